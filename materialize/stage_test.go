package materialize

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sync/semaphore"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/index/tarscan"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestStagerSlabs asks a stager for room for member data in turn: a slab
// is shared while the data fits, a new one is taken from the memory
// budget when not, and a slab whose pieces are all written goes back to
// the budget and to the free list.
func TestStagerSlabs(t *testing.T) {
	const slabBytes = 100
	tests := []struct {
		name      string
		sizes     []int64
		wantSlabs int // distinct slabs handed out
	}{
		{"one member", []int64{10}, 1},
		{"members that fit in one", []int64{40, 30, 30}, 1},
		{"a member that does not fit", []int64{60, 50}, 2},
		{"whole slabs", []int64{100, 100, 100}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sem := semaphore.NewWeighted(10 * slabBytes)
			var s stager
			s.init(sem, slabBytes)
			var got []*slab
			for _, n := range tt.sizes {
				sl, err := s.slabFor(context.Background(), n)
				if err != nil {
					t.Fatal(err)
				}
				if len(sl.buf)-sl.used < int(n) {
					t.Fatalf("got a slab with %d bytes free, want at least %d", len(sl.buf)-sl.used, n)
				}
				sl.used += int(n)
				sl.refs.Add(1) // one piece
				if !slices.Contains(got, sl) {
					got = append(got, sl)
				}
				defer s.slabDone(sl) // the piece written
			}
			if len(got) != tt.wantSlabs {
				t.Errorf("got %d slabs, want %d", len(got), tt.wantSlabs)
			}
			s.dropSlab()
			if sem.TryAcquire(10 * slabBytes) {
				t.Error("got the whole budget free with pieces unwritten, want it held")
			}
		})
	}
	// Once every piece is written (the deferred slabDone above), a
	// stager gives the budget back and keeps the slab for reuse.
	sem := semaphore.NewWeighted(slabBytes)
	var s stager
	s.init(sem, slabBytes)
	if _, err := s.slabFor(context.Background(), slabBytes); err != nil {
		t.Fatal(err)
	}
	s.dropSlab()
	if got := len(s.slabFree.free); got != 1 {
		t.Errorf("got %d free slabs, want 1", got)
	}
	if !sem.TryAcquire(slabBytes) {
		t.Error("got the budget held after the slab was written, want it free")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.slabFor(ctx, slabBytes); err == nil {
		t.Errorf("got a slab with the budget spent and ctx done, want %v", context.Canceled)
	}
}

// TestStagerEarlyPlace places members early under a new DIR: valid names
// get their directories made (0700, plain) and kept open; refused names,
// the state directory and names past the descriptor budget are not placed
// (what else it returns then is not used).
func TestStagerEarlyPlace(t *testing.T) {
	tests := []struct {
		name     string
		member   string
		budget   int64
		wantOK   bool
		wantBase string
		wantPath string
		wantMade []string
	}{
		{"top", "f", 100, true, "f", "f", nil},
		{"nested", "./a/b/f", 100, true, "f", "a/b/f", []string{"a", "a/b"}},
		{"absolute", "/a/f", 100, true, "f", "a/f", []string{"a"}},
		{"dot dot", "a/../../f", 100, false, "", "", nil},
		{"state directory", stateDirName + "/f", 100, false, "", "", nil},
		{"state file", stateDirName, 100, false, "", "", nil},
		{"no directory budget", "a/f", 0, false, "", "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, rootFd := openRoot(t)
			var s stager
			s.init(nil, 1)
			s.root, s.fdBudget = earlyDir{fd: rootFd, plain: true}, tt.budget
			defer s.closeEarly()
			d, base, p, ok := s.earlyPlace(tt.member)
			if ok != tt.wantOK || (ok && (base != tt.wantBase || p != tt.wantPath)) {
				t.Errorf("got %q, %q, %v; want %q, %q, %v", base, p, ok, tt.wantBase, tt.wantPath, tt.wantOK)
			}
			if ok && (d.fd < 0 || !d.plain) {
				t.Errorf("got directory %+v, want an open, plain one", d)
			}
			if !slices.Equal(s.earlyMade, tt.wantMade) {
				t.Errorf("got made %q, want %q", s.earlyMade, tt.wantMade)
			}
			for _, m := range tt.wantMade {
				fi, err := os.Lstat(filepath.Join(dir, m))
				if err != nil || !fi.IsDir() || fi.Mode().Perm() != 0o700 {
					t.Errorf("%s: got %v, %v; want a directory of mode 0700", m, fi, err)
				}
			}
		})
	}
}

// TestStagerDirs makes stage directories on first use only, one per
// bucket, and closes them.
func TestStagerDirs(t *testing.T) {
	tmp, tmpFd := openRoot(t)
	var s stager
	s.init(nil, 1)
	for _, i := range []int{0, 5, stageBuckets - 1} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			fd, err := s.dir(tmpFd, i)
			if err != nil {
				t.Fatal(err)
			}
			again, err := s.dir(tmpFd, i)
			if err != nil || again != fd {
				t.Errorf("got %d, %v the second time, want %d", again, err, fd)
			}
			if _, err := os.Lstat(filepath.Join(tmp, fmt.Sprintf("b%02x", i))); err != nil {
				t.Errorf("got %v, want the stage directory made", err)
			}
		})
	}
	s.closeDirs()
	for i, fd := range s.dirs {
		if fd != -1 {
			t.Errorf("stage directory %d: got descriptor %d after closeDirs, want -1", i, fd)
		}
	}
}

