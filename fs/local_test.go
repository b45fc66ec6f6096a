package fs

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tarmount/tarmount/index"
)

// fakeLocal holds local copies of files of a fake archive: a file's copy
// is complete once set is called, and opening copies can be made to fail
// (as when the process is out of descriptors).
type fakeLocal struct {
	dir      string
	mu       sync.Mutex
	complete map[index.EntryID]bool // guarded by mu
	fail     bool                   // guarded by mu
}

func newFakeLocal(t *testing.T) *fakeLocal {
	return &fakeLocal{dir: t.TempDir(), complete: map[index.EntryID]bool{}}
}

// set writes the copy of file id of a and marks it complete.
func (l *fakeLocal) set(t *testing.T, a *fakeArchive, id index.EntryID) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(l.dir, fmt.Sprint(id)), a.entries[id].data, 0o644); err != nil {
		t.Fatal(err)
	}
	l.mu.Lock()
	l.complete[id] = true
	l.mu.Unlock()
}

// failOpens makes OpenLocal fail (true) or work again (false).
func (l *fakeLocal) failOpens(fail bool) {
	l.mu.Lock()
	l.fail = fail
	l.mu.Unlock()
}

func (l *fakeLocal) OpenLocal(id index.EntryID) (*os.File, bool) {
	l.mu.Lock()
	ok := l.complete[id] && !l.fail
	l.mu.Unlock()
	if !ok {
		return nil, false
	}
	f, err := os.Open(filepath.Join(l.dir, fmt.Sprint(id)))
	return f, err == nil
}

// TestHandover opens files of a mount with local copies through the
// handover from the archive to the copy: opened before the copy completes
// and held while it completes, opened only after, and opened while the
// copy cannot be opened, with passthrough handles of the same file open.
// The kernel fails an open (EIO) that mixes passthrough and cached mode on
// one inode or gives it a second backing file, so every open, read and
// close here must succeed with the archive's bytes. The READ requests that
// reach the server say whether the kernel read the local copy itself.
func TestHandover(t *testing.T) {
	a := testArchive()
	local := newFakeLocal(t)
	var reads atomic.Int64
	observe := func(op string, d time.Duration, errno syscall.Errno) {
		if op == OpRead {
			reads.Add(1)
		}
	}
	mp, _ := mountTest(t, a, Options{Local: local, Observe: observe})
	idOf := func(p string) index.EntryID {
		id, ok := a.id(p)
		if !ok {
			t.Fatalf("no %s in the fixture", p)
		}
		return id
	}
	check := func(f *os.File, p string) {
		t.Helper()
		want := a.entries[idOf(p)].data
		got := make([]byte, len(want))
		if n, err := f.ReadAt(got, 0); n != len(want) {
			t.Fatalf("read %s: got %d bytes, %v; want %d", p, n, err, len(want))
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read %s: wrong bytes", p)
		}
	}
	open := func(p string) *os.File {
		t.Helper()
		f, err := os.Open(filepath.Join(mp, p))
		if err != nil {
			t.Fatalf("open %s: %v", p, err)
		}
		t.Cleanup(func() { f.Close() }) // before the unmount, if the test fails
		check(f, p)
		return f
	}
	// hammer opens, reads and closes p from 8 goroutines, 50 times each.
	hammer := func(p string) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		want := a.entries[idOf(p)].data
		for range 8 {
			wg.Go(func() {
				got := make([]byte, len(want))
				for range 50 {
					f, err := os.Open(filepath.Join(mp, p))
					if err != nil {
						errs <- err
						return
					}
					n, err := f.ReadAt(got, 0)
					f.Close()
					if n != len(want) || !bytes.Equal(got, want) {
						errs <- fmt.Errorf("read %s: got %d bytes (%v), want %d, equal %v", p, n, err, len(want), bytes.Equal(got, want))
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("%s: %v", p, err)
		}
	}

	// Opened before its copy completes, and held: this node reads here
	// for good, from the archive and then from the copy.
	early := open("dir/file.txt")
	local.set(t, a, idOf("dir/file.txt"))
	hammer("dir/file.txt")
	early.Close()
	hammer("dir/file.txt")

	// Opened only once its copy is complete: passthrough, so no READ
	// reaches the server.
	local.set(t, a, idOf("big.bin"))
	before := reads.Load()
	held := open("big.bin")
	hammer("big.bin")
	if n := reads.Load() - before; n != 0 {
		t.Errorf("big.bin through passthrough: got %d READ requests at the server, want 0", n)
	}
	// The copy cannot be opened for a while, with a passthrough handle
	// open: the handles opened then, from the archive, share the backing
	// file. Once they are all closed, the opens after still work.
	local.failOpens(true)
	fromArchive := open("big.bin")
	fromArchive.Close()
	hammer("big.bin")
	local.failOpens(false)
	hammer("big.bin")
	held.Close()
	hammer("big.bin")
	again := open("big.bin")
	again.Close()
}
