package materialize

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/hostile"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
	"github.com/tarmount/tarmount/internal/xattr"
)

// fileSource reads a local archive.
type fileSource struct{ r io.ReaderAt }

func (s fileSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return s.r.ReadAt(p, off)
}

// extract materializes the archive at path into dir: with one pass that
// builds the index and stages the data (cold), or with an index built
// first and spans decoded in parallel.
func extract(t *testing.T, archive, dir string, cold bool, opts Options) (*Job, error) {
	t.Helper()
	return extractWith(t, archive, dir, cold, opts, nil)
}

// extractWith is extract with prep called on the job before anything is
// written.
func extractWith(t *testing.T, archive, dir string, cold bool, opts Options, prep func(*Job)) (*Job, error) {
	t.Helper()
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	id := fetch.Identity{Size: int64(len(data)), ETag: "test"}
	j, err := Open(dir, id.Key(), opts)
	if err != nil {
		return nil, err
	}
	defer j.Close()
	if prep != nil {
		prep(j)
	}
	bopts := index.BuildOptions{Span: 64 << 10}
	if cold {
		bopts.OnMember = j.Stage
	}
	ix, err := index.Build(context.Background(), bytes.NewReader(data), id, bopts)
	if err != nil {
		t.Fatal(err)
	}
	src := fileSource{bytes.NewReader(data)}
	r := index.NewReader(ix, src, index.ReaderOptions{})
	defer r.Close()
	var spans Spans
	if !cold {
		spans = IndexSpans(r, src, Peers{})
	}
	return j, j.Run(context.Background(), ix, spans)
}

// TestRoundTrip extracts archives of the corpus tree in both modes and
// compares the result with what GNU tar extracts.
func TestRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "owners and devices need root")
	}
	specs := []tarbuild.Spec{
		{Tool: "gnutar", Format: "posix", Codec: "gzip"},
		{Tool: "gnutar", Format: "gnu", Codec: "none"},
		{Tool: "bsdtar", Format: "pax", Codec: "gzip-multi"},
	}
	many := 300
	if raceEnabled {
		// The race detector slows every write: fewer files, same features.
		many = 20
		specs = specs[:2]
	}
	work := t.TempDir()
	src := filepath.Join(work, "src")
	corpus.MakeTree(t, src, corpus.TreeOptions{Many: many, NoBigFiles: raceEnabled})
	for _, spec := range specs {
		for _, cold := range []bool{false, true} {
			name := spec.String()
			if cold {
				name += "-cold"
			}
			t.Run(name, func(t *testing.T) {
				dir := t.TempDir()
				treeSrc := src
				if o := corpus.TreeOptionsFor(spec); o != (corpus.TreeOptions{}) {
					o.Many, o.NoBigFiles = many, raceEnabled
					treeSrc = filepath.Join(dir, "src")
					corpus.MakeTree(t, treeSrc, o)
				}
				archive := filepath.Join(dir, "a"+spec.Ext())
				tarbuild.Archive(t, treeSrc, archive, spec)
				ref := filepath.Join(dir, "ref")
				tarbuild.Extract(t, archive, ref)
				out := filepath.Join(dir, "out")
				j, err := extract(t, archive, out, cold, Options{Writers: 4, Decoders: 3})
				if err != nil {
					t.Fatal(err)
				}
				treecmp.Compare(t, ref, out, treecmp.Options{MaxErrors: 20})
				if m, ok := readMarker(out); !ok || !m.Complete {
					t.Errorf("marker %+v, %v; want complete", m, ok)
				}
				// A second run finds DIR complete and writes nothing.
				j2, err := extract(t, archive, out, cold, Options{})
				if err != nil {
					t.Fatal(err)
				}
				if !j2.Complete() {
					t.Error("second run did not find the directory complete")
				}
				_ = j
			})
		}
	}
}

