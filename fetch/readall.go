package fetch

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
)

// ReadAll reads the whole object at rawURL, of at most limit bytes, as
// one object beside an archive is read (a published index): an HTTP(S)
// object with one GET, without the round trip that Open's identity probe
// costs; s3:// and local objects through Open, then one read. Retryable
// failures are retried under ropts, as OpenWithRetry does. A missing
// object is ErrNotFound.
func ReadAll(ctx context.Context, rawURL string, limit int64, opts Options, ropts RetryOptions) ([]byte, error) {
	t, err := parseTarget(rawURL)
	if err != nil {
		return nil, err
	}
	var data []byte
	err = Retry(ctx, ropts, "read failed, retrying", rawURL, IsRetryable, func(ctx context.Context) error {
		var err error
		if t.u != nil {
			data, err = getHTTP(ctx, t.u.String(), redactURL(t.u), limit, opts)
		} else {
			data, err = readOpened(ctx, rawURL, limit, opts)
		}
		return err
	})
	return data, err
}

// getHTTP reads the object at url (named name) with one GET.
func getHTTP(ctx context.Context, url, name string, limit int64, opts Options) ([]byte, error) {
	s := &httpSource{url: url, name: name, header: opts.Header.Clone(), log: opts.Logger}
	if opts.Client != nil {
		s.client = withCheckRedirect(opts.Client)
	} else {
		s.client = &http.Client{Transport: newSpreadTransport(baseTransport(), 1, opts.HTTP1), CheckRedirect: checkRedirect}
		defer s.client.CloseIdleConnections()
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	req, err := s.newRequest(ctx, http.MethodGet)
	if err != nil {
		return nil, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", name, classifyTransport(ctx, unwrapURLError(err)))
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("get %s: %w", name, statusError(resp))
	}
	if resp.ContentLength > limit {
		return nil, fmt.Errorf("get %s: %d bytes, more than %d", name, resp.ContentLength, limit)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", name, classifyTransport(ctx, err))
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("get %s: more than %d bytes", name, limit)
	}
	if resp.ContentLength >= 0 && int64(len(data)) != resp.ContentLength {
		return nil, fmt.Errorf("get %s: got %d of %d bytes: %w", name, len(data), resp.ContentLength, io.ErrUnexpectedEOF)
	}
	return data, nil
}

// readOpened reads the object at rawURL through Open.
func readOpened(ctx context.Context, rawURL string, limit int64, opts Options) ([]byte, error) {
	src, err := Open(ctx, rawURL, opts)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	size := src.Identity().Size
	if size > limit {
		return nil, fmt.Errorf("%s: %d bytes, more than %d", src, size, limit)
	}
	data := make([]byte, size)
	n, err := src.ReadAt(ctx, data, 0)
	if err == io.EOF && n == len(data) {
		err = nil
	}
	if err != nil {
		return nil, err // it names the source and offset
	}
	return data, nil
}
