package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// gatedServer serves a directory over loopback HTTP; the requests of its
// archive for bytes from limit on wait until the gate opens, or fail
// with 404 while it fails, except for its last tailBytes (where an
// embedded index is looked for at open).
type gatedServer struct {
	url  string
	name string // the archive's file name
	end  int64  // the gate holds up to here: the archive's size less tailBytes

	mu      sync.Mutex
	limit   int64 // -1: open
	failing bool
	changed chan struct{}
}

const tailBytes = 64 << 10

func newGatedServer(t *testing.T, dir, name string, size int64) *gatedServer {
	g := &gatedServer{name: name, end: size - tailBytes, limit: -1, changed: make(chan struct{})}
	files := http.FileServer(http.Dir(dir))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/"+name && !g.pass(r) {
			http.Error(w, "gone", http.StatusNotFound)
			return
		}
		files.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	g.url = srv.URL + "/" + name
	return g
}

// set holds the requests from limit on (-1: none), or fails them.
func (g *gatedServer) set(limit int64, failing bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.limit, g.failing = limit, failing
	close(g.changed)
	g.changed = make(chan struct{})
}

// pass waits while r asks for bytes the gate holds, and reports whether
// it may be served.
func (g *gatedServer) pass(r *http.Request) bool {
	spec, ok := strings.CutPrefix(r.Header.Get("Range"), "bytes=")
	if !ok {
		return true
	}
	from, _, _ := strings.Cut(spec, "-")
	start, err := strconv.ParseInt(from, 10, 64)
	if err != nil {
		return true
	}
	for {
		g.mu.Lock()
		held, failing, changed := g.limit >= 0 && start >= g.limit && start < g.end, g.failing, g.changed
		g.mu.Unlock()
		switch {
		case !held:
			return true
		case failing:
			return false
		}
		select {
		case <-changed:
		case <-r.Context().Done():
			return false
		}
	}
}

// streamOnlyArchive writes the files of tree in a tar in name order,
// compressed into one zstd frame by how ("stream": as a pipe into zstd
// makes it, without the size in its header; "cli": by the zstd command
// from a file, with it), to dir/a.tar.zst, and returns its size.
func streamOnlyArchive(t *testing.T, dir, how string, tree map[string][]byte) int64 {
	t.Helper()
	var entries []tarbuild.Entry
	for name, data := range tree {
		entries = append(entries, tarbuild.Entry{Name: name, Body: data})
	}
	slicesSortEntries(entries)
	raw := tarbuild.Go(t, tar.FormatPAX, entries...)
	path := filepath.Join(dir, "a.tar.zst")
	switch how {
	case "stream":
		if err := os.WriteFile(path, tarbuild.ZstdStream(raw), 0o644); err != nil {
			t.Fatal(err)
		}
	case "cli", "cli-wlog16":
		if _, err := exec.LookPath("zstd"); err != nil {
			testutil.Missing(t, "zstd not installed")
		}
		tarPath := filepath.Join(t.TempDir(), "a.tar")
		if err := os.WriteFile(tarPath, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"-q", "-f", tarPath, "-o", path}
		if how == "cli-wlog16" {
			// A 64 KiB window: a pass finds room for resume points
			// inside the frame of a small archive (every 32 windows).
			args = append(args, "--zstd=wlog=16")
		}
		if out, err := exec.Command("zstd", args...).CombinedOutput(); err != nil {
			t.Fatalf("zstd: %v: %s", err, out)
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

func slicesSortEntries(e []tarbuild.Entry) {
	for i := 1; i < len(e); i++ {
		for j := i; j > 0 && e[j].Name < e[j-1].Name; j-- {
			e[j], e[j-1] = e[j-1], e[j]
		}
	}
}

// decodeOptions are testOptions with small blocks and no disk cache, so
// that the gate of a gatedServer holds the decode pass about where it is
// set.
func decodeOptions(t *testing.T, buf *syncBuffer) Options {
	o := testOptions(t, buf)
	o.BlockSize = 64 << 10
	o.CacheDisk = 0
	return o
}

// firstAndLast returns the names of the files of tree whose data comes
// first and last in the tar stream of ix.
func firstAndLast(t *testing.T, ix *index.Index, tree map[string][]byte) (first, last string) {
	t.Helper()
	lo, hi := int64(-1), int64(-1)
	for name := range tree {
		id, ok := ix.LookupPath(name)
		if !ok {
			t.Fatalf("%s: not in the index", name)
		}
		off := int64(ix.Entry(id).DataOffset)
		if lo < 0 || off < lo {
			lo, first = off, name
		}
		if off > hi {
			hi, last = off, name
		}
	}
	return first, last
}

// readFile reads the file name of tr whole, within 30 s.
func readFile(tr Tree, name string, size int) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	id := index.RootID
	for part := range strings.SplitSeq(name, "/") {
		var ok bool
		if id, ok = tr.Lookup(id, part); !ok {
			return nil, index.ErrNotFound
		}
	}
	got := make([]byte, size)
	n, err := tr.ReadAt(ctx, id, got, 0)
	if err == io.EOF && n == size {
		err = nil
	}
	return got[:n], err
}

// readAsync is readFile in a goroutine.
func readAsync(tr Tree, name string, size int) <-chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		data, err := readFile(tr, name, size)
		ch <- readResult{data, err}
	}()
	return ch
}

