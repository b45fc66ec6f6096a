// Package shaped is a static file handler for tests and benchmarks: it
// serves the files of one directory with byte ranges, a strong ETag,
// Last-Modified and the conditional headers (If-Match, If-None-Match,
// If-Range, If-Modified-Since), optionally shaped like object storage (a
// delay before every response and a per-connection bandwidth cap), and it
// counts what it served. For fault tests it injects what a failing object
// store does (Faults: 5xx, throttling, bodies cut or stalled, silence), and
// Server serves it on a loopback address that can go away and come back,
// drop its connections, and change its TLS certificate.
//
// It owns only serving bytes over HTTP; it knows nothing of tar or of
// tarmount's packages. A Handler is safe for concurrent use.
package shaped

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// StatsPath answers GET with the Stats as JSON (not shaped, not counted).
const StatsPath = "/-/stats"

// Options shapes the responses. The zero value serves as fast as it can.
type Options struct {
	// Latency is slept before the first byte of every response (and before
	// the status line), like the time to first byte of object storage.
	Latency time.Duration
	// Rate caps each response body in bytes per second (a token bucket per
	// response writer, so parallel connections each get Rate). Zero means
	// no cap.
	Rate int64
	// Logger gets one Debug line per request; nil discards.
	Logger *slog.Logger
	// Faults, if set, injects faults into the requests (after Latency).
	Faults *Faults
}

// Stats counts what the handler served since it was made or last reset.
type Stats struct {
	Requests      int64            `json:"requests"`       // every request but StatsPath
	RangeRequests int64            `json:"range_requests"` // requests with a Range header
	Bytes         int64            `json:"bytes"`          // response body bytes written
	Status        map[string]int64 `json:"status"`         // by status code, "200", "206", "412"...
}

// Handler serves the files below one directory. Make it with NewHandler.
type Handler struct {
	// set once
	root *os.Root
	dir  string
	opts Options
	log  *slog.Logger

	requests atomic.Int64
	ranges   atomic.Int64
	bytes    atomic.Int64

	mu     sync.Mutex
	status map[int]int64 // guarded by mu
}

var _ http.Handler = (*Handler)(nil)

// NewHandler returns a handler serving the regular files below dir. Names
// are resolved inside dir only: "..", absolute names and symlinks that
// leave dir are refused. It panics if dir cannot be opened, which is a
// programming error in a test or a bad flag in a tool.
func NewHandler(dir string, opts Options) *Handler {
	root, err := os.OpenRoot(dir)
	if err != nil {
		panic(fmt.Sprintf("shaped: open %s: %v", dir, err))
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Handler{root: root, dir: dir, opts: opts, log: log, status: map[int]int64{}}
}

// Close releases the directory handle. Requests served after Close fail.
func (h *Handler) Close() error { return h.root.Close() }

// Stats returns a copy of the counters.
func (h *Handler) Stats() Stats {
	s := Stats{
		Requests:      h.requests.Load(),
		RangeRequests: h.ranges.Load(),
		Bytes:         h.bytes.Load(),
		Status:        map[string]int64{},
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for code, n := range h.status {
		s.Status[strconv.Itoa(code)] = n
	}
	return s
}

// ResetStats sets every counter to zero, for benchmarks that measure one
// phase at a time.
func (h *Handler) ResetStats() {
	h.requests.Store(0)
	h.ranges.Store(0)
	h.bytes.Store(0)
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.status)
}

// ETag returns the strong entity tag served for a file: a hash of its name,
// size and modification time (quoted, as in the header).
func ETag(name string, size int64, mtime time.Time) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d", name, size, mtime.UnixNano()))
	return `"` + hex.EncodeToString(sum[:12]) + `"`
}

func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == StatsPath {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(h.Stats())
		return
	}
	h.requests.Add(1)
	if r.Header.Get("Range") != "" {
		h.ranges.Add(1)
	}
	start := time.Now()
	sw := &shapedWriter{ResponseWriter: w, h: h, rate: bucket{rate: h.opts.Rate}, req: r}
	abort := h.serve(sw, r)
	if sw.code == 0 && !abort {
		sw.code = http.StatusOK
	}
	h.mu.Lock()
	h.status[sw.code]++
	h.mu.Unlock()
	h.log.Debug("request", "method", r.Method, "path", r.URL.Path, "range", r.Header.Get("Range"),
		"status", sw.code, "len", sw.written, "dur", time.Since(start), "aborted", abort)
	if abort {
		// The client sees the connection close (HTTP/1.1) or the
		// stream reset (HTTP/2) where the reply broke.
		panic(http.ErrAbortHandler)
	}
}

