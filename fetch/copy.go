package fetch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// keepCopy saves the body of resp, a 200 reply with the whole object to a
// range request, as the local copy of the object with identity id under
// s.copyDir, unless a complete copy is there already. The copy is written
// under a temporary name and renamed, so a copy under its real name is
// always complete. It returns the copy's path.
func (s *httpSource) keepCopy(resp *http.Response, id Identity) (string, error) {
	if !DiskCacheable(id) {
		return "", fmt.Errorf("%w, and without a strong ETag or Last-Modified a local copy could not be told from a changed object", ErrNoRange)
	}
	path := filepath.Join(s.copyDir, id.Key()+".obj")
	if st, err := os.Stat(path); err == nil && st.Size() == id.Size {
		s.log.Info("server ignores range requests: using the local copy", "src", s.name, "path", path)
		return path, nil
	}
	s.log.Warn("server ignores range requests: downloading the whole archive once, to a local copy",
		"src", s.name, "len", id.Size, "path", path)
	if err := os.MkdirAll(s.copyDir, 0o755); err != nil {
		return "", err
	}
	f, err := os.CreateTemp(s.copyDir, ".tmp-*.obj")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	start := time.Now()
	n, err := io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("download %s: %w", s.name, err)
	}
	if n != id.Size {
		return "", fmt.Errorf("download %s: got %d bytes, want %d: %w", s.name, n, id.Size, io.ErrUnexpectedEOF)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return "", err
	}
	s.log.Info("local copy complete", "src", s.name, "len", n, "elapsed", time.Since(start).Round(time.Millisecond))
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
