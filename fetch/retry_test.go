package fetch

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// step is what one call of a scriptSource does: deliver up to n bytes
// (all of the range when err is nil and hang is false), then fail with err,
// or hang until ctx is done.
type step struct {
	n     int
	err   error
	hang  bool
	every time.Duration // if set, deliver the n bytes one chunk at a time, sleeping this long before each
	chunk int           // bytes per chunk with every
}

// scriptSource is an in-memory Source that plays a script of faults, one
// step per call, and serves normally once the script is used up. With
// metered it counts bytes into the stall watchdog's meter like the HTTP
// source.
type scriptSource struct {
	// set once
	data    []byte
	metered bool

	mu sync.Mutex
	// guarded by mu
	script []step
	calls  []call
}

// call is one ReadAt of a scriptSource: where, how much, and when.
type call struct {
	off int64
	len int
	at  time.Time
}

var _ Source = (*scriptSource)(nil)

func newScriptSource(data []byte, script ...step) *scriptSource {
	return &scriptSource{data: data, script: script}
}

func (s *scriptSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	s.mu.Lock()
	s.calls = append(s.calls, call{off: off, len: len(p), at: time.Now()})
	st := step{n: -1}
	if len(s.script) > 0 {
		st, s.script = s.script[0], s.script[1:]
	}
	s.mu.Unlock()

	m := meterFrom(ctx)
	if s.metered {
		m.arm()
	}
	if off >= int64(len(s.data)) {
		return 0, io.EOF
	}
	avail := s.data[off:]
	if st.n < 0 && st.err == nil && !st.hang {
		n := copy(p, avail)
		if s.metered {
			m.bytes.Add(int64(n))
		}
		if n < len(p) {
			return n, io.EOF
		}
		return n, nil
	}
	want := min(max(st.n, 0), len(p), len(avail))
	n := 0
	for n < want {
		c := want - n
		if st.every > 0 {
			c = min(c, st.chunk)
			if err := Sleep(ctx, st.every); err != nil {
				return n, fmt.Errorf("mem at %d: %w", off, err)
			}
		}
		copy(p[n:n+c], avail[n:n+c])
		n += c
		if s.metered {
			m.bytes.Add(int64(c))
		}
	}
	if st.hang {
		<-ctx.Done()
		return n, fmt.Errorf("mem at %d: %w", off, ctx.Err())
	}
	if st.err == nil {
		return n, nil // a short read without an error: a broken source
	}
	return n, st.err
}

func (s *scriptSource) Identity() Identity { return Identity{Size: int64(len(s.data)), ETag: `"s"`} }
func (s *scriptSource) String() string     { return "script" }
func (s *scriptSource) Close() error       { return nil }

func (s *scriptSource) log() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

// ranges returns the (off, len) pairs asked so far.
func (s *scriptSource) ranges() [][2]int64 {
	var r [][2]int64
	for _, c := range s.log() {
		r = append(r, [2]int64{c.off, int64(c.len)})
	}
	return r
}

// fastRetry retries at once (a few µs of backoff) and gives a read a
// generous second.
var fastRetry = RetryOptions{BaseDelay: time.Microsecond, MaxDelay: 10 * time.Microsecond, Deadline: time.Second, MinSpeed: -1}

func retryStats(t *testing.T, src Source) RetryStats {
	t.Helper()
	rs, ok := src.(interface{ RetryStats() RetryStats })
	require.True(t, ok, "WithRetry's source has no RetryStats method")
	return rs.RetryStats()
}

var (
	err503   = &StatusError{Code: 503, Status: "503 Service Unavailable"}
	errReset = &connError{err: syscall.ECONNRESET}
	errShort = fmt.Errorf("body ended after 0 of 10 bytes: %w", io.ErrUnexpectedEOF)
)

