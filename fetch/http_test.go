package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// object is an HTTP object served with http.ServeContent (which supports
// Range, If-Match and If-Unmodified-Since), whose bytes, validators and
// faults a test may change while it is served.
type object struct {
	mu sync.Mutex
	// guarded by mu
	data             []byte
	etag             string        // "" sends none
	modtime          time.Time     // zero sends no Last-Modified
	ignoreRange      bool          // answer ranges with 200 and the whole body
	ignoreConds      bool          // ignore If-Match and If-Unmodified-Since
	acceptRangesNone bool          // answer 200 with "Accept-Ranges: none"
	status           int           // if non-zero, answer every request with it
	shortBody        bool          // cut ranged bodies (other than the probe) in half
	delay            time.Duration // before each answer
	bytesPerSec      int64         // if non-zero, caps each response
	headers          []http.Header // of every request, in order

	conns atomic.Int64 // connections accepted
}

func (o *object) set(f func(o *object)) {
	o.mu.Lock()
	defer o.mu.Unlock()
	f(o)
}

func (o *object) requests() []http.Header {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.headers
}

func (o *object) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	o.headers = append(o.headers, r.Header.Clone())
	data, etag, modtime := o.data, o.etag, o.modtime
	ignoreRange, ignoreConds, rangesNone := o.ignoreRange, o.ignoreConds, o.acceptRangesNone
	status, shortBody, delay, bytesPerSec := o.status, o.shortBody, o.delay, o.bytesPerSec
	o.mu.Unlock()
	if delay > 0 {
		select {
		case <-time.After(delay):
		case <-r.Context().Done():
			return
		}
	}
	switch {
	case status != 0:
		http.Error(w, http.StatusText(status), status)
		return
	case rangesNone:
		w.Header().Set("Accept-Ranges", "none")
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data)
		return
	}
	if ignoreRange {
		r.Header.Del("Range")
	}
	if ignoreConds {
		r.Header.Del("If-Match")
		r.Header.Del("If-Unmodified-Since")
	}
	if etag != "" {
		w.Header().Set("ETag", etag)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if shortBody && r.Header.Get("Range") != "bytes=0-0" {
		w = &halfWriter{ResponseWriter: w, left: -1}
	}
	if bytesPerSec > 0 {
		w = &slowWriter{ResponseWriter: w, ctx: r.Context(), bytesPerSec: bytesPerSec}
	}
	http.ServeContent(w, r, "", modtime, bytes.NewReader(data))
}

// slowWriter caps the bandwidth of one response. It paces by the bytes
// sent since the first write, so that coarse timers do not lower the rate.
type slowWriter struct {
	http.ResponseWriter
	ctx         context.Context
	bytesPerSec int64
	start       time.Time
	sent        int64
}

func (w *slowWriter) Write(p []byte) (int, error) {
	const chunk = 16 << 10
	if w.start.IsZero() {
		w.start = time.Now()
	}
	n := 0
	for len(p) > 0 {
		c := min(len(p), chunk)
		m, err := w.ResponseWriter.Write(p[:c])
		n += m
		w.sent += int64(m)
		if err != nil {
			return n, err
		}
		p = p[c:]
		due := w.start.Add(time.Duration(w.sent * int64(time.Second) / w.bytesPerSec))
		if d := time.Until(due); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-w.ctx.Done():
				t.Stop()
				return n, w.ctx.Err()
			}
		}
	}
	return n, nil
}

// halfWriter sends half of the declared Content-Length and drops the rest;
// the server then cuts the connection.
type halfWriter struct {
	http.ResponseWriter
	left int
}

