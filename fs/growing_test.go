package fs

import (
	"context"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/tarmount/tarmount/index"
)

// growingArchive is a fakeArchive whose index is still being built: every
// name is known but hidden, which Lookup finds only once the test calls
// finish; listings wait for finish too.
type growingArchive struct {
	*fakeArchive
	hidden   string
	done     chan struct{}
	complete atomic.Bool
}

var _ Growing = (*growingArchive)(nil)

func (g *growingArchive) Complete() bool { return g.complete.Load() }

func (g *growingArchive) WaitName(ctx context.Context, dir index.EntryID, name string) error {
	if name != g.hidden {
		return nil
	}
	return g.WaitListing(ctx)
}

func (g *growingArchive) WaitListing(ctx context.Context) error {
	select {
	case <-g.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (g *growingArchive) Lookup(dir index.EntryID, name string) (index.EntryID, bool) {
	if name == g.hidden {
		return 0, false
	}
	return g.fakeArchive.Lookup(dir, name)
}

func (g *growingArchive) finish() {
	g.complete.Store(true)
	close(g.done)
}

// returnsWithin runs f and reports whether it returned before the
// deadline, with its errno.
func returnsWithin(d time.Duration, f func() syscall.Errno) (chan syscall.Errno, bool) {
	ch := make(chan syscall.Errno, 1)
	go func() { ch <- f() }()
	select {
	case errno := <-ch:
		ch <- errno
		return ch, true
	case <-time.After(d):
		return ch, false
	}
}

func TestGrowingArchive(t *testing.T) {
	g := &growingArchive{fakeArchive: testArchive(), hidden: "nope", done: make(chan struct{})}
	root := newTestRoot(t, g, Options{})
	ctx := context.Background()

	var out fuse.EntryOut
	if _, errno := root.Lookup(ctx, "dir", &out); errno != 0 {
		t.Fatalf("Lookup dir while growing: got %v, want success", errno)
	}
	if got := out.EntryTimeout(); got != growingTimeout {
		t.Errorf("entry timeout while growing: got %v, want %v", got, growingTimeout)
	}
	if got := out.AttrTimeout(); got != growingTimeout {
		t.Errorf("attr timeout while growing: got %v, want %v", got, growingTimeout)
	}

	missing, returned := returnsWithin(100*time.Millisecond, func() syscall.Errno {
		_, errno := root.Lookup(ctx, "nope", &fuse.EntryOut{})
		return errno
	})
	if returned {
		t.Fatalf("Lookup of an unknown name returned %v while the archive grows", <-missing)
	}
	listing, returned := returnsWithin(100*time.Millisecond, func() syscall.Errno {
		_, _, errno := root.OpendirHandle(ctx, 0)
		return errno
	})
	if returned {
		t.Fatalf("OpendirHandle returned %v while the archive grows", <-listing)
	}

	// A cancelled wait is an interrupted request.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, errno := root.Lookup(cctx, "nope", &fuse.EntryOut{}); errno != syscall.EINTR {
		t.Errorf("interrupted Lookup: got %v, want EINTR", errno)
	}

	// Partial listings answer at once, and the kernel does not keep them.
	partial := newTestRoot(t, g, Options{PartialListings: true})
	if _, flags, errno := partial.OpendirHandle(ctx, 0); errno != 0 || flags&fuse.FOPEN_CACHE_DIR != 0 {
		t.Errorf("partial OpendirHandle while growing: got flags %#x, %v; want no FOPEN_CACHE_DIR, success", flags, errno)
	}

	g.finish()
	if errno := <-missing; errno != syscall.ENOENT {
		t.Errorf("Lookup of a missing name once complete: got %v, want ENOENT", errno)
	}
	if errno := <-listing; errno != 0 {
		t.Errorf("OpendirHandle once complete: got %v, want success", errno)
	}
	if _, flags, _ := root.OpendirHandle(ctx, 0); flags&fuse.FOPEN_CACHE_DIR == 0 {
		t.Errorf("OpendirHandle once complete: got flags %#x, want FOPEN_CACHE_DIR", flags)
	}
	out = fuse.EntryOut{}
	if _, errno := root.Lookup(ctx, "dir", &out); errno != 0 || out.EntryTimeout() != defaultTimeout {
		t.Errorf("Lookup once complete: got %v, entry timeout %v; want success, %v", errno, out.EntryTimeout(), defaultTimeout)
	}
}
