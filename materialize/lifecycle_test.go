package materialize

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestLifecycleOpenDir opens DIRs in every state Open tells apart: new,
// ours (complete or not), another archive's, somebody else's.
func TestLifecycleOpenDir(t *testing.T) {
	const key = "source-1"
	tests := []struct {
		name         string
		prep         func(t *testing.T, dir string)
		overwrite    bool
		wantErr      error
		wantFresh    bool
		wantComplete bool
	}{
		{"missing", func(t *testing.T, dir string) {}, false, nil, true, false},
		{"empty", func(t *testing.T, dir string) { mkdir(t, dir) }, false, nil, true, false},
		{"complete", func(t *testing.T, dir string) {
			mkfile(t, filepath.Join(dir, "f"))
			mark(t, dir, marker{Source: key, Complete: true})
		}, false, nil, true, true},
		{"marked complete with its state left", func(t *testing.T, dir string) {
			mkdir(t, filepath.Join(dir, stateDirName))
			mark(t, dir, marker{Source: key, Complete: true})
		}, false, nil, false, false},
		{"incomplete", func(t *testing.T, dir string) {
			mkdir(t, filepath.Join(dir, stateDirName))
			mark(t, dir, marker{Source: key})
		}, false, nil, false, false},
		{"another version's: upgraded", func(t *testing.T, dir string) {
			mkfile(t, filepath.Join(dir, "f"))
			mark(t, dir, marker{Source: "source-2", Complete: true})
		}, false, nil, true, false},
		{"somebody else's", func(t *testing.T, dir string) { mkfile(t, filepath.Join(dir, "f")) }, false, ErrNotOurs, false, false},
		{"somebody else's, overwritten", func(t *testing.T, dir string) { mkfile(t, filepath.Join(dir, "f")) }, true, nil, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			tt.prep(t, dir)
			l := lifecycle{dir: dir, key: key, rootFd: -1, stateFd: -1, tmpFd: -1}
			fresh, err := l.openDir(tt.overwrite)
			defer l.close()
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("got error %v, want %v", err, tt.wantErr)
			}
			if err != nil {
				return
			}
			if fresh != tt.wantFresh || l.complete != tt.wantComplete {
				t.Errorf("got fresh %v, complete %v; want %v, %v", fresh, l.complete, tt.wantFresh, tt.wantComplete)
			}
			if l.rootFd < 0 || l.root == nil {
				t.Errorf("got DIR not open (%d, %v), want it open", l.rootFd, l.root)
			}
		})
	}
}

// TestLifecycleResume opens the state of a DIR twice: the second job
// resumes from the ids the first journaled unless it starts afresh, and
// removeState leaves no state behind.
func TestLifecycleResume(t *testing.T) {
	tests := []struct {
		name       string
		fresh      bool
		wantResume []index.EntryID
	}{
		{"resumed", false, []index.EntryID{3, 5}},
		{"started over", true, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "out")
			first := openLifecycle(t, dir, true)
			first.jr.Add(3)
			first.jr.Add(5)
			first.jr.Close()
			first.close()
			if m, ok := readMarker(dir); !ok || m.Complete {
				t.Errorf("got marker %+v, %v; want an incomplete one", m, ok)
			}

			second := openLifecycle(t, dir, tt.fresh)
			defer second.close()
			defer second.jr.Close()
			if !slices.Equal(second.resume, tt.wantResume) {
				t.Errorf("got resume %v, want %v", second.resume, tt.wantResume)
			}
			if err := second.removeState(); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Lstat(filepath.Join(dir, stateDirName)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("got %v for the state directory, want it removed", err)
			}
			if second.tmpFd != -1 || second.stateFd != -1 {
				t.Errorf("got descriptors %d, %d after removeState, want -1, -1", second.tmpFd, second.stateFd)
			}
		})
	}
}

func openLifecycle(t *testing.T, dir string, fresh bool) *lifecycle {
	t.Helper()
	l := &lifecycle{dir: dir, key: "k", rootFd: -1, stateFd: -1, tmpFd: -1}
	if _, err := l.openDir(false); err != nil {
		t.Fatal(err)
	}
	if err := l.openState(fresh, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	return l
}

func mkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mkfile(t *testing.T, p string) {
	t.Helper()
	mkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mark(t *testing.T, dir string, m marker) {
	t.Helper()
	if err := writeMarker(dir, m); err != nil {
		t.Fatal(err)
	}
}

// TestNotes counts refusals by kind and lists them sorted, with the first
// example of each.
func TestNotes(t *testing.T) {
	errX := errors.New("x")
	tests := []struct {
		name string
		add  [][2]string // kind, path
		err  error
		want []string
	}{
		{"none", nil, nil, nil},
		{"one kind", [][2]string{{"k", "a"}, {"k", "b"}}, nil, []string{"k: 2, e.g. a"}},
		{"sorted", [][2]string{{"z", "a"}, {"b", "c"}}, nil, []string{"b: 1, e.g. c", "z: 1, e.g. a"}},
		{"with an error", [][2]string{{"k", "a"}}, errX, []string{"k: 1, e.g. a (x)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := notes{byKind: map[string]*note{}}
			for _, a := range tt.add {
				n.add(a[0], a[1], tt.err)
			}
			if got := n.lines(); !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestOpenLocal opens files of DIR only once Run says they are complete.
func TestOpenLocal(t *testing.T) {
	ix, data := buildIndex(t, []tarbuild.Entry{{Name: "d/", Type: '5'}, {Name: "d/f", Body: []byte("body")}})
	fid, ok := ix.LookupPath("d/f")
	if !ok {
		t.Fatal("no d/f in the index")
	}
	did, _ := ix.LookupPath("d")
	j, err := Open(filepath.Join(t.TempDir(), "out"), "k", Options{Writers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if f, ok := j.OpenLocal(fid); ok {
		f.Close()
		t.Error("before Run: got d/f open, want not complete")
	}
	src := fileSource{bytes.NewReader(data)}
	r := index.NewReader(ix, src, index.ReaderOptions{})
	defer r.Close()
	if err := j.Run(t.Context(), ix, IndexSpans(r, src, Peers{})); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		id   index.EntryID
		want bool
	}{
		{"complete file", fid, true},
		{"directory", did, false},
		{"unknown", index.EntryID(ix.Len() + 40), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, ok := j.OpenLocal(tt.id)
			if ok {
				defer f.Close()
				if b, err := io.ReadAll(f); err != nil || string(b) != "body" {
					t.Errorf("got %q, %v; want %q", b, err, "body")
				}
			}
			if ok != tt.want {
				t.Errorf("got %v, want %v", ok, tt.want)
			}
		})
	}
}
