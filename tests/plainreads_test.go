package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestPlainTarReads checks what reads of a plain tar fetch through a
// mount with a saved index: a small file costs one request for about its
// bytes (not a 4 MiB block), a read in the middle of a large file a
// bounded range, and a large file read whole its bytes about once.
func TestPlainTarReads(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "none"}, "a.tar")
	opts := libOptions(filepath.Join(f.work, "cache"))
	opts.CacheDisk = 0
	libIndex(t, f.url, opts)
	m := libMount(t, f.url, opts)
	f.server.ResetStats()

	readme, err := os.ReadFile(filepath.Join(m.dir, corpus.PathReadme))
	if err != nil {
		t.Fatal(err)
	}
	st := f.server.Stats()
	if st.Requests != 1 || st.Bytes != int64(len(readme)) {
		t.Errorf("reading %s (%d bytes) made %d requests for %d bytes, want 1 for %d",
			corpus.PathReadme, len(readme), st.Requests, st.Bytes, len(readme))
	}

	want, err := os.ReadFile(filepath.Join(f.src, corpus.PathBig))
	if err != nil {
		t.Fatal(err)
	}
	big, err := os.Open(filepath.Join(m.dir, corpus.PathBig))
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	f.server.ResetStats()
	const at = 2<<20 + 1000
	p := make([]byte, 4096)
	if _, err := big.ReadAt(p, at); err != nil || !bytes.Equal(p, want[at:at+len(p)]) {
		t.Fatalf("read %s at %d: %v, or bytes that differ", corpus.PathBig, at, err)
	}
	if st := f.server.Stats(); st.Requests != 1 || st.Bytes > 512<<10 {
		t.Errorf("a read of 4 KiB in the middle of %s made %d requests for %d bytes, want 1 for at most 512 KiB",
			corpus.PathBig, st.Requests, st.Bytes)
	}
	f.server.ResetStats()
	got, err := os.ReadFile(filepath.Join(m.dir, corpus.PathBig))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read %s whole: %v, or bytes that differ", corpus.PathBig, err)
	}
	// Its blocks (4 MiB), one more for the alignment, and its first piece.
	if st, limit := f.server.Stats(), int64(corpus.BigSize+2*4<<20+512<<10); st.Bytes > limit {
		t.Errorf("reading %s (%d bytes) whole fetched %d bytes in %d requests, want at most %d",
			corpus.PathBig, corpus.BigSize, st.Bytes, st.Requests, limit)
	}
}
