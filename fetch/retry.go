package fetch

// Locking: a watchdog has one mutex, watchdog.mu, held only for the few
// instructions of a check or stop; nothing blocks under it.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ErrTimeout means a read did not succeed within RetryOptions.Deadline,
// retries and waits included. It is permanent: the source may answer
// later, but this read has given up.
var ErrTimeout = errors.New("fetch: read timed out")

// errStalled is the cause of an attempt cancelled by the stall watchdog.
var errStalled = errors.New("fetch: transfer stalled below the minimum speed")

// errDeadline is the cause of the per-read context once Deadline passes.
var errDeadline = errors.New("fetch: read deadline")

const (
	defaultMaxAttempts = 8
	defaultBaseDelay   = 100 * time.Millisecond
	defaultMaxDelay    = 10 * time.Second
	// DefaultReadTimeout is the default RetryOptions.Deadline.
	DefaultReadTimeout = 2 * time.Minute
	// DefaultMinBytesPerSec is the default RetryOptions.MinSpeed.
	DefaultMinBytesPerSec = 64 << 10
	defaultStallGrace     = 5 * time.Second
	defaultStallWindow    = 5 * time.Second
	// stallTicksPerWindow is how often per window the watchdog samples
	// the bytes received: the rate is averaged over a sliding window.
	stallTicksPerWindow = 5
	// maxRetryAfter bounds a Retry-After header before MaxDelay applies,
	// so that a huge value cannot overflow a Duration.
	maxRetryAfter = 24 * time.Hour
)

// RetryOptions configure WithRetry. Zero values mean the defaults.
type RetryOptions struct {
	// MaxAttempts bounds the attempts of one read since the last one that
	// brought new bytes (that one included): an attempt that makes
	// progress before failing starts the count again, so a long read over
	// a connection that keeps breaking still completes, within Deadline.
	// Default 8; 1 means no retries.
	MaxAttempts int
	// BaseDelay and MaxDelay bound the exponential backoff with full
	// jitter: before retry k (counted like MaxAttempts) the read sleeps a
	// random time in [0, min(MaxDelay, BaseDelay*2^(k-1))), or at least
	// what the server asked with Retry-After, up to MaxDelay. Defaults
	// 100 ms and 10 s.
	BaseDelay, MaxDelay time.Duration
	// Deadline bounds one ReadAt, retries and waits included, for sources
	// that honour ctx (all in this package do); then the read fails with
	// an error wrapping ErrTimeout. Default DefaultReadTimeout (2 min).
	Deadline time.Duration
	// MinSpeed is the stall watchdog's threshold in bytes per second: an
	// attempt that, once StallGrace has passed since it started, received
	// fewer than MinSpeed bytes per second over the last StallWindow is
	// cancelled and retried from where it stopped. Default
	// DefaultMinBytesPerSec (64 KiB/s); negative disables the watchdog.
	// Only sources that meter their transfers are watched (HTTP is; a
	// local file is not).
	MinSpeed int64
	// StallGrace and StallWindow: see MinSpeed. Defaults 5 s and 5 s.
	StallGrace, StallWindow time.Duration
	Logger                  *slog.Logger // Warn per retry; nil = discard
}

