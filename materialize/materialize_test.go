package materialize

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/tests/corpus"
	"github.com/tarmount/tarmount/tests/treecmp"
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
		spans = IndexSpans(r, src)
	}
	return j, j.Run(context.Background(), ix, spans)
}

// TestRoundTrip extracts archives of the corpus tree in both modes and
// compares the result with what GNU tar extracts.
func TestRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("owners and devices need root")
	}
	specs := []corpus.Spec{
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
				corpus.Archive(t, treeSrc, archive, spec)
				ref := filepath.Join(dir, "ref")
				corpus.Extract(t, archive, ref)
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

// TestMalicious extracts archives that try to write outside DIR: nothing
// outside changes, and the job reports what it refused.
func TestMalicious(t *testing.T) {
	for _, cold := range []bool{false, true} {
		t.Run(map[bool]string{false: "indexed", true: "cold"}[cold], func(t *testing.T) {
			work := t.TempDir()
			outside := filepath.Join(work, "outside")
			os.Mkdir(outside, 0o755)
			victim := filepath.Join(outside, "victim")
			os.WriteFile(victim, []byte("keep me"), 0o644)
			members := []tarMember{
				{name: "../escaped", body: "x"},
				{name: "a/../../escaped2", body: "x"},
				{name: "/abs/file", body: "absolute"},
				{name: "link", link: outside, typ: tar.TypeSymlink},
				{name: "link/pwned", body: "through the symlink"},
				{name: "rel", link: "../outside", typ: tar.TypeSymlink},
				{name: "rel/pwned2", body: "through the relative symlink"},
				{name: "hl", link: "../outside/victim", typ: tar.TypeLink},
				{name: "hl2", link: "link/victim", typ: tar.TypeLink},
				{name: "over", link: victim, typ: tar.TypeSymlink},
				{name: "over", body: "replaces the symlink, not its target"},
				{name: "sd", link: outside, typ: tar.TypeSymlink},
				{name: "sd", typ: tar.TypeDir},
				{name: "sd/inside", body: "in a real directory"},
				{name: ".tarmount-partial/journal", body: "0\n"},
				{name: "ok.txt", body: "fine"},
			}
			archive := filepath.Join(work, "evil.tar.gz")
			writeTar(t, archive, members, true)
			out := filepath.Join(work, "out")
			j, err := extract(t, archive, out, cold, Options{})
			if err != nil {
				t.Fatal(err)
			}
			ents, _ := os.ReadDir(outside)
			if len(ents) != 1 {
				t.Errorf("outside has %d entries, want only the victim", len(ents))
			}
			if b, _ := os.ReadFile(victim); string(b) != "keep me" {
				t.Errorf("victim changed: %q", b)
			}
			for _, p := range []string{"escaped", "escaped2"} {
				if _, err := os.Lstat(filepath.Join(work, p)); err == nil {
					t.Errorf("%s written outside DIR", p)
				}
			}
			want := map[string]string{"abs/file": "absolute", "over": "replaces the symlink, not its target",
				"sd/inside": "in a real directory", "ok.txt": "fine"}
			for p, body := range want {
				if b, err := os.ReadFile(filepath.Join(out, p)); err != nil || string(b) != body {
					t.Errorf("%s: got %q, %v; want %q", p, b, err, body)
				}
			}
			if st, err := os.Lstat(filepath.Join(out, "over")); err != nil || !st.Mode().IsRegular() {
				t.Errorf("over is not a regular file: %v", err)
			}
			for _, p := range []string{"link/pwned", "rel/pwned2", "hl", "hl2"} {
				if _, err := os.Lstat(filepath.Join(out, p)); err == nil {
					t.Errorf("%s exists, want it refused", p)
				}
			}
			if _, err := os.Lstat(filepath.Join(out, stateDirName)); err == nil {
				t.Errorf("%s left in DIR", stateDirName)
			}
			notes := strings.Join(j.Notes(), "\n")
			wants := []string{"symlinks pointing outside DIR"}
			if cold {
				wants = append(wants, "absolute member names", "member names with ..", "hard links with ..", "reserved")
			}
			for _, w := range wants {
				if !strings.Contains(notes, w) {
					t.Errorf("notes do not report %q:\n%s", w, notes)
				}
			}
		})
	}
}

type tarMember struct {
	name, body, link string
	typ              byte
	mode             int64 // 0: 0644 for files, 0755 for directories
	uid, gid         int
}

// writeTar writes members as a pax tar, gzipped when gz.
func writeTar(t *testing.T, path string, members []tarMember, gz bool) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range members {
		h := &tar.Header{Name: m.name, Linkname: m.link, Typeflag: m.typ, Mode: 0o644, Size: int64(len(m.body)),
			ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX}
		if m.typ == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o755
		}
		if m.mode != 0 {
			h.Mode = m.mode
		}
		h.Uid, h.Gid = m.uid, m.gid
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(m.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	data := buf.Bytes()
	if gz {
		var z bytes.Buffer
		w := gzip.NewWriter(&z)
		w.Write(data)
		w.Close()
		data = z.Bytes()
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestRefusesForeignDir checks that a non-empty DIR that is not ours is
// refused unless Overwrite, and that Overwrite extracts over it.
func TestRefusesForeignDir(t *testing.T) {
	work := t.TempDir()
	archive := filepath.Join(work, "a.tar")
	writeTar(t, archive, []tarMember{{name: "f", body: "new"}}, false)
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
	for p, want := range map[string]string{"f": "new", "other": "mine"} {
		if b, _ := os.ReadFile(filepath.Join(out, p)); string(b) != want {
			t.Errorf("%s: got %q, want %q", p, b, want)
		}
	}
}