func (w *halfWriter) Write(p []byte) (int, error) {
	if w.left < 0 {
		cl, _ := strconv.Atoi(w.Header().Get("Content-Length"))
		w.left = cl / 2
	}
	n := min(len(p), w.left)
	w.left -= n
	if _, err := w.ResponseWriter.Write(p[:n]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// newTestServer serves o on 127.0.0.1 until the test ends.
func newTestServer(t testing.TB, o *object) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(o)
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			o.conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

func TestHTTPRequests(t *testing.T) {
	tests := []struct {
		name     string
		etag     string
		modtime  time.Time
		wantCond [2]string // precondition header on ranged reads
	}{
		{"strong etag", `"v1"`, testModTime, [2]string{"If-Match", `"v1"`}},
		{"weak etag", `W/"v1"`, testModTime, [2]string{"If-Unmodified-Since", "Mon, 04 Mar 2024 05:06:07 GMT"}},
		{"last-modified only", "", testModTime, [2]string{"If-Unmodified-Since", "Mon, 04 Mar 2024 05:06:07 GMT"}},
		{"no validators", "", time.Time{}, [2]string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &object{data: randomBytes(1000, 7), etag: tt.etag, modtime: tt.modtime}
			srv := newTestServer(t, o)
			src, err := Open(t.Context(), srv.URL+"/a.tar", Options{
				Header: http.Header{"Authorization": {"Bearer tok"}, "Range": {"bytes=5-6"}},
			})
			require.NoError(t, err)
			reqs := o.requests()
			require.Len(t, reqs, 1, "Open must send one request")
			require.Equal(t, "bytes=0-0", reqs[0].Get("Range"))

			_, err = src.ReadAt(t.Context(), make([]byte, 100), 900)
			require.NoError(t, err)
			reqs = o.requests()
			require.Len(t, reqs, 2)
			for _, h := range reqs {
				require.Equal(t, "identity", h.Get("Accept-Encoding"))
				require.Equal(t, "Bearer tok", h.Get("Authorization"))
				require.Equal(t, userAgent, h.Get("User-Agent"))
			}
			r := reqs[1]
			require.Equal(t, "bytes=900-999", r.Get("Range"))
			for _, k := range []string{"If-Match", "If-Unmodified-Since"} {
				want := ""
				if k == tt.wantCond[0] {
					want = tt.wantCond[1]
				}
				require.Equal(t, want, r.Get(k), k)
			}
		})
	}
}

func TestHTTPChanged(t *testing.T) {
	const size = 10_000
	tests := []struct {
		name   string
		etag   string
		mtime  time.Time
		change func(o *object)
	}{
		{"new etag", `"v1"`, testModTime, func(o *object) {
			o.data, o.etag = randomBytes(size, 99), `"v2"`
		}},
		{"new etag, server ignores If-Match", `"v1"`, testModTime, func(o *object) {
			o.data, o.etag, o.ignoreConds = randomBytes(size, 99), `"v2"`, true
		}},
		{"new size, same etag, server ignores If-Match", `"v1"`, testModTime, func(o *object) {
			o.data, o.ignoreConds = randomBytes(size+1, 99), true
		}},
		{"weak etag, new mtime", `W/"v1"`, testModTime, func(o *object) {
			o.data, o.etag, o.modtime = randomBytes(size, 99), `W/"v2"`, testModTime.Add(time.Hour)
		}},
		{"mtime only, server ignores If-Unmodified-Since", "", testModTime, func(o *object) {
			o.data, o.modtime, o.ignoreConds = randomBytes(size, 99), testModTime.Add(time.Hour), true
		}},
		{"no validators, new size", "", time.Time{}, func(o *object) {
			o.data = randomBytes(size+100, 99)
		}},
		{"no validators, shrunk below the offset", "", time.Time{}, func(o *object) {
			o.data = randomBytes(100, 99)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &object{data: randomBytes(size, 1), etag: tt.etag, modtime: tt.mtime}
			srv := newTestServer(t, o)
			src := mustOpen(t, srv.URL+"/a.tar")
			blocks := NewBlocks(src, BlocksOptions{BlockSize: 1024, Workers: 2})
			defer blocks.Close()
			_, err := blocks.ReadAt(t.Context(), make([]byte, 10), 0) // cached before the change
			require.NoError(t, err)

			o.set(tt.change)
			p := make([]byte, 1000)
			n, err := src.ReadAt(t.Context(), p, 5000)
			require.ErrorIs(t, err, ErrChanged)
			require.Zero(t, n)
			require.Equal(t, make([]byte, len(p)), p, "no bytes of the new version")
			require.False(t, IsRetryable(err))
			require.Contains(t, err.Error(), srv.URL+"/a.tar at 5000")

			_, err = blocks.ReadAt(t.Context(), p, 5000)
			require.ErrorIs(t, err, ErrChanged)
		})
	}
}

func TestHTTPErrors(t *testing.T) {
	tests := []struct {
		name      string
		before    func(o *object) // before Open
		after     func(o *object) // after Open, before ReadAt
		openErr   error           // wanted from Open (errors.Is), or nil
		readErr   error           // wanted from ReadAt (errors.Is), or nil
		status    int             // wanted *StatusError code, or 0
		contains  string
		retryable bool
	}{
		{name: "ignores range", before: func(o *object) { o.ignoreRange = true },
			readErr: ErrNoRange, contains: "does not support range requests: got 200 OK to bytes=10-19"},
		{name: "accept-ranges none", before: func(o *object) { o.acceptRangesNone = true },
			openErr: ErrNoRange, contains: "Accept-Ranges: none"},
		{name: "404 at open", before: func(o *object) { o.status = 404 },
			openErr: ErrNotFound, contains: "404 Not Found"},
		{name: "410 at open", before: func(o *object) { o.status = 410 },
			openErr: ErrNotFound, contains: "410 Gone"},
		{name: "403 at open", before: func(o *object) { o.status = 403 },
			status: 403, contains: "403 Forbidden"},
		{name: "500 at open", before: func(o *object) { o.status = 500 },
			status: 500, contains: "500 Internal Server Error", retryable: true},
		{name: "404 on read", after: func(o *object) { o.status = 404 },
			readErr: ErrNotFound, contains: "at 10: fetch: not found (404 Not Found): deleted since it was opened"},
		{name: "500 on read", after: func(o *object) { o.status = 500 },
			status: 500, contains: "at 10: unexpected HTTP status 500", retryable: true},
		{name: "503 on read", after: func(o *object) { o.status = 503 },
			status: 503, retryable: true},
		{name: "429 on read", after: func(o *object) { o.status = 429 },
			status: 429, retryable: true},
		{name: "short body", after: func(o *object) { o.shortBody = true },
			readErr: io.ErrUnexpectedEOF, contains: "body ended after 5 of 10 bytes", retryable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &object{data: randomBytes(100, 3), etag: `"e"`, modtime: testModTime}
			if tt.before != nil {
				tt.before(o)
			}
			srv := newTestServer(t, o)
			src, err := Open(t.Context(), srv.URL+"/a.tar", Options{})
			if err == nil {
				defer src.Close()
				require.Equal(t, int64(100), src.Identity().Size)
				if tt.after != nil {
					o.set(tt.after)
				}
				_, err = src.ReadAt(t.Context(), make([]byte, 10), 10)
				if tt.openErr != nil {
					t.Fatalf("Open: got no error, want %v", tt.openErr)
				}
			} else if tt.openErr == nil && tt.after != nil {
				t.Fatalf("Open: %v", err)
			}
			require.Error(t, err)
			for _, want := range []error{tt.openErr, tt.readErr} {
				if want != nil {
					require.ErrorIs(t, err, want)
				}
			}
			if tt.status != 0 {
				se, ok := errors.AsType[*StatusError](err)
				require.True(t, ok, "got %v, want a *StatusError", err)
				require.Equal(t, tt.status, se.Code)
			}
			require.ErrorContains(t, err, tt.contains)
			require.Equal(t, tt.retryable, IsRetryable(err), "IsRetryable(%v)", err)
		})
	}
}

