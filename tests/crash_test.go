package tests

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// stallHandler holds every range request while stalled, until released or
// until its client goes away, so that reads through a mount block.
type stallHandler struct {
	h       http.Handler
	stalled atomic.Bool
	waiting atomic.Int32
	release chan struct{}
	once    sync.Once
}

func (s *stallHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.stalled.Load() && r.Header.Get("Range") != "" {
		s.waiting.Add(1)
		select {
		case <-s.release:
		case <-r.Context().Done():
		}
		s.waiting.Add(-1)
	}
	s.h.ServeHTTP(w, r)
}

func (s *stallHandler) unstall() {
	s.stalled.Store(false)
	s.once.Do(func() { close(s.release) })
}

// runCLI runs tarmount with args and returns its combined output; it fails
// the test if the command takes more than a minute.
func runCLI(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("tarmount %s hung:\n%s", strings.Join(args, " "), out)
	}
	return string(out), err
}

// TestKill9WithReadsInFlight kills the server of a mount with SIGKILL
// while files are open and readers are blocked in read (the server is
// waiting for the archive's bytes). The blocked reads fail instead of
// hanging; the dead mount refuses a new mount with a message saying what
// to do; `tarmount unmount` clears it (lazily, saying so, as files are
// still open); and a new `tarmount URL MNT` on the same mountpoint serves
// the right bytes. fs.TestUnmountDeadMount covers the library's side with
// nothing open.
func TestKill9WithReadsInFlight(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{NoSparse: true}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	gate := &stallHandler{h: shaped.NewHandler(filepath.Dir(f.archive), shaped.Options{}), release: make(chan struct{})}
	srv := httptest.NewServer(gate)
	t.Cleanup(func() {
		gate.unstall()
		srv.Close()
	})
	url := srv.URL + "/a.tar.gz"
	cache := filepath.Join(f.work, "cache")
	args := []string{"--cache-dir", cache, "--span", "262144"}
	// The first mount builds and saves the index; the next reads spans
	// from the server (no disk cache), where they stall.
	mount(t, url, append(args, "--wait-index")...).stop(t)

	mnt := t.TempDir()
	t.Cleanup(func() {
		if isMounted(mnt) {
			exec.Command("umount", "-l", mnt).Run()
		}
	})
	m := mountAt(t, mnt, url, append(args, "--cache-disk", "0")...)

	// Files held open without a read in progress, and readers blocked in
	// reads of spans that the server holds back.
	var open []*os.File
	defer func() {
		for _, fh := range open {
			fh.Close()
		}
	}()
	for _, name := range []string{corpus.PathReadme, corpus.PathHardLink} {
		fh, err := os.Open(filepath.Join(mnt, name))
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, fh)
	}
	gate.stalled.Store(true)
	type result struct {
		n   int
		err error
	}
	const readers = 6
	results := make(chan result, readers)
	for i := range readers {
		name := []string{corpus.PathBig, corpus.PathBig2}[i%2]
		fh, err := os.OpenFile(filepath.Join(mnt, name), os.O_RDONLY|syscall.O_DIRECT, 0)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, fh)
		go func() {
			n, err := fh.ReadAt(alignedBuffer(64<<10), int64(i)*512<<10)
			results <- result{n, err}
		}()
	}
	deadline := time.Now().Add(30 * time.Second)
	for gate.waiting.Load() == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if gate.waiting.Load() == 0 {
		t.Fatal("no read reached the server within 30 s")
	}
	time.Sleep(300 * time.Millisecond) // the other readers get there too
	if len(results) > 0 {
		t.Fatalf("%d reads returned while the server held every range back", len(results))
	}

	if err := m.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-m.exited
	for range readers {
		select {
		case r := <-results:
			if !errors.Is(r.err, syscall.ECONNABORTED) && !errors.Is(r.err, syscall.ENOTCONN) {
				t.Errorf("read blocked when the server died: got %d bytes, %v; want ECONNABORTED or ENOTCONN", r.n, r.err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("a read blocked in the dead mount did not return within 30 s")
		}
	}
	gate.unstall()

	// The mount is dead: what the kernel has not cached fails, and so
	// does a new mount.
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &sfs); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("statfs of the dead mount: got %v, want ENOTCONN", err)
	}
	if _, err := os.Stat(filepath.Join(mnt, "never-looked-up")); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("stat in the dead mount: got %v, want ENOTCONN", err)
	}
	if out, err := runCLI(t, "status", mnt); err == nil || !strings.Contains(out, "tarmount unmount") {
		t.Errorf("status of the dead mount: got %v, %q; want an error that says to unmount", err, out)
	}
	out, err := runCLI(t, url, mnt, "--mount-name", testMountName, "--cache-dir", cache)
	if err == nil || !strings.Contains(out, "dead") || !strings.Contains(out, "unmount it first") {
		t.Errorf("mount on the dead mount: got %v, %q; want a refusal that says it is dead and to unmount it", err, out)
	}

	// Files are still open: unmount detaches lazily and says so.
	out, err = runCLI(t, "unmount", mnt)
	if err != nil {
		t.Fatalf("tarmount unmount of the dead mount: %v\n%s", err, out)
	}
	t.Logf("tarmount unmount: %s", strings.TrimSpace(out))
	if !strings.Contains(out, "dead mount") || !strings.Contains(out, "detached lazily") || !strings.Contains(out, "closed") {
		t.Errorf("tarmount unmount of a dead mount with open files: got %q, want it to say that the mount was dead and is detached lazily until the files are closed", out)
	}
	if isMounted(mnt) {
		t.Fatalf("%s still mounted after tarmount unmount", mnt)
	}
	if _, err := open[0].ReadAt(make([]byte, 10), 0); err == nil {
		t.Error("read through a file of the dead mount succeeded")
	}

	// A new mount on the same mountpoint, while the old files are still
	// open, serves the right bytes.
	m2 := mountAt(t, mnt, url, args...)
	if n := readTree(t, m2.dir, f.src); n == 0 {
		t.Error("read nothing through the new mount")
	}
	for _, fh := range open {
		fh.Close()
	}
	open = nil
	m2.stop(t)
}
