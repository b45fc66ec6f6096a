package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// faultKind is a fault that faultServer injects into one ranged GET.
type faultKind int

const (
	faultNone    faultKind = iota
	fault503               // 503 Service Unavailable
	fault429               // 429 Too Many Requests, Retry-After: 1
	faultCut               // 206, k bytes of the body, then the connection is closed
	faultStall             // 206, k bytes of the body, then nothing until the client leaves
	faultHang              // nothing at all (not even a status line) until the client leaves
	faultReplace           // like faultCut, then the object is replaced by a new version
)

func (k faultKind) String() string {
	return [...]string{"none", "503", "429", "cut", "stall", "hang", "replace"}[k]
}

// fault is one scripted fault: kind, and k bytes of body for cuts and
// stalls.
type fault struct {
	kind faultKind
	k    int
}

// cutRecord is a ranged GET cut after k bytes of first..last.
type cutRecord struct {
	first, last int64
	k           int
}

// faultServer serves one object on 127.0.0.1 with byte ranges, a strong
// ETag and If-Match, and injects faults into ranged GETs other than the
// identity probe (bytes=0-0): first the scripted ones, in order, then at
// random with the rates given, and always with always unless it is
// faultNone.
type faultServer struct {
	url     string
	release chan struct{} // closed at cleanup: stalled and hung handlers return

	mu sync.Mutex
	// guarded by mu
	data          []byte
	etag          string
	ignoreIfMatch bool // serve whatever the validators say
	script        []fault
	always        faultKind
	rng           *rand.Rand
	rates         map[faultKind]float64 // probability per request
	ranges        []string              // Range of every ranged GET but the probe, in order
	times         []time.Time           // when each of them arrived
	cuts          []cutRecord
	injected      map[faultKind]int
}

func newFaultServer(t *testing.T, data []byte) *faultServer {
	t.Helper()
	s := &faultServer{
		release:  make(chan struct{}),
		data:     data,
		etag:     `"v1"`,
		rng:      rand.New(rand.NewPCG(1, 2)),
		rates:    map[faultKind]float64{},
		injected: map[faultKind]int{},
	}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(s.release) }) // runs before srv.Close
	s.url = srv.URL + "/a.tar.gz"
	return s
}

func (s *faultServer) set(f func(s *faultServer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

// next picks the fault for a ranged GET of rng and records it.
func (s *faultServer) next(rng string) fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ranges = append(s.ranges, rng)
	s.times = append(s.times, time.Now())
	f := fault{kind: s.always}
	switch {
	case len(s.script) > 0:
		f, s.script = s.script[0], s.script[1:]
	case f.kind == faultNone:
		x := s.rng.Float64()
		for _, k := range []faultKind{fault503, fault429, faultCut, faultStall} {
			if x < s.rates[k] {
				f.kind = k
				f.k = -1 // a random cut point
				break
			}
			x -= s.rates[k]
		}
	}
	if f.kind != faultNone {
		s.injected[f.kind]++
	}
	return f
}

func (s *faultServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rng := r.Header.Get("Range")
	if rng == "" || rng == "bytes=0-0" {
		s.serve(w, r)
		return
	}
	f := s.next(rng)
	switch f.kind {
	case faultNone:
		s.serve(w, r)
	case fault503:
		http.Error(w, "busy", http.StatusServiceUnavailable)
	case fault429:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	case faultHang:
		select {
		case <-r.Context().Done():
		case <-s.release:
		}
	case faultCut, faultStall, faultReplace:
		s.serveBroken(w, r, f)
	}
}

// serve answers like a correct server.
func (s *faultServer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	data, etag, ignore := s.data, s.etag, s.ignoreIfMatch
	s.mu.Unlock()
	if ignore {
		r.Header.Del("If-Match")
	}
	w.Header().Set("ETag", etag)
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(data))
}

