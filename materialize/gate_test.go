package materialize

import (
	"context"
	"testing"
	"time"
)

// waitDone runs g.Wait in a goroutine and returns when it returns.
func waitDone(g *Gate) <-chan error { return doneOf(g.Wait) }

// waitDecodeDone is waitDone for g.WaitDecode.
func waitDecodeDone(g *Gate) <-chan error { return doneOf(g.WaitDecode) }

func doneOf(wait func(context.Context) error) <-chan error {
	done := make(chan error, 1)
	go func() { done <- wait(context.Background()) }()
	return done
}

// TestGate: Wait holds background work while a foreground read runs and
// lets it go Linger after the last one ends, or once MaxWait has passed under
// foreground reads that never stop, or when its ctx ends; while foreground
// reads only wait for their bytes, Acquire admits Share decodes.
func TestGate(t *testing.T) {
	t.Run("idle", func(t *testing.T) {
		var g Gate
		if err := g.Wait(context.Background()); err != nil {
			t.Fatalf("Wait with no foreground read: got %v, want nil", err)
		}
		var nilGate *Gate
		defer nilGate.Enter()()
		if err := nilGate.Wait(context.Background()); err != nil {
			t.Fatalf("Wait of a nil Gate: got %v, want nil", err)
		}
	})
	t.Run("released", func(t *testing.T) {
		g := Gate{MaxWait: -1}
		release1, release2 := g.Enter(), g.Enter()
		done := waitDone(&g)
		release1()
		release1() // a second release changes nothing
		select {
		case err := <-done:
			t.Fatalf("Wait returned (%v) while a foreground read runs", err)
		case <-time.After(100 * time.Millisecond):
		}
		release2()
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("Wait: got %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait still waiting 10 s after the last foreground read ended")
		}
	})
	t.Run("max wait", func(t *testing.T) {
		g := Gate{MaxWait: 50 * time.Millisecond}
		defer g.Enter()()
		start := time.Now()
		select {
		case err := <-waitDone(&g):
			if err != nil {
				t.Fatalf("Wait: got %v, want nil", err)
			}
			if d := time.Since(start); d < g.MaxWait {
				t.Fatalf("Wait returned after %v, want at least MaxWait %v", d, g.MaxWait)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait still waiting 10 s under a foreground read, with MaxWait 50 ms")
		}
	})
	t.Run("linger", func(t *testing.T) {
		g := Gate{MaxWait: -1, Linger: 200 * time.Millisecond}
		g.Enter()()
		start := time.Now()
		select {
		case err := <-waitDone(&g):
			if err != nil {
				t.Fatalf("Wait: got %v, want nil", err)
			}
			if d := time.Since(start); d < g.Linger/2 {
				t.Fatalf("Wait returned %v after the last foreground read, want about Linger %v", d, g.Linger)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait still waiting 10 s after the last foreground read, with Linger 200 ms")
		}
		// Long after: at once.
		g = Gate{MaxWait: -1, Linger: time.Millisecond}
		g.Enter()()
		time.Sleep(10 * time.Millisecond)
		select {
		case <-waitDone(&g):
		case <-time.After(10 * time.Second):
			t.Fatal("Wait still waiting long after Linger")
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		g := Gate{MaxWait: -1}
		defer g.Enter()()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- g.Wait(ctx) }()
		cancel()
		select {
		case err := <-done:
			if err != context.Canceled {
				t.Fatalf("Wait: got %v, want context.Canceled", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Wait still waiting 10 s after its ctx was cancelled")
		}
	})
	t.Run("fetch wait", func(t *testing.T) {
		// A foreground read that waits for its bytes lets Share
		// decodes run, and no more; once its bytes are in, none.
		g := Gate{MaxWait: -1, Linger: time.Hour, Share: 2}
		release := g.Enter()
		resume := g.FetchWait()
		ctx := context.Background()
		var admitted []func()
		for range g.Share {
			done, err := g.Acquire(ctx)
			if err != nil {
				t.Fatalf("Acquire during a fetch wait: %v", err)
			}
			admitted = append(admitted, done)
		}
		// Work that only fetches waits for the read to end.
		select {
		case err := <-waitDone(&g):
			t.Fatalf("Wait returned (%v) while a foreground read waits for its bytes", err)
		case <-time.After(100 * time.Millisecond):
		}
		third := make(chan func(), 1)
		go func() {
			done, _ := g.Acquire(ctx)
			third <- done
		}()
		select {
		case <-third:
			t.Fatalf("a decode beyond Share %d was admitted during a fetch wait", g.Share)
		case <-time.After(100 * time.Millisecond):
		}
		admitted[0]()
		admitted[0]() // a second release changes nothing
		var done func()
		select {
		case done = <-third:
		case <-time.After(10 * time.Second):
			t.Fatal("a decode was not admitted 10 s after a running one ended")
		}
		admitted[1]()
		done()
		// The read's bytes are in: it runs again, and nothing starts.
		resume()
		select {
		case err := <-waitDone(&g):
			t.Fatalf("Wait returned (%v) while the foreground read decodes", err)
		case <-time.After(100 * time.Millisecond):
		}
		// Ended, with an hour of Linger: still shut.
		release()
		select {
		case err := <-waitDone(&g):
			t.Fatalf("Wait returned (%v) within Linger of the last foreground read", err)
		case <-time.After(100 * time.Millisecond):
		}
	})
	t.Run("fetch wait beside a running read", func(t *testing.T) {
		// One read waits for bytes, another decodes: shut.
		g := Gate{MaxWait: -1, Share: 1}
		defer g.Enter()()
		release := g.Enter()
		defer g.FetchWait()()
		select {
		case err := <-waitDecodeDone(&g):
			t.Fatalf("Wait returned (%v) while a foreground read runs", err)
		case <-time.After(100 * time.Millisecond):
		}
		release()
		select {
		case err := <-waitDecodeDone(&g):
			if err != nil {
				t.Fatalf("WaitDecode: got %v, want nil", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("WaitDecode still waiting 10 s after the running read ended, beside one waiting for bytes")
		}
	})
}