type readResult struct {
	data []byte
	err  error
}

// statusJSON is the archive's status as `tarmount status --json` has it.
func statusJSON(t *testing.T, a *Archive) string {
	t.Helper()
	b, err := json.Marshal(a.Status())
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDecodePass opens a stream-only archive (one zstd frame) whose index
// is known but whose decoded copy is not there: published beside it and
// opened with an empty cache, or saved by an earlier run whose copy was
// removed. The index serves at once (no first pass: every name is there,
// missing ones are not found) while a decode pass writes the copy again,
// held back by the server halfway through the archive: a file near the
// start reads meanwhile, one near the end waits for the pass, and the
// copy is kept for the next open, which needs no decode pass. (Under a
// materialization, the staging pass does the job: TestStagingPass.)
func TestDecodePass(t *testing.T) {
	ctx := context.Background()
	tree := testTree(25)
	for _, tc := range []struct {
		name, how string
		from      string
	}{
		{"sidecar", "stream", FromSidecar},
		{"saved", "stream", FromCache},
		{"sidecar zstd cli", "cli", FromSidecar},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served := t.TempDir()
			size := streamOnlyArchive(t, served, tc.how, tree)
			srv := newGatedServer(t, served, "a.tar.zst", size)
			log := newSyncBuffer()
			opts := decodeOptions(t, log)
			if tc.from == FromSidecar {
				publishLocal(t, filepath.Join(served, "a.tar.zst"))
			} else {
				a, err := OpenIndexed(ctx, srv.url, opts)
				if err != nil {
					t.Fatal(err)
				}
				a.Close()
				if err := os.Remove(decodedPath(opts.CacheDir, a.SavedIndex())); err != nil {
					t.Fatalf("remove the decoded copy: %v", err)
				}
			}
			srv.set(size/2, false)

			a, err := Open(ctx, srv.url, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if a.IndexFrom() != tc.from || a.Index() == nil {
				t.Fatalf("got an index from %q, want the one from %q kept", a.IndexFrom(), tc.from)
			}
			ix := a.Index()
			if !ix.StreamOnly() {
				t.Fatal("the archive is not stream-only")
			}
			if err := a.Start(ctx, false); err != nil {
				t.Fatal(err)
			}
			tr := a.Tree()
			first, last := firstAndLast(t, ix, tree)
			// (1) The whole tree at once, while the pass is held.
			if tr.Len() != ix.Len() {
				t.Errorf("got a tree of %d entries, want the index's %d", tr.Len(), ix.Len())
			}
			dirName, base, _ := strings.Cut(last, "/")
			if did, ok := tr.Lookup(index.RootID, dirName); !ok {
				t.Errorf("%s: not found while the pass is held", dirName)
			} else if _, ok := tr.Lookup(did, base); !ok {
				t.Errorf("%s: not found while the pass is held", last)
			}
			if _, ok := tr.Lookup(index.RootID, "missing"); ok {
				t.Error("got a missing name found")
			}
			// (3) The last file waits for the pass.
			lastRead := readAsync(tr, last, len(tree[last]))
			// (2) The first one reads while the pass is held.
			if got, err := readFile(tr, first, len(tree[first])); err != nil || !bytes.Equal(got, tree[first]) {
				t.Errorf("%s: got %d bytes (err %v) while the pass is held, want %d", first, len(got), err, len(tree[first]))
			}
			select {
			case r := <-lastRead:
				t.Fatalf("%s: read ended before the pass got there (got %d bytes, err %v)", last, len(r.data), r.err)
			case <-time.After(300 * time.Millisecond):
			}
			st := a.Status()
			if p := st.Index.Pass; st.Index.Source != tc.from || p == nil || !p.Running || p.BytesRead >= size {
				t.Errorf("got status %+v, pass %+v while the decode pass is held, want the index from %q and the pass running", st.Index, p, tc.from)
			}
			if js := statusJSON(t, a); !strings.Contains(js, `"decoded_copy":true`) {
				t.Errorf("status --json does not say that the pass writes the decoded copy: %s", js)
			}
			srv.set(-1, false)
			if r := <-lastRead; r.err != nil || !bytes.Equal(r.data, tree[last]) {
				t.Errorf("%s: got %d bytes (err %v) after the pass, want %d", last, len(r.data), r.err, len(tree[last]))
			}
			for deadline := time.Now().Add(30 * time.Second); ; {
				p := a.Status().Index.Pass
				if p != nil && !p.Running {
					if p.Percent != 100 {
						t.Errorf("got the ended pass %+v, want 100%%", p)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatal("the decode pass did not end")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if n := strings.Count(log.String(), "decoded copy of this stream-only archive is missing"); n != 1 {
				t.Errorf("got %d log lines about the missing decoded copy, want 1:\n%s", n, log)
			}
			a.Close()

			// (4) The next open finds the copy: no decode pass, and
			// nothing past the archive's first block.
			if st, err := os.Stat(decodedPath(opts.CacheDir, a.SavedIndex())); err != nil || st.Size() != ix.TarSize {
				t.Fatalf("decoded copy: got %v, want %d bytes", err, ix.TarSize)
			}
			srv.set(64<<10, false)
			b, err := Open(ctx, srv.url, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			if err := b.Start(ctx, false); err != nil {
				t.Fatal(err)
			}
			if got, err := readFile(b.Tree(), last, len(tree[last])); err != nil || !bytes.Equal(got, tree[last]) {
				t.Errorf("%s: got %d bytes (err %v) from the kept copy, want %d", last, len(got), err, len(tree[last]))
			}
			if st := b.Status(); st.Index.Source == Building || st.Index.Pass != nil {
				t.Errorf("got index %+v on the next open, want one found and no pass", st.Index)
			}
		})
	}
}

// TestDecodePassStops fails or stops the decode pass of a stream-only
// archive known by its published index while a read waits for it: the
// read fails (it does not hang), and no copy is left behind.
func TestDecodePassStops(t *testing.T) {
	ctx := context.Background()
	tree := testTree(25)
	for _, how := range []string{"source fails", "closed"} {
		t.Run(how, func(t *testing.T) {
			served := t.TempDir()
			size := streamOnlyArchive(t, served, "stream", tree)
			publishLocal(t, filepath.Join(served, "a.tar.zst"))
			srv := newGatedServer(t, served, "a.tar.zst", size)
			srv.set(size/2, false)
			opts := decodeOptions(t, nil)
			a, err := Open(ctx, srv.url, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if a.IndexFrom() != FromSidecar {
				t.Fatalf("got an index from %q, want the published one kept", a.IndexFrom())
			}
			if err := a.Start(ctx, false); err != nil {
				t.Fatal(err)
			}
			_, last := firstAndLast(t, a.Index(), tree)
			lastRead := readAsync(a.Tree(), last, len(tree[last]))
			select {
			case r := <-lastRead:
				t.Fatalf("%s: read ended before the pass got there (got %d bytes, err %v)", last, len(r.data), r.err)
			case <-time.After(300 * time.Millisecond):
			}
			closed := make(chan struct{})
			if how == "closed" {
				go func() {
					defer close(closed)
					a.Close()
				}()
			} else {
				srv.set(size/2, true)
				close(closed)
			}
			select {
			case r := <-lastRead:
				if r.err == nil || ctxErr(r.err) {
					t.Errorf("%s: got %d bytes, err %v; want the read failed by the pass", last, len(r.data), r.err)
				}
				t.Logf("%s: the read failed with %v", last, r.err)
			case <-time.After(20 * time.Second):
				t.Fatalf("%s: read still waiting 20 s after the pass was stopped", last)
			}
			select {
			case <-closed:
			case <-time.After(20 * time.Second):
				t.Fatal("Close did not return")
			}
			if how == "source fails" {
				for deadline := time.Now().Add(20 * time.Second); !strings.Contains(statusJSON(t, a), `"error":`); {
					if time.Now().After(deadline) {
						t.Fatalf("status does not say the decode pass failed: %s", statusJSON(t, a))
					}
					time.Sleep(10 * time.Millisecond)
				}
				a.Close()
			}
			// A copy kept for the partial index of the stopped pass
			// (which resumes inside the frame) may stay; no other.
			left, _ := filepath.Glob(filepath.Join(opts.CacheDir, "decoded", "*"))
			partials, _ := filepath.Glob(filepath.Join(opts.CacheDir, "indexes", "*.partial"))
			for _, f := range left {
				if !strings.HasSuffix(f, ".kept.tar") || len(partials) == 0 {
					t.Errorf("got %q in the decoded copies, want none but one kept for a partial index (%q)", left, partials)
					break
				}
			}
		})
	}
}

// ctxErr reports whether err is a read's own deadline, which the 30 s of
// readFile would be: a hang, not a failed pass.
func ctxErr(err error) bool { return err == context.DeadlineExceeded }