func TestHTTPConnectionRefused(t *testing.T) {
	o := &object{data: randomBytes(100, 3), etag: `"e"`}
	srv := newTestServer(t, o)
	src := mustOpen(t, srv.URL+"/a.tar")
	srv.Close()
	_, err := src.ReadAt(t.Context(), make([]byte, 10), 0)
	require.Error(t, err)
	require.True(t, IsRetryable(err), "IsRetryable(%v)", err)
	require.ErrorContains(t, err, "read "+srv.URL+"/a.tar at 0: ")
}

func TestHTTPCanceled(t *testing.T) {
	o := &object{data: randomBytes(100, 3), etag: `"e"`}
	srv := newTestServer(t, o)
	src := mustOpen(t, srv.URL+"/a.tar")
	o.set(func(o *object) { o.delay = time.Minute })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := src.ReadAt(ctx, make([]byte, 10), 0)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.False(t, IsRetryable(err))
}

func TestHTTPRedactsURL(t *testing.T) {
	var gotUser, gotPass, gotQuery string
	o := &object{data: randomBytes(100, 3), etag: `"e"`}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotUser, gotPass, _ = r.BasicAuth()
		gotQuery = r.URL.RawQuery
		o.ServeHTTP(w, r)
	})
	srv := httptest.NewServer(h)
	defer srv.Close()
	raw := strings.Replace(srv.URL, "http://", "http://user:s3cret@", 1) + "/a.tar?X-Sig=s3cret#frag"

	src, err := Open(t.Context(), raw, Options{})
	require.NoError(t, err)
	require.Equal(t, srv.URL+"/a.tar", src.String())
	require.Equal(t, "user", gotUser)
	require.Equal(t, "s3cret", gotPass)
	require.Equal(t, "X-Sig=s3cret", gotQuery)

	o.set(func(o *object) { o.status = 500 })
	_, err = src.ReadAt(t.Context(), make([]byte, 10), 0)
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")

	_, err = Open(t.Context(), raw, Options{})
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
}

