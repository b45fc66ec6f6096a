package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// TestExtractPackedUsesEmbeddedIndex extracts an archive made by
// `tarmount pack` over HTTP with an empty cache: the index inside the
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
	if out, err := exec.Command(binary, "pack", orig, "-o", packed, "--span", "262144",
		"--cache-dir", filepath.Join(work, "pack-cache")).CombinedOutput(); err != nil {
		t.Fatalf("tarmount pack: %v\n%s", err, out)
	}
	base, _ := serve(t, served)
	for _, tc := range []struct{ name, cache string }{
		{"empty cache", filepath.Join(work, "cache")},
		{"index saved by the first", filepath.Join(work, "cache")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(work, "out-"+strings.ReplaceAll(tc.name, " ", "-"))
			out := runExtract(t, base+"/packed.tar.zst", dir, "--cache-dir", tc.cache)
			if !strings.Contains(out, "(parallel spans)") || strings.Contains(out, "(one pass)") {
				t.Errorf("got a summary without \"(parallel spans)\", want the embedded index used:\n%s", out)
			}
			treecmp.Compare(t, ref, dir, treecmp.Options{MaxErrors: 20})
		})
	}
}
