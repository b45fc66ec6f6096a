package materialize

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"golang.org/x/sync/semaphore"

	"github.com/tarmount/tarmount/index"
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