// serve answers r on w; abort reports an injected fault that must end
// the reply abruptly.
func (h *Handler) serve(w *shapedWriter, r *http.Request) (abort bool) {
	if h.opts.Latency > 0 {
		t := time.NewTimer(h.opts.Latency)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
			return false
		}
	}
	if f := h.opts.Faults; f != nil {
		return f.inject(w, r, h.serveFile)
	}
	h.serveFile(w, r)
	return false
}

// serveFile answers r with a file below the directory.
func (h *Handler) serveFile(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	name := strings.TrimPrefix(path.Clean("/"+r.URL.Path), "/")
	if name == "" {
		name = "."
	}
	f, err := h.root.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			http.Error(w, "not found", http.StatusNotFound)
		} else {
			http.Error(w, "forbidden", http.StatusForbidden)
		}
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		http.Error(w, "stat failed", http.StatusInternalServerError)
		return
	}
	if !st.Mode().IsRegular() {
		http.Error(w, "not found", http.StatusNotFound)
		return
	}
	w.Header().Set("ETag", ETag(name, st.Size(), st.ModTime()))
	w.Header().Set("Accept-Ranges", "bytes")
	// ServeContent handles Range, If-Match, If-None-Match, If-Range,
	// If-(Un)Modified-Since and Last-Modified; a fixed Content-Type keeps
	// it from sniffing (and reading) the start of the file.
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, name, st.ModTime(), f)
}

// shapedWriter records the status, counts body bytes and applies the
// bandwidth cap.
type shapedWriter struct {
	http.ResponseWriter
	h    *Handler
	req  *http.Request
	rate bucket

	code    int
	written int64
}

func (w *shapedWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *shapedWriter) Write(p []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.rate.write(w.req.Context(), p, func(chunk []byte) (int, error) {
		n, err := w.ResponseWriter.Write(chunk)
		w.written += int64(n)
		w.h.bytes.Add(int64(n))
		return n, err
	})
}

// burstBytes is the bucket size: small enough to keep the rate smooth at
// a few MB/s, large enough that a write is not split into tiny sleeps.
const burstBytes = 64 << 10

// bucket is a token bucket of burstBytes refilled at rate bytes per
// second; a zero rate lets everything through. It is not safe for
// concurrent use.
type bucket struct {
	rate   int64
	tokens float64
	last   time.Time
}

// write passes p to w in chunks of at most burstBytes, each once the
// bucket holds enough tokens.
func (b *bucket) write(ctx context.Context, p []byte, w func([]byte) (int, error)) (int, error) {
	total := 0
	for len(p) > 0 {
		chunk := p
		if b.rate > 0 {
			if len(chunk) > burstBytes {
				chunk = chunk[:burstBytes]
			}
			if err := b.wait(ctx, len(chunk)); err != nil {
				return total, err
			}
		}
		n, err := w(chunk)
		total += n
		if err != nil {
			return total, err
		}
		p = p[n:]
	}
	return total, nil
}

// wait blocks until n tokens are available, then takes them.
func (b *bucket) wait(ctx context.Context, n int) error {
	now := time.Now()
	if b.last.IsZero() {
		b.tokens = burstBytes
	} else {
		b.tokens = min(b.tokens+now.Sub(b.last).Seconds()*float64(b.rate), burstBytes)
	}
	b.last = now
	if need := float64(n) - b.tokens; need > 0 {
		d := time.Duration(need / float64(b.rate) * float64(time.Second))
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		now = time.Now()
		b.tokens += now.Sub(b.last).Seconds() * float64(b.rate)
		b.last = now
	}
	b.tokens -= float64(n)
	return nil
}

// Flush passes through so streaming responses stay streaming.
func (w *shapedWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap gives http.ResponseController the writer underneath.
func (w *shapedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ParseRate parses a bandwidth such as "80MB", "80M", "10MiB", "1.5GB",
// "500KB" or "1000" (bytes per second). Decimal units (K, KB, M, MB, G, GB)
// are powers of 1000, binary ones (KiB, MiB, GiB) powers of 1024. "", "0"
// and "none" mean no cap.
func ParseRate(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "0" || strings.EqualFold(s, "none") {
		return 0, nil
	}
	s = strings.TrimSuffix(strings.TrimSuffix(s, "/s"), "ps")
	i := strings.IndexFunc(s, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := s, ""
	if i >= 0 {
		num, unit = s[:i], strings.TrimSpace(s[i:])
	}
	v, err := strconv.ParseFloat(num, 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("shaped: bad rate %q", s)
	}
	mult := map[string]float64{
		"": 1, "B": 1,
		"K": 1e3, "KB": 1e3, "M": 1e6, "MB": 1e6, "G": 1e9, "GB": 1e9,
		"KIB": 1 << 10, "MIB": 1 << 20, "GIB": 1 << 30,
	}[strings.ToUpper(unit)]
	if mult == 0 {
		return 0, fmt.Errorf("shaped: bad rate unit %q in %q", unit, s)
	}
	return int64(v * mult), nil
}
