package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// testTree is the content of the archives of these tests: name -> data.
func testTree(files int) map[string][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	tree := map[string][]byte{}
	for i := range files {
		data := make([]byte, 1000+r.IntN(300_000))
		for j := range data {
			data[j] = byte('a' + r.IntN(4)) // compressible, not trivially
		}
		tree[fmt.Sprintf("d%d/f%03d.txt", i%5, i)] = data
	}
	return tree
}

// tarGz writes tree as a tar.gz.
func tarGz(t *testing.T, tree map[string][]byte) []byte {
	t.Helper()
	return tarbuild.Gzip(treeTar(t, tree))
}

// treeTar writes tree as a tar.
func treeTar(t *testing.T, tree map[string][]byte) []byte {
	t.Helper()
	var entries []tarbuild.Entry
	for name, data := range tree {
		entries = append(entries, tarbuild.Entry{Name: name, Body: data})
	}
	return tarbuild.Go(t, tar.FormatPAX, entries...)
}

// checkTree checks that dir holds the files of tree.
func checkTree(t *testing.T, dir string, tree map[string][]byte) {
	t.Helper()
	for name, want := range tree {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s: got %d bytes (err %v), want the archive's %d", name, len(got), err, len(want))
		}
	}
}

// flakyServer serves dir over loopback HTTP; while down is set, it
// answers every request with 503.
type flakyServer struct {
	url      string
	down     atomic.Bool
	requests atomic.Int64
}

func newFlakyServer(t *testing.T, dir string) *flakyServer {
	s := &flakyServer{}
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.requests.Add(1)
		if s.down.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s.url = srv.URL
	return s
}

// newSlowServer serves dir over loopback HTTP, each response at rate
// bytes per second, and returns its URL.
func newSlowServer(t *testing.T, dir string, rate int64) string {
	h := shaped.NewHandler(dir, shaped.Options{Rate: rate})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	return srv.URL
}