func TestRetryTransient(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"503", err503},
		{"500", &StatusError{Code: 500, Status: "500 Internal Server Error"}},
		{"429", &StatusError{Code: 429, Status: "429 Too Many Requests"}},
		{"408", &StatusError{Code: 408, Status: "408 Request Timeout"}},
		{"reset", errReset},
		{"short body", errShort},
		// The name resolved at open: a DNS outage, waited out.
		{"no such host", fmt.Errorf("read x: %w", &net.DNSError{Err: "no such host", Name: "a.test", IsNotFound: true})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := randomBytes(1000, 1)
			fake := newScriptSource(data, step{err: tt.err}, step{err: tt.err}, step{err: tt.err})
			src := WithRetry(fake, fastRetry)
			p := make([]byte, 500)
			n, err := src.ReadAt(t.Context(), p, 300)
			require.NoError(t, err)
			require.Equal(t, 500, n)
			require.Equal(t, data[300:800], p)
			require.Equal(t, [][2]int64{{300, 500}, {300, 500}, {300, 500}, {300, 500}}, fake.ranges())
			require.Equal(t, RetryStats{Retries: 3}, retryStats(t, src))
		})
	}
}

func TestRetryPermanent(t *testing.T) {
	tests := []struct {
		name string
		err  error
	}{
		{"changed", fmt.Errorf("read x: %w (412 Precondition Failed)", ErrChanged)},
		{"not found", fmt.Errorf("read x: %w", ErrNotFound)},
		{"no range", fmt.Errorf("read x: %w", ErrNoRange)},
		{"closed", ErrClosed},
		{"403", &StatusError{Code: 403, Status: "403 Forbidden"}},
		{"501", &StatusError{Code: 501, Status: "501 Not Implemented"}},
		{"other", errFake},
		{"canceled", context.Canceled},
		{"no such host, canceled", fmt.Errorf("%w (%w)", context.Canceled, &net.DNSError{Err: "no such host", IsNotFound: true})},
		{"bad certificate", &tls.CertificateVerificationError{Err: errors.New("x509: certificate signed by unknown authority")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake := newScriptSource(randomBytes(1000, 1), step{err: tt.err})
			src := WithRetry(fake, fastRetry)
			_, err := src.ReadAt(t.Context(), make([]byte, 10), 0)
			require.ErrorIs(t, err, tt.err)
			require.Len(t, fake.log(), 1, "a permanent error was retried")
			require.Equal(t, RetryStats{}, retryStats(t, src))
		})
	}
}

// TestRetryResume checks that a read cut short keeps what it got and asks
// only for the rest.
func TestRetryResume(t *testing.T) {
	data := randomBytes(2000, 2)
	fake := newScriptSource(data,
		step{n: 100, err: errShort},
		step{n: 0, err: err503},
		step{n: 250, err: errReset},
		step{n: 1, err: errShort},
	)
	src := WithRetry(fake, fastRetry)
	p := make([]byte, 1000)
	n, err := src.ReadAt(t.Context(), p, 500)
	require.NoError(t, err)
	require.Equal(t, 1000, n)
	require.True(t, bytes.Equal(data[500:1500], p), "resumed read returned wrong bytes")
	require.Equal(t, [][2]int64{{500, 1000}, {600, 900}, {600, 900}, {850, 650}, {851, 649}}, fake.ranges())
	require.Equal(t, RetryStats{Retries: 4, Resumes: 4}, retryStats(t, src))
}

// TestRetryChangedAfterCut: the resume finds the object replaced; the read
// fails with ErrChanged at once and returns only the first version's bytes.
func TestRetryChangedAfterCut(t *testing.T) {
	data := randomBytes(2000, 3)
	fake := newScriptSource(data, step{n: 100, err: errShort}, step{err: fmt.Errorf("x: %w", ErrChanged)})
	src := WithRetry(fake, fastRetry)
	p := make([]byte, 1000)
	n, err := src.ReadAt(t.Context(), p, 0)
	require.ErrorIs(t, err, ErrChanged)
	require.False(t, IsRetryable(err))
	require.Equal(t, 100, n)
	require.Equal(t, data[:100], p[:100])
	require.Len(t, fake.log(), 2)
}

