package archive

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
)

// TestPassResumes: a mount's first pass that is stopped (Close, as an
// unmount or a signal does) keeps a partial index; the next Open resumes
// the pass where it stood, fetches only the rest of the archive, and ends
// with the index a whole pass makes. Status says where it resumed.
func TestPassResumes(t *testing.T) {
	ctx := context.Background()
	served := t.TempDir()
	obj := tarGz(t, testTree(120))
	if err := os.WriteFile(filepath.Join(served, "a.tar.gz"), obj, 0o644); err != nil {
		t.Fatal(err)
	}
	url := newSlowServer(t, served, 256<<10) + "/a.tar.gz"
	opts := testOptions(t, nil)
	opts.CacheDisk = 0 // every byte comes from the server
	// Blocks smaller than the archive, so that the pass resumes inside
	// one: only its bytes from there on are fetched.
	opts.BlockSize = 128 << 10
	size := int64(len(obj))

	a, err := Open(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(ctx, false); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for passRead(a) < size/2 {
		if time.Now().After(deadline) {
			t.Fatal("the pass did not reach half the archive in a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.Close()
	if a.PassErr() == nil && a.Index() != nil {
		t.Fatal("the pass ended before it was stopped: make the archive bigger or the server slower")
	}
	matches, _ := filepath.Glob(filepath.Join(opts.CacheDir, "indexes", "*.partial"))
	if len(matches) != 1 {
		t.Fatalf("got partial indexes %v after the pass was stopped, want one", matches)
	}

	b, err := Open(ctx, url, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Start(ctx, false); err != nil {
		t.Fatal(err)
	}
	<-b.PassDone()
	if err := b.PassErr(); err != nil {
		t.Fatal(err)
	}
	ps := b.Status().Index.Pass
	if ps.ResumedFrom < size/2 || ps.Percent != 100 {
		t.Errorf("got a pass that resumed at %d of %d and ended at %.0f%%, want it resumed past half and at 100%%", ps.ResumedFrom, size, ps.Percent)
	}
	// The open's identity probe brings the first bytes too.
	fetched, _ := b.Fetched()
	if limit := size - ps.ResumedFrom + fetch.ProbeBytes; fetched > limit {
		t.Errorf("the resumed pass fetched %d bytes, want at most the %d after where it resumed and the open's %d", fetched, size-ps.ResumedFrom, fetch.ProbeBytes)
	}
	if ps.ResumedFrom%opts.BlockSize == 0 {
		t.Errorf("the pass resumed at %d, at the start of a block: the test shows nothing", ps.ResumedFrom)
	}
	whole, err := index.Build(ctx, bytes.NewReader(obj), b.Identity(), index.BuildOptions{Span: opts.Span})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := b.Index().Marshal()
	want, _ := whole.Marshal()
	if !bytes.Equal(got, want) {
		t.Error("the resumed pass gave another index than a whole pass")
	}
	if matches, _ := filepath.Glob(filepath.Join(opts.CacheDir, "indexes", "*.partial")); len(matches) != 0 {
		t.Errorf("partial indexes %v left after the pass ended", matches)
	}
}

// passRead is how much of the archive a's first pass has read (0 before
// it started).
func passRead(a *Archive) int64 {
	if p := a.Status().Index.Pass; p != nil {
		return p.BytesRead
	}
	return 0
}