// TestMalicious extracts every hostile.PathCase, in one pass (cold) and
// from an index (spans): nothing beside DIR is created or changed (a
// snapshot of DIR's parent, with a sentinel directory in it, before and
// after), DIR holds exactly the tree the case says, and the job reports
// what it refused.
func TestMalicious(t *testing.T) {
	for _, tc := range hostile.PathCases() {
		for _, cold := range []bool{false, true} {
			t.Run(tc.Name+map[bool]string{false: "/indexed", true: "/cold"}[cold], func(t *testing.T) {
				work := t.TempDir()
				outside := hostile.MakeSentinel(t, work)
				archive := filepath.Join(t.TempDir(), "evil.tar.gz")
				if err := os.WriteFile(archive, tarbuild.Gzip(tc.Archive(outside)), 0o644); err != nil {
					t.Fatal(err)
				}
				out := filepath.Join(work, "out")
				before := hostile.Snapshot(t, work, "out")
				j, err := extract(t, archive, out, cold, Options{})
				if err != nil {
					t.Fatal(err)
				}
				after := hostile.Snapshot(t, work, "out")
				for _, d := range hostile.DiffTrees(after, before) {
					t.Errorf("outside DIR: %s", d)
				}
				want := hostile.ReplaceAbs(tc.WantTree(os.Geteuid() == 0), outside)
				for _, d := range hostile.DiffTrees(hostile.DescribeTree(t, out), want) {
					t.Errorf("in DIR: %s", d)
				}
				wantNotes := tc.Notes
				if cold {
					wantNotes = append(slices.Clone(wantNotes), tc.ScreenNotes...)
				}
				if os.Geteuid() != 0 {
					wantNotes = append(slices.Clone(wantNotes), tc.UnprivilegedNotes...)
				}
				hostile.CheckNotes(t, "notes", j.Notes(), wantNotes...)
				if len(wantNotes) == 0 && len(j.Notes()) > 0 {
					t.Errorf("got notes %q, want none", j.Notes())
				}
			})
		}
	}
}

