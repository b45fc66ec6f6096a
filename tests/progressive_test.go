package tests

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tarmount/tarmount/archive"
	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// heldServer serves a directory, holding every range request that starts
// at or after a limit until the limit rises past it (or the client goes
// away): an index pass over it stops there, for as long as the test says.
// Requests from free on are never held: a mount reads the last 64 KiB of
// the archive, looking for an embedded index, before its pass.
type heldServer struct {
	h       *shaped.Handler
	free    int64
	mu      sync.Mutex
	cond    *sync.Cond
	limit   int64
	waiting atomic.Int32 // requests held now
}

func newHeldServer(t *testing.T, dir string, limit, free int64) (*heldServer, string) {
	s := &heldServer{h: shaped.NewHandler(dir, shaped.Options{}), limit: limit, free: free}
	s.cond = sync.NewCond(&s.mu)
	srv := httptest.NewServer(s)
	t.Cleanup(func() {
		s.setLimit(1 << 62)
		srv.Close()
	})
	return s, srv.URL
}

func (s *heldServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if start, ok := rangeStart(r.Header.Get("Range")); ok {
		// Wake the waiters when the client goes away.
		stop := context.AfterFunc(r.Context(), func() {
			s.mu.Lock()
			s.cond.Broadcast()
			s.mu.Unlock()
		})
		s.mu.Lock()
		for start >= s.limit && start < s.free && r.Context().Err() == nil {
			s.waiting.Add(1)
			s.cond.Wait()
			s.waiting.Add(-1)
		}
		s.mu.Unlock()
		stop()
	}
	s.h.ServeHTTP(w, r)
}

func (s *heldServer) setLimit(n int64) {
	s.mu.Lock()
	s.limit = n
	s.cond.Broadcast()
	s.mu.Unlock()
}

func (s *heldServer) released(size int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit >= size
}

// rangeStart parses the first offset of "bytes=START-[END]".
func rangeStart(h string) (int64, bool) {
	rest, ok := strings.CutPrefix(h, "bytes=")
	if !ok {
		return 0, false
	}
	first, _, _ := strings.Cut(rest, "-")
	n, err := strconv.ParseInt(first, 10, 64)
	return n, err == nil
}

// progressiveFixture is a corpus tree with a large file last in the
// archive, as a GNU tar .tar.gz (sorted by name), its tar -x extraction,
// and a held server of it.
type progressiveFixture struct {
	src, ref, archive string
	size              int64
	url               string
	server            *heldServer
}

const progressiveLate = "zz-late/filler.txt"

func newProgressiveFixture(t *testing.T, limit float64) *progressiveFixture {
	return newProgressiveFixtureOf(t, limit, "gzip")
}

// newProgressiveFixtureOf is newProgressiveFixture with the archive
// compressed by codec (a tarbuild.Spec codec), named a.tar.
func newProgressiveFixtureOf(t *testing.T, limit float64, codec string) *progressiveFixture {
	t.Helper()
	work := t.TempDir()
	f := &progressiveFixture{src: filepath.Join(work, "src"), ref: filepath.Join(work, "ref")}
	corpus.MakeTree(t, f.src, corpus.TreeOptions{Many: 300})
	// 24 MiB of text from a small alphabet: about 13 MiB compressed, the
	// larger part of the archive, after everything else.
	late := make([]byte, 24<<20)
	r := rand.New(rand.NewPCG(9, 9))
	for i := range late {
		late[i] = "abcdefghijklmnopqrstuvwxyz \n0123"[r.IntN(32)]
	}
	if err := os.MkdirAll(filepath.Join(f.src, filepath.Dir(progressiveLate)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.src, progressiveLate), late, 0o644); err != nil {
		t.Fatal(err)
	}
	served := filepath.Join(work, "served")
	for _, d := range []string{served, f.ref} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spec := tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: codec}
	f.archive = filepath.Join(served, "a"+spec.Ext())
	tarbuild.Archive(t, f.src, f.archive, spec)
	tarbuild.Extract(t, f.archive, f.ref)
	st, err := os.Stat(f.archive)
	if err != nil {
		t.Fatal(err)
	}
	f.size = st.Size()
	var base string
	f.server, base = newHeldServer(t, served, int64(limit*float64(f.size)), f.size-1<<20)
	f.url = base + "/" + filepath.Base(f.archive)
	return f
}

// waitHeld waits until the server holds a request of the pass.
func (f *progressiveFixture) waitHeld(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for f.server.waiting.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the pass never reached the held part of the archive")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// readEarly checks a file near the start of the archive through the
// mount on mnt.
func (f *progressiveFixture) readEarly(t *testing.T, mnt string) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(mnt, corpus.PathReadme))
	want, _ := os.ReadFile(filepath.Join(f.src, corpus.PathReadme))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("%s during the pass: got %q, %v; want %q", corpus.PathReadme, got, err, want)
	}
}

// progressiveArgs make blocks and spans small, so that the pass stops
// close to the server's limit and the early files have their spans.
func progressiveArgs(t *testing.T) []string {
	return []string{"--cache-dir", filepath.Join(t.TempDir(), "cache"), "--cache-disk", "0",
		"--block-size", "262144", "--span", "1048576"}
}

