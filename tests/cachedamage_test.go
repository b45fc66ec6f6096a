package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// savedIndex returns the path of the one index saved under cache.
func savedIndex(t *testing.T, cache string) string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(cache, "indexes", "*.idx"))
	if err != nil || len(m) != 1 {
		t.Fatalf("saved indexes under %s: got %q, %v; want one", cache, m, err)
	}
	return m[0]
}

// TestDamagedSavedIndex damages the saved index of an archive in every way
// a crash, a bad disk or a confused copy can: the next mount does not trust
// it, indexes the archive again, serves the right bytes and saves a good
// index, which the mount after loads. An index given to tarmount with
// --index in the same state is refused with a clear one-line error.
func TestDamagedSavedIndex(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{NoSparse: true, NoBigFiles: true}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	cache := filepath.Join(f.work, "cache")
	opts := libOptions(cache)
	opts.Span = 65536
	libIndex(t, f.url, opts) // builds and saves the index
	path := savedIndex(t, cache)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The index of another archive (same tree, archived by Go: another
	// size and ETag).
	tarbuild.Archive(t, f.src, filepath.Join(filepath.Dir(f.archive), "b.tar.gz"), tarbuild.Spec{Tool: "go", Format: "pax", Codec: "gzip"})
	libIndex(t, f.base+"/b.tar.gz", libOptions(filepath.Join(f.work, "cache-b")))
	otherIdx, err := os.ReadFile(savedIndex(t, filepath.Join(f.work, "cache-b")))
	if err != nil {
		t.Fatal(err)
	}
	flip := func(at int) []byte {
		b := slices.Clone(good)
		b[at] ^= 0x10
		return b
	}
	cases := []struct {
		name    string
		data    []byte
		foreign bool // a valid index of another archive
	}{
		{"empty", nil, false},
		{"truncated to its header", good[:12], false},
		{"truncated by half", good[:len(good)/2], false},
		{"last byte missing", good[:len(good)-1], false},
		{"flipped byte in the payload", flip(len(good) / 2), false},
		{"flipped byte in the header", flip(9), false},
		{"flipped byte in the checksum", flip(len(good) - 1), false},
		{"garbage", []byte(strings.Repeat("not an index\n", 100)), false},
		{"index of another archive", otherIdx, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// A cache directory of its own, with the damaged index
			// under the name the mount looks for.
			cache := filepath.Join(t.TempDir(), "cache")
			damaged := filepath.Join(cache, "indexes", filepath.Base(path))
			if err := os.MkdirAll(filepath.Dir(damaged), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(damaged, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			opts := libOptions(cache)
			opts.Span = 65536
			m := libMount(t, f.url, opts)
			log := m.log.String()
			if !strings.Contains(log, "msg=indexing") {
				t.Errorf("the mount used the damaged index instead of indexing again:\n%s", log)
			}
			if !tc.foreign && !strings.Contains(log, "saved index unusable") {
				t.Errorf("no warning about the damaged index:\n%s", log)
			}
			readTree(t, m.dir, f.src)
			m.stop(t)
			m = libMount(t, f.url, opts)
			if strings.Contains(m.log.String(), "msg=indexing") {
				t.Errorf("the mount after did not load the index saved again:\n%s", m.log)
			}
			m.stop(t)

			// The same bytes given to tarmount with --index are refused
			// with one line.
			idx := filepath.Join(t.TempDir(), "x.idx")
			if err := os.WriteFile(idx, tc.data, 0o644); err != nil {
				t.Fatal(err)
			}
			mnt := t.TempDir()
			out, err := runCLI(t, f.url, mnt, "--index", idx, "--mount-name", testMountName, "--cache-dir", filepath.Join(t.TempDir(), "c"))
			want := "invalid index file"
			if tc.foreign {
				want = "another version"
			}
			if err == nil || !strings.HasPrefix(lastLine(out), "tarmount: ") || !strings.Contains(lastLine(out), want) {
				t.Errorf("mount with a damaged --index: got %v, last line %q; want a tarmount: error about the %s", err, lastLine(out), want)
			}
			if isMounted(mnt) {
				t.Errorf("mounted with a damaged --index")
			}
		})
	}
}

func lastLine(out string) string {
	out = strings.TrimSpace(out)
	if i := strings.LastIndex(out, "\n"); i >= 0 {
		return out[i+1:]
	}
	return out
}

// TestDamagedDiskCache damages the entries of the disk block cache in
// every way a crash or a bad disk can, and leaves stray files among them:
// a mount over it serves the right bytes, fetching again what was
// damaged, and rewrites the entries, so that the mount after reads
// everything from disk. A cache directory that is not a directory at all
// is passed over with a warning. (fetch.TestBlocksDiskDamage and
// fetch.TestDiskCacheCrash check each kind of damage on the cache itself.)
func TestDamagedDiskCache(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{NoSparse: true}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	cache := filepath.Join(f.work, "cache")
	// Small blocks: the index pass leaves many entries.
	opts := libOptions(cache)
	opts.Span, opts.BlockSize = 262144, 65536
	pass := func(name string) (sent int64) {
		t.Helper()
		f.server.ResetStats()
		m := libMount(t, f.url, opts)
		readTree(t, m.dir, f.src)
		m.stop(t)
		st := f.server.Stats()
		t.Logf("%s: server sent %d bytes in %d requests", name, st.Bytes, st.Requests)
		return st.Bytes
	}
	pass("first mount")
	if sent := pass("remount"); sent > 1 {
		t.Fatalf("remount: server sent %d bytes, want at most 1 (the identity probe): the test needs a full disk cache", sent)
	}

	var entries []string
	filepath.Walk(filepath.Join(cache, "blocks"), func(p string, info os.FileInfo, err error) error {
		if err == nil && info.Mode().IsRegular() && !strings.HasPrefix(info.Name(), ".") {
			entries = append(entries, p)
		}
		return nil
	})
	if len(entries) < 8 {
		t.Fatalf("%d entries in the disk cache, want at least 8 to damage", len(entries))
	}
	const header = 64 // see fetch.DiskCache
	damage := []struct {
		what string
		f    func(b []byte) []byte
	}{
		{"empty", func(b []byte) []byte { return nil }},
		{"header only", func(b []byte) []byte { return b[:header] }},
		{"short", func(b []byte) []byte { return b[:header+(len(b)-header)/2] }},
		{"zeros", func(b []byte) []byte { return make([]byte, len(b)) }},
		{"zeroed data", func(b []byte) []byte { clear(b[header:]); return b }},
		{"offset in the header", func(b []byte) []byte { b[47] ^= 1; return b }},
		{"checksum", func(b []byte) []byte { b[63] ^= 1; return b }},
		{"data byte", func(b []byte) []byte { b[header+(len(b)-header)/3] ^= 0x20; return b }},
		{"extra byte", func(b []byte) []byte { return append(b, 0) }},
	}
	for i, p := range entries {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, damage[i%len(damage)].f(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Dir(entries[0])
	for name, data := range map[string]string{
		"not-an-entry": "stray", "1-2-3": "stray", "0-999999999999": "stray", ".tmp-crashed": "partial",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "0-4096.d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "blocks", "stray-file"), []byte("stray"), 0o600); err != nil {
		t.Fatal(err)
	}
	if sent := pass("mount over the damaged cache"); sent <= 1 {
		t.Errorf("mount over the damaged cache: server sent %d bytes; damaged entries were not fetched again", sent)
	}
	if sent := pass("mount after"); sent > 1 {
		t.Errorf("mount after: server sent %d bytes, want at most 1: damaged entries were not rewritten", sent)
	}

	// A blocks directory that is a file: the mount goes on without a disk
	// cache.
	if err := os.RemoveAll(filepath.Join(cache, "blocks")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(cache, "blocks"), []byte("not a directory"), 0o600); err != nil {
		t.Fatal(err)
	}
	m := libMount(t, f.url, opts)
	if !strings.Contains(m.log.String(), "disk cache unusable") {
		t.Errorf("no warning about the unusable disk cache:\n%s", m.log)
	}
	readTree(t, m.dir, f.src)
	m.stop(t)
}

// TestDamagedDecodedCopy damages the decoded copy that the index pass of a
// stream-only archive (one zstd frame) keeps under the cache directory: a
// mount over it never returns wrong bytes (a damaged span fails with EIO),
// and drops the copy, so that the next mount decodes the archive again
// (its saved index serving meanwhile) and serves every byte.
func TestDamagedDecodedCopy(t *testing.T) {
	needFUSE(t)
	// One zstd frame holding more than the 32 MiB that a read may decode
	// whole: 40 MiB of text beside the corpus.
	f := &fixture{work: t.TempDir()}
	f.src = filepath.Join(f.work, "src")
	corpus.MakeTree(t, f.src, corpus.TreeOptions{NoSparse: true, NoBigFiles: true})
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range 5 {
		b := make([]byte, 8<<20)
		for j := range b {
			b[j] = "abcdefghijklmnopqrstuvwxyz0123456789 \n"[rng.IntN(38)]
		}
		if err := os.WriteFile(filepath.Join(f.src, fmt.Sprintf("text%d.txt", i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	served := filepath.Join(f.work, "served")
	if err := os.Mkdir(served, 0o755); err != nil {
		t.Fatal(err)
	}
	tarbuild.Archive(t, f.src, filepath.Join(served, "a.tar.zst"), tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "zstd"})
	base, _ := serve(t, served)
	f.url = base + "/a.tar.zst"
	cache := filepath.Join(f.work, "cache")
	opts := libOptions(cache)
	first := libMountWith(t, f.url, opts, libMountOptions{wait: true}) // decodes the archive to its copy
	first.stop(t)
	if !strings.Contains(first.log.String(), "stream-only") {
		t.Fatalf("the archive is not stream-only:\n%s", first.log)
	}
	copies, err := filepath.Glob(filepath.Join(cache, "decoded", "*.tar"))
	if err != nil || len(copies) != 1 {
		t.Fatalf("decoded copies: got %q, %v; want one", copies, err)
	}
	data, err := os.ReadFile(copies[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, frac := range []int{3, 5, 7} {
		data[len(data)*frac/10] ^= 0xff
	}
	if err := os.WriteFile(copies[0], data, 0o644); err != nil {
		t.Fatal(err)
	}

	m := libMount(t, f.url, opts)
	if strings.Contains(m.log.String(), "msg=indexing") {
		t.Fatalf("the mount indexed again instead of using the damaged copy:\n%s", m.log)
	}
	if !readTreeOrEIO(t, m.dir, f.src) {
		t.Error("no read failed after the decoded copy was damaged")
	}
	m.stop(t)

	m = libMount(t, f.url, opts)
	if !strings.Contains(m.log.String(), "decoding the archive again") || strings.Contains(m.log.String(), "msg=indexing") {
		t.Errorf("the mount after did not decode the archive again with its saved index:\n%s", m.log)
	}
	readTree(t, m.dir, f.src)
	m.stop(t)
}
