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

// TestPublishedIndexCommand publishes the index of a served archive with
// tarmount index PATH --publish, beside the file the server serves; a
// mount of the archive over HTTP with an empty cache then uses it, runs
// no pass, and says so in its log and status; --no-sidecar mounts without
// it; an http(s) archive cannot be published to, and the error says what
// to do instead.
func TestPublishedIndexCommand(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	ref := f.extracted(t)
	if out, err := exec.Command(binary, "index", f.archive, "--publish", "--cache-dir", filepath.Join(f.work, "c0")).CombinedOutput(); err != nil {
		t.Fatalf("tarmount index --publish: %v\n%s", err, out)
	}
	st, err := os.Stat(f.archive + ".tarmount-index")
	if err != nil {
		t.Fatalf("no published index beside the archive: %v", err)
	}
	if st.Mode().Perm() != 0o644 {
		t.Errorf("published index mode %v, want 0644 (umask 022)", st.Mode().Perm())
	}

	m := mount(t, f.url, "--cache-dir", filepath.Join(f.work, "c1"))
	if log := m.stderr.String(); strings.Contains(log, "msg=indexing") || !strings.Contains(log, "index published beside the archive") {
		t.Errorf("the mount did not use the published index:\n%s", log)
	}
	if got := status(t, m.dir).Index.Source; got != "sidecar" {
		t.Errorf("status index source: got %q, want %q", got, "sidecar")
	}
	treecmp.Compare(t, ref, m.dir, treecmp.Options{MaxErrors: 20})
	m.stop(t)

	// Ready after its pass: a SIGTERM during it would interrupt it.
	m = mount(t, f.url, "--cache-dir", filepath.Join(f.work, "c2"), "--no-sidecar", "--wait-index")
	if log := m.stderr.String(); !strings.Contains(log, "msg=indexing") || strings.Contains(log, "published beside") {
		t.Errorf("with --no-sidecar the mount did not index the archive itself:\n%s", log)
	}
	m.stop(t)

	out, err := exec.Command(binary, "index", f.url, "--publish", "--cache-dir", filepath.Join(f.work, "c3")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "cannot write there") {
		t.Errorf("index --publish of an http archive: got err %v, output:\n%s\nwant a refusal that says why", err, out)
	}
}
