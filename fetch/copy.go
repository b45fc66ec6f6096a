package fetch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"
)

// keepCopy saves the body of resp, a 200 reply with the whole object to a
// range request, as the whole copy of the object with identity id in
// s.copies, unless a complete copy is there already, and returns its
// path. The body goes through the stall watchdog's meter of ctx, if any
// (OpenWithRetry).
func (s *httpSource) keepCopy(ctx context.Context, resp *http.Response, id Identity) (string, error) {
	if !DiskCacheable(id) {
		return "", fmt.Errorf("%w, and without a strong ETag or Last-Modified a local copy could not be told from a changed object", ErrNoRange)
	}
	if path, ok := s.copies.Whole(id.Key(), id.Size); ok {
		s.log.Info("server ignores range requests: using the local copy", "src", s.name, "path", path)
		return path, nil
	}
	s.log.Warn("server ignores range requests: downloading the whole archive once, to a local copy",
		"src", s.name, "len", id.Size, "path", s.copies.Dir())
	start := time.Now()
	m := meterFrom(ctx)
	m.arm()
	path, err := s.copies.KeepWhole(id.Key(), id.Size, m.reader(resp.Body))
	if errors.Is(err, ErrTooLarge) {
		return "", fmt.Errorf("%w, and a local copy does not fit: %w (raise --cache-disk)", ErrNoRange, err)
	}
	if err != nil {
		return "", fmt.Errorf("download the whole object: %w", err) // Open names the source
	}
	s.log.Info("local copy complete", "src", s.name, "len", id.Size, "elapsed", time.Since(start).Round(time.Millisecond))
	return path, nil
}

// copySource reads the local copy of an object whose server ignores range
// requests, under the identity the server gave it, so that saved indexes
// and caches are keyed as for any other source.
type copySource struct {
	Source // the file
	id     Identity
	name   string
}

func (c *copySource) Identity() Identity { return c.id }
func (c *copySource) String() string     { return c.name }
func (c *copySource) Local() bool        { return true }

func openCopy(ctx context.Context, path string, id Identity, name string, log *slog.Logger) (Source, error) {
	f, err := openFile(ctx, path, log)
	if err != nil {
		return nil, err
	}
	if f.Identity().Size != id.Size {
		f.Close()
		return nil, fmt.Errorf("local copy %s: size %d, want %d", path, f.Identity().Size, id.Size)
	}
	return &copySource{Source: f, id: id, name: name}, nil
}