func TestRetryMaxAttempts(t *testing.T) {
	script := make([]step, 100)
	for i := range script {
		script[i] = step{err: err503}
	}
	opts := fastRetry
	opts.MaxAttempts = 3
	fake := newScriptSource(randomBytes(100, 4), script...)
	src := WithRetry(fake, opts)
	_, err := src.ReadAt(t.Context(), make([]byte, 10), 0)
	se, ok := errors.AsType[*StatusError](err)
	require.True(t, ok, "got %v, want the last *StatusError", err)
	require.Equal(t, 503, se.Code)
	require.NotErrorIs(t, err, ErrTimeout)
	require.ErrorContains(t, err, "after 3 attempts")
	require.Len(t, fake.log(), 3)
	require.Equal(t, int64(2), retryStats(t, src).Retries)

	// MaxAttempts 1 never retries, even after progress.
	opts.MaxAttempts = 1
	fake = newScriptSource(randomBytes(100, 4), step{n: 5, err: errShort})
	_, err = WithRetry(fake, opts).ReadAt(t.Context(), make([]byte, 10), 0)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Len(t, fake.log(), 1)
}

// TestRetryProgressRestartsCount: attempts that bring bytes do not use up
// MaxAttempts, so a long read over a connection that keeps breaking
// completes.
func TestRetryProgressRestartsCount(t *testing.T) {
	data := randomBytes(1000, 5)
	var script []step
	for range 10 {
		script = append(script, step{n: 10, err: errReset}, step{err: err503})
	}
	opts := fastRetry
	opts.MaxAttempts = 3
	fake := newScriptSource(data, script...)
	src := WithRetry(fake, opts)
	p := make([]byte, 150)
	n, err := src.ReadAt(t.Context(), p, 0)
	require.NoError(t, err)
	require.Equal(t, 150, n)
	require.Equal(t, data[:150], p)
	require.Len(t, fake.log(), 21)
}

func TestRetryEOF(t *testing.T) {
	data := randomBytes(1000, 6)
	fake := newScriptSource(data, step{n: 4, err: errShort})
	src := WithRetry(fake, fastRetry)
	p := make([]byte, 100)
	n, err := src.ReadAt(t.Context(), p, 990)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, 10, n)
	require.Equal(t, data[990:], p[:10])
	require.Equal(t, [][2]int64{{990, 100}, {994, 96}}, fake.ranges())

	n, err = src.ReadAt(t.Context(), p, 1000)
	require.Equal(t, io.EOF, err)
	require.Zero(t, n)
	n, err = src.ReadAt(t.Context(), nil, 0)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, fake.Identity(), src.Identity())
	require.Equal(t, "script", src.String())
}

// TestRetryCompleteDespiteError: every byte arrived before the connection
// broke; the read succeeds without another attempt.
func TestRetryCompleteDespiteError(t *testing.T) {
	data := randomBytes(1000, 7)
	fake := newScriptSource(data, step{n: 100, err: errReset})
	n, err := WithRetry(fake, fastRetry).ReadAt(t.Context(), make([]byte, 100), 0)
	require.NoError(t, err)
	require.Equal(t, 100, n)
	require.Len(t, fake.log(), 1)
}

// TestRetryShortWithoutError: a source that breaks the contract with a
// short read and no error is resumed like a short body.
func TestRetryShortWithoutError(t *testing.T) {
	data := randomBytes(1000, 7)
	fake := newScriptSource(data, step{n: 30})
	src := WithRetry(fake, fastRetry)
	p := make([]byte, 100)
	n, err := src.ReadAt(t.Context(), p, 0)
	require.NoError(t, err)
	require.Equal(t, 100, n)
	require.Equal(t, data[:100], p)
	require.Equal(t, [][2]int64{{0, 100}, {30, 70}}, fake.ranges())
}