// TestLogicalPieces splits stored data of plain and sparse files into
// pieces at their logical offsets.
func TestLogicalPieces(t *testing.T) {
	chunks := []index.SparseChunk{{Offset: 0, Length: 4}, {Offset: 100, Length: 4}, {Offset: 200, Length: 2}}
	tests := []struct {
		name   string
		sparse bool
		off    int64
		data   string
		want   []string // "AT:DATA"
	}{
		{"plain", false, 7, "abc", []string{"7:abc"}},
		{"sparse, all", true, 0, "aaaabbbbcc", []string{"0:aaaa", "100:bbbb", "200:cc"}},
		{"sparse, across a chunk end", true, 2, "aabb", []string{"2:aa", "100:bb"}},
		{"sparse, within a chunk", true, 5, "bb", []string{"101:bb"}},
		{"sparse, past the map", true, 10, "zz", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []string
			for _, p := range logicalPieces(chunks, tt.sparse, tt.off, []byte(tt.data)) {
				got = append(got, fmt.Sprintf("%d:%s", p.at, p.data))
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestStagedResume: what Stage placed under their names stays journaled
// when a one-pass job stops before Run; StagedBefore says so once they
// are all placed; a later job of the same source finds them (Placed),
// and after TrustPlaced its Run completes DIR without reading the
// archive. Without TrustPlaced, Run needs the archive's data.
func TestStagedResume(t *testing.T) {
	members := []tarbuild.Entry{
		{Name: "a/", Type: tar.TypeDir},
		{Name: "a/f1", Body: []byte("one\n")},
		{Name: "a/f 2", Body: bytes.Repeat([]byte("two\n"), 5000)},
		{Name: "b/\"q\"\n", Body: []byte("quoted\n")},
		{Name: "b/link", Link: "a/f1", Type: tar.TypeLink},
		{Name: "c", Body: []byte("c\n"), Mode: 0o600},
	}
	ix, data := buildIndex(t, members)
	id := fetch.Identity{Size: int64(len(data)), ETag: "v1"}
	dir := filepath.Join(t.TempDir(), "out")
	j, err := Open(dir, id.Key(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var ends []int64 // where each regular file's data ends
	stage := func(h *tarscan.Header, r io.Reader) error {
		if h.Typeflag == tarscan.TypeReg {
			ends = append(ends, h.DataOffset+h.StoredSize)
		}
		return j.Stage(h, r)
	}
	if _, err := index.Build(context.Background(), bytes.NewReader(data), id, index.BuildOptions{OnMember: stage}); err != nil {
		t.Fatal(err)
	}
	last := ends[len(ends)-1]
	for deadline := time.Now().Add(10 * time.Second); !j.StagedBefore(last); {
		if time.Now().After(deadline) {
			t.Fatal("StagedBefore never said the staged files were placed")
		}
		time.Sleep(time.Millisecond)
	}
	if !j.StagedBefore(last + 1) {
		// Nothing is staged past the last file: it holds everything.
		t.Error("StagedBefore past the last file: got false, want true")
	}
	j.Close() // stopped before Run

	for _, trust := range []bool{false, true} {
		t.Run(fmt.Sprintf("trust=%v", trust), func(t *testing.T) {
			j, err := Open(dir, id.Key(), Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			for i := 1; i < ix.Len(); i++ {
				e := ix.Entry(index.EntryID(i))
				if e.Type != index.TypeReg {
					continue
				}
				name := ix.Path(index.EntryID(i))
				if !j.Placed(int64(e.DataOffset), name) {
					t.Errorf("%q: Placed got false, want true", name)
				}
				if j.Placed(int64(e.DataOffset), name+"x") {
					t.Errorf("%q: Placed under another name got true, want false", name)
				}
			}
			if !trust {
				if err := j.Run(context.Background(), ix, nil); err == nil {
					t.Error("Run without TrustPlaced and without spans: got no error, want one")
				}
				return
			}
			j.TrustPlaced(last)
			if err := j.Run(context.Background(), ix, nil); err != nil {
				t.Fatalf("Run over the trusted files: %v", err)
			}
			for _, m := range members {
				if m.Type != 0 {
					continue
				}
				got, err := os.ReadFile(filepath.Join(dir, m.Name))
				if err != nil || !bytes.Equal(got, m.Body) {
					t.Errorf("%q: got %q, %v; want %q", m.Name, got, err, m.Body)
				}
			}
			if fi, err := os.Stat(filepath.Join(dir, "c")); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("c: got %v, %v; want mode 0600", fi, err)
			}
			if a, b := filepath.Join(dir, "a/f1"), filepath.Join(dir, "b/link"); !sameFile(t, a, b) {
				t.Errorf("b/link is not a hard link to a/f1")
			}
		})
	}
}

func sameFile(t *testing.T, a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		t.Fatal(err)
	}
	fb, err := os.Stat(b)
	if err != nil {
		t.Fatal(err)
	}
	return os.SameFile(fa, fb)
}