// progressiveOptions are progressiveArgs as archive options.
func progressiveOptions(t *testing.T) archive.Options {
	o := libOptions(filepath.Join(t.TempDir(), "cache"))
	o.CacheDisk, o.BlockSize, o.Span = 0, 262144, 1048576
	return o
}

// checkIndexing fails unless m answered before its index was built: it
// serves the archive during its first pass, which has not ended.
func checkIndexing(t *testing.T, m *libMounted) {
	t.Helper()
	if !m.a.Indexing() || strings.Contains(m.log.String(), "msg=indexed") {
		t.Fatalf("the mount was not ready before its index:\n%s", m.log)
	}
}

// TestProgressiveMount mounts a .tar.gz with no index over a server that
// holds the pass at 60% of the archive. While it is held: the mount is
// ready, a file near the start reads right, and a lookup of a missing
// name, a listing, and a lookup of a file beyond the pass all wait. Once
// the server lets the pass go on, they return: ENOENT for the missing
// name only then, the complete listing, the late file's bytes.
func TestProgressiveMount(t *testing.T) {
	needFUSE(t)
	f := newProgressiveFixture(t, 0.6)
	m := libMount(t, f.url, progressiveOptions(t))
	checkIndexing(t, m)
	f.waitHeld(t)

	var mu sync.Mutex
	var events []string
	event := func(s string) {
		mu.Lock()
		events = append(events, s)
		mu.Unlock()
	}
	f.readEarly(t, m.dir)
	event("early file read")

	missing := make(chan error, 1)
	go func() {
		_, err := os.Lstat(filepath.Join(m.dir, "no-such-file"))
		event("missing name answered")
		missing <- err
	}()
	listing := make(chan []string, 1)
	go func() {
		ents, err := os.ReadDir(m.dir)
		event("listing answered")
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		if err != nil {
			names = append(names, "error: "+err.Error())
		}
		listing <- names
	}()
	late := make(chan []byte, 1)
	go func() {
		data, err := os.ReadFile(filepath.Join(m.dir, progressiveLate))
		event("late file read")
		if err != nil {
			data = []byte("error: " + err.Error())
		}
		late <- data
	}()
	time.Sleep(300 * time.Millisecond)
	if strings.Contains(m.log.String(), "msg=indexed") {
		t.Fatal("the pass ended while the server held it")
	}
	event("pass released")
	f.server.setLimit(1 << 62)

	if err := <-missing; !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing name after the pass: got %v, want ENOENT", err)
	}
	ents, _ := os.ReadDir(f.ref)
	var wantNames []string
	for _, e := range ents {
		wantNames = append(wantNames, e.Name())
	}
	if got := <-listing; !slices.Equal(got, wantNames) {
		t.Errorf("listing during the pass: got %v, want %v", got, wantNames)
	}
	wantLate, _ := os.ReadFile(filepath.Join(f.src, progressiveLate))
	if got := <-late; !bytes.Equal(got, wantLate) {
		t.Errorf("late file: got %d bytes (%.40q), want its %d", len(got), got, len(wantLate))
	}
	mu.Lock()
	defer mu.Unlock()
	if events[0] != "early file read" || events[1] != "pass released" {
		t.Errorf("events: got %v; want the early read, then the release, then the rest", events)
	}
	// The index the pass saved serves a remount.
	m.waitLog(t, "msg=indexed")
}

// TestProgressiveMountMatchesTarExtract reads the whole tree through a
// mount while its index pass is still running, as the server lets the pass
// through a tenth of the archive at a time: every file's bytes and every
// entry's type, mode, owner, size, mtime and link target must be what
// tar -x made. Then, the pass done, the full comparison (listings, link
// counts, xattrs) must pass too.
func TestProgressiveMountMatchesTarExtract(t *testing.T) {
	needFUSE(t)
	f := newProgressiveFixture(t, 0.1)
	m := libMount(t, f.url, progressiveOptions(t))
	stop := make(chan struct{})
	stepped := make(chan struct{})
	go func() {
		defer close(stepped)
		for k := 2; k <= 10; k++ {
			select {
			case <-stop:
			case <-time.After(200 * time.Millisecond):
			}
			f.server.setLimit(int64(k) * f.size / 10)
		}
		f.server.setLimit(1 << 62)
	}()
	defer func() {
		close(stop)
		<-stepped
	}()

	var during, checked int
	err := filepath.WalkDir(f.ref, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(f.ref, p)
		if rel == "." {
			return nil
		}
		wantSt, gotSt := new(syscall.Stat_t), new(syscall.Stat_t)
		if err := syscall.Lstat(p, wantSt); err != nil {
			return err
		}
		mp := filepath.Join(m.dir, rel)
		if err := syscall.Lstat(mp, gotSt); err != nil {
			t.Errorf("%s: lstat through the mount: %v", rel, err)
			return nil
		}
		if gotSt.Mode != wantSt.Mode || gotSt.Uid != wantSt.Uid || gotSt.Gid != wantSt.Gid ||
			(wantSt.Mode&syscall.S_IFMT != syscall.S_IFDIR && gotSt.Size != wantSt.Size) || gotSt.Mtim != wantSt.Mtim {
			t.Errorf("%s: got mode %o uid %d gid %d size %d mtime %v; want %o %d %d %d %v", rel,
				gotSt.Mode, gotSt.Uid, gotSt.Gid, gotSt.Size, gotSt.Mtim, wantSt.Mode, wantSt.Uid, wantSt.Gid, wantSt.Size, wantSt.Mtim)
		}
		switch wantSt.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			want, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			got, err := os.ReadFile(mp)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s: got %d bytes (%v), want the %d tar -x wrote", rel, len(got), err, len(want))
			}
		case syscall.S_IFLNK:
			want, _ := os.Readlink(p)
			if got, err := os.Readlink(mp); got != want {
				t.Errorf("%s: link to %q (%v), want %q", rel, got, err, want)
			}
		}
		checked++
		if !f.server.released(f.size) {
			during++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d entries checked, %d of them while the pass was held back", checked, during)
	if during == 0 {
		t.Error("no entry was checked while the pass was held back")
	}
	m.waitLog(t, "msg=indexed")
	treecmp.Compare(t, f.ref, m.dir, treecmp.Options{MaxErrors: 20})
}

