package fetch

import (
	"context"
	"crypto/tls"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tarmount/tarmount/internal/testutil/shaped"
)

// newH2Server serves data as /a.tar over TLS with HTTP/2 offered, its
// connections shaped by co, and counts the connections and the protocol
// of each request.
func newH2Server(t testing.TB, data []byte, ho shaped.Options, co shaped.ConnOptions) (*httptest.Server, *h2Counts) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.tar"), data, 0o644))
	h := shaped.NewHandler(dir, ho)
	t.Cleanup(func() { h.Close() })
	c := &h2Counts{protos: map[string]int{}, used: map[string]bool{}, release: make(chan struct{})}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c.mu.Lock()
		c.protos[r.Proto]++
		c.used[r.RemoteAddr] = true
		c.n++
		n, hold := c.n, c.hold
		if hold > 0 && n == hold+1 {
			close(c.release)
		}
		c.mu.Unlock()
		if hold > 0 && n > 1 {
			select {
			case <-c.release:
			case <-time.After(10 * time.Second):
			}
		}
		h.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.Listener = shaped.Listen(srv.Listener, co)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, c
}

type h2Counts struct {
	mu     sync.Mutex
	protos map[string]int  // requests by protocol
	used   map[string]bool // client addresses that sent requests
	n      int             // requests so far
	// hold, when set, makes requests after the first wait until hold
	// of them are in flight (at most 10 s), closing release.
	hold    int
	release chan struct{}
}

// holdUntil makes the requests after the first wait until n of them are
// in flight at once.
func (c *h2Counts) holdUntil(n int) {
	c.mu.Lock()
	c.hold = n
	c.mu.Unlock()
}

// get returns how many connections carried requests, and the requests
// by protocol.
func (c *h2Counts) get() (int, map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.used), maps.Clone(c.protos)
}

// spreadClient returns a client like the one Open makes, trusting srv's
// certificate.
func spreadClient(srv *httptest.Server, conns int, http1 bool) *http.Client {
	base := baseTransport().Clone()
	base.TLSClientConfig = &tls.Config{RootCAs: srv.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs}
	return &http.Client{Transport: newSpreadTransport(base, conns, http1)}
}

// TestSpreadTransport checks that parallel range requests to an HTTP/2
// server are spread over the configured number of connections, each
// speaking HTTP/2, and that HTTP1 keeps to HTTP/1.1.
func TestSpreadTransport(t *testing.T) {
	data := randomBytes(1<<20, 11)
	for _, tc := range []struct {
		name      string
		conns     int
		http1     bool
		wantProto string
		wantConns int
	}{
		{"http2", 4, false, "HTTP/2.0", 4},
		{"http2-one", 1, false, "HTTP/2.0", 1},
		{"http1", 4, true, "HTTP/1.1", 16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The reads wait until all 16 are in flight at once.
			srv, counts := newH2Server(t, data, shaped.Options{}, shaped.ConnOptions{})
			counts.holdUntil(16)
			client := spreadClient(srv, tc.conns, tc.http1)
			defer client.CloseIdleConnections()
			src, err := Open(t.Context(), srv.URL+"/a.tar", Options{Client: client})
			require.NoError(t, err)
			var wg sync.WaitGroup
			for i := range 16 {
				wg.Go(func() {
					p := make([]byte, 4096)
					off := int64(i) * 60000
					if _, err := src.ReadAt(t.Context(), p, off); err != nil {
						t.Errorf("read at %d: %v", off, err)
					} else if string(p) != string(data[off:off+4096]) {
						t.Errorf("read at %d: bytes differ", off)
					}
				})
			}
			wg.Wait()
			conns, protos := counts.get()
			require.Equal(t, map[string]int{tc.wantProto: 17}, protos, "requests by protocol (probe + 16 reads)")
			require.Equal(t, tc.wantConns, conns, "connections")
		})
	}
}

// BenchmarkHTTPProtocols compares HTTP/1.1 with one connection per
// request, HTTP/2 on one connection, and HTTP/2 spread over 8 connections,
// against a TLS server shaped like distant object storage: 20 ms to the
// first byte of each response, 40 ms to set up a connection, and 80 MB/s
// per connection. "stream" reads 64 MiB in order through Blocks with 8
// workers, as the index pass does; "burst" sends 64 reads of 64 KiB at
// once from a fresh client, as 64 cold readers of a mount do, and reports
// the slowest.
func BenchmarkHTTPProtocols(b *testing.B) {
	const size = 64 << 20
	data := randomBytes(size, 12)
	srv, _ := newH2Server(b, data, shaped.Options{Latency: 20 * time.Millisecond},
		shaped.ConnOptions{Rate: 80e6, Handshake: 40 * time.Millisecond})
	for _, mode := range []struct {
		name  string
		conns int
		http1 bool
	}{{"http1", 8, true}, {"http2-1conn", 1, false}, {"http2-8conns", 8, false}} {
		b.Run("stream/"+mode.name, func(b *testing.B) {
			b.SetBytes(size)
			b.ReportAllocs()
			for b.Loop() {
				client := spreadClient(srv, mode.conns, mode.http1)
				src, err := Open(b.Context(), srv.URL+"/a.tar", Options{Client: client})
				require.NoError(b, err)
				bl := NewBlocks(src, BlocksOptions{Workers: 8})
				rc := bl.Stream(b.Context(), 0)
				n, err := io.Copy(io.Discard, rc)
				require.NoError(b, err)
				require.Equal(b, int64(size), n)
				rc.Close()
				bl.Close()
				client.CloseIdleConnections()
			}
		})
		b.Run("burst/"+mode.name, func(b *testing.B) {
			var worst []time.Duration
			for b.Loop() {
				client := spreadClient(srv, mode.conns, mode.http1)
				src, err := Open(b.Context(), srv.URL+"/a.tar", Options{Client: client})
				require.NoError(b, err)
				lat := make([]time.Duration, 64)
				errs := make([]error, 64)
				var wg sync.WaitGroup
				for i := range lat {
					wg.Go(func() {
						start := time.Now()
						_, errs[i] = src.ReadAt(context.Background(), make([]byte, 64<<10), int64(i)*(size/64))
						lat[i] = time.Since(start)
					})
				}
				wg.Wait()
				for _, err := range errs {
					require.NoError(b, err)
				}
				sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
				worst = append(worst, lat[len(lat)-1])
				client.CloseIdleConnections()
			}
			sort.Slice(worst, func(i, j int) bool { return worst[i] < worst[j] })
			b.ReportMetric(float64(worst[len(worst)/2].Milliseconds()), "ms-slowest")
		})
	}
}
