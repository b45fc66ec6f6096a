package materialize

import (
	"cmp"
	"context"
	"runtime"
	"sync"
	"time"
)

// Gate gives foreground reads priority over background materialization.
//
// While a foreground read runs (between Enter and its release), the
// materializer starts no new span fetch or decode. Work already running
// goes on, so a foreground read waits behind at most the spans in flight
// (Options.Decoders), never behind a queue of them. Under foreground reads
// that never stop, the materializer still starts one span per MaxWait and
// decoder, so that it is slowed, never starved.
//
// A reader seldom reads alone: a program being started faults in pages of
// its binary one read after another, with readahead decoding for it in
// between, so the gate stays shut for Linger after the last foreground
// read ends.
//
// A foreground read that only waits for archive bytes on their way from
// the source (FetchWait) needs no CPU meanwhile: the gate then lets the
// materializer run Share decodes at once, one core fewer than the
// machine has, so that the read's own decode finds a core free when its
// bytes arrive. At boot, over object storage, most of the time of the
// first reads is such waiting; shutting the gate for it left the cores
// idle and made a materialization with `go version` run from the mount
// 20% slower than one without.
//
// The zero value is ready to use; a nil *Gate never waits. It is safe for
// concurrent use.
type Gate struct {
	// MaxWait bounds one Wait or Acquire: DefaultGateMaxWait when zero,
	// no bound when negative. Set before first use.
	MaxWait time.Duration
	// Linger is how long the gate stays shut after the last foreground
	// read: DefaultGateLinger when zero, none when negative. Set before
	// first use.
	Linger time.Duration
	// Share is how many background decodes may run while foreground
	// reads only wait for their bytes: GOMAXPROCS-1 (at least 1) when
	// zero. Set before first use.
	Share int

	mu      sync.Mutex
	active  int           // foreground reads running, not in FetchWait
	waiting int           // foreground reads in FetchWait
	running int           // background decodes admitted by Acquire, not yet released
	last    time.Time     // when the last foreground read ended
	changed chan struct{} // closed (and replaced) on every change; nil until needed
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
	g.update(func() { g.active++ })
	var once sync.Once
	return func() {
		once.Do(func() {
			g.update(func() {
				g.active--
				if g.active == 0 && g.waiting == 0 {
					g.last = time.Now()
				}
			})
		})
	}
}

// FetchWait marks a foreground read that has entered (Enter) as waiting
// for archive bytes still being fetched: it uses no CPU until it calls
// the returned function, which it must do before its release.
func (g *Gate) FetchWait() (resume func()) {
	if g == nil {
		return func() {}
	}
	g.update(func() { g.active--; g.waiting++ })
	var once sync.Once
	return func() {
		once.Do(func() { g.update(func() { g.waiting--; g.active++ }) })
	}
}

// Acquire returns once a background decode may start: when no foreground
// read runs and Linger has passed since the last one, when foreground
// reads only wait for their bytes and fewer than Share decodes run, or
// MaxWait after it was called. The caller calls release once its decode
// is done. It returns ctx's error, and no release, when ctx ends first.
func (g *Gate) Acquire(ctx context.Context) (release func(), err error) {
	if g == nil {
		return func() {}, ctx.Err()
	}
	if err := g.wait(ctx, true, true); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() { once.Do(func() { g.update(func() { g.running-- }) }) }, nil
}

// WaitDecode returns once Acquire would admit a decode (without
// admitting one), or MaxWait after it was called, or with ctx's error: a
// job may then start the fetch of a span whose decode Acquire admits.
func (g *Gate) WaitDecode(ctx context.Context) error {
	if g == nil {
		return ctx.Err()
	}
	return g.wait(ctx, true, false)
}

// Wait returns once no foreground read runs, not even one that waits for
// its bytes, and Linger has passed since the last one; or MaxWait after
// it was called, or with ctx's error. Background work that is all
// fetching (the pieces of a plain tar) waits so, since its requests would
// go beside the foreground's, often for the same bytes.
func (g *Gate) Wait(ctx context.Context) error {
	if g == nil {
		return ctx.Err()
	}
	return g.wait(ctx, false, false)
}

// wait waits until background work may start: a decode when decode is
// set, else any work. It counts a decode as running when admit is set.
func (g *Gate) wait(ctx context.Context, decode, admit bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var limit <-chan time.Time
	if d := cmp.Or(g.MaxWait, DefaultGateMaxWait); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		limit = t.C
	}
	linger := cmp.Or(g.Linger, DefaultGateLinger)
	share := g.Share
	if share <= 0 {
		share = max(1, runtime.GOMAXPROCS(0)-1)
	}
	for {
		g.mu.Lock()
		open, after := false, time.Duration(0)
		switch {
		case g.active > 0:
		case g.waiting > 0:
			open = decode && g.running < share
		default:
			quiet := time.Since(g.last)
			open = linger <= 0 || g.last.IsZero() || quiet >= linger
			after = linger - quiet
		}
		if open {
			if admit {
				g.running++
			}
			g.mu.Unlock()
			return nil
		}
		if g.changed == nil {
			g.changed = make(chan struct{})
		}
		ch := g.changed
		g.mu.Unlock()
		var timer *time.Timer
		var lingered <-chan time.Time
		if after > 0 {
			timer = time.NewTimer(after)
			lingered = timer.C
		}
		select {
		case <-ch:
		case <-lingered:
		case <-limit:
			if admit {
				g.update(func() { g.running++ })
			}
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
		if timer != nil {
			timer.Stop()
		}
	}
}

// update changes the gate's counts under its lock and wakes every waiter
// to look at them again.
func (g *Gate) update(change func()) {
	g.mu.Lock()
	change()
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
	g.mu.Unlock()
}