// serveBroken starts a correct 206 reply and breaks it after f.k bytes of
// body (a random point when f.k < 0).
func (s *faultServer) serveBroken(w http.ResponseWriter, r *http.Request, f fault) {
	s.mu.Lock()
	data, etag, ignore := s.data, s.etag, s.ignoreIfMatch
	s.mu.Unlock()
	first, last, ok := parseRange(r.Header.Get("Range"), int64(len(data)))
	if im := r.Header.Get("If-Match"); !ok || (im != "" && im != etag && !ignore) {
		s.serve(w, r) // 412 or 416
		return
	}
	body := data[first : last+1]
	k := f.k
	if k < 0 {
		s.mu.Lock()
		k = s.rng.IntN(len(body))
		s.mu.Unlock()
	}
	k = min(k, len(body)-1)
	h := w.Header()
	h.Set("ETag", etag)
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", first, last, len(data)))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(http.StatusPartialContent)
	w.Write(body[:k])
	rc := http.NewResponseController(w)
	rc.Flush()
	if f.kind == faultStall {
		select {
		case <-r.Context().Done():
		case <-s.release:
		}
		return
	}
	s.mu.Lock()
	s.cuts = append(s.cuts, cutRecord{first: first, last: last, k: k})
	if f.kind == faultReplace {
		s.data = bytes.Repeat([]byte{0xA5}, len(s.data))
		s.etag = `"v2"`
	}
	s.mu.Unlock()
	if conn, _, err := rc.Hijack(); err == nil {
		conn.Close()
	}
}

// parseRange parses "bytes=first-last" within size.
func parseRange(h string, size int64) (first, last int64, ok bool) {
	a, b, ok := strings.Cut(strings.TrimPrefix(h, "bytes="), "-")
	if !ok {
		return 0, 0, false
	}
	first, err1 := strconv.ParseInt(a, 10, 64)
	last, err2 := strconv.ParseInt(b, 10, 64)
	if err1 != nil || err2 != nil || first > last || first >= size {
		return 0, 0, false
	}
	return first, min(last, size-1), true
}

func (s *faultServer) log() (ranges []string, times []time.Time, cuts []cutRecord) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.ranges...), append([]time.Time(nil), s.times...), append([]cutRecord(nil), s.cuts...)
}

func (s *faultServer) injectedCount(k faultKind) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.injected[k]
}

// TestHTTPCutKeepsBytes checks the HTTP source's side of resuming: a body
// cut after k bytes returns n = k with those bytes in p and a retryable
// error.
func TestHTTPCutKeepsBytes(t *testing.T) {
	for _, k := range []int{0, 1, 1000, 9999} {
		t.Run(fmt.Sprint(k), func(t *testing.T) {
			data := randomBytes(20000, 20)
			fs := newFaultServer(t, data)
			fs.set(func(s *faultServer) { s.script = []fault{{faultCut, k}} })
			src := mustOpen(t, fs.url)
			p := make([]byte, 10000)
			n, err := src.ReadAt(t.Context(), p, 5000)
			require.Error(t, err)
			require.True(t, IsRetryable(err), "IsRetryable(%v)", err)
			require.Equal(t, k, n)
			require.Equal(t, data[5000:5000+k], p[:k])
			require.Equal(t, make([]byte, len(p)-k), p[k:], "bytes past the cut")
		})
	}
}

// httpRetryOpts retry at once and catch a stall within a few hundred ms
// (slack enough that a loaded machine does not trip the watchdog on a
// healthy loopback transfer).
var httpRetryOpts = RetryOptions{
	MaxAttempts: 20, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, Deadline: 20 * time.Second,
	MinSpeed: 64 << 10, StallGrace: 100 * time.Millisecond, StallWindow: 100 * time.Millisecond,
}

// TestRetryHTTPResume reads through scripted faults and checks that each
// retry asks for exactly the bytes still missing.
func TestRetryHTTPResume(t *testing.T) {
	data := randomBytes(50000, 21)
	fs := newFaultServer(t, data)
	fs.set(func(s *faultServer) {
		s.script = []fault{{faultCut, 1000}, {kind: fault503}, {faultCut, 500}, {faultStall, 2000}, {faultCut, 0}, {kind: faultHang}}
	})
	src := WithRetry(mustOpen(t, fs.url), httpRetryOpts)
	p := make([]byte, 10000)
	n, err := src.ReadAt(t.Context(), p, 100)
	require.NoError(t, err)
	require.Equal(t, len(p), n)
	require.True(t, bytes.Equal(data[100:10100], p), "wrong bytes after faults")
	ranges, _, _ := fs.log()
	require.Equal(t, []string{
		"bytes=100-10099",
		"bytes=1100-10099", // after a cut at 1000: the rest only
		"bytes=1100-10099", // after a 503
		"bytes=1600-10099", // after a cut at 500
		"bytes=3600-10099", // after a stall at 2000
		"bytes=3600-10099", // after a cut before the first byte
		"bytes=3600-10099", // after a stall before the status line
	}, ranges)
	require.Equal(t, RetryStats{Retries: 6, Resumes: 6, Stalls: 2}, retryStats(t, src))
}

