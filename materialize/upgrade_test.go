package materialize

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/hostile"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
	"github.com/tarmount/tarmount/internal/testutil/versions"
)

// version is one version of an archive, as a job sees it.
type version struct {
	path string
	data []byte
	id   fetch.Identity
	ix   *index.Index
}

func makeVersion(t *testing.T, dir, name string, members []tarbuild.Entry, gz bool) *version {
	t.Helper()
	data, err := versions.Tar(members)
	if err != nil {
		t.Fatal(err)
	}
	ext := ".tar"
	if gz {
		data, ext = tarbuild.Gzip(data), ".tar.gz"
	}
	v := &version{path: filepath.Join(dir, name+ext), data: data, id: fetch.Identity{Size: int64(len(data)), ETag: name}}
	if err := os.WriteFile(v.path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if v.ix, err = index.Build(context.Background(), bytes.NewReader(data), v.id, index.BuildOptions{Span: 64 << 10}); err != nil {
		t.Fatal(err)
	}
	return v
}

// failingSpans fails every read after the first n.
type failingSpans struct {
	Spans
	n   int
	err error
}

func (s *failingSpans) Read(ctx context.Context, i int, from, to int64, buf []byte) ([]byte, []byte, error) {
	if s.n <= 0 {
		return nil, nil, s.err
	}
	s.n--
	return s.Spans.Read(ctx, i, from, to, buf)
}

// materializeVersion runs a job of v into dir; wrap, if set, wraps its
// spans.
func materializeVersion(t *testing.T, v *version, dir string, opts Options, wrap func(Spans) Spans) (*Job, error) {
	t.Helper()
	j, err := Open(dir, v.id.Key(), opts)
	if err != nil {
		return nil, err
	}
	defer j.Close()
	src := fileSource{bytes.NewReader(v.data)}
	r := index.NewReader(v.ix, src, index.ReaderOptions{})
	defer r.Close()
	spans := IndexSpans(r, src, Peers{})
	if wrap != nil {
		spans = wrap(spans)
	}
	return j, j.Run(context.Background(), v.ix, spans)
}

// inodeOf returns the inode and ctime of p (not followed).
func inodeOf(t *testing.T, p string) (uint64, unix.Timespec) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino, st.Ctim
}

// TestUpgrade materializes V1, then V2 into the same DIR, for a
// compressed archive (member digests) and a plain tar (none), with and
// without V1's index at hand: DIR ends as tar -x of V2 makes it; entries
// the same in both are not touched (inode and ctime), those whose
// metadata alone changed keep their inode and get the new metadata; only
// the changed files are written; nothing outside DIR changes, though V1
// has a symlink out where V2 has a directory.
func TestUpgrade(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "owners need root")
	}
	for _, gz := range []bool{true, false} {
		for _, withPrev := range []bool{true, false} {
			name := map[bool]string{true: "gzip", false: "plain"}[gz] + map[bool]string{true: "/previous-index", false: "/no-index"}[withPrev]
			t.Run(name, func(t *testing.T) {
				work := t.TempDir()
				outside := hostile.MakeSentinel(t, work)
				v1 := makeVersion(t, work, "v1", versions.V1(outside), gz)
				v2 := makeVersion(t, work, "v2", versions.V2(), gz)
				out := filepath.Join(work, "out")
				if _, err := materializeVersion(t, v1, out, Options{}, nil); err != nil {
					t.Fatal(err)
				}
				before := inodesBefore(t, out)
				snap := hostile.Snapshot(t, work, "out")

				prog := &Progress{}
				opts := Options{Progress: prog}
				if withPrev {
					opts.Previous = previous(v1)
				}
				if _, err := materializeVersion(t, v2, out, opts, nil); err != nil {
					t.Fatal(err)
				}
				checkUpgraded(t, work, out, v2, before)
				for _, d := range hostile.DiffTrees(hostile.Snapshot(t, work, "out"), snap) {
					t.Errorf("outside DIR: %s", d)
				}
				if got := prog.Files.Load(); got != int64(versions.Written) {
					t.Errorf("files written: got %d, want %d", got, versions.Written)
				}
				if got := prog.Kept.Load(); got < int64(versions.Files-versions.Written) {
					t.Errorf("entries kept: got %d, want at least %d", got, versions.Files-versions.Written)
				}
				if got, want := prog.Retouched.Load(), int64(len(versions.Retouched)); got != want {
					t.Errorf("retouched: got %d, want %d", got, want)
				}
				if m, ok := readMarker(out); !ok || !m.Complete || m.Source != v2.id.Key() || m.Replace || m.From != "" {
					t.Errorf("marker %+v, %v; want V2's, complete", m, ok)
				}
			})
		}
	}
}