// TestProgressiveMaterialize mounts with --materialize and no index over a
// server that holds the pass at 60%: the mount is ready and serves an
// early file during the pass, and the one pass both indexes the archive
// and feeds the materializer: DIR ends up as tar -x makes it, the mount
// serves the same tree, and the archive was fetched once.
func TestProgressiveMaterialize(t *testing.T) {
	needFUSE(t)
	f := newProgressiveFixture(t, 0.6)
	mat := filepath.Join(t.TempDir(), "mat")
	m := libMountWith(t, f.url, progressiveOptions(t), libMountOptions{materialize: mat})
	checkIndexing(t, m)
	f.readEarly(t, m.dir)
	if strings.Contains(m.log.String(), "msg=indexed") {
		t.Fatal("the pass ended while the server held it")
	}
	f.server.setLimit(1 << 62)
	m.waitMaterialized(t)
	m.waitLog(t, "msg=materialized")
	treecmp.Compare(t, f.ref, mat, treecmp.Options{MaxErrors: 20})
	treecmp.Compare(t, f.ref, m.dir, treecmp.Options{MaxErrors: 20})
	if got, limit := f.server.h.Stats().Bytes, f.size*105/100; got > limit {
		t.Errorf("fetched %d bytes of a %d-byte archive: more than 1.05x", got, f.size)
	}
}

// TestProgressivePassFails replaces the archive while the server holds
// the pass of a mount that is already serving: the pass fails on the
// changed object, a read waiting for it fails instead of hanging or
// returning other bytes, and tarmount unmounts and exits with the reason.
func TestProgressivePassFails(t *testing.T) {
	needFUSE(t)
	f := newProgressiveFixture(t, 0.6)
	m := mount(t, f.url, progressiveArgs(t)...)
	f.waitHeld(t)
	late := make(chan error, 1)
	go func() {
		_, err := os.ReadFile(filepath.Join(m.dir, progressiveLate))
		late <- err
	}()
	replaceArchive(t, f.archive)
	f.server.setLimit(1 << 62)
	select {
	case err := <-late:
		if err == nil {
			t.Error("a read waiting for the failed pass succeeded")
		}
	case <-time.After(time.Minute):
		t.Fatal("a read waiting for the failed pass still waits")
	}
	select {
	case <-m.exited:
	case <-time.After(time.Minute):
		t.Fatal("tarmount still runs after its index pass failed")
	}
	if m.err == nil {
		t.Errorf("tarmount exited with success after its index pass failed:\n%s", lastLines(m.stderr.String(), 10))
	}
	if last := lastLines(m.stderr.String(), 1); !strings.Contains(last, "source changed") {
		t.Errorf("the last line does not say the archive changed:\n%s", lastLines(m.stderr.String(), 10))
	}
	if isMounted(m.dir) {
		t.Errorf("%s still mounted after the pass failed", m.dir)
	}
}

// TestProgressiveStreamOnly mounts a single-frame .tar.zst (stream-only: no
// checkpoint inside the frame) while the server holds the pass at 60%: a
// file near the start is read from the decoded copy the pass is writing,
// before the pass ends; once it has, the late file and the whole tree read
// right.
func TestProgressiveStreamOnly(t *testing.T) {
	needFUSE(t)
	f := newProgressiveFixtureOf(t, 0.6, "zstd")
	m := libMount(t, f.url, progressiveOptions(t))
	f.readEarly(t, m.dir)
	if f.server.released(f.size) || strings.Contains(m.log.String(), "msg=indexed") {
		t.Fatal("the pass ended before the early file was read")
	}
	f.server.setLimit(1 << 62)
	treecmp.Compare(t, f.ref, m.dir, treecmp.Options{MaxErrors: 20})
	if !strings.Contains(m.log.String(), "stream-only archive") {
		t.Errorf("the archive was not stream-only:\n%s", m.log)
	}
}
