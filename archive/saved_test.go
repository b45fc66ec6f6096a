package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/fetch"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestSavedIndexVersions opens one archive, by path and by file URL,
// while it holds two versions in turn. The newest saved index, read while
// the source is opened, is the one used when it was built for the version
// there (a hit); else the saved index of that version is, or a new one is
// built. The garbage collector setting that loading changes is restored
// every time.
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
	for i, step := range []struct {
		url     string
		data    []byte
		at      time.Time
		from    string
		entries int  // members and the root
		hit     bool // the newest saved index is the one used
	}{
		{path, v1, t1, FromBuilt, 3, false},
		{path, v2, t2, FromBuilt, 4, false}, // the newest is v1's
		{path, v1, t1, FromCache, 3, false}, // the newest is v2's
		{path, v1, t1, FromCache, 3, false}, // still v2's: a load saves nothing
		{path, v2, t2, FromCache, 4, true},
		{"file://" + path, v2, t2, FromCache, 4, true}, // one name for both forms
	} {
		put(step.data, step.at)
		name, err := fetch.Name(step.url)
		if err != nil {
			t.Fatal(err)
		}
		newest := NewestSaved(cache, name)
		var logged bytes.Buffer
		log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
		opts := DefaultOptions()
		opts.CacheDir, opts.Logger = cache, log
		a, err := OpenIndexed(context.Background(), step.url, opts)
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if a.IndexFrom() != step.from || a.Index().Len() != step.entries {
			t.Errorf("step %d: got an index from %s with %d entries, want one from %s with %d",
				i, a.IndexFrom(), a.Index().Len(), step.from, step.entries)
		}
		used := a.SavedIndex()
		if want := SavedPath(cache, a.String(), a.Identity()); used != want {
			t.Errorf("step %d: saved at %q, want %q", i, used, want)
		}
		if hit := newest == used; hit != step.hit {
			t.Errorf("step %d: newest saved index %q, the one used %q: hit %v, want %v", i, newest, used, hit, step.hit)
		}
		if hit := strings.Contains(logged.String(), "preloaded=true"); hit != step.hit {
			t.Errorf("step %d: the index used came from the preload: %v, want %v; log:\n%s", i, hit, step.hit, logged.String())
		}
		a.Close()
		if gc := debug.SetGCPercent(100); gc != 100 {
			t.Errorf("step %d: the garbage collector is left at %d%%, want 100%%", i, gc)
		}
		// The files' times tell which index is the newest.
		time.Sleep(20 * time.Millisecond)
	}
	if got := NewestSaved(cache, "no such archive"); got != "" {
		t.Errorf("NewestSaved of an archive never indexed: got %q, want none", got)
	}
}

// tarOf is a tar of empty regular files with these names.
func tarOf(t *testing.T, names ...string) []byte {
	t.Helper()
	entries := make([]tarbuild.Entry, len(names))
	for i, n := range names {
		entries[i] = tarbuild.Entry{Name: n}
	}
	return tarbuild.Go(t, tar.FormatUnknown, entries...)
}

// TestSaveIndex writes the index of an archive that was built, then of one
// loaded from the cache: either way the file is the index encoded.
func TestSaveIndex(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.tar")
	if err := os.WriteFile(path, tarOf(t, "one", "two"), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.CacheDir = filepath.Join(dir, "cache")
	for i, from := range []string{FromBuilt, FromCache} {
		a, err := OpenIndexed(context.Background(), path, opts)
		if err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(dir, "out.idx")
		if err := a.SaveIndex(out); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		want, err := a.Index().Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if a.IndexFrom() != from || !bytes.Equal(got, want) {
			t.Errorf("open %d: index from %s, written %d bytes equal to its encoding: %v; want from %s, equal",
				i, a.IndexFrom(), len(got), bytes.Equal(got, want), from)
		}
		a.Close()
	}
}
