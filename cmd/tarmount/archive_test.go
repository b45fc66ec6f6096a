package main

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
	"time"
)

// TestSavedIndexVersions opens one path while it holds two versions of
// an archive in turn. The newest saved index, read while the source is
// opened, is used only when it was built for the version there; else the
// saved index of that version is, or a new one is built. The garbage
// collector setting that loading changes is restored every time.
func TestSavedIndexVersions(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.tar")
	cache := filepath.Join(dir, "cache")
	v1, v2 := tarOf(t, "one", "two"), tarOf(t, "three", "four", "five")
	t1, t2 := time.Unix(1_700_000_000, 0), time.Unix(1_700_000_500, 0)
	put := func(data []byte, at time.Time) {
		t.Helper()
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
	log := slog.New(slog.DiscardHandler)
	for i, step := range []struct {
		data    []byte
		at      time.Time
		from    string
		entries int // members and the root
	}{
		{v1, t1, indexFromBuilt, 3},
		{v2, t2, indexFromBuilt, 4}, // the newest saved index is v1's
		{v1, t1, indexFromCache, 3}, // the newest is v2's
		{v1, t1, indexFromCache, 3}, // the newest is v2's, still
		{v2, t2, indexFromCache, 4},
	} {
		put(step.data, step.at)
		var c config
		if _, err := parse(c.flags("tarmount index", io.Discard), []string{"--cache-dir", cache}); err != nil {
			t.Fatal(err)
		}
		a, err := openArchive(context.Background(), path, &c, log, false)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if a.indexFrom != step.from || a.ix.Len() != step.entries {
			t.Errorf("step %d: got an index from %s with %d entries, want one from %s with %d",
				i, a.indexFrom, a.ix.Len(), step.from, step.entries)
		}
		a.Close(log)
		if gc := debug.SetGCPercent(100); gc != 100 {
			t.Errorf("step %d: the garbage collector is left at %d%%, want 100%%", i, gc)
		}
		// The files' times tell which index is the newest.
		time.Sleep(20 * time.Millisecond)
	}
	if got := newestSaved(cache, "no such archive"); got != "" {
		t.Errorf("newestSaved of an archive never indexed: got %q, want none", got)
	}
}

// tarOf is a tar of empty regular files with these names.
func tarOf(t *testing.T, names ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	w := tar.NewWriter(&b)
	for _, n := range names {
		if err := w.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}
