package tests

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// cachedVersion is what the test reads of a line of tarmount cache ls
// --json.
type cachedVersion struct {
	Archive  string `json:"archive"`
	Key      string `json:"key"`
	Identity *struct {
		Size int64 `json:"size"`
	} `json:"identity"`
	IndexBytes   int64     `json:"index_bytes"`
	BlockBytes   int64     `json:"block_bytes"`
	DecodedBytes int64     `json:"decoded_bytes"`
	TotalBytes   int64     `json:"total_bytes"`
	LastUsed     time.Time `json:"last_used"`
}

// TestCacheLsPruneRm runs tarmount cache ls, prune and rm on the cache
// that ls and cat of two served archives leave: a .tar.gz, and a
// stream-only .tar.zst (one frame) whose cat keeps a decoded copy. ls
// --json names each version's archive, identity, index, blocks, decoded
// copy and last use, least recently used first; prune --older-than and
// --max-size remove the versions they should, and rm URL the rest.
func TestCacheLsPruneRm(t *testing.T) {
	needTools(t, "zstd")
	work := t.TempDir()
	served := filepath.Join(work, "served")
	os.Mkdir(served, 0o755)
	// Bytes that compress little, so that the one zstd frame holds many
	// spans.
	rnd := rand.New(rand.NewPCG(1, 2))
	var b strings.Builder
	for range 1 << 15 {
		fmt.Fprintf(&b, "%016x\n", rnd.Uint64())
	}
	body := b.String()
	plain := writeTar(t, filepath.Join(work, "a.tar"), tarbuild.Member{Name: "f", Body: body})
	gz, zst := filepath.Join(served, "a.tar.gz"), filepath.Join(served, "s.tar.zst")
	if err := os.WriteFile(gz, tarbuild.Gzip(tarbuild.Tar(tarbuild.Member{Name: "f", Body: body})), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tarbuild.Compress(plain, zst, "zstd"); err != nil {
		t.Fatal(err)
	}
	base, _ := serve(t, served)
	gzURL, zstURL := base+"/a.tar.gz", base+"/s.tar.zst"
	cache := filepath.Join(work, "cache")
	run := func(args ...string) ran {
		t.Helper()
		r := runBinary(t, nil, false, append(args, "--cache-dir", cache)...)
		if r.err != nil {
			t.Fatalf("tarmount %s: %v\n%s", strings.Join(args, " "), r.err, r.stderr)
		}
		return r
	}
	list := func() []cachedVersion {
		t.Helper()
		var vs []cachedVersion
		sc := bufio.NewScanner(strings.NewReader(run("cache", "ls", "--json").stdout))
		for sc.Scan() {
			var v cachedVersion
			if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
				t.Fatalf("cache ls --json line %q: %v", sc.Text(), err)
			}
			vs = append(vs, v)
		}
		return vs
	}
	archives := func(vs []cachedVersion) string {
		var names []string
		for _, v := range vs {
			names = append(names, v.Archive)
		}
		return strings.Join(names, " ")
	}
	size := func(p string) int64 { return mustStat(t, p).Size() }

	start := time.Now().Add(-time.Second)
	if r := run("cat", zstURL, "f", "--span", "64KiB"); r.stdout != body {
		t.Fatalf("cat %s: got %d bytes, want %d", zstURL, len(r.stdout), len(body))
	}
	time.Sleep(20 * time.Millisecond)
	run("ls", gzURL)
	vs := list()
	if got, want := archives(vs), zstURL+" "+gzURL; got != want {
		t.Fatalf("cache ls --json: got %s, want %s (least recently used first)", got, want)
	}
	for i, v := range vs {
		file, decoded := gz, false
		if v.Archive == zstURL {
			file, decoded = zst, true
		}
		if v.Identity == nil || v.Identity.Size != size(file) {
			t.Errorf("%s: identity %+v, want the size %d", v.Archive, v.Identity, size(file))
		}
		if v.Key == "" || v.IndexBytes <= 0 || v.BlockBytes <= 0 {
			t.Errorf("%s: key %q, %d bytes of index, %d of blocks; want a key, an index and blocks", v.Archive, v.Key, v.IndexBytes, v.BlockBytes)
		}
		if got := v.DecodedBytes > 0; got != decoded {
			t.Errorf("%s: %d bytes of decoded copy; want one: %v", v.Archive, v.DecodedBytes, decoded)
		}
		if decoded && v.DecodedBytes < int64(len(body)) {
			t.Errorf("%s: a decoded copy of %d bytes, want the tar's %d or more", v.Archive, v.DecodedBytes, len(body))
		}
		if v.TotalBytes != v.IndexBytes+v.BlockBytes+v.DecodedBytes {
			t.Errorf("%s: total %d, want index + blocks + decoded, %d", v.Archive, v.TotalBytes, v.IndexBytes+v.BlockBytes+v.DecodedBytes)
		}
		if v.LastUsed.Before(start) || v.LastUsed.After(time.Now()) || i > 0 && v.LastUsed.Before(vs[i-1].LastUsed) {
			t.Errorf("%s: last used %v, want since the test started (%v), in order", v.Archive, v.LastUsed, start)
		}
	}

	// The table says the same, a line a version under a header.
	table := strings.Split(strings.TrimRight(run("cache", "ls").stdout, "\n"), "\n")
	if len(table) != 3 || !strings.HasPrefix(table[0], "LAST USED") || !strings.Contains(table[1], zstURL) || !strings.Contains(table[2], gzURL) {
		t.Errorf("cache ls: got\n%s\nwant a header, then %s, then %s", strings.Join(table, "\n"), zstURL, gzURL)
	}

	// --older-than: what was last used two hours ago goes, what was used
	// since stays.
	old := time.Now().Add(-2 * time.Hour)
	filepath.WalkDir(cache, func(p string, _ fs.DirEntry, err error) error {
		if err == nil {
			os.Chtimes(p, old, old)
		}
		return err
	})
	run("ls", gzURL)
	r := run("cache", "prune", "--older-than", "1h")
	if got := archives(list()); got != gzURL || !strings.Contains(r.stderr, "removed "+zstURL) || !strings.Contains(r.stderr, "removed 1 versions") {
		t.Errorf("prune --older-than 1h: left %q, said %q; want %s removed", got, r.stderr, zstURL)
	}

	// --max-size: the least recently used go until the rest fits.
	run("cat", zstURL, "f", "--span", "64KiB")
	vs = list()
	if got, want := archives(vs), gzURL+" "+zstURL; got != want {
		t.Fatalf("cache ls --json: got %s, want %s", got, want)
	}
	r = run("cache", "prune", "--max-size", fmt.Sprint(vs[1].TotalBytes))
	if got := archives(list()); got != zstURL || !strings.Contains(r.stderr, "removed "+gzURL) {
		t.Errorf("prune --max-size %d: left %q, said %q; want %s removed", vs[1].TotalBytes, got, r.stderr, gzURL)
	}

	// rm URL: what is left of the archive goes, and the cache holds no
	// file of it.
	if r := run("cache", "rm", zstURL); !strings.Contains(r.stderr, "removed "+zstURL) {
		t.Errorf("cache rm %s said %q", zstURL, r.stderr)
	}
	if vs := list(); len(vs) != 0 {
		t.Errorf("after rm: cache ls --json lists %s", archives(vs))
	}
	filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			t.Errorf("after rm of every archive, the cache still holds %s", p)
		}
		return nil
	})
	r = runBinary(t, nil, false, "cache", "rm", zstURL, "--cache-dir", cache)
	if r.err == nil || !strings.Contains(r.stderr, "nothing cached") {
		t.Errorf("rm of an archive not cached: %v, %q; want an error", r.err, r.stderr)
	}
}
