package archive

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil"
)

// TestPassResumes: a mount's first pass that is stopped (Close, as an
// unmount or a signal does) keeps a partial index, with the bytes from
// its latest checkpoint to where it stood (its tail); the next Open
// resumes the pass there, fetches only the rest of the archive after
// where the first stood, and ends with the index a whole pass makes.
// Status says where it resumed. An xz pass resumes only at an xz block's
// start, which lies well before where the pass stood. A single-frame zstd
// pass resumes at a block boundary inside the frame (its decoded copy
// then serves the members before from what the stopped pass wrote).
func TestPassResumes(t *testing.T) {
	for _, c := range []struct {
		name  string
		files int // of testTree
		obj   func(t *testing.T) []byte
	}{
		{"a.tar.gz", 120, func(t *testing.T) []byte { return tarGz(t, testTree(120)) }},
		// xz blocks of 1 MiB of tar, about 300 KB stored.
		{"a.tar.xz", 60, func(t *testing.T) []byte { return xzCLI(t, treeTar(t, testTree(60)), "-T2", "--block-size=1MiB") }},
		// One frame, as zstd and tar --zstd write it: 18 MB of tar.
		{"a.tar.zst", 120, func(t *testing.T) []byte { return compressCLI(t, "zstd", treeTar(t, testTree(120)), "-3") }},
	} {
		t.Run(c.name, func(t *testing.T) { testPassResumes(t, c.name, c.obj(t), c.files) })
	}
}