func TestRetryDeadline(t *testing.T) {
	always := func(st step) []step {
		s := make([]step, 10000)
		for i := range s {
			s[i] = st
		}
		return s
	}
	tests := []struct {
		name    string
		script  []step
		wantN   int
		wantMsg string
	}{
		{"always 503", always(step{err: err503}), 0, "503"},
		{"hang", []step{{hang: true}}, 0, ""},
		{"hang after bytes", []step{{n: 100, hang: true}}, 100, ""},
		{"503 then hang", []step{{err: err503}, {hang: true}}, 0, "last error: unexpected HTTP status 503"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := randomBytes(1000, 8)
			fake := newScriptSource(data, tt.script...)
			src := WithRetry(fake, RetryOptions{
				BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond,
				MaxAttempts: 1 << 30, Deadline: 50 * time.Millisecond, MinSpeed: -1,
			})
			start := time.Now()
			p := make([]byte, 500)
			n, err := src.ReadAt(t.Context(), p, 0)
			require.ErrorIs(t, err, ErrTimeout)
			require.False(t, IsRetryable(err), "a timeout must be final")
			require.NotErrorIs(t, err, context.DeadlineExceeded)
			require.Less(t, time.Since(start), 10*time.Second)
			require.Equal(t, tt.wantN, n)
			require.Equal(t, data[:n], p[:n])
			require.ErrorContains(t, err, "read script at 0: fetch: read timed out: no success within 50ms: ")
			if tt.wantMsg != "" {
				require.ErrorContains(t, err, tt.wantMsg)
			}
			require.Equal(t, int64(1), retryStats(t, src).Timeouts)
		})
	}
}

// TestRetryCallerDone: a read whose caller gives up returns the caller's
// context error, not ErrTimeout, and is not retried.
func TestRetryCallerDone(t *testing.T) {
	for _, hang := range []bool{true, false} {
		t.Run(fmt.Sprintf("hang=%v", hang), func(t *testing.T) {
			script := []step{{hang: true}}
			if !hang {
				// Waiting for a long backoff when the caller leaves.
				script = []step{{err: &StatusError{Code: 429, Status: "429", RetryAfter: time.Hour}}}
			}
			fake := newScriptSource(randomBytes(100, 9), script...)
			src := WithRetry(fake, RetryOptions{MaxDelay: time.Hour, Deadline: 2 * time.Hour, MinSpeed: -1})
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(20*time.Millisecond, cancel)
			_, err := src.ReadAt(ctx, make([]byte, 10), 0)
			require.ErrorIs(t, err, context.Canceled)
			require.NotErrorIs(t, err, ErrTimeout)
			require.Len(t, fake.log(), 1)
			require.Zero(t, retryStats(t, src).Timeouts)

			ctx, cancel = context.WithTimeout(t.Context(), 20*time.Millisecond)
			defer cancel()
			fake = newScriptSource(randomBytes(100, 9), script...)
			src = WithRetry(fake, RetryOptions{MaxDelay: time.Hour, Deadline: 2 * time.Hour, MinSpeed: -1})
			_, err = src.ReadAt(ctx, make([]byte, 10), 0)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.NotErrorIs(t, err, ErrTimeout)
		})
	}
}

func TestRetryAfter(t *testing.T) {
	t.Run("honoured", func(t *testing.T) {
		data := randomBytes(100, 10)
		fake := newScriptSource(data, step{err: &StatusError{Code: 429, Status: "429", RetryAfter: 40 * time.Millisecond}})
		src := WithRetry(fake, RetryOptions{BaseDelay: time.Microsecond, MaxDelay: time.Second, Deadline: 10 * time.Second})
		_, err := src.ReadAt(t.Context(), make([]byte, 10), 0)
		require.NoError(t, err)
		calls := fake.log()
		require.Len(t, calls, 2)
		require.GreaterOrEqual(t, calls[1].at.Sub(calls[0].at), 40*time.Millisecond)
	})
	t.Run("capped by MaxDelay", func(t *testing.T) {
		fake := newScriptSource(randomBytes(100, 10), step{err: &StatusError{Code: 503, Status: "503", RetryAfter: time.Hour}})
		src := WithRetry(fake, RetryOptions{BaseDelay: time.Microsecond, MaxDelay: 30 * time.Millisecond, Deadline: 10 * time.Second})
		start := time.Now()
		_, err := src.ReadAt(t.Context(), make([]byte, 10), 0)
		require.NoError(t, err)
		require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond)
		require.Less(t, time.Since(start), 10*time.Second)
	})
	t.Run("beyond the deadline fails at once", func(t *testing.T) {
		fake := newScriptSource(randomBytes(100, 10), step{err: &StatusError{Code: 503, Status: "503", RetryAfter: time.Hour}})
		src := WithRetry(fake, RetryOptions{MaxDelay: time.Hour, Deadline: time.Minute})
		start := time.Now()
		_, err := src.ReadAt(t.Context(), make([]byte, 10), 0)
		require.ErrorIs(t, err, ErrTimeout)
		require.Less(t, time.Since(start), 10*time.Second)
		require.Len(t, fake.log(), 1)
	})
}