// previous is Options.Previous with v's index at hand.
func previous(v *version) func(string) *index.Index {
	return func(key string) *index.Index {
		if key == v.id.Key() {
			return v.ix
		}
		return nil
	}
}

// inodesBefore records the inode and ctime of the entries of V1 in out
// that the upgrade must not replace.
func inodesBefore(t *testing.T, out string) map[string][2]any {
	t.Helper()
	before := map[string][2]any{}
	for _, p := range append(append(versions.Kept, versions.Relinked...), keys(versions.Retouched)...) {
		ino, ct := inodeOf(t, filepath.Join(out, p))
		before[p] = [2]any{ino, ct}
	}
	return before
}

func keys(m map[string]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// checkUpgraded compares out with tar -x of v2 and checks that the
// entries before lists kept their inode (and, for Kept, their ctime).
func checkUpgraded(t *testing.T, work, out string, v2 *version, before map[string][2]any) {
	t.Helper()
	ref := filepath.Join(t.TempDir(), "ref")
	tarbuild.Extract(t, v2.path, ref)
	treecmp.Compare(t, ref, out, treecmp.Options{SkipRoot: true, MaxErrors: 20})
	for _, p := range versions.Kept {
		ino, ct := inodeOf(t, filepath.Join(out, p))
		if b := before[p]; b[0] != ino || b[1] != ct {
			t.Errorf("%s: got inode %d ctime %v, want %v %v (kept untouched)", p, ino, ct, b[0], b[1])
		}
	}
	for _, p := range append(keys(versions.Retouched), versions.Relinked...) {
		if ino, _ := inodeOf(t, filepath.Join(out, p)); before[p][0] != ino {
			t.Errorf("%s: got inode %d, want %v (only its metadata changed)", p, ino, before[p][0])
		}
	}
	for _, p := range versions.Gone {
		if _, err := os.Lstat(filepath.Join(out, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: got %v, want it gone", p, err)
		}
	}
}

// TestUpgradeResumed interrupts an upgrade once it has written a little
// and runs it again: it resumes (the marker says it replaces V1) and DIR
// still ends exactly as V2.
func TestUpgradeResumed(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "owners need root")
	}
	work := t.TempDir()
	outside := hostile.MakeSentinel(t, work)
	v1 := makeVersion(t, work, "v1", versions.V1(outside), true)
	v2 := makeVersion(t, work, "v2", versions.V2(), true)
	out := filepath.Join(work, "out")
	if _, err := materializeVersion(t, v1, out, Options{}, nil); err != nil {
		t.Fatal(err)
	}
	before := inodesBefore(t, out)
	prev := previous(v1)
	cut := errors.New("connection cut")
	_, err := materializeVersion(t, v2, out, Options{Previous: prev, Writers: 1, Decoders: 1}, func(s Spans) Spans {
		return &failingSpans{Spans: s, n: 1, err: cut}
	})
	if !errors.Is(err, cut) {
		t.Fatalf("got %v, want the cut", err)
	}
	if m, ok := readMarker(out); !ok || m.Complete || !m.Replace || m.From != v1.id.Key() {
		t.Fatalf("marker after the cut: %+v, %v; want V2's, incomplete, replacing V1", m, ok)
	}
	if _, err := materializeVersion(t, v2, out, Options{Previous: prev}, nil); err != nil {
		t.Fatal(err)
	}
	checkUpgraded(t, work, out, v2, before)
}

// TestUpgradeOtherArchive upgrades a DIR made from one archive with an
// unrelated one: everything of the first goes.
func TestUpgradeOtherArchive(t *testing.T) {
	work := t.TempDir()
	a := makeVersion(t, work, "a", []tarbuild.Entry{{Name: "x/y", Body: []byte("y")}, {Name: "k", Body: []byte("k")}}, true)
	b := makeVersion(t, work, "b", []tarbuild.Entry{{Name: "k", Body: []byte("k")}, {Name: "z", Body: []byte("z")}}, true)
	out := filepath.Join(work, "out")
	for _, v := range []*version{a, b} {
		if _, err := materializeVersion(t, v, out, Options{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	ref := filepath.Join(t.TempDir(), "ref")
	tarbuild.Extract(t, b.path, ref)
	treecmp.Compare(t, ref, out, treecmp.Options{SkipRoot: true, SkipOwner: os.Geteuid() != 0})
	var names []string
	ents, _ := os.ReadDir(out)
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if got := strings.Join(names, " "); got != "k z" {
		t.Errorf("DIR holds %q, want %q", got, "k z")
	}
}