func testPassResumes(t *testing.T, name string, obj []byte, files int) {
	ctx := context.Background()
	served := t.TempDir()
	if err := os.WriteFile(filepath.Join(served, name), obj, 0o644); err != nil {
		t.Fatal(err)
	}
	url := newSlowServer(t, served, 256<<10) + "/" + name
	opts := testOptions(t, nil)
	opts.CacheDisk = 0 // every byte comes from the server
	// Blocks smaller than the archive, so that the pass resumes inside
	// one: only its bytes from there on are fetched.
	opts.BlockSize = 128 << 10
	size := int64(len(obj))

	a, err := Open(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for passRead(a) < size/2 {
		if time.Now().After(deadline) {
			t.Fatal("the pass did not reach half the archive in a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.Close()
	if a.PassErr() == nil && a.Index() != nil {
		t.Fatal("the pass ended before it was stopped: make the archive bigger or the server slower")
	}
	stood := passRead(a)
	matches, _ := filepath.Glob(filepath.Join(opts.CacheDir, "indexes", "*.partial"))
	if len(matches) != 1 {
		t.Fatalf("got partial indexes %v after the pass was stopped, want one", matches)
	}

	b, err := Open(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(ctx, false); err != nil {
		t.Fatal(err)
	}
	<-b.PassDone()
	if err := b.PassErr(); err != nil {
		t.Fatal(err)
	}
	ps := b.Status().Index.Pass
	if ps.ResumedFrom < size/2 || ps.Percent != 100 {
		t.Errorf("got a pass that resumed at %d of %d and ended at %.0f%%, want it resumed past half and at 100%%", ps.ResumedFrom, size, ps.Percent)
	}
	// The open's identity probe brings the first bytes too, and an
	// archive that may embed an index has its last 64 KiB read to look
	// for one (index.LoadEmbedded).
	fetched, _ := b.Fetched()
	limit := size - stood + fetch.ProbeBytes
	if index.MayEmbed(obj[0]) {
		limit += 64 << 10
	}
	if fetched > limit {
		t.Errorf("the resumed pass fetched %d bytes (it resumed fetching at %d), want at most the %d after where the first pass stood (%d) and the open's %d",
			fetched, ps.ResumedFrom, size-stood, stood, fetch.ProbeBytes)
	}
	// Every byte the first pass read is still in its block cache.
	if ps.ResumedFrom != stood {
		t.Errorf("the pass resumed fetching at %d, want where the first pass stood, %d", ps.ResumedFrom, stood)
	}
	whole, err := index.Build(ctx, bytes.NewReader(obj), b.Identity(), index.BuildOptions{Span: opts.Span})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := b.Index().Marshal()
	want, _ := whole.Marshal()
	if !bytes.Equal(got, want) {
		t.Error("the resumed pass gave another index than a whole pass")
	}
	if matches, _ := filepath.Glob(filepath.Join(opts.CacheDir, "indexes", "*.partial")); len(matches) != 0 {
		t.Errorf("partial indexes %v left after the pass ended", matches)
	}
	// Members before and after where the pass resumed read back right
	// (before it, a stream-only archive's from the copy the first pass
	// kept).
	tree := testTree(files)
	tr := b.Tree()
	for _, name := range []string{"d1/f001.txt", fmt.Sprintf("d%d/f%03d.txt", (files/2)%5, files/2), fmt.Sprintf("d%d/f%03d.txt", (files-1)%5, files-1)} {
		want := tree[name]
		id, err := b.Lookup(name)
		if err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(want))
		if n, err := tr.ReadAt(ctx, id, got, 0); (err != nil && err != io.EOF) || n != len(want) || !bytes.Equal(got, want) {
			t.Errorf("read %s after the resumed pass: got %d bytes (err %v), want %d", name, n, err, len(want))
		}
	}
}

// xzCLI compresses raw with the xz command and args.
func xzCLI(t *testing.T, raw []byte, args ...string) []byte {
	t.Helper()
	return compressCLI(t, "xz", raw, args...)
}

// compressCLI compresses raw with the command tool and args (xz, zstd).
func compressCLI(t *testing.T, tool string, raw []byte, args ...string) []byte {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		testutil.Missing(t, "%s not installed", tool)
	}
	cmd := exec.Command(tool, append(args, "-c")...)
	cmd.Stdin = bytes.NewReader(raw)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s %v: %v\n%s", tool, args, err, stderr.Bytes())
	}
	return out
}

// passRead is how much of the archive a's first pass has read (0 before
// it started).
func passRead(a *Archive) int64 {
	if p := a.Status().Index.Pass; p != nil {
		return p.BytesRead
	}
	return 0
}

// TestLockPass: one pass at a time holds the lock beside a partial index
// (a second open of it, in this process or another, does not get it),
// and it is free again once released.
func TestLockPass(t *testing.T) {
	partial := filepath.Join(t.TempDir(), "indexes", "x-k.partial")
	unlock, ok := lockPass(partial)
	if !ok {
		t.Fatal("the first lock: got false, want it held")
	}
	if unlock2, ok := lockPass(partial); ok {
		unlock2()
		t.Fatal("a second lock while the first is held: got true, want false")
	}
	unlock()
	unlock3, ok := lockPass(partial)
	if !ok {
		t.Fatal("a lock after the release: got false, want it held")
	}
	unlock3()
	if _, ok := lockPass(""); ok {
		t.Error("a lock without a partial index: got true, want false")
	}
}

// TestPassWithoutLock: a first pass over a one-frame .tar.zst is
// stopped and keeps a partial index and its decoded copy; then, while
// another holds the pass lock of that version (as a process resuming it
// would), a second pass runs and is stopped too. It says that it keeps no
// partial index, and leaves the first pass's partial index and kept copy
// as they were: it neither writes them nor renames its own copy there.
func TestPassWithoutLock(t *testing.T) {
	ctx := context.Background()
	served := t.TempDir()
	obj := compressCLI(t, "zstd", treeTar(t, testTree(120)), "-3")
	if err := os.WriteFile(filepath.Join(served, "a.tar.zst"), obj, 0o644); err != nil {
		t.Fatal(err)
	}
	url := newSlowServer(t, served, 256<<10) + "/a.tar.zst"
	log := newSyncBuffer()
	opts := testOptions(t, log)
	opts.CacheDisk = 0
	opts.BlockSize = 128 << 10
	size := int64(len(obj))
	stopHalfway := func() *Archive {
		t.Helper()
		a, err := Open(ctx, url, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Start(ctx, false); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(time.Minute); passRead(a) < size/2; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("the pass did not reach half the archive in a minute")
			}
		}
		a.Close()
		return a
	}
	a := stopHalfway()
	partial := partialPath(opts.CacheDir, a.base.String(), a.Identity())
	kept := keptPath(a.decodedPath())
	before := map[string]os.FileInfo{}
	for _, p := range []string{partial, kept} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("the first stopped pass left no %s: %v", filepath.Base(p), err)
		}
		before[p] = fi
	}
	unlock, ok := lockPass(partial)
	if !ok {
		t.Fatal("could not take the pass lock")
	}
	defer unlock()
	stopHalfway()
	if !strings.Contains(log.String(), "another pass over this archive keeps its partial index") {
		t.Errorf("the pass without the lock did not say so:\n%s", log)
	}
	for p, fi := range before {
		now, err := os.Stat(p)
		if err != nil || !os.SameFile(fi, now) || now.Size() != fi.Size() || !now.ModTime().Equal(fi.ModTime()) {
			t.Errorf("%s changed under the pass without the lock: %v, %v; want it as the first pass left it", filepath.Base(p), now, err)
		}
	}
	if m, _ := filepath.Glob(filepath.Join(opts.CacheDir, "decoded", ".tmp-*")); len(m) != 0 {
		t.Errorf("the pass without the lock left %v", m)
	}
}