// TestRetryHTTP429 checks that Retry-After is honoured, up to MaxDelay.
func TestRetryHTTP429(t *testing.T) {
	data := randomBytes(5000, 22)
	fs := newFaultServer(t, data)
	fs.set(func(s *faultServer) { s.script = []fault{{kind: fault429}} })
	opts := httpRetryOpts
	opts.BaseDelay, opts.MaxDelay = time.Microsecond, 50*time.Millisecond
	src := WithRetry(mustOpen(t, fs.url), opts)
	p := make([]byte, 1000)
	_, err := src.ReadAt(t.Context(), p, 0)
	require.NoError(t, err)
	require.Equal(t, data[:1000], p)
	_, times, _ := fs.log()
	require.Len(t, times, 2)
	// Retry-After: 1 (second), capped by MaxDelay, not the µs backoff.
	require.GreaterOrEqual(t, times[1].Sub(times[0]), 50*time.Millisecond)
}

// TestRetryHTTPReplaced replaces the object in the middle of a read: the
// resumed request fails with ErrChanged, is not retried, and no byte of
// the new version reaches p.
func TestRetryHTTPReplaced(t *testing.T) {
	for _, ignoreIfMatch := range []bool{false, true} {
		t.Run(fmt.Sprintf("ignoreIfMatch=%v", ignoreIfMatch), func(t *testing.T) {
			data := randomBytes(50000, 23)
			fs := newFaultServer(t, data)
			fs.set(func(s *faultServer) {
				s.script = []fault{{faultReplace, 1000}}
				s.ignoreIfMatch = ignoreIfMatch
			})
			src := WithRetry(mustOpen(t, fs.url), httpRetryOpts)
			p := make([]byte, 10000)
			n, err := src.ReadAt(t.Context(), p, 0)
			require.ErrorIs(t, err, ErrChanged)
			require.False(t, IsRetryable(err))
			require.Equal(t, 1000, n)
			require.Equal(t, data[:1000], p[:1000])
			require.Equal(t, make([]byte, len(p)-1000), p[1000:], "bytes of the new version reached p")
			ranges, _, _ := fs.log()
			require.Equal(t, []string{"bytes=0-9999", "bytes=1000-9999"}, ranges, "ErrChanged was retried")

			// Later reads fail too, through Blocks as well.
			b := newTestBlocks(t, src, BlocksOptions{BlockSize: 4096, Workers: 2})
			_, err = b.ReadAt(t.Context(), p, 20000)
			require.ErrorIs(t, err, ErrChanged)
		})
	}
}

// TestRetryHTTPDeadline: a server that fails every request, or answers
// nothing, makes a read fail within the deadline, not hang.
func TestRetryHTTPDeadline(t *testing.T) {
	for _, kind := range []faultKind{fault503, faultHang, faultStall} {
		t.Run(kind.String(), func(t *testing.T) {
			data := randomBytes(50000, 24)
			fs := newFaultServer(t, data)
			src := mustOpen(t, fs.url)
			fs.set(func(s *faultServer) { s.always = kind })
			opts := httpRetryOpts
			opts.MaxAttempts = 1 << 20
			opts.Deadline = 200 * time.Millisecond
			opts.StallGrace = time.Hour // only the deadline ends a hang
			rs := WithRetry(src, opts)
			start := time.Now()
			_, err := rs.ReadAt(t.Context(), make([]byte, 10000), 0)
			require.ErrorIs(t, err, ErrTimeout)
			require.Less(t, time.Since(start), 10*time.Second)
			require.Equal(t, int64(1), retryStats(t, rs).Timeouts)

			// The server recovers: the next read succeeds.
			fs.set(func(s *faultServer) { s.always = faultNone })
			p := make([]byte, 10000)
			_, err = rs.ReadAt(t.Context(), p, 0)
			require.NoError(t, err)
			require.Equal(t, data[:10000], p)
		})
	}
}