func TestHTTPConnectionReuse(t *testing.T) {
	o := &object{data: randomBytes(64<<10, 3), etag: `"e"`}
	srv := newTestServer(t, o)
	// A client of its own, so that idle connections of other tests do
	// not count.
	client := &http.Client{Transport: baseTransport().Clone()}
	defer client.CloseIdleConnections()
	src, err := Open(t.Context(), srv.URL+"/a.tar", Options{Client: client})
	require.NoError(t, err)

	for i := range 100 {
		_, err := src.ReadAt(t.Context(), make([]byte, 1000), int64(i*500))
		require.NoError(t, err)
	}
	// An error status with a body must not cost a connection either.
	o.set(func(o *object) { o.status = 503 })
	for range 10 {
		_, err := src.ReadAt(t.Context(), make([]byte, 1000), 0)
		require.Error(t, err)
	}
	require.Equal(t, int64(1), o.conns.Load(), "sequential requests must reuse one connection")
}

// TestHTTPPrefix checks that an open with Options.Prefix asks for
// ProbeRange and keeps the bytes (the whole of a small object, ProbeBytes
// of a larger one), and that a stream from the start of an object
// fetched in pieces asks for none of them again; without Prefix the open
// asks for the first byte only.
func TestHTTPPrefix(t *testing.T) {
	for _, size := range []int{1000, ProbeBytes, 3 << 20} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			o := &object{data: randomBytes(size, 3), etag: `"v1"`}
			srv := newTestServer(t, o)
			plain, err := Open(t.Context(), srv.URL+"/a.tar", Options{})
			require.NoError(t, err)
			require.Nil(t, plain.(Prefixer).Prefix(), "prefix without Options.Prefix")
			plain.Close()
			src, err := Open(t.Context(), srv.URL+"/a.tar", Options{Prefix: true})
			require.NoError(t, err)
			defer src.Close()
			reqs := o.requests()
			require.Equal(t, []string{"bytes=0-0", ProbeRange}, []string{reqs[0].Get("Range"), reqs[1].Get("Range")})
			pf, ok := src.(Prefixer)
			require.True(t, ok, "an HTTP source is a Prefixer")
			require.True(t, bytes.Equal(o.data[:min(size, ProbeBytes)], pf.Prefix()), "prefix")

			b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1 << 20})
			s := b.Stream(t.Context(), 0)
			got, err := io.ReadAll(s)
			s.Close()
			require.NoError(t, err)
			require.True(t, bytes.Equal(o.data, got), "streamed bytes")
			var ranges []string
			for _, h := range o.requests()[2:] {
				ranges = append(ranges, h.Get("Range"))
			}
			for _, r := range ranges {
				if strings.HasPrefix(r, "bytes=0-") {
					t.Errorf("got ranges %q after the probe, want none from 0", ranges)
				}
			}
			require.Equal(t, int64(size), b.Stats().BytesFetched, "bytes fetched, the probe's included")
		})
	}
}