// stallOpts make the watchdog act within tens of milliseconds.
var stallOpts = RetryOptions{
	BaseDelay: time.Microsecond, MaxDelay: 10 * time.Microsecond, Deadline: 10 * time.Second,
	MinSpeed: 1 << 20, StallGrace: 20 * time.Millisecond, StallWindow: 20 * time.Millisecond,
}

func TestRetryStall(t *testing.T) {
	tests := []struct {
		name  string
		first step
	}{
		{"no first byte", step{hang: true}},
		{"stops mid-body", step{n: 100, hang: true}},
		{"trickles", step{n: 900, every: 5 * time.Millisecond, chunk: 10, err: errShort}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data := randomBytes(10000, 11)
			fake := newScriptSource(data, tt.first)
			fake.metered = true
			src := WithRetry(fake, stallOpts)
			p := make([]byte, 1000)
			n, err := src.ReadAt(t.Context(), p, 0)
			require.NoError(t, err)
			require.Equal(t, 1000, n)
			require.Equal(t, data[:1000], p)
			st := retryStats(t, src)
			require.Equal(t, int64(1), st.Stalls)
			require.Equal(t, int64(1), st.Retries)
			r := fake.ranges()
			require.Len(t, r, 2)
			require.Equal(t, [2]int64{0, 1000}, r[0])
			// The second attempt asks for exactly what the first did not get.
			require.Equal(t, int64(1000), r[1][0]+r[1][1])
			if tt.first.n > 0 && tt.first.every == 0 {
				require.Equal(t, [2]int64{100, 900}, r[1])
			}
		})
	}
}

// TestRetryNoFalseStall: a steady transfer above MinSpeed, or a source
// that does not meter (a local file), is never cancelled however long it
// takes.
func TestRetryNoFalseStall(t *testing.T) {
	data := randomBytes(10000, 12)
	opts := stallOpts
	opts.MinSpeed = 1000 // bytes/s; the steady source sends 100 per 2 ms
	opts.StallWindow = 100 * time.Millisecond
	fake := newScriptSource(data, step{n: 4000, every: 2 * time.Millisecond, chunk: 100})
	fake.metered = true
	src := WithRetry(fake, opts)
	_, err := src.ReadAt(t.Context(), make([]byte, 4000), 0)
	require.NoError(t, err)
	require.Zero(t, retryStats(t, src).Stalls)
	require.Len(t, fake.log(), 1)

	slow := newScriptSource(data, step{n: 50, every: 5 * time.Millisecond, chunk: 1})
	src = WithRetry(slow, stallOpts)
	_, err = src.ReadAt(t.Context(), make([]byte, 50), 0)
	require.NoError(t, err)
	require.Zero(t, retryStats(t, src).Stalls)
	require.Len(t, slow.log(), 1)
}

