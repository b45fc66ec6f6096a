package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tarmount/tarmount/archive"
	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// TestExtractPackedUsesEmbeddedIndex extracts an archive packed (as
// tarmount pack does) over HTTP with an empty cache: the index inside the
// archive is found by the one index lookup that every command shares, so
// the extraction reads spans in parallel instead of running a pass, and
// the tree is what GNU tar extracts from the original archive. Before the
// lookup was shared, extract never looked for an embedded index and ran
// one pass here.
func TestExtractPackedUsesEmbeddedIndex(t *testing.T) {
	work := t.TempDir()
	src, ref, served := filepath.Join(work, "src"), filepath.Join(work, "ref"), filepath.Join(work, "served")
	if err := os.Mkdir(served, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}
	opts := corpus.TreeOptionsFor(spec)
	opts.Many = 300
	corpus.MakeTree(t, src, opts)
	orig := filepath.Join(work, "orig"+spec.Ext())
	tarbuild.Archive(t, src, orig, spec)
	tarbuild.Extract(t, orig, ref)
	packed := filepath.Join(served, "packed.tar.zst")
	// Spans of 256 KiB: the packed archive has many frames.
	popts := libOptions(filepath.Join(work, "pack-cache"))
	popts.Span = 262144
	if _, err := archive.Pack(context.Background(), orig, packed, 3, popts); err != nil {
		t.Fatalf("pack: %v", err)
	}
	base, _ := serve(t, served)
	for _, tc := range []struct{ name, cache string }{
		{"empty cache", filepath.Join(work, "cache")},
		{"index saved by the first", filepath.Join(work, "cache")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(work, "out-"+strings.ReplaceAll(tc.name, " ", "-"))
			s := libExtract(t, base+"/packed.tar.zst", dir, libOptions(tc.cache), archive.MaterializeOptions{})
			if s == nil || s.OnePass {
				t.Errorf("got summary %+v, want the embedded index used: spans read in parallel", s)
			}
			treecmp.Compare(t, ref, dir, treecmp.Options{MaxErrors: 20})
		})
	}
	// What a user sees: tarmount extract's summary names the mode.
	t.Run("the command", func(t *testing.T) {
		dir := filepath.Join(work, "out-cli")
		out := runExtract(t, base+"/packed.tar.zst", dir, "--cache-dir", filepath.Join(work, "cache-cli"))
		if !strings.Contains(out, "(parallel spans)") || !strings.Contains(out, "index embedded in the archive") {
			t.Errorf("got output without the embedded index and \"(parallel spans)\":\n%s", out)
		}
		treecmp.Compare(t, ref, dir, treecmp.Options{MaxErrors: 20})
	})
}

// TestOutputFileModes: index -o and pack -o write files of mode 0644 less
// the umask (022 here: 0644), which a web server or another user can
// read; they were 0600.
func TestOutputFileModes(t *testing.T) {
	work := t.TempDir()
	archive := filepath.Join(work, "a.tar")
	if err := os.WriteFile(archive, tarbuild.Tar(tarbuild.Member{Name: "f", Body: "x"}), 0o644); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0o022)
	defer syscall.Umask(old)
	idx, packed := filepath.Join(work, "a.idx"), filepath.Join(work, "p.tar.zst")
	cache := filepath.Join(work, "cache")
	for _, args := range [][]string{{"index", archive, "-o", idx}, {"pack", archive, "-o", packed}} {
		if r := runBinary(t, nil, false, append(args, "--cache-dir", cache)...); r.err != nil {
			t.Fatalf("%s: %v\n%s", args[0], r.err, r.stderr)
		}
	}
	for _, p := range []string{idx, packed} {
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o644 {
			t.Errorf("%s: got %v, %v; want mode 0644", filepath.Base(p), st.Mode(), err)
		}
	}
}