// TestHTTPProbeFallbacks covers servers whose reply to "bytes=0-0" does
// not carry the size.
func TestHTTPProbeFallbacks(t *testing.T) {
	data := randomBytes(300, 5)
	tests := []struct {
		name     string
		probe    func(w http.ResponseWriter) // answer to the GET bytes=0-0
		wantSize int64
		wantErr  string
	}{
		{"206 with unknown total", func(w http.ResponseWriter) {
			w.Header().Set("Content-Range", "bytes 0-0/*")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[:1])
		}, 300, ""},
		{"200 chunked", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusOK)
			w.(http.Flusher).Flush()
			w.Write(data)
		}, 300, ""},
		{"416 on empty object", func(w http.ResponseWriter) {
			w.Header().Set("Content-Range", "bytes */0")
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
		}, 0, ""},
		{"416 on non-empty object", func(w http.ResponseWriter) {
			w.Header().Set("Content-Range", "bytes */300")
			w.WriteHeader(http.StatusRequestedRangeNotSatisfiable)
		}, 0, "source changed"},
		{"bad Content-Range", func(w http.ResponseWriter) {
			w.Header().Set("Content-Range", "bytes 5-9/300")
			w.WriteHeader(http.StatusPartialContent)
			w.Write(data[5:10])
		}, 0, `bad Content-Range "bytes 5-9/300"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Method == http.MethodGet && r.Header.Get("Range") == "bytes=0-0" {
					tt.probe(w)
					return
				}
				http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
			}))
			defer srv.Close()
			src, err := Open(t.Context(), srv.URL, Options{})
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tt.wantSize, src.Identity().Size)
		})
	}
}

func TestParseContentRange(t *testing.T) {
	tests := []struct {
		in   string
		want contentRange
		ok   bool
	}{
		{"bytes 0-0/10", contentRange{0, 0, 10}, true},
		{"bytes 5-9/10", contentRange{5, 9, 10}, true},
		{"bytes 5-9/*", contentRange{5, 9, -1}, true},
		{"bytes */10", contentRange{-1, -1, 10}, true},
		{"bytes */*", contentRange{}, false},
		{"bytes 5-10/10", contentRange{}, false},
		{"bytes 9-5/10", contentRange{}, false},
		{"bytes -1-5/10", contentRange{}, false},
		{"bytes +1-5/10", contentRange{}, false},
		{"bytes 1-5/", contentRange{}, false},
		{"items 1-5/10", contentRange{}, false},
		{"", contentRange{}, false},
		{"bytes 1-99999999999999999999/10", contentRange{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, ok := parseContentRange(tt.in)
			if ok != tt.ok || (ok && got != tt.want) {
				t.Errorf("got %+v %v, want %+v %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestHTTPBlocksParallel(t *testing.T) {
	// Blocks over a real loopback server: parallel fetches, exact bytes.
	data := randomBytes(1<<20+12345, 11)
	o := &object{data: data, etag: `"e"`, modtime: testModTime}
	srv := newTestServer(t, o)
	src := mustOpen(t, srv.URL+"/a.tar")
	b := NewBlocks(src, BlocksOptions{BlockSize: 64 << 10, Workers: 8})
	defer b.Close()
	got := make([]byte, len(data))
	n, err := b.ReadAt(t.Context(), got, 0)
	require.NoError(t, err)
	require.Equal(t, len(data), n)
	require.True(t, bytes.Equal(data, got))
	require.Equal(t, int64(17), b.Stats().Requests)

	s := b.Stream(t.Context(), 3)
	defer s.Close()
	all, err := io.ReadAll(s)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data[3:], all), "stream bytes differ")
	require.Equal(t, int64(17), b.Stats().Requests, fmt.Sprintf("stream must hit the cache: %+v", b.Stats()))
}

// TestHTTPSuffix: with Options.Suffix the open asks for the last
// ProbeBytes beside the probe, and a read inside them sends no request;
// a tail of another version, a failed one or a late one is not used:
// the read asks for its bytes under the precondition.
func TestHTTPSuffix(t *testing.T) {
	const late = tailWait + 3*time.Second
	tests := []struct {
		name string
		size int
		// tail answers the request for the tail (nil: as the object).
		tail   func(w http.ResponseWriter, r *http.Request)
		asks   bool // a read of the tail sends a request of its own
		closes bool // Close cuts a tail still on its way
		retry  bool // opened with OpenWithRetry, whose attempt's ctx ends with the open
	}{
		{"small object", 1000, nil, false, false, false},
		{"large object", 3 << 20, nil, false, false, false},
		{"after the open's attempt", 3 << 20, func(w http.ResponseWriter, r *http.Request) {
			time.Sleep(100 * time.Millisecond) // the probe's attempt has ended
			w.Header().Set("ETag", `"v1"`)
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(randomBytes(3<<20, 3)))
		}, false, false, true},
		{"another version", 3 << 20, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", `"v2"`)
			http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(randomBytes(3<<20, 9)))
		}, true, false, false},
		{"failed", 3 << 20, func(w http.ResponseWriter, r *http.Request) {
			http.Error(w, "boom", http.StatusInternalServerError)
		}, true, false, false},
		{"late", 3 << 20, func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-time.After(late):
			case <-r.Context().Done():
			}
		}, true, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &object{data: randomBytes(tt.size, 3), etag: `"v1"`}
			var tails atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.Header.Get("Range") == SuffixRange {
					tails.Add(1)
					if tt.tail != nil {
						tt.tail(w, r)
						return
					}
				}
				o.ServeHTTP(w, r)
			}))
			defer srv.Close()
			opts := Options{Prefix: true, Suffix: true}
			var src Source
			var err error
			if tt.retry {
				src, err = OpenWithRetry(t.Context(), srv.URL+"/a.tar.zst", opts, RetryOptions{})
			} else {
				src, err = Open(t.Context(), srv.URL+"/a.tar.zst", opts)
			}
			require.NoError(t, err)
			// The tail's request went out with the probe.
			deadline := time.Now().Add(10 * time.Second)
			for tails.Load() == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
			require.Equal(t, int64(1), tails.Load(), "tail requests")
			n := min(tt.size, 20000)
			off := int64(tt.size - n)
			before := len(o.requests())
			got := make([]byte, n)
			_, err = src.ReadAt(t.Context(), got, off)
			require.NoError(t, err)
			require.True(t, bytes.Equal(o.data[off:], got), "the tail's bytes")
			reqs := o.requests()[before:]
			if tt.asks {
				require.Len(t, reqs, 1, "a read of the tail asks for itself")
				require.Equal(t, `"v1"`, reqs[0].Get("If-Match"))
			} else {
				require.Empty(t, reqs, "a read of the tail sends no request")
			}
			if tt.size > ProbeBytes {
				// Bytes before the tail are read as usual, at once even
				// while the tail is on its way.
				start := time.Now()
				_, err = src.ReadAt(t.Context(), got[:100], 0)
				require.NoError(t, err)
				require.True(t, bytes.Equal(o.data[:100], got[:100]))
				require.Less(t, time.Since(start), tailWait/2, "a read before the tail waited for it")
			}
			start := time.Now()
			require.NoError(t, src.Close())
			if tt.closes {
				require.Less(t, time.Since(start), late/2, "Close waits for the tail's request to end")
			}
		})
	}
}
