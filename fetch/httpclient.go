package fetch

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// defaultConns is how many connections an HTTP source spreads its
// requests over when Options.Conns is zero: one per default fetch worker.
const defaultConns = defaultWorkers

// baseTransport is the transport every HTTP source's own transports are
// cloned from: keep-alive, many idle connections, no transparent
// decompression, HTTP/2 when the server offers it over TLS.
var baseTransport = sync.OnceValue(func() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.DisableCompression = true
	t.ResponseHeaderTimeout = time.Minute
	return t
})

// maxRedirects is how many redirects a request follows, as many as Go's
// default client follows.
const maxRedirects = 10

// errRedirects means a request met a redirect loop or too long a chain of
// redirects. It is permanent: every attempt meets the same chain.
var errRedirects = errors.New("fetch: too many redirects")

// checkRedirect is the http.Client.CheckRedirect of this package's
// clients: the default policy, with an error that IsRetryable reports
// as permanent and that names a loop as one. URLs are redacted: a
// presigned URL carries its signature in the query.
func checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) < maxRedirects {
		return nil
	}
	for i, v := range via {
		switch {
		case v.URL.String() != req.URL.String():
		case i == 0:
			// The caller names the URL it asked for.
			return fmt.Errorf("%w: a redirect loop", errRedirects)
		default:
			return fmt.Errorf("%w: a redirect loop through %s", errRedirects, redactURL(req.URL))
		}
	}
	return fmt.Errorf("%w: %d, the last to %s", errRedirects, maxRedirects, redactURL(req.URL))
}

// withCheckRedirect returns c, or a copy of it that follows redirects by
// checkRedirect when c has no policy of its own.
func withCheckRedirect(c *http.Client) *http.Client {
	if c.CheckRedirect != nil {
		return c
	}
	cc := *c
	cc.CheckRedirect = checkRedirect
	return &cc
}

// spreadTransport sends each request on one of several transports. Over
// HTTP/2 a transport carries every request on one connection, so a
// server's per-connection bandwidth cap would bind all parallel range
// requests together; n transports give n connections, each multiplexed.
// Once a reply shows that the server speaks HTTP/2, a transport with no
// connection yet gets one request to open it while the others go to open
// connections, so a burst of requests does not dial a connection each.
// Over HTTP/1.1 each transport opens connections as its requests need
// them, as one transport would.
type spreadTransport struct {
	ts    []http.RoundTripper
	busy  []atomic.Int64 // requests in flight on ts[i], until their body is closed
	state []atomic.Int32 // of ts[i]: cold, opening or open
	h2    atomic.Bool    // a reply came over HTTP/2
}

// Transport states.
const (
	cold int32 = iota
	opening
	open
)

// newSpreadTransport clones base n times; http1 limits them to HTTP/1.1.
func newSpreadTransport(base *http.Transport, n int, http1 bool) *spreadTransport {
	n = max(n, 1)
	s := &spreadTransport{ts: make([]http.RoundTripper, n), busy: make([]atomic.Int64, n), state: make([]atomic.Int32, n)}
	for i := range s.ts {
		t := base.Clone()
		t.MaxIdleConnsPerHost = max(base.MaxIdleConnsPerHost/n, 8)
		if http1 {
			keepHTTP1(t)
		}
		s.ts[i] = t
	}
	return s
}

// pick returns the transport for the next request.
func (s *spreadTransport) pick() int {
	least := func(state int32, any bool) int {
		k := -1
		for i := range s.ts {
			if !any && s.state[i].Load() != state {
				continue
			}
			if k < 0 || s.busy[i].Load() < s.busy[k].Load() {
				k = i
			}
		}
		return k
	}
	if !s.h2.Load() {
		return least(0, true)
	}
	k := least(open, false)
	if k >= 0 && s.busy[k].Load() == 0 {
		return k
	}
	for i := range s.ts {
		if s.state[i].CompareAndSwap(cold, opening) {
			return i
		}
	}
	if k < 0 {
		return least(0, true)
	}
	return k
}

func (s *spreadTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	k := s.pick()
	s.busy[k].Add(1)
	resp, err := s.ts[k].RoundTrip(req)
	if err != nil {
		s.busy[k].Add(-1)
		s.state[k].CompareAndSwap(opening, cold)
		return nil, err
	}
	if resp.ProtoMajor == 2 {
		s.h2.Store(true)
	}
	s.state[k].Store(open)
	resp.Body = &countedBody{ReadCloser: resp.Body, busy: &s.busy[k]}
	return resp, nil
}

// keepHTTP1 makes t speak HTTP/1.1 only. Limiting t.Protocols is not
// enough: a transport cloned from one that has been used offers "h2" in
// its TLS config, and a server that picks it gets HTTP/1.1 requests on an
// HTTP/2 connection.
func keepHTTP1(t *http.Transport) {
	t.Protocols = new(http.Protocols)
	t.Protocols.SetHTTP1(true)
	t.ForceAttemptHTTP2 = false
	if t.TLSClientConfig != nil {
		t.TLSClientConfig = t.TLSClientConfig.Clone()
		t.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
}

// CloseIdleConnections closes the idle connections of every transport.
func (s *spreadTransport) CloseIdleConnections() {
	for _, t := range s.ts {
		if c, ok := t.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
}

// countedBody takes its request off the busy count once, at Close.
type countedBody struct {
	io.ReadCloser
	busy *atomic.Int64
	once sync.Once
}

func (b *countedBody) Close() error {
	b.once.Do(func() { b.busy.Add(-1) })
	return b.ReadCloser.Close()
}