// testOptions are Options for a test: its own cache, a small span, and
// the log in buf when it is not nil.
func testOptions(t *testing.T, buf *syncBuffer) Options {
	o := DefaultOptions()
	o.CacheDir = filepath.Join(t.TempDir(), "cache")
	o.Span = 256 << 10
	if buf != nil {
		o.Logger = slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return o
}

// waitComplete waits up to a minute for the materialization m to end,
// and fails unless it completed.
func waitComplete(t *testing.T, m *Materializer) {
	t.Helper()
	select {
	case <-m.Done():
	case <-time.After(time.Minute):
		t.Fatal("materialization not done after a minute")
	}
	if complete, stopped := m.State(); !complete {
		t.Fatalf("materialization stopped: %s", stopped)
	}
}

// startMaterialized opens the materialization of a into a new directory,
// starts a as a mount does, then the materialization, and returns it and
// the directory.
func startMaterialized(t *testing.T, a *Archive) (*Materializer, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mat")
	return startMaterializedIn(t, a, dir), dir
}

// startMaterializedIn starts a and its materialization into dir.
func startMaterializedIn(t *testing.T, a *Archive, dir string) *Materializer {
	t.Helper()
	m, err := a.Materialize(dir, MaterializeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	m.Run()
	return m
}

// syncBuffer is a bytes.Buffer for a log written from several goroutines.
type syncBuffer struct {
	mu  chan struct{}
	buf bytes.Buffer
}

func newSyncBuffer() *syncBuffer { return &syncBuffer{mu: make(chan struct{}, 1)} }

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu <- struct{}{}
	defer func() { <-b.mu }()
	return b.buf.String()
}

// TestIndexLookup opens one archive over HTTP in every way the one index
// lookup finds an index, in its order: a given file, the saved one, the
// one embedded by Pack, else the pass builds one. A given file built for
// another version is refused.
func TestIndexLookup(t *testing.T) {
	ctx := context.Background()
	served := t.TempDir()
	tree := testTree(20)
	if err := os.WriteFile(filepath.Join(served, "a.tar.gz"), tarGz(t, tree), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := newFlakyServer(t, served)
	url := srv.url + "/a.tar.gz"
	opts := testOptions(t, nil)
	if _, err := Pack(ctx, url, filepath.Join(served, "p.tar.zst"), 3, opts); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(t.TempDir(), "other.idx")
	{
		o := testOptions(t, nil)
		a, err := OpenIndexed(ctx, srv.url+"/p.tar.zst", o)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Index().Save(other); err != nil {
			t.Fatal(err)
		}
		a.Close()
	}
	given := filepath.Join(t.TempDir(), "given.idx")
	for _, tc := range []struct {
		name, url string
		opts      func(o *Options)
		from      string
		err       error
	}{
		{"built", url, nil, FromBuilt, nil},
		{"saved", url, nil, FromCache, nil},
		{"rebuild", url, func(o *Options) { o.Rebuild = true }, FromBuilt, nil},
		{"given", url, func(o *Options) { o.IndexFile = given }, FromFile, nil},
		{"given for another archive", url, func(o *Options) { o.IndexFile = other }, "", index.ErrIdentity},
		{"embedded", srv.url + "/p.tar.zst", func(o *Options) { o.CacheDir = t.TempDir() }, FromEmbedded, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := opts
			if tc.opts != nil {
				tc.opts(&o)
			}
			a, err := OpenIndexed(ctx, tc.url, o)
			if !errors.Is(err, tc.err) {
				t.Fatalf("got error %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			defer a.Close()
			if a.IndexFrom() != tc.from {
				t.Errorf("got an index from %q, want from %q", a.IndexFrom(), tc.from)
			}
			if tc.name == "built" {
				if err := a.Index().Save(given); err != nil {
					t.Fatal(err)
				}
			}
			var got bytes.Buffer
			if err := a.Cat(ctx, &got, "d1/f001.txt"); err != nil || !bytes.Equal(got.Bytes(), tree["d1/f001.txt"]) {
				t.Errorf("cat d1/f001.txt: got %d bytes (err %v), want %d", got.Len(), err, len(tree["d1/f001.txt"]))
			}
		})
	}
}

// TestExtractPacked extracts an archive made by Pack over HTTP with an
// empty cache: the embedded index is found, so the extraction reads
// spans in parallel, and fetches about the archive once.
func TestExtractPacked(t *testing.T) {
	ctx := context.Background()
	served := t.TempDir()
	tree := testTree(30)
	src := filepath.Join(t.TempDir(), "a.tar.gz")
	if err := os.WriteFile(src, tarGz(t, tree), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Pack(ctx, src, filepath.Join(served, "p.tar.zst"), 3, testOptions(t, nil)); err != nil {
		t.Fatal(err)
	}
	srv := newFlakyServer(t, served)
	x, err := Extract(ctx, srv.url+"/p.tar.zst", filepath.Join(t.TempDir(), "out"), testOptions(t, nil), MaterializeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	if x.OnePass() {
		t.Fatal("got a one-pass extraction, want spans read in parallel from the embedded index")
	}
	s, err := x.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.OnePass || s.Files != int64(len(tree)) {
		t.Errorf("got a summary of %d files (one pass %v), want %d files read in spans", s.Files, s.OnePass, len(tree))
	}
	st, _ := os.Stat(filepath.Join(served, "p.tar.zst"))
	if s.Fetched > st.Size()*21/20+128<<10 {
		t.Errorf("fetched %d bytes of a %d-byte archive, want about it once", s.Fetched, st.Size())
	}
	checkTree(t, s.Dir, tree)
}

// TestMaterializeResumes materializes an archive behind its (indexed)
// archive while the server goes away for a while: the job fails, is
// opened again after fetch's backoff, resumes from its journal and
// completes, and the tree is served and written exactly.
// startMaterializing indexes the archive at url and saves its index, then
// opens it again with a materialization into a new directory (not run
// yet) and starts it; the cleanup closes it.
func startMaterializing(t *testing.T, url string, opts Options) (*Archive, *Materializer, string) {
	t.Helper()
	ctx := context.Background()
	if a, err := OpenIndexed(ctx, url, opts); err != nil {
		t.Fatal(err)
	} else {
		a.Close() // the index is saved
	}
	a, err := Open(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	dir := filepath.Join(t.TempDir(), "mat")
	m, err := a.Materialize(dir, MaterializeOptions{Decoders: 1, Writers: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx, false); err != nil {
		t.Fatal(err)
	}
	return a, m, dir
}

func TestMaterializeResumes(t *testing.T) {
	ctx := context.Background()
	served := t.TempDir()
	tree := testTree(40)
	if err := os.WriteFile(filepath.Join(served, "a.tar.gz"), tarGz(t, tree), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := newFlakyServer(t, served)
	logBuf := newSyncBuffer()
	opts := testOptions(t, logBuf)
	opts.Retries, opts.ReadTimeout = 0, 2*time.Second
	url := srv.url + "/a.tar.gz"
	a, m, dir := startMaterializing(t, url, opts)
	if a.IndexFrom() != FromCache {
		t.Fatalf("got an index from %q, want the saved one", a.IndexFrom())
	}
	srv.down.Store(true)
	m.Run()
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logBuf.String(), "materialize interrupted") {
		if time.Now().After(deadline) {
			t.Fatalf("the job did not fail while the server was down; log:\n%s", logBuf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	srv.down.Store(false)
	select {
	case <-m.Done():
	case <-time.After(time.Minute):
		t.Fatalf("the job did not complete after the server came back; log:\n%s", logBuf.String())
	}
	if complete, stopped := m.State(); !complete {
		t.Fatalf("got a job stopped with %q, want it complete; log:\n%s", stopped, logBuf.String())
	}
	checkTree(t, dir, tree)
	// Through the tree the mount serves: a file read from the archive.
	tr := a.Tree()
	id, err := a.Lookup("d2/f007.txt")
	if err != nil {
		t.Fatal(err)
	}
	want := tree["d2/f007.txt"]
	got := make([]byte, len(want))
	if n, err := tr.ReadAt(ctx, id, got, 0); (err != nil && err != io.EOF) || n != len(want) || !bytes.Equal(got, want) {
		t.Errorf("read through the tree: got %d bytes (err %v), want %d", n, err, len(want))
	}
	if st := a.Status(); st.Materialize == nil || !st.Materialize.Complete || st.Index.Source != FromCache {
		t.Errorf("got status %+v, want a complete materialization of a saved index", st)
	}
}

// TestStartPassServes serves an archive during its first pass: the tree
// answers before the pass ends, the pass saves the index, and Status is
// truthful throughout.
func TestStartPassServes(t *testing.T) {
	ctx := context.Background()
	served := t.TempDir()
	tree := testTree(25)
	if err := os.WriteFile(filepath.Join(served, "a.tar.gz"), tarGz(t, tree), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := newFlakyServer(t, served)
	opts := testOptions(t, nil)
	a, err := Open(ctx, srv.url+"/a.tar.gz", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.Index() != nil {
		t.Fatal("got an index before the first pass")
	}
	if err := a.Start(ctx, false); err != nil {
		t.Fatal(err)
	}
	if !a.Indexing() {
		t.Fatal("got no pass in the background, want the tree served during it")
	}
	st := a.Status()
	if st.Index.Source != Building && st.Index.Source != FromBuilt {
		t.Errorf("got index source %q during the pass, want %q (or %q once it ended)", st.Index.Source, Building, FromBuilt)
	}
	tr := a.Tree()
	for name, want := range tree {
		dir, base, _ := strings.Cut(name, "/")
		g, ok := tr.(interface {
			WaitName(context.Context, index.EntryID, string) error
		})
		if !ok {
			t.Fatal("got a tree that cannot wait for names during the pass")
		}
		if err := g.WaitName(ctx, index.RootID, dir); err != nil {
			t.Fatal(err)
		}
		did, _ := tr.Lookup(index.RootID, dir)
		if err := g.WaitName(ctx, did, base); err != nil {
			t.Fatal(err)
		}
		id, ok := tr.Lookup(did, base)
		if !ok {
			t.Fatalf("%s: not found", name)
		}
		got := make([]byte, len(want))
		if n, err := tr.ReadAt(ctx, id, got, 0); (err != nil && err != io.EOF) || n != len(want) || !bytes.Equal(got, want) {
			t.Errorf("%s: got %d bytes (err %v), want %d", name, n, err, len(want))
		}
	}
	<-a.PassDone()
	if err := a.PassErr(); err != nil {
		t.Fatal(err)
	}
	if a.IndexFrom() != FromBuilt || a.Index().Len() != len(tree)+6 {
		t.Errorf("got an index from %q with %d entries, want one built with %d", a.IndexFrom(), a.Index().Len(), len(tree)+6)
	}
	if _, err := os.Stat(a.SavedIndex()); err != nil {
		t.Errorf("the pass saved no index: %v", err)
	}
}

// TestStatusDuringPass reads Status in a loop while the first pass of a
// materialized archive runs over a slow server: the pass's fields are
// there from the start, move forward only, and end at 100%; the
// materialization's totals grow until they are final.
func TestStatusDuringPass(t *testing.T) {
	ctx := context.Background()
	served := t.TempDir()
	tree := testTree(60)
	data := tarGz(t, tree)
	if err := os.WriteFile(filepath.Join(served, "a.tar.gz"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	url := newSlowServer(t, served, int64(len(data))/2) // a pass of about 2 s
	opts := testOptions(t, nil)
	opts.BlockSize = 256 << 10
	a, err := Open(ctx, url+"/a.tar.gz", opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if st := a.Status(); st.Index.Pass != nil || st.Index.Source != Building {
		t.Fatalf("before the pass: got index %+v, want no pass yet and the source %q", st.Index, Building)
	}
	m, dir := startMaterialized(t, a)
	var last PassStatus
	var running, growing int
	for {
		st := a.Status()
		p := st.Index.Pass
		if p == nil {
			t.Fatal("got no index.pass during the pass")
		}
		if p.BytesRead < last.BytesRead || p.Percent < last.Percent || p.Entries < last.Entries {
			t.Fatalf("the pass went backwards: got %+v after %+v", *p, last)
		}
		if p.BytesTotal != int64(len(data)) {
			t.Fatalf("got bytes_total %d, want the archive's %d", p.BytesTotal, len(data))
		}
		if p.Running {
			running++
			if st.Index.Source != Building || p.Percent >= 100 && p.BytesRead < p.BytesTotal {
				t.Fatalf("got index %+v while the pass runs", st.Index)
			}
		}
		ms := st.Materialize
		if !ms.TotalsFinal && !ms.Complete && ms.FilesTotal > 0 {
			growing++
			if ms.Percent != 0 {
				t.Errorf("got materialize percent %v before the totals are final", ms.Percent)
			}
		}
		last = *p
		if ms.Complete {
			break
		}
		select {
		case <-m.Done():
			if c, stopped := m.State(); !c {
				t.Fatalf("materialization stopped: %s", stopped)
			}
		case <-time.After(20 * time.Millisecond):
		}
	}
	if running < 5 || growing == 0 {
		t.Errorf("got %d snapshots of a running pass and %d of growing totals, want a pass of a couple of seconds seen moving", running, growing)
	}
	if last.Running || last.Percent != 100 || last.BytesRead == 0 || last.Entries != int64(len(tree)) || last.ETASeconds != 0 || last.RateBytesPerSecond <= 0 {
		t.Errorf("got the final pass %+v, want 100%% of the archive read and every member", last)
	}
	st := a.Status()
	if ms := st.Materialize; !ms.TotalsFinal || ms.FilesTotal != int64(len(tree)) || ms.Percent != 100 {
		t.Errorf("got materialize %+v at the end, want final totals of %d files at 100%%", *ms, len(tree))
	}
	if st.Index.Source != FromBuilt || st.Index.Entries == 0 {
		t.Errorf("got index %+v at the end, want it built", st.Index)
	}
	checkTree(t, dir, tree)
}

// TestStatusDuringBuild reads Status while Build runs the pass in the
// foreground (a mount with --wait-index): it reports the pass, and
// reads nothing that Build writes (run with -race).
func TestStatusDuringBuild(t *testing.T) {
	ctx := context.Background()
	served := t.TempDir()
	data := tarGz(t, testTree(20))
	if err := os.WriteFile(filepath.Join(served, "a.tar.gz"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	url := newSlowServer(t, served, int64(len(data)))
	a, err := Open(ctx, url+"/a.tar.gz", testOptions(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	built := make(chan error, 1)
	go func() { built <- a.Build(ctx) }()
	seen := 0
	for done := false; !done; {
		select {
		case err := <-built:
			if err != nil {
				t.Fatal(err)
			}
			done = true
		case <-time.After(10 * time.Millisecond):
		}
		st := a.Status()
		if st.Index.Pass != nil && st.Index.Pass.Running {
			seen++
			if st.Index.Source != Building {
				t.Errorf("got index source %q while Build runs, want %q", st.Index.Source, Building)
			}
		}
	}
	if p := a.Status().Index.Pass; p == nil || p.Running || p.Percent != 100 || seen == 0 {
		t.Errorf("got the pass %+v after Build (seen running %d times), want it ended at 100%%", p, seen)
	}
}

// TestMaterializeSharesMountSpans: spans (gzip) or blocks (plain tar)
// that reads through the mount fetched are not fetched again by the
// materialization.
func TestMaterializeSharesMountSpans(t *testing.T) {
	tree := testTree(40)
	big := make([]byte, 12<<20)
	rng := rand.NewChaCha8([32]byte{5, 6})
	rng.Read(big)
	bigTree := map[string][]byte{"big.bin": big, "d0/small.txt": tree["d0/f000.txt"]}
	var plain []tarbuild.Entry
	for name, data := range bigTree {
		plain = append(plain, tarbuild.Entry{Name: name, Body: data})
	}
	for _, c := range []struct {
		name  string
		tree  map[string][]byte
		obj   []byte
		read  []string
		slack int64 // bytes both may fetch: the block of a plain file's first read
	}{
		{"gzip", tree, tarGz(t, tree), []string{"d0/f000.txt", "d2/f017.txt", "d4/f039.txt"}, 0},
		{"plain", bigTree, tarbuild.Go(t, tar.FormatPAX, plain...), []string{"big.bin"}, 4 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			served := t.TempDir()
			if err := os.WriteFile(filepath.Join(served, "a.tar"), c.obj, 0o644); err != nil {
				t.Fatal(err)
			}
			url := newFlakyServer(t, served).url + "/a.tar"
			opts := testOptions(t, nil)
			opts.CacheDisk = 0 // every byte comes from the server
			a, m, dir := startMaterializing(t, url, opts)
			// Files read through the mount before the materialization
			// starts, as a service does at boot, 128 KiB at a time as
			// FUSE reads.
			tr := a.Tree()
			for _, name := range c.read {
				id, err := a.Lookup(name)
				if err != nil {
					t.Fatal(err)
				}
				want := c.tree[name]
				got := make([]byte, len(want))
				for off := 0; off < len(want); off += 128 << 10 {
					end := min(off+128<<10, len(want))
					if n, err := tr.ReadAt(ctx, id, got[off:end], int64(off)); (err != nil && err != io.EOF) || n != end-off {
						t.Fatalf("%s at %d through the tree: got %d bytes (err %v)", name, off, n, err)
					}
				}
				if !bytes.Equal(got, want) {
					t.Fatalf("%s through the tree differs", name)
				}
			}
			mount := a.Status().Fetch.Bytes
			m.Run()
			waitComplete(t, m)
			checkTree(t, dir, c.tree)
			job, _ := m.Fetched()
			size := int64(len(c.obj))
			if mount == 0 || job+mount > size+size/100+c.slack {
				t.Errorf("fetched %d bytes for the mount and %d for the materialization, want about the archive's %d in all", mount, job, size)
			}
		})
	}
}
