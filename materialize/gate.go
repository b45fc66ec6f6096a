package materialize

import (
	"cmp"
	"context"
	"sync"
	"time"
)

// Gate gives foreground reads priority over background materialization:
// while a foreground read runs (between Enter and its release), the
// materializer starts no new span fetch or decode. Work already running
// goes on, so a foreground read waits behind at most the spans in flight
// (Options.Decoders), never behind a queue of them. Under foreground reads
// that never stop, the materializer still starts one span per MaxWait and
// decoder, so that it is slowed, never starved. A reader seldom reads
// alone: a program being started faults in pages of its binary one read
// after another, with readahead decoding for it in between, so the gate
// stays shut for Linger after the last foreground read ends. The zero
// value is ready to use; a nil *Gate never waits. It is safe for
// concurrent use.
type Gate struct {
	// MaxWait bounds one Wait: DefaultGateMaxWait when zero, no bound
	// when negative. Set before first use.
	MaxWait time.Duration
	// Linger is how long the gate stays shut after the last foreground
	// read: DefaultGateLinger when zero, none when negative. Set before
	// first use.
	Linger time.Duration

	mu      sync.Mutex
	active  int           // foreground reads running
	resumed chan struct{} // closed when active drops to 0; nil while 0
	last    time.Time     // when active last dropped to 0
}

// DefaultGateLinger is the default Gate.Linger: a cold read of a span
// over object storage takes some tens of milliseconds, and so does the
// gap between the page faults of a program starting from the mount.
const DefaultGateLinger = 20 * time.Millisecond

// DefaultGateMaxWait is the default Gate.MaxWait: a span of 4 MiB decodes
// in about 15 ms, so busy foreground reads leave the materializer about a
// tenth of a core.
const DefaultGateMaxWait = 200 * time.Millisecond

// Enter marks a foreground read as running; call the returned function
// when it is done.
func (g *Gate) Enter() (release func()) {
	if g == nil {
		return func() {}
	}
	g.mu.Lock()
	if g.active == 0 {
		g.resumed = make(chan struct{})
	}
	g.active++
	g.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			g.mu.Lock()
			g.active--
			if g.active == 0 {
				close(g.resumed)
				g.resumed = nil
				g.last = time.Now()
			}
			g.mu.Unlock()
		})
	}
}

// Wait returns once no foreground read runs, or MaxWait after it was
// called, or with ctx's error.
func (g *Gate) Wait(ctx context.Context) error {
	if g == nil {
		return ctx.Err()
	}
	var limit <-chan time.Time
	if d := cmp.Or(g.MaxWait, DefaultGateMaxWait); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		limit = t.C
	}
	linger := g.Linger
	if linger == 0 {
		linger = DefaultGateLinger
	}
	for {
		g.mu.Lock()
		ch, last := g.resumed, g.last
		g.mu.Unlock()
		quiet := time.Since(last)
		var after <-chan time.Time
		switch {
		case ch == nil && (linger <= 0 || last.IsZero() || quiet >= linger):
			return ctx.Err()
		case ch == nil:
			t := time.NewTimer(linger - quiet)
			defer t.Stop()
			after = t.C
		}
		select {
		case <-ch:
		case <-after:
		case <-limit:
			return ctx.Err()
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