// TestRetryHTTPSoak reads an object through random faults (5% 503, 5%
// cuts at random points, 2% stalls, 1% 429) with parallel random reads
// and a stream through Blocks: every read returns exactly the object's
// bytes, and every cut range is resumed from where it broke.
func TestRetryHTTPSoak(t *testing.T) {
	const size = 2 << 20
	data := randomBytes(size, 25)
	fs := newFaultServer(t, data)
	fs.set(func(s *faultServer) {
		// One of each first, so that each kind is seen whatever the draw.
		s.script = []fault{{fault503, 0}, {faultCut, -1}, {faultStall, -1}, {fault429, 0}}
		s.rates = map[faultKind]float64{fault503: 0.05, faultCut: 0.05, faultStall: 0.02, fault429: 0.01}
	})
	// A watchdog slack enough that a loaded machine rarely trips it on a
	// healthy transfer (a false stall is harmless, but blurs the resume
	// check below).
	opts := httpRetryOpts
	opts.MinSpeed, opts.StallGrace, opts.StallWindow = 16<<10, 150*time.Millisecond, 150*time.Millisecond
	src := WithRetry(mustOpen(t, fs.url), opts)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: 64 << 10, Workers: 4, CacheBytes: 512 << 10})

	var wg sync.WaitGroup
	errs := make(chan error, 16)
	wg.Go(func() {
		s := b.Stream(t.Context(), 0)
		defer s.Close()
		got, err := io.ReadAll(s)
		if err != nil {
			errs <- fmt.Errorf("stream: %w", err)
		} else if !bytes.Equal(got, data) {
			errs <- errors.New("stream: wrong bytes")
		}
	})
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			for range 40 {
				off := r.Int64N(size)
				p := make([]byte, 1+r.IntN(100<<10))
				start := time.Now()
				n, err := src.ReadAt(t.Context(), p, off)
				if err == io.EOF && off+int64(n) == size {
					err = nil
				}
				switch {
				case err != nil:
					errs <- fmt.Errorf("read %d+%d after %v: %w", off, len(p), time.Since(start), err)
					return
				case !bytes.Equal(p[:n], data[off:off+int64(n)]):
					errs <- fmt.Errorf("read %d+%d: wrong bytes", off, len(p))
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	ranges, _, cuts := fs.log()
	asked := map[string]int{}
	for _, r := range ranges {
		asked[r]++
	}
	var missed []string
	for _, c := range cuts {
		if rest := rangeHeader(c.first+int64(c.k), c.last); asked[rest] == 0 {
			missed = append(missed, fmt.Sprintf("range %d-%d cut after %d bytes: no request for %s", c.first, c.last, c.k, rest))
		}
	}
	st := retryStats(t, src)
	t.Logf("%d ranged requests, injected 503=%d cut=%d stall=%d 429=%d, stats %+v", len(ranges),
		fs.injectedCount(fault503), fs.injectedCount(faultCut), fs.injectedCount(faultStall), fs.injectedCount(fault429), st)
	// A cut whose bytes the client never read, because the watchdog had
	// just cancelled the attempt (a false stall on a loaded machine), is
	// retried from where the client was: only as many misses as false
	// stalls are allowed. TestRetryHTTPResume checks resumes exactly.
	if falseStalls := st.Stalls - int64(fs.injectedCount(faultStall)); int64(len(missed)) > max(falseStalls, 0) {
		t.Errorf("%d cuts not resumed where they broke (%d false stalls):\n%s", len(missed), falseStalls, strings.Join(missed, "\n"))
	} else if len(missed) > 0 {
		t.Logf("%d cuts resumed from elsewhere after false stalls", len(missed))
	}
	require.NotEmpty(t, cuts)
	require.GreaterOrEqual(t, st.Retries, int64(4))
	require.GreaterOrEqual(t, st.Stalls, int64(1))
	require.Zero(t, st.Timeouts)
}

// TestRetryHTTPCallerCancel: a reader that gives up during a hang gets its
// own context error at once, not ErrTimeout.
func TestRetryHTTPCallerCancel(t *testing.T) {
	fs := newFaultServer(t, randomBytes(5000, 26))
	src := WithRetry(mustOpen(t, fs.url), RetryOptions{Deadline: time.Hour, MinSpeed: -1})
	fs.set(func(s *faultServer) { s.always = faultHang })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := src.ReadAt(ctx, make([]byte, 100), 0)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NotErrorIs(t, err, ErrTimeout)
}
