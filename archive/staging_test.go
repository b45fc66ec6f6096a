package archive

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil"
)

// TestStagingPass mounts with a materialization a stream-only archive
// (one zstd frame) whose published index is known but whose decoded copy
// is not there, as a fleet boots: the staging pass decodes the archive
// into DIR, held back by the server halfway through. The whole tree
// serves at once; a file near the start is read from DIR while the pass
// is held, one near the end waits for it; DIR completes without a span
// read back and without a decoded copy written; and the next boot over
// the complete DIR reads nothing from the archive.
func TestStagingPass(t *testing.T) {
	ctx := context.Background()
	tree := testTree(25)
	for _, how := range []string{"stream", "cli"} {
		t.Run(how, func(t *testing.T) {
			served := t.TempDir()
			size := streamOnlyArchive(t, served, how, tree)
			srv := newGatedServer(t, served, "a.tar.zst", size)
			log := newSyncBuffer()
			opts := decodeOptions(t, log)
			publishLocal(t, filepath.Join(served, "a.tar.zst"))
			srv.set(size/2, false)

			a, err := Open(ctx, srv.url, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if a.IndexFrom() != FromSidecar || !a.Index().StreamOnly() {
				t.Fatalf("got an index from %q (stream-only %v), want the published one of a stream-only archive",
					a.IndexFrom(), a.Index() != nil && a.Index().StreamOnly())
			}
			m, dir := startMaterialized(t, a)
			tr := a.Tree()
			ix := a.Index()
			if tr.Len() != ix.Len() {
				t.Errorf("got a tree of %d entries, want the index's %d", tr.Len(), ix.Len())
			}
			first, last := firstAndLast(t, ix, tree)
			lastRead := readAsync(tr, last, len(tree[last]))
			if got, err := readFile(tr, first, len(tree[first])); err != nil || !bytes.Equal(got, tree[first]) {
				t.Errorf("%s: got %d bytes (err %v) while the pass is held, want %d", first, len(got), err, len(tree[first]))
			}
			select {
			case r := <-lastRead:
				t.Fatalf("%s: read ended before the pass got there (got %d bytes, err %v)", last, len(r.data), r.err)
			case <-time.After(300 * time.Millisecond):
			}
			st := a.Status()
			if p := st.Index.Pass; p == nil || !p.Running || !p.IntoDir || p.DecodedCopy {
				t.Errorf("got pass %+v while the staging pass is held, want it running into DIR", p)
			}
			if js := statusJSON(t, a); !strings.Contains(js, `"into_dir":true`) {
				t.Errorf("status --json does not say that the pass decodes into DIR: %s", js)
			}
			srv.set(-1, false)
			if r := <-lastRead; r.err != nil || !bytes.Equal(r.data, tree[last]) {
				t.Errorf("%s: got %d bytes (err %v) after the pass, want %d", last, len(r.data), r.err, len(tree[last]))
			}
			waitComplete(t, m)
			checkTree(t, dir, tree)
			// The files were written once, by the pass: none read back
			// from spans, no decode pass, no decoded copy.
			if n := m.SpanDecodes(); n != 0 {
				t.Errorf("the materialization decoded %d spans, want 0", n)
			}
			if a.DecodeDone() != nil {
				t.Error("a decode pass started beside the staging pass")
			}
			if left := decodedFiles(t, opts.CacheDir); len(left) != 0 {
				t.Errorf("got decoded copies %q, want none", left)
			}
			if n := strings.Count(log.String(), "decoding the archive into the materialized directory while"); n != 1 {
				t.Errorf("got %d log lines about the staging pass, want 1:\n%s", n, log)
			}
			a.Close()

			// The next boot: DIR is complete, the copy is not there.
			// Nothing is decoded, while the server holds all but the
			// archive's first block: a read as the mount starts waits
			// for the job to open the file in DIR, and then the mount
			// opens every file there (fs.Local).
			srv.set(64<<10, false)
			b, err := Open(ctx, srv.url, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			m2 := startMaterializedIn(t, b, dir)
			if got, err := readFile(b.Tree(), last, len(tree[last])); err != nil || !bytes.Equal(got, tree[last]) {
				t.Fatalf("%s: got %d bytes (err %v) as the boot over a complete DIR starts, want %d", last, len(got), err, len(tree[last]))
			}
			select {
			case <-m2.Done():
			case <-time.After(time.Minute):
				t.Fatal("materialization of a complete DIR not done after a minute")
			}
			for name, want := range tree {
				id, ok := b.Index().LookupPath(name)
				if !ok {
					t.Fatalf("%s: not in the index", name)
				}
				f, ok := m2.OpenLocal(id)
				if !ok {
					t.Fatalf("%s: not local in the complete DIR", name)
				}
				got, err := io.ReadAll(f)
				f.Close()
				if err != nil || !bytes.Equal(got, want) {
					t.Fatalf("%s: got %d bytes (err %v) from the complete DIR, want %d", name, len(got), err, len(want))
				}
			}
			if b.DecodeDone() != nil || b.stage == nil || b.stage.pass || b.Status().Index.Pass != nil {
				t.Errorf("the boot over a complete DIR decoded the archive (status %+v)", b.Status().Index)
			}
		})
	}
}

// TestStagingPassFails fails the server during the staging pass: the
// materialization stops with the pass's error, and a read of a file the
// pass did not get to fails (it does not hang), after a decode pass
// tried again for it.
func TestStagingPassFails(t *testing.T) {
	ctx := context.Background()
	tree := testTree(25)
	srv, size := servePublished(t, tree)
	srv.set(size/2, false)
	a, err := Open(ctx, srv.url, decodeOptions(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	m, _ := startMaterialized(t, a)
	_, last := firstAndLast(t, a.Index(), tree)
	lastRead := readAsync(a.Tree(), last, len(tree[last]))
	select {
	case r := <-lastRead:
		t.Fatalf("%s: read ended before the pass got there (got %d bytes, err %v)", last, len(r.data), r.err)
	case <-time.After(300 * time.Millisecond):
	}
	srv.set(size/2, true)
	select {
	case r := <-lastRead:
		if r.err == nil || ctxErr(r.err) {
			t.Errorf("%s: got %d bytes, err %v; want the read failed", last, len(r.data), r.err)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: read still waiting 30 s after the server failed", last)
	}
	select {
	case <-m.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("materialization not done 30 s after the server failed")
	}
	if complete, stopped := m.State(); complete || stopped == "" {
		t.Errorf("got the materialization complete %v, stopped %q; want it stopped by the failed pass", complete, stopped)
	}
	// The read that failed started the decode pass, whose error
	// status shows once it has ended.
	for deadline := time.Now().Add(20 * time.Second); ; {
		if p := a.Status().Index.Pass; p != nil && p.Error != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status does not say the pass failed: %s", statusJSON(t, a))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestStagingPassDiskFull fills DIR (a small tmpfs) during the staging
// pass: that is no fault of the archive, so the materialization is not
// given up but resumes later, reading the spans from the decoded copy,
// which a decode pass writes; files read through the mount meanwhile come
// from that copy.
func TestStagingPassDiskFull(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root to mount a tmpfs")
	}
	ctx := context.Background()
	tree := testTree(25)
	srv, _ := servePublished(t, tree)
	small := t.TempDir()
	if err := unix.Mount("tarmount-test", small, "tmpfs", 0, "size=1m"); err != nil {
		testutil.Missing(t, "mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(small, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount tmpfs: %v", err)
		}
	})
	log := newSyncBuffer()
	a, err := Open(ctx, srv.url, decodeOptions(t, log))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	m := startMaterializedIn(t, a, filepath.Join(small, "mat"))
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log.String(), "decoding the archive into the materialized directory failed"); {
		if time.Now().After(deadline) {
			t.Fatalf("the staging pass did not fail on a full DIR:\n%s", log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	first, last := firstAndLast(t, a.Index(), tree)
	for _, name := range []string{first, last} {
		if got, err := readFile(a.Tree(), name, len(tree[name])); err != nil || !bytes.Equal(got, tree[name]) {
			t.Errorf("%s: got %d bytes (err %v) after the staging pass failed, want %d", name, len(got), err, len(tree[name]))
		}
	}
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(log.String(), "materialize interrupted"); {
		if time.Now().After(deadline) {
			t.Fatalf("the materialization does not say it will resume:\n%s", log)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if complete, stopped := m.State(); complete || stopped != "" {
		t.Errorf("got the materialization complete %v, stopped %q; want it waiting to resume", complete, stopped)
	}
	if a.DecodeDone() == nil {
		t.Error("no decode pass wrote the decoded copy")
	}
}

// servePublished serves the files of tree as a stream-only archive
// (streamOnlyArchive) with its index published beside it, and returns the
// server and the archive's size.
func servePublished(t *testing.T, tree map[string][]byte) (*gatedServer, int64) {
	t.Helper()
	served := t.TempDir()
	size := streamOnlyArchive(t, served, "stream", tree)
	publishLocal(t, filepath.Join(served, "a.tar.zst"))
	return newGatedServer(t, served, "a.tar.zst", size), size
}

// decodedFiles lists what the cache holds of decoded copies (written,
// kept or being written).
func decodedFiles(t *testing.T, cacheDir string) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(cacheDir, "decoded"))
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestStagingPassResumes stops a boot's staging pass (an unmount) once
// it has kept a resume point inside the frame, and boots again over the
// same DIR: the second pass resumes there and fetches only the rest,
// while a file the first pass placed is read from DIR before the second
// pass gets anywhere (checked against the index's digest); DIR ends up
// whole, and nothing was written to a decoded copy.
func TestStagingPassResumes(t *testing.T) {
	ctx := context.Background()
	tree := testTree(80)
	served := t.TempDir()
	size := streamOnlyArchive(t, served, "cli-wlog16", tree)
	srv := newGatedServer(t, served, "a.tar.zst", size)
	log := newSyncBuffer()
	opts := decodeOptions(t, log)
	opts.FrameResumeMin = 0 // a small archive
	publishLocal(t, filepath.Join(served, "a.tar.zst"))
	srv.set(size*7/10, false)

	a, err := Open(ctx, srv.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, dir := startMaterialized(t, a)
	first, last := firstAndLast(t, a.Index(), tree)
	partial := partialPath(opts.CacheDir, a.base.String(), a.Identity())
	var resumeIn int64
	for deadline := time.Now().Add(30 * time.Second); ; {
		if p, err := index.LoadPartial(partial, a.Identity()); err == nil && p.LocalBefore() > 0 && p.In() > size/4 {
			resumeIn = p.In()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the staging pass kept no resume point inside the frame past a quarter of the archive:\n%s", log)
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.Close() // the unmount, with the pass held at 70%
	if _, err := os.Stat(filepath.Join(dir, first)); err != nil {
		t.Fatalf("the stopped pass left no %s in DIR: %v", first, err)
	}

	// The next boot. The server holds the archive again, past where the
	// pass resumes: the first file is read from DIR meanwhile.
	srv.set(resumeIn+(size-resumeIn)/2, false)
	b, err := Open(ctx, srv.url, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	m := startMaterializedIn(t, b, dir)
	if got, err := readFile(b.Tree(), first, len(tree[first])); err != nil || !bytes.Equal(got, tree[first]) {
		t.Errorf("%s: got %d bytes (err %v) from the resumed boot, want %d", first, len(got), err, len(tree[first]))
	}
	srv.set(-1, false)
	if got, err := readFile(b.Tree(), last, len(tree[last])); err != nil || !bytes.Equal(got, tree[last]) {
		t.Errorf("%s: got %d bytes (err %v), want %d", last, len(got), err, len(tree[last]))
	}
	waitComplete(t, m)
	checkTree(t, dir, tree)
	if !strings.Contains(log.String(), `msg="resuming the index pass"`) {
		t.Errorf("the second boot did not resume the staging pass:\n%s", log)
	}
	// The rest, the blocks it resumes in and the open's requests (the
	// last 64 KiB, for an embedded index).
	if got, limit := fetchedOf(b), size-resumeIn+4*opts.BlockSize; got > limit {
		t.Errorf("the second boot fetched %d bytes of %d, resuming at %d: want at most %d", got, size, resumeIn, limit)
	}
	if left := decodedFiles(t, opts.CacheDir); len(left) != 0 {
		t.Errorf("got decoded copies %q, want none", left)
	}
}

func fetchedOf(a *Archive) int64 {
	n, _ := a.Fetched()
	return n
}