// OpenWithRetry is Open with the retry policy of opts: the request that
// pins the object's identity is retried like a read when it fails
// transiently (a 503 at mount time, a connection reset), with backoff,
// until opts.Deadline has passed. An open in progress is not cut short by
// the deadline: it may be downloading a whole object whose server ignores
// ranges (Options.Copies). But the stall watchdog watches it as it
// watches a read: a transfer that falls under opts.MinSpeed (a server
// that sends headers and then nothing) is cancelled and retried, within
// the deadline. The Source it returns retries its reads too (WithRetry).
func OpenWithRetry(ctx context.Context, rawURL string, opts Options, ropts RetryOptions) (Source, error) {
	r := newRetrySource(nil, ropts)
	retryable := func(err error) bool { return errors.Is(err, errStalled) || IsRetryable(err) }
	err := r.retry(ctx, "open failed, retrying", rawURL, retryable, func(ctx context.Context) error {
		src, err := r.openAttempt(ctx, rawURL, opts)
		r.src = src
		return err
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// openAttempt is one Open, watched by the stall watchdog; an attempt it
// cancels fails with an error wrapping errStalled.
func (s *retrySource) openAttempt(ctx context.Context, rawURL string, opts Options) (Source, error) {
	var src Source
	stalled, err := s.watched(ctx, func(ctx context.Context) (err error) {
		src, err = Open(ctx, rawURL, opts)
		return err
	})
	if stalled && ctx.Err() == nil {
		s.stalls.Add(1)
		return nil, fmt.Errorf("open %s: %w", rawURL, errStalled)
	}
	return src, err
}

// Retry runs op until it returns nil, ctx ends, or it fails with an error
// that retryable reports as permanent, and waits between attempts as a
// read of a Source made by WithRetry does: full jitter under a ceiling
// that doubles from opts.BaseDelay to opts.MaxDelay (at least a server's
// Retry-After). opts.MaxAttempts and opts.Deadline bound the attempts and
// the time as they bound a read; an attempt in progress is not cut short
// by the deadline. Each retry is logged at Warn as msg with the keys src
// (name), attempt, err and delay. It returns op's last error, wrapped in
// ErrTimeout when the deadline ended the retries.
func Retry(ctx context.Context, opts RetryOptions, msg, name string, retryable func(error) bool, op func(context.Context) error) error {
	return newRetrySource(nil, opts).retry(ctx, msg, name, retryable, op)
}

// retry is Retry with the policy of s.
func (s *retrySource) retry(ctx context.Context, msg, name string, retryable func(error) bool, op func(context.Context) error) error {
	start := time.Now()
	for failures := 1; ; failures++ {
		err := op(ctx)
		if err == nil {
			return nil
		}
		if !retryable(err) || failures >= s.maxAttempts || ctx.Err() != nil {
			return err
		}
		d := s.backoff(failures, err)
		if time.Since(start)+d > s.deadline {
			return fmt.Errorf("%w after %d attempts in %v: %v", ErrTimeout, failures, s.deadline, err)
		}
		s.log.Warn(msg, "src", name, "attempt", failures, "err", err, "delay", d)
		if err := Sleep(ctx, d); err != nil {
			return err
		}
	}
}

// RetryStats are the counters of a source made by WithRetry since it was
// made. Each is read atomically.
type RetryStats struct {
	Retries  int64 // attempts after the first one of a read
	Resumes  int64 // retries that asked only for the rest of a range cut short
	Stalls   int64 // attempts cancelled by the stall watchdog
	Timeouts int64 // reads that failed with ErrTimeout
}

// retrySource is the Source that WithRetry returns.
type retrySource struct {
	// set once
	src         Source
	maxAttempts int
	baseDelay   time.Duration
	maxDelay    time.Duration
	deadline    time.Duration
	minSpeed    int64 // <= 0: no watchdog
	stallGrace  time.Duration
	stallWindow time.Duration
	log         *slog.Logger

	retries, resumes, stalls, timeouts atomic.Int64
}

var _ Source = (*retrySource)(nil)

// WithRetry returns a Source that reads src and retries reads that fail
// with an error IsRetryable reports as transient (5xx, 408, 429,
// refused, reset or cut connections, short bodies), a host name that
// stopped resolving (it resolved when src was opened), and attempts that
// the stall watchdog cancels. It never retries ErrChanged, ErrNotFound,
// ErrNoRange, ErrClosed, other 4xx, the transport failures IsRetryable
// calls permanent (TLS against plain HTTP, a certificate that does not
// verify, a redirect loop), nor a read whose ctx is done.
//
// A read that failed after n > 0 bytes resumes where it broke: it keeps
// p[:n] and asks only for the rest, relying on the Source contract that
// p[:n] holds the object's bytes whatever the error. Every attempt goes
// to the same pinned version (HTTP sends If-Match), so a resumed read
// never mixes two versions: a replaced object fails with ErrChanged.
//
// Each ReadAt is bounded by opts.Deadline; past it the read fails with an
// error wrapping ErrTimeout. Every retry is logged at Warn with the keys
// src, attempt, off, len, err and delay. The returned Source also has a
// method
//
//	RetryStats() RetryStats
//
// It is safe for concurrent use, and Close closes src.
func WithRetry(src Source, opts RetryOptions) Source { return newRetrySource(src, opts) }

// newRetrySource applies the defaults of opts.
func newRetrySource(src Source, opts RetryOptions) *retrySource {
	s := &retrySource{
		src:         src,
		maxAttempts: opts.MaxAttempts,
		baseDelay:   opts.BaseDelay,
		maxDelay:    opts.MaxDelay,
		deadline:    opts.Deadline,
		minSpeed:    opts.MinSpeed,
		stallGrace:  opts.StallGrace,
		stallWindow: opts.StallWindow,
		log:         opts.Logger,
	}
	if s.maxAttempts <= 0 {
		s.maxAttempts = defaultMaxAttempts
	}
	if s.baseDelay <= 0 {
		s.baseDelay = defaultBaseDelay
	}
	if s.maxDelay <= 0 {
		s.maxDelay = defaultMaxDelay
	}
	s.maxDelay = max(s.maxDelay, s.baseDelay)
	if s.deadline <= 0 {
		s.deadline = DefaultReadTimeout
	}
	if s.minSpeed == 0 {
		s.minSpeed = DefaultMinBytesPerSec
	}
	if s.stallGrace <= 0 {
		s.stallGrace = defaultStallGrace
	}
	if s.stallWindow <= 0 {
		s.stallWindow = defaultStallWindow
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	return s
}

// RetryStats returns the counters.
func (s *retrySource) RetryStats() RetryStats {
	return RetryStats{
		Retries:  s.retries.Load(),
		Resumes:  s.resumes.Load(),
		Stalls:   s.stalls.Load(),
		Timeouts: s.timeouts.Load(),
	}
}

func (s *retrySource) Identity() Identity { return s.src.Identity() }
func (s *retrySource) String() string     { return s.src.String() }
func (s *retrySource) Close() error       { return s.src.Close() }
func (s *retrySource) Local() bool        { return IsLocal(s.src) }

// FirstByte is the wrapped source's (FirstByter).
func (s *retrySource) FirstByte() (byte, bool) {
	if fb, ok := s.src.(FirstByter); ok {
		return fb.FirstByte()
	}
	return 0, false
}

// Prefix is the wrapped source's (Prefixer).
func (s *retrySource) Prefix() []byte {
	if p, ok := s.src.(Prefixer); ok {
		return p.Prefix()
	}
	return nil
}

// ReadAt reads like src.ReadAt, retrying as WithRetry describes.
//
//	off                     off+done                       off+len(p)
//	|-- bytes received ------|-- asked by the next attempt --|
func (s *retrySource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if len(p) == 0 || off < 0 {
		return s.src.ReadAt(ctx, p, off)
	}
	start := time.Now()
	deadline := start.Add(s.deadline)
	dctx, cancel := context.WithDeadlineCause(ctx, deadline, errDeadline)
	defer cancel()
	done := 0
	failures := 0     // attempts since the last one that brought bytes, included
	var lastErr error // the last error that was retried
	for attempt := 1; ; attempt++ {
		rest := p[done:]
		n, stalled, err := s.attempt(dctx, rest, off+int64(done))
		if n < 0 || n > len(rest) {
			return done, fmt.Errorf("read %s at %d: source returned %d for %d bytes", s.src, off+int64(done), n, len(rest))
		}
		done += n
		switch {
		case err == io.EOF:
			return done, err
		case err == nil && done == len(p):
			return done, nil
		case done == len(p) && (retryableRead(err) || stalled):
			// Every byte arrived; what broke after them does not matter.
			return done, nil
		case err == nil:
			// Short without an error breaks the Source contract; treat
			// it like a short body.
			err = fmt.Errorf("read %s at %d: got %d of %d bytes: %w", s.src, off+int64(done-n), n, len(rest), io.ErrUnexpectedEOF)
		}
		if ctx.Err() != nil {
			return done, ctxError(ctx, err)
		}
		if dctx.Err() != nil {
			return done, s.timeout(off, attempt, start, err, lastErr)
		}
		if stalled {
			s.stalls.Add(1)
			err = fmt.Errorf("read %s at %d: %w (got %d of %d bytes)", s.src, off+int64(done-n), errStalled, n, len(rest))
		} else if !retryableRead(err) {
			return done, withAttempts(err, attempt)
		}
		if n > 0 {
			failures = 1
		} else {
			failures++
		}
		if failures >= s.maxAttempts {
			return done, withAttempts(err, attempt)
		}
		delay := s.backoff(failures, err)
		if time.Until(deadline) <= delay {
			return done, s.timeout(off, attempt, start, err, err)
		}
		lastErr = err
		s.retries.Add(1)
		if done > 0 {
			s.resumes.Add(1)
		}
		s.log.LogAttrs(ctx, slog.LevelWarn, "retry",
			slog.String("src", s.src.String()), slog.Int("attempt", attempt),
			slog.Int64("off", off+int64(done-n)), slog.Int("len", len(rest)),
			slog.Any("err", err), slog.Duration("delay", delay.Round(time.Millisecond)))
		if err := Sleep(dctx, delay); err != nil {
			if ctx.Err() != nil {
				return done, fmt.Errorf("read %s at %d: %w", s.src, off, ctx.Err())
			}
			return done, s.timeout(off, attempt, start, nil, lastErr)
		}
	}
}

// retryableRead is IsRetryable for a read of an object that was opened:
// there, a host name that no longer resolves ("no such host") is a DNS
// outage to wait out, since it resolved at open; at open it is final (a
// typo, a name that does not exist).
func retryableRead(err error) bool {
	if IsRetryable(err) {
		return true
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	_, ok := errors.AsType[*net.DNSError](err)
	return ok
}

// attempt makes one read of p at off under ctx, watched by a stall
// watchdog unless it is disabled. stalled reports that the watchdog
// cancelled it.
func (s *retrySource) attempt(ctx context.Context, p []byte, off int64) (n int, stalled bool, err error) {
	stalled, err = s.watched(ctx, func(ctx context.Context) (err error) {
		n, err = s.src.ReadAt(ctx, p, off)
		return err
	})
	return n, stalled && (errors.Is(err, context.Canceled) || IsRetryable(err)), err
}

// watched runs op under the stall watchdog, unless it is disabled, with
// the watchdog's meter in op's ctx; stalled reports that op failed because
// the watchdog cancelled it.
func (s *retrySource) watched(ctx context.Context, op func(context.Context) error) (stalled bool, err error) {
	if s.minSpeed <= 0 {
		return false, op(ctx)
	}
	actx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	m := &meter{}
	w := startWatchdog(m, s.minSpeed, s.stallGrace, s.stallWindow, cancel)
	err = op(context.WithValue(actx, meterKey{}, m))
	w.stop()
	return err != nil && errors.Is(context.Cause(actx), errStalled), err
}

// backoff returns the wait before the retry that follows failures
// attempts without progress: full jitter over an exponential ceiling, and
// at least the server's Retry-After, both capped by maxDelay.
func (s *retrySource) backoff(failures int, err error) time.Duration {
	ceil := s.baseDelay
	for i := 1; i < failures && ceil < s.maxDelay; i++ {
		ceil *= 2
	}
	ceil = min(ceil, s.maxDelay)
	d := time.Duration(rand.Int64N(int64(ceil)))
	if se, ok := errors.AsType[*StatusError](err); ok && se.RetryAfter > 0 {
		d = max(d, min(se.RetryAfter, s.maxDelay))
	}
	return d
}

// timeout counts a read that ran out of time, or would run out before
// its next attempt, and returns its error. The error names the last
// retried failure (the final one is often just the deadline cutting an
// attempt short), formatted with %v: it was transient, and the timeout
// must not look retryable to IsRetryable.
func (s *retrySource) timeout(off int64, attempts int, start time.Time, err, lastErr error) error {
	s.timeouts.Add(1)
	last := lastErr
	if last == nil {
		last = err
	}
	msg := fmt.Sprintf("no success within %v: %d attempts in %v", s.deadline, attempts, time.Since(start).Round(time.Millisecond))
	if last == nil {
		return fmt.Errorf("read %s at %d: %w: %s", s.src, off, ErrTimeout, msg)
	}
	// Said once: the last error of a read that made no progress names
	// the same source and offset.
	lastMsg := strings.TrimPrefix(last.Error(), fmt.Sprintf("read %s at %d: ", s.src, off))
	return fmt.Errorf("read %s at %d: %w: %s; last error: %s", s.src, off, ErrTimeout, msg, lastMsg)
}

// withAttempts notes how many attempts a failed read made.
func withAttempts(err error, attempts int) error {
	if attempts == 1 {
		return err
	}
	return fmt.Errorf("%w (after %d attempts)", err, attempts)
}

// ctxError returns err if it already says that ctx is done, else wraps
// ctx's error around it.
func ctxError(ctx context.Context, err error) error {
	if errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (%v)", ctx.Err(), err)
}

// Sleep waits d or until ctx is done, and then returns ctx.Err(): nil
// unless ctx ended.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// parseRetryAfter reads a Retry-After header: delay-seconds or an
// HTTP-date. It returns 0 when v is empty, invalid or in the past.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs <= 0 {
			return 0
		}
		return min(time.Duration(min(secs, int64(maxRetryAfter/time.Second)))*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}

// meter counts the bytes one attempt receives, for the stall watchdog.
// WithRetry puts one in each attempt's ctx; a source that meters its
// transfers calls arm when it starts a request, then reads its body
// through reader:
//
//	m := meterFrom(ctx)
//	m.arm()
//	... send the request ...
//	n, err := io.ReadFull(m.reader(body), p)
//
// The watchdog judges only armed meters, so sources that do not meter
// (local files) are never cancelled for being slow. A nil *meter does
// nothing.
type meter struct {
	armed atomic.Bool
	bytes atomic.Int64
}

type meterKey struct{}

// meterFrom returns the meter of ctx, or nil.
func meterFrom(ctx context.Context) *meter {
	m, _ := ctx.Value(meterKey{}).(*meter)
	return m
}

func (m *meter) arm() {
	if m != nil {
		m.armed.Store(true)
	}
}

// reader returns r counting what it reads into m (r itself if m is nil).
func (m *meter) reader(r io.Reader) io.Reader {
	if m == nil {
		return r
	}
	return &meteredReader{r: r, m: m}
}

type meteredReader struct {
	r io.Reader
	m *meter
}

func (r *meteredReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	r.m.bytes.Add(int64(n))
	return n, err
}

// watchdog cancels an attempt whose meter shows fewer than minSpeed bytes
// per second over the last window, once grace has passed. It samples the
// meter stallTicksPerWindow times per window from a timer: no goroutine
// waits while nothing is due.
type watchdog struct {
	// set once
	m        *meter
	minSpeed int64
	grace    time.Duration
	tick     time.Duration
	cancel   context.CancelCauseFunc
	start    time.Time

	mu sync.Mutex
	// guarded by mu
	timer   *time.Timer
	stopped bool
	samples [stallTicksPerWindow + 1]sample // ring; next is the oldest
	next    int
}

type sample struct {
	at    time.Time
	bytes int64
}

func startWatchdog(m *meter, minSpeed int64, grace, window time.Duration, cancel context.CancelCauseFunc) *watchdog {
	w := &watchdog{
		m:        m,
		minSpeed: minSpeed,
		grace:    grace,
		tick:     max(window/stallTicksPerWindow, time.Millisecond),
		cancel:   cancel,
		start:    time.Now(),
	}
	for i := range w.samples {
		w.samples[i].at = w.start
	}
	w.mu.Lock()
	w.timer = time.AfterFunc(w.tick, w.check)
	w.mu.Unlock()
	return w
}

// check samples the meter and cancels the attempt if it is too slow.
func (w *watchdog) check() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	now := time.Now()
	n := w.m.bytes.Load()
	old := w.samples[w.next]
	w.samples[w.next] = sample{at: now, bytes: n}
	w.next = (w.next + 1) % len(w.samples)
	if now.Sub(w.start) >= w.grace && w.m.armed.Load() {
		dt := now.Sub(old.at).Seconds()
		if dt > 0 && float64(n-old.bytes) < float64(w.minSpeed)*dt {
			w.stopped = true
			w.cancel(errStalled)
			return
		}
	}
	w.timer.Reset(w.tick)
}

// stop ends the watch; after it returns the attempt is never cancelled.
func (w *watchdog) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.timer.Stop()
}