// TestRetryLogs checks the Warn line of a retry and its fixed keys.
func TestRetryLogs(t *testing.T) {
	var buf lockedBuffer
	opts := fastRetry
	opts.Logger = slog.New(slog.NewTextHandler(&buf, nil))
	fake := newScriptSource(randomBytes(1000, 13), step{n: 10, err: err503})
	_, err := WithRetry(fake, opts).ReadAt(t.Context(), make([]byte, 100), 50)
	require.NoError(t, err)
	line := buf.String()
	for _, want := range []string{"level=WARN", "msg=retry", "src=script", "attempt=1", "off=50", "len=100", `err="unexpected HTTP status 503`, "delay="} {
		require.Contains(t, line, want)
	}
	require.Equal(t, 1, strings.Count(line, "\n"))
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestRetryBackoff(t *testing.T) {
	s := WithRetry(newScriptSource(nil), RetryOptions{BaseDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second}).(*retrySource)
	for failures := 1; failures <= 70; failures++ {
		ceil := 10 * time.Second
		if failures <= 7 {
			ceil = 100 * time.Millisecond << (failures - 1)
		}
		var maxSeen time.Duration
		for range 200 {
			d := s.backoff(failures, err503)
			require.GreaterOrEqual(t, d, time.Duration(0))
			require.Less(t, d, ceil, "failures %d", failures)
			maxSeen = max(maxSeen, d)
		}
		require.Greater(t, maxSeen, ceil/4, "failures %d: jitter does not spread over [0, %v)", failures, ceil)
	}
	ra := &StatusError{Code: 429, RetryAfter: 3 * time.Second}
	require.GreaterOrEqual(t, s.backoff(1, fmt.Errorf("x: %w", ra)), 3*time.Second)
	ra.RetryAfter = time.Hour
	require.Equal(t, 10*time.Second, s.backoff(1, ra))
}

func TestRetryDefaults(t *testing.T) {
	s := WithRetry(newScriptSource(nil), RetryOptions{}).(*retrySource)
	require.Equal(t, defaultMaxAttempts, s.maxAttempts)
	require.Equal(t, defaultBaseDelay, s.baseDelay)
	require.Equal(t, defaultMaxDelay, s.maxDelay)
	require.Equal(t, DefaultReadTimeout, s.deadline)
	require.Equal(t, int64(DefaultMinBytesPerSec), s.minSpeed)
	require.Equal(t, defaultStallGrace, s.stallGrace)
	require.Equal(t, defaultStallWindow, s.stallWindow)
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2024, 3, 4, 5, 6, 7, 0, time.UTC)
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"", 0},
		{"0", 0},
		{"-3", 0},
		{"3", 3 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"99999999999999999", maxRetryAfter},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"soon", 0},
		{"1.5", 0},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if got := parseRetryAfter(tt.in, now); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRetryErrorsSayItOnce checks that a read of an HTTP source that
// keeps failing names the source and offset once, however it gives up.
func TestRetryErrorsSayItOnce(t *testing.T) {
	tests := []struct {
		name string
		opts RetryOptions
		is   error
	}{
		{"deadline", RetryOptions{MaxAttempts: 1 << 30, Deadline: 50 * time.Millisecond}, ErrTimeout},
		{"attempts", RetryOptions{MaxAttempts: 3, Deadline: time.Minute}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := &object{data: randomBytes(100, 3), etag: `"e"`}
			srv := newTestServer(t, o)
			src := mustOpen(t, srv.URL+"/a.tar")
			o.set(func(o *object) { o.status = http.StatusServiceUnavailable })
			tt.opts.BaseDelay, tt.opts.MaxDelay, tt.opts.MinSpeed = time.Millisecond, 2*time.Millisecond, -1
			_, err := WithRetry(src, tt.opts).ReadAt(t.Context(), make([]byte, 10), 20)
			if err == nil {
				t.Fatal("got no error, want one")
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("got %v, want %v", err, tt.is)
			}
			where := "read " + srv.URL + "/a.tar at 20: "
			if got := strings.Count(err.Error(), where); got != 1 || !strings.Contains(err.Error(), "503") {
				t.Errorf("got %q, which says %q %d times, want it once and the 503", err, where, got)
			}
		})
	}
}
