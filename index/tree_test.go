package index

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/tarmount/tarmount/index/tarscan"
)

// TestGNUSuffix: the names GNU tar 1.34's safer_name_suffix strips, and
// what it leaves.
func TestGNUSuffix(t *testing.T) {
	for _, tc := range []struct{ name, rest, prefix string }{
		{"ok.txt", "ok.txt", ""},
		{"./a/b", "./a/b", ""},
		{"/abs", "abs", "/"},
		{"//twice/x", "twice/x", "//"},
		{"../up", "up", "../"},
		{"a/../b", "b", "a/../"},
		{"a/b/../../c/d", "c/d", "a/b/../../"},
		{"x/..", "", "x/.."},
		{"..", "", ".."},
		{"..a/b", "..a/b", ""},
		{"a/..b/c", "a/..b/c", ""},
		{"/../x", "x", "/../"},
		{"a/..//b", "b", "a/..//"},
	} {
		rest, prefix := gnuSuffix(tc.name)
		if rest != tc.rest || prefix != tc.prefix {
			t.Errorf("gnuSuffix(%q): got %q, %q, want %q, %q", tc.name, rest, prefix, tc.rest, tc.prefix)
		}
	}
}

// TestNotes: hard link targets lose what leads to their last "..", as
// GNU tar extracts them; member names with ".." are left out; the index
// keeps one note per kind, saved with it, and LogNotes says each once.
func TestNotes(t *testing.T) {
	var logged bytes.Buffer
	b := newBuilder(slog.New(slog.NewTextHandler(&logged, nil)))
	for _, h := range []*tarscan.Header{
		{Name: "ok.txt", Typeflag: tarscan.TypeReg, Mode: 0o644},
		{Name: "/abs.txt", Typeflag: tarscan.TypeReg, Mode: 0o644},
		{Name: "../up.txt", Typeflag: tarscan.TypeReg, Mode: 0o644},
		{Name: "a/../b.txt", Typeflag: tarscan.TypeReg, Mode: 0o644},
		{Name: "hl1", Typeflag: tarscan.TypeLink, Linkname: "a/../../ok.txt"},
		{Name: "hl2", Typeflag: tarscan.TypeLink, Linkname: "../ok.txt"},
		{Name: "hl3", Typeflag: tarscan.TypeLink, Linkname: "/abs.txt"},
		{Name: "hl4", Typeflag: tarscan.TypeLink, Linkname: "../missing"},
	} {
		if err := b.add(h); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.finish(); err != nil {
		t.Fatal(err)
	}
	b.report(true)
	ix := b.ix
	ok, _ := ix.LookupPath("ok.txt")
	abs, _ := ix.LookupPath("abs.txt")
	for p, want := range map[string]EntryID{"hl1": ok, "hl2": ok, "hl3": abs} {
		if got, found := ix.LookupPath(p); !found || got != want {
			t.Errorf("%s: got entry %d (found %v), want %d", p, got, found, want)
		}
	}
	for _, p := range []string{"up.txt", "b.txt", "hl4", "missing"} {
		if _, found := ix.LookupPath(p); found {
			t.Errorf("%s: in the tree, want it left out", p)
		}
	}
	want := []Note{
		{noteRenamed, "removing leading `../' from hard link targets", 2, "hl2"},
		{noteRenamed, "removing leading `/' from hard link targets", 1, "hl3"},
		{noteRenamed, "removing leading `/' from member names", 1, "/abs.txt"},
		{noteRenamed, "removing leading `a/../../' from hard link targets", 1, "hl1"},
		{noteSkipped, "hard link to a missing member", 1, "hl4"},
		{noteSkipped, "name contains ..", 2, "../up.txt"},
	}
	if !slices.Equal(ix.Notes, want) {
		t.Errorf("notes:\n got %v\nwant %v", ix.Notes, want)
	}
	if got := strings.Count(logged.String(), "level=WARN"); got != len(want) {
		t.Errorf("logged %d warnings, want %d:\n%s", got, len(want), logged.String())
	}
	ix.Source.Size, ix.Codec, ix.TarSize = 1<<20, CodecNone, 1<<20
	data, err := ix.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Notes, want) {
		t.Errorf("notes after a save:\n got %v\nwant %v", back.Notes, want)
	}
}
