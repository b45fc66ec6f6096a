package materialize

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// buildIndex returns the index of a plain tar of members, and the tar.
func buildIndex(t *testing.T, members []tarbuild.Entry) (*index.Index, []byte) {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "a.tar")
	writeTar(t, archive, members, false)
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := index.Build(context.Background(), bytes.NewReader(data), fetch.Identity{Size: int64(len(data))}, index.BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ix, data
}

// openRoot opens a new empty directory as a job's DIR.
func openRoot(t *testing.T) (string, int) {
	t.Helper()
	dir := t.TempDir()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return dir, fd
}

// TestDirTreePlan plans the directories of small trees: which to make,
// parents first, which names are refused, which entries have other names.
func TestDirTreePlan(t *testing.T) {
	tests := []struct {
		name      string
		members   []tarbuild.Entry
		wantOrder []string
		wantNotes int
		wantExtra map[string][]string // first Name: other names
	}{
		{"parents first", []tarbuild.Entry{
			{Name: "a/", Type: '5'}, {Name: "c/", Type: '5'}, {Name: "a/b/", Type: '5'}, {Name: "a/b/f", Body: []byte("f")},
		}, []string{"a", "c", "a/b"}, 0, nil},
		{"implicit directories", []tarbuild.Entry{
			{Name: "x/y/f", Body: []byte("f")},
		}, []string{"x", "x/y"}, 0, nil},
		{"reserved name refused", []tarbuild.Entry{
			{Name: stateDirName + "/f", Body: []byte("f")}, {Name: "ok/", Type: '5'},
		}, []string{"ok"}, 1, nil},
		{"hard links", []tarbuild.Entry{
			{Name: "d/", Type: '5'}, {Name: "f", Body: []byte("f")}, {Name: "d/h", Link: "f", Type: '1'}, {Name: "h2", Link: "f", Type: '1'},
		}, []string{"d"}, 0, map[string][]string{"f": {"d/h", "h2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix, _ := buildIndex(t, tt.members)
			_, rootFd := openRoot(t)
			var tree dirTree
			var nb notes
			nb.byKind = map[string]*note{}
			if err := tree.plan(ix, rootFd, true, nb.add); err != nil {
				t.Fatal(err)
			}
			defer tree.close()
			var order []string
			for _, id := range tree.order {
				order = append(order, ix.Path(id))
			}
			if !slices.Equal(order, tt.wantOrder) {
				t.Errorf("got order %q, want %q", order, tt.wantOrder)
			}
			for k, id := range tree.order {
				if got := tree.pos[id]; got != int32(k) {
					t.Errorf("%s: got pos %d, want %d", ix.Path(id), got, k)
				}
				if !tree.reach[id] {
					t.Errorf("%s: got unreachable, want reachable", ix.Path(id))
				}
			}
			if got := len(nb.lines()); got != tt.wantNotes {
				t.Errorf("got %d notes (%q), want %d", got, nb.lines(), tt.wantNotes)
			}
			extra := map[string][]string{}
			for id, names := range tree.extra {
				for _, n := range names {
					extra[ix.Path(id)] = append(extra[ix.Path(id)], filepath.Join(ix.Path(n.dir), n.name))
				}
				slices.Sort(extra[ix.Path(id)])
			}
			if len(extra) != len(tt.wantExtra) {
				t.Errorf("got other names %q, want %q", extra, tt.wantExtra)
			}
			for p, want := range tt.wantExtra {
				if !slices.Equal(extra[p], want) {
					t.Errorf("%s: got other names %q, want %q", p, extra[p], want)
				}
			}
		})
	}
}

// TestDirTreeMake makes planned directories, stopping after some: those
// made exist and wait reports them made; once halted, wait reports the
// others not made instead of blocking; make returns stop's error.
func TestDirTreeMake(t *testing.T) {
	members := []tarbuild.Entry{{Name: "a/", Type: '5'}, {Name: "a/b/", Type: '5'}, {Name: "a/b/c/", Type: '5'}, {Name: "d/", Type: '5'}}
	errStop := errors.New("stop")
	tests := []struct {
		name     string
		stopAt   int // make is stopped before this many directories
		wantMade int
		wantErr  error
	}{
		{"all", -1, 4, nil},
		{"stopped at once", 0, 0, errStop},
		{"stopped half way", 2, 2, errStop},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ix, _ := buildIndex(t, members)
			dir, rootFd := openRoot(t)
			var tree dirTree
			if err := tree.plan(ix, rootFd, true, func(string, string, error) {}); err != nil {
				t.Fatal(err)
			}
			defer tree.close()
			var entries atomic.Int64
			calls := 0
			err := tree.make(ix, &entries, func() error {
				if calls == tt.stopAt {
					return errStop
				}
				calls++
				return nil
			})
			tree.halt()
			if err != tt.wantErr {
				t.Errorf("got error %v, want %v", err, tt.wantErr)
			}
			if got := int(entries.Load()); got != tt.wantMade {
				t.Errorf("got %d directories counted, want %d", got, tt.wantMade)
			}
			if !tree.wait(index.RootID) {
				t.Error("got root not made, want made")
			}
			for k, id := range tree.order {
				want := k < tt.wantMade
				if got := tree.wait(id); got != want {
					t.Errorf("%s: got made %v, want %v", ix.Path(id), got, want)
				}
				_, err := os.Lstat(filepath.Join(dir, ix.Path(id)))
				if got := err == nil; got != want {
					t.Errorf("%s: got present %v, want %v", ix.Path(id), got, want)
				}
				if want && !tree.plain[id] {
					t.Errorf("%s: got not plain, want plain (made by the job)", ix.Path(id))
				}
			}
		})
	}
}