// writeTar writes members as a pax tar, gzipped when gz.
func writeTar(t *testing.T, path string, members []tarbuild.Entry, gz bool) {
	t.Helper()
	data := tarbuild.Go(t, tar.FormatPAX, members...)
	if gz {
		data = tarbuild.Gzip(data)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRefusesForeignDir checks that a non-empty DIR that tarmount did not
// make is refused unless Overwrite, and that Overwrite makes it hold
// exactly the archive's tree.
func TestRefusesForeignDir(t *testing.T) {
	work := t.TempDir()
	archive := filepath.Join(work, "a.tar")
	writeTar(t, archive, []tarbuild.Entry{{Name: "f", Body: []byte("new")}}, false)
	out := filepath.Join(work, "out")
	os.Mkdir(out, 0o755)
	os.WriteFile(filepath.Join(out, "f"), []byte("old"), 0o644)
	os.WriteFile(filepath.Join(out, "other"), []byte("mine"), 0o644)
	if _, err := extract(t, archive, out, false, Options{}); !errors.Is(err, ErrNotOurs) {
		t.Fatalf("got %v, want ErrNotOurs", err)
	}
	if _, err := extract(t, archive, out, false, Options{Overwrite: true}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "f")); string(b) != "new" {
		t.Errorf("f: got %q, want %q", b, "new")
	}
	if _, err := os.Lstat(filepath.Join(out, "other")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("other: got %v, want it removed (the archive lacks it)", err)
	}
}

// TestExtractHostile extracts every hostile.ArchiveCase in one pass: a
// damaged archive fails the pass with its error and leaves nothing named
// in DIR but the job's state; a readable one is extracted, in both modes,
// with its files' bytes and without the names it refuses.
func TestExtractHostile(t *testing.T) {
	for _, tc := range hostile.ArchiveCases() {
		if tc.Big && raceEnabled {
			// Deep trees take tens of seconds under the race detector:
			// scripts/test.sh runs this test again without it.
			continue
		}
		t.Run(tc.Name, func(t *testing.T) {
			archive := filepath.Join(t.TempDir(), "archive")
			if err := os.WriteFile(archive, tc.Data, 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.Err != "" {
				out := filepath.Join(t.TempDir(), "out")
				j, err := Open(out, "hostile", Options{})
				if err != nil {
					t.Fatal(err)
				}
				_, err = index.Build(context.Background(), bytes.NewReader(tc.Data), fetch.Identity{Size: int64(len(tc.Data))},
					index.BuildOptions{Span: 64 << 10, OnMember: j.Stage})
				j.Abandon()
				if err == nil || !strings.Contains(strings.ToLower(err.Error()), tc.Err) {
					t.Errorf("got %v, want an error with %q", err, tc.Err)
				}
				ents, _ := os.ReadDir(out)
				for _, e := range ents {
					if e.Name() != stateDirName {
						t.Errorf("the failed pass left %s in DIR", e.Name())
					}
				}
				return
			}
			modes := []bool{false, true}
			if tc.Big {
				modes = modes[1:] // deep trees: one mode is enough
			}
			for _, cold := range modes {
				out := filepath.Join(t.TempDir(), "out")
				// A tree deeper than the open-file limit is more than
				// os.RemoveAll can take apart; rm removes it without a
				// descriptor per level (and runs before TempDir's own
				// cleanup).
				t.Cleanup(func() { exec.Command("rm", "-rf", out).Run() })
				if _, err := extract(t, archive, out, cold, Options{}); err != nil {
					t.Fatalf("cold %v: %.2000v", cold, err)
				}
				for p, want := range tc.Files {
					if got, err := os.ReadFile(filepath.Join(out, p)); err != nil || string(got) != want {
						t.Errorf("cold %v: %s: got %d bytes (%v), want its %d", cold, p, len(got), err, len(want))
					}
				}
				for _, p := range tc.Refused {
					if _, err := os.Lstat(filepath.Join(out, p)); err == nil {
						t.Errorf("cold %v: %.40q extracted, want it refused", cold, p)
					}
				}
			}
		})
	}
}

// TestStateInsideDir: a job keeps its state in DIR (an xattr, the journal
// under DIR/.tarmount-partial), so it runs where nothing may be written
// beside DIR: here DIR's parent is immutable (chattr +i), as the root of
// a read-only volume would be. A marker that an older version wrote beside
// DIR is still read, and moves into DIR.
func TestStateInsideDir(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "root, to make a directory immutable")
	}
	if _, err := exec.LookPath("chattr"); err != nil {
		testutil.Missing(t, "chattr (e2fsprogs)")
	}
	work := t.TempDir()
	archive := filepath.Join(work, "a.tar")
	writeTar(t, archive, []tarbuild.Entry{{Name: "d/f", Body: []byte("data")}}, false)
	parent := filepath.Join(work, "parent")
	out := filepath.Join(parent, "out")
	mkdir(t, out)
	if msg, err := exec.Command("chattr", "+i", parent).CombinedOutput(); err != nil {
		testutil.Missing(t, "chattr +i on this filesystem: %v: %s", err, msg)
	}
	t.Cleanup(func() { exec.Command("chattr", "-i", parent).Run() })
	if _, err := extract(t, archive, out, true, Options{}); err != nil {
		t.Fatalf("extract under an immutable parent: %v", err)
	}
	// Complete: nothing to do, and nothing written.
	if j, err := extract(t, archive, out, false, Options{}); err != nil || !j.Complete() {
		t.Fatalf("extract again: got %v (complete %v), want a complete DIR", err, j != nil && j.Complete())
	}
	if b, err := os.ReadFile(filepath.Join(out, "d", "f")); err != nil || string(b) != "data" {
		t.Fatalf("d/f: got %q, %v", b, err)
	}
	if m, ok := readMarker(out); !ok || !m.Complete {
		t.Errorf("marker: got %+v, %v; want a complete one", m, ok)
	}
	ents, _ := os.ReadDir(parent)
	if len(ents) != 1 {
		t.Errorf("the parent holds %d entries, want DIR alone", len(ents))
	}
	exec.Command("chattr", "-i", parent).Run()

	// A DIR that an older version completed, its marker beside it.
	old := filepath.Join(work, "old")
	if _, err := extract(t, archive, old, true, Options{}); err != nil {
		t.Fatal(err)
	}
	m, _ := readMarker(old)
	data, _ := json.Marshal(m)
	if err := unix.Removexattr(old, xattr.State); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(legacyMarkerPath(old), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, ok := readMarker(old); !ok || got != m {
		t.Fatalf("legacy marker: got %+v, %v; want %+v", got, ok, m)
	}
	if err := writeMarker(old, m); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(legacyMarkerPath(old)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("legacy marker after a write: %v, want it removed", err)
	}
	if got, ok := readMarker(old); !ok || got != m {
		t.Errorf("marker moved into DIR: got %+v, %v; want %+v", got, ok, m)
	}
}
