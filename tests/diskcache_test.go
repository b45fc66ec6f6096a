package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestRemountFromDiskCache mounts an archive over HTTP, reads every file,
// unmounts, and mounts again with the same cache directory: the second
// full read fetches nothing from the server but the identity probe. For
// gzip it does so twice: with the blocks that the index pass wrote, and
// (after the blocks directory is removed and a mount reads through the
// saved index) with the exact span ranges that the reads fetched; then a
// mount over a disk cache whose every file was damaged reads the right
// bytes.
func TestRemountFromDiskCache(t *testing.T) {
	needFUSE(t)
	for _, spec := range []tarbuild.Spec{
		{Tool: "gnutar", Format: "posix", Codec: "gzip"},
		{Tool: "gnutar", Format: "posix", Codec: "none"},
	} {
		t.Run(spec.String(), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, corpus.TreeOptions{}, spec, "a"+spec.Ext())
			cache := filepath.Join(f.work, "cache")
			opts := libOptions(cache)
			opts.Span = 262144
			pass := func(name string, wantFetch bool) {
				t.Helper()
				f.server.ResetStats()
				m := libMount(t, f.url, opts)
				start := time.Now()
				n := readTree(t, m.dir, f.src)
				elapsed := time.Since(start)
				m.stop(t)
				st := f.server.Stats()
				t.Logf("%s: read %d bytes in %v; server sent %d bytes in %d requests", name, n, elapsed.Round(time.Millisecond), st.Bytes, st.Requests)
				if !wantFetch && st.Bytes > 1 {
					t.Errorf("%s: server sent %d bytes, want at most 1 (the identity probe)", name, st.Bytes)
				}
				if wantFetch && st.Bytes <= 1 {
					t.Errorf("%s: server sent %d bytes; the test expected a cold read", name, st.Bytes)
				}
			}
			pass("first mount", true)
			pass("remount", false)
			if spec.Codec == "none" {
				return
			}
			if err := os.RemoveAll(filepath.Join(cache, "blocks")); err != nil {
				t.Fatal(err)
			}
			pass("mount with the saved index only", true)
			pass("remount after span reads", false)

			// Damage every cached range: each is refetched, none served.
			damaged := 0
			err := filepath.Walk(filepath.Join(cache, "blocks"), func(p string, info os.FileInfo, err error) error {
				if err != nil || !info.Mode().IsRegular() {
					return err
				}
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				data[len(data)-1] ^= 0x55
				damaged++
				return os.WriteFile(p, data, 0o600)
			})
			if err != nil || damaged == 0 {
				t.Fatalf("damage the disk cache: %d files, %v", damaged, err)
			}
			pass("mount over a damaged disk cache", true)
		})
	}
}

// readTree reads every regular file below mnt and compares it with the same
// file below src. It returns the bytes read.
func readTree(t *testing.T, mnt, src string) int64 {
	t.Helper()
	var total int64
	err := filepath.Walk(mnt, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(mnt, p)
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		want, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: read returned wrong bytes", rel)
		}
		total += int64(len(got))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}
