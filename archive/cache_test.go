package archive

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestCacheVersions: the cache lists each version of each archive opened
// (name, identity, the bytes of its index and blocks); two names of the
// same bytes share their blocks, which stay until the last one goes;
// prune removes by age, then least recently used beyond a size; rm removes
// every version of one archive.
func TestCacheVersions(t *testing.T) {
	ctx := context.Background()
	served := t.TempDir()
	tree := testTree(40)
	data := tarGz(t, tree)
	for _, n := range []string{"a.tar.gz", "b.tar.gz"} {
		if err := os.WriteFile(filepath.Join(served, n), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	srv := newFlakyServer(t, served)
	opts := testOptions(t, nil)
	open := func(url string) {
		t.Helper()
		a, err := OpenIndexed(ctx, url, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if err := a.Cat(ctx, discard{}, "d0/f000.txt"); err != nil {
			t.Fatal(err)
		}
	}
	a, b, local := srv.url+"/a.tar.gz", srv.url+"/b.tar.gz", filepath.Join(served, "a.tar.gz")
	open(a)
	open(local)
	vs, err := CachedVersions(opts.CacheDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(vs) != 2 {
		t.Fatalf("got %d versions, want 2 (the URL and the path): %+v", len(vs), vs)
	}
	names := []string{vs[0].Name, vs[1].Name}
	slices.Sort(names)
	if !slices.Equal(names, []string{local, a}) && !slices.Equal(names, []string{a, local}) {
		t.Errorf("names: got %q, want %q and %q", names, a, local)
	}
	for _, v := range vs {
		if v.Identity == nil || v.Identity.Size != int64(len(data)) || v.IndexBytes == 0 || v.TotalBytes < v.IndexBytes {
			t.Errorf("%s: got identity %+v, index %d bytes, total %d; want the archive's size and an index", v.Name, v.Identity, v.IndexBytes, v.TotalBytes)
		}
		if remote := v.Name == a; remote != (v.BlockBytes > 0) {
			t.Errorf("%s: %d bytes of blocks; want some for the URL only (local archives are never cached)", v.Name, v.BlockBytes)
		}
	}

	// b is the same bytes at another URL: an identity of its own (its
	// ETag and time may differ) or the same key, blocks shared.
	open(b)
	// Age: a was used long ago, b and the path now.
	old := time.Now().Add(-48 * time.Hour)
	vs, _ = CachedVersions(opts.CacheDir)
	for _, v := range vs {
		if v.Name == a {
			for _, p := range v.paths {
				filepath.Walk(p, func(q string, _ os.FileInfo, _ error) error { return os.Chtimes(q, old, old) })
			}
		}
	}
	removed, err := PruneCache(opts.CacheDir, 24*time.Hour, 0, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0].Name != a {
		t.Fatalf("prune --older-than 24h: removed %+v, want %s only", removed, a)
	}
	vs, _ = CachedVersions(opts.CacheDir)
	for _, v := range vs {
		if v.Name == a {
			t.Errorf("%s still listed after the prune", a)
		}
		if v.Name == b && v.BlockBytes == 0 {
			t.Errorf("%s lost its blocks with %s's version", b, a)
		}
	}
	// Size: least recently used first, until the rest fits.
	var total int64
	for _, v := range vs {
		total += v.TotalBytes
	}
	removed, err = PruneCache(opts.CacheDir, 0, total-1, time.Now())
	if err != nil || len(removed) != 1 {
		t.Fatalf("prune --max-size %d: removed %d versions (%v), want 1", total-1, len(removed), err)
	}
	if _, err := RemoveCached(opts.CacheDir, removed[0].Name); err == nil {
		t.Errorf("rm of %s, removed already: got no error, want ErrNotCached", removed[0].Name)
	}
	vs, _ = CachedVersions(opts.CacheDir)
	if len(vs) != 1 {
		t.Fatalf("got %d versions, want 1", len(vs))
	}
	// A decoded copy kept by a pass that stopped or crashed counts with
	// its version, and goes with it; so does the pass lock (lockPass).
	var prefix string
	for _, p := range vs[0].paths {
		if strings.HasSuffix(p, ".idx") {
			prefix = strings.TrimSuffix(filepath.Base(p), ".idx")
		}
	}
	if _, err := os.Stat(filepath.Join(opts.CacheDir, "indexes", prefix+".lock")); err != nil {
		t.Errorf("the pass left no lock file: %v", err)
	}
	kept := filepath.Join(opts.CacheDir, "decoded", prefix+".kept.tar")
	os.MkdirAll(filepath.Dir(kept), 0o755)
	if err := os.WriteFile(kept, make([]byte, 1000), 0o600); err != nil {
		t.Fatal(err)
	}
	vs, _ = CachedVersions(opts.CacheDir)
	if len(vs) != 1 || vs[0].DecodedBytes != 1000 {
		t.Fatalf("with a kept copy: got %+v, want 1 version with 1000 decoded bytes", vs)
	}
	if _, err := RemoveCached(opts.CacheDir, vs[0].Name); err != nil {
		t.Fatal(err)
	}
	if vs, _ := CachedVersions(opts.CacheDir); len(vs) != 0 {
		t.Errorf("after rm: got %+v, want an empty cache", vs)
	}
	for _, dir := range []string{"indexes", "decoded"} {
		if ents, _ := os.ReadDir(filepath.Join(opts.CacheDir, dir)); len(ents) != 0 {
			t.Errorf("after rm, %s holds %d files, want none", dir, len(ents))
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
