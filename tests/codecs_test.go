package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/archive"
	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// TestMountEveryCodec mounts the corpus tree compressed with every codec
// and variant (made by the zstd, pzstd, lz4, bzip2, pbzip2 and xz CLIs and by Go),
// from a path and over HTTP, with a small span so that archives have many
// checkpoints and one zstd frame is "too big", and compares every entry
// with what GNU tar extracts. Stream-only archives say so once at mount.
func TestMountEveryCodec(t *testing.T) {
	needFUSE(t)
	cases := []struct {
		codec      string
		streamOnly bool
		span       string
	}{
		{"zstd", true, ""},
		// pzstd -3 writes frames of 8 MiB: checkpoints need a span of
		// at least 1 MiB (frames up to 8 spans are decoded whole).
		{"pzstd", false, "1048576"},
		{"zstd-multi", false, ""},
		{"zstd-seekable", false, ""},
		{"lz4", false, ""},
		{"lz4-linked", false, ""},
		{"lz4-legacy", false, ""},
		{"lz4-go", false, ""},
		{"bzip2", false, ""},
		{"pbzip2", false, ""},
		// xz -6 writes one block: stream-only.
		{"xz", true, ""},
		// xz -T2 --block-size=1MiB: blocks up to 8 spans are decoded
		// whole, so block starts are checkpoints.
		{"xz-mt", false, ""},
	}
	for _, tc := range cases {
		spec := tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: tc.codec}
		span := tc.span
		if span == "" {
			span = "262144"
		}
		t.Run(tc.codec, func(t *testing.T) {
			t.Parallel()
			for _, tool := range []string{"zstd", "pzstd", "lz4", "bzip2", "pbzip2", "xz"} {
				if strings.HasPrefix(tc.codec, tool) {
					if _, err := exec.LookPath(tool); err != nil {
						testutil.Missing(t, "%s not installed", tool)
					}
				}
			}
			work := t.TempDir()
			src, ref, served := filepath.Join(work, "src"), filepath.Join(work, "ref"), filepath.Join(work, "served")
			for _, d := range []string{ref, served} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			corpus.MakeTree(t, src, corpus.TreeOptionsFor(spec))
			archive := filepath.Join(served, "archive"+spec.Ext())
			tarbuild.Archive(t, src, archive, spec)
			tarbuild.Extract(t, archive, ref)
			base, _ := serve(t, served)
			cache := filepath.Join(work, "cache")
			opts := libOptions(cache)
			opts.Span, _ = strconv.ParseInt(span, 10, 64)
			for i, url := range []string{archive, base + "/" + filepath.Base(archive)} {
				m := libMount(t, url, opts)
				treecmp.Compare(t, ref, m.dir, treecmp.Options{MaxErrors: 20})
				// Said once the index pass (if any) has found out;
				// the listings above waited for it.
				out := m.log.String()
				if got := strings.Count(out, "stream-only archive"); tc.streamOnly && got != 1 || !tc.streamOnly && got != 0 {
					t.Errorf("%d messages about a stream-only archive, want streamOnly=%v:\n%s", got, tc.streamOnly, out)
				}
				if tc.streamOnly && !strings.Contains(out, "tarmount pack") {
					t.Errorf("the stream-only message does not say how to make a seekable archive:\n%s", out)
				}
				m.stop(t)
				if i == 0 && tc.streamOnly {
					checkLocalCopyRefill(t, url, cache, ref)
					checkStagingMount(t, url, cache, ref)
				}
			}
		})
	}
}

// checkLocalCopyRefill remounts a stream-only archive whose saved index is
// kept but whose decoded copy was removed: the saved index serves at once
// while a decode pass writes the copy again, the tree is the same, and the
// copy is kept once the pass ends.
func checkLocalCopyRefill(t *testing.T, url, cache, ref string) {
	t.Helper()
	copies, _ := filepath.Glob(filepath.Join(cache, "decoded", "*.tar"))
	if len(copies) != 1 {
		t.Fatalf("got decoded copies %v, want one", copies)
	}
	if err := os.Remove(copies[0]); err != nil {
		t.Fatal(err)
	}
	opts := libOptions(cache)
	opts.Span = 256 << 10
	m := libMount(t, url, opts)
	if from := m.a.IndexFrom(); from != archive.FromCache {
		t.Errorf("got the index from %q, want the saved one kept", from)
	}
	if !strings.Contains(m.log.String(), "decoding the archive again while the index serves") {
		t.Errorf("no message about decoding the archive again:\n%s", m.log)
	}
	treecmp.Compare(t, ref, m.dir, treecmp.Options{MaxErrors: 20})
	select {
	case <-m.a.DecodeDone():
	case <-time.After(3 * time.Minute):
		t.Fatalf("decode pass not done after 3 minutes:\n%s", m.log)
	}
	if err := m.a.DecodeErr(); err != nil {
		t.Errorf("decode pass: %v", err)
	}
	m.stop(t)
	if _, err := os.Stat(copies[0]); err != nil {
		t.Errorf("decoded copy not written again: %v", err)
	}
}

// checkStagingMount mounts with --materialize a stream-only archive whose
// saved index is kept but whose decoded copy was removed, as a fleet boots
// with a published index: the archive is decoded into DIR, not into a
// copy, the mount serves the tree meanwhile, and DIR ends up as tar -x
// makes it. A second mount over the complete DIR decodes nothing.
func checkStagingMount(t *testing.T, url, cache, ref string) {
	t.Helper()
	copies, _ := filepath.Glob(filepath.Join(cache, "decoded", "*.tar"))
	for _, c := range copies {
		if err := os.Remove(c); err != nil {
			t.Fatal(err)
		}
	}
	dir := filepath.Join(t.TempDir(), "mat")
	opts := libOptions(cache)
	opts.Span = 256 << 10
	m := libMountWith(t, url, opts, libMountOptions{materialize: dir})
	if !strings.Contains(m.log.String(), "decoding the archive into the materialized directory") {
		t.Errorf("no message about decoding the archive into DIR:\n%s", m.log)
	}
	treecmp.Compare(t, ref, m.dir, treecmp.Options{MaxErrors: 20})
	m.waitMaterialized(t)
	treecmp.Compare(t, ref, dir, treecmp.Options{MaxErrors: 20})
	if m.a.DecodeDone() != nil {
		t.Errorf("a decode pass wrote the decoded copy too:\n%s", m.log)
	}
	if left, _ := filepath.Glob(filepath.Join(cache, "decoded", "*")); len(left) != 0 {
		t.Errorf("got decoded copies %q, want none", left)
	}
	m.stop(t)

	again := libMountWith(t, url, opts, libMountOptions{materialize: dir})
	treecmp.Compare(t, ref, again.dir, treecmp.Options{MaxErrors: 20})
	again.waitMaterialized(t)
	if p := again.a.Status().Index.Pass; p != nil || again.a.DecodeDone() != nil {
		t.Errorf("the mount over the complete DIR decoded the archive (pass %+v):\n%s", p, again.log)
	}
	again.stop(t)
}

// TestPackMountsWithoutPass packs a directory and a .tar.xz with `tarmount
// pack` (the command, end to end), checks that zstd -d | tar -t reads the
// result, and mounts it over HTTP: the mount reads only the archive's
// tail (zero bytes of index pass) and the tree matches what tar -x
// extracts from the packed file.
func TestPackMountsWithoutPass(t *testing.T) {
	needFUSE(t)
	needTools(t, "zstd", "xz")
	work := t.TempDir()
	src, served := filepath.Join(work, "src"), filepath.Join(work, "served")
	if err := os.Mkdir(served, 0o755); err != nil {
		t.Fatal(err)
	}
	corpus.MakeTree(t, src, corpus.TreeOptions{})
	xzArchive := filepath.Join(work, "in.tar.xz")
	tarbuild.Archive(t, src, xzArchive, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "xz"})
	base, h := serve(t, served)
	for _, in := range []string{src, xzArchive} {
		name := "from-dir.tar.zst"
		if in == xzArchive {
			name = "from-xz.tar.zst"
		}
		t.Run(name, func(t *testing.T) {
			packed := filepath.Join(served, name)
			out, err := exec.Command(binary, "pack", in, "-o", packed, "--span", "1048576", "--cache-dir", filepath.Join(work, "c0")).CombinedOutput()
			if err != nil {
				t.Fatalf("tarmount pack: %v\n%s", err, out)
			}
			if out, err := exec.Command("sh", "-c", `zstd -dc "$1" | tar -t >/dev/null`, "sh", packed).CombinedOutput(); err != nil {
				t.Fatalf("zstd -d | tar -t: %v\n%s", err, out)
			}
			ref := filepath.Join(work, "ref-"+name)
			tarbuild.Extract(t, packed, ref)
			st, err := os.Stat(packed)
			if err != nil {
				t.Fatal(err)
			}
			h.ResetStats()
			m := libMount(t, base+"/"+name, libOptions(filepath.Join(work, "cache-"+name)))
			stats := h.Stats()
			if log := m.log.String(); strings.Contains(log, "msg=indexing") || !strings.Contains(log, "index embedded") {
				t.Errorf("the mount of a packed archive did not use its embedded index:\n%s", log)
			}
			// The identity probe (with the first bytes: no index is
			// known before the open), the tail, and the published index
			// asked for beside the archive (a 404 and its short body):
			// nothing of the data frames.
			if limit := int64(64<<10 + fetch.ProbeBytes + 512); stats.Bytes > limit || stats.Requests > 3 {
				t.Errorf("mount fetched %d bytes in %d requests before any read, want at most %d bytes in 3 requests (archive %d bytes)",
					stats.Bytes, stats.Requests, limit, st.Size())
			}
			t.Logf("mount of a %d-byte packed archive fetched %d bytes in %d requests", st.Size(), stats.Bytes, stats.Requests)
			treecmp.Compare(t, ref, m.dir, treecmp.Options{MaxErrors: 20})
			m.stop(t)
		})
	}
}

// TestStreamOnlyWarnedOnce: the warning that an archive is stream-only
// (one zstd frame) is given once per version of the archive, not on every
// ls; a new version is warned of again.
func TestStreamOnlyWarnedOnce(t *testing.T) {
	needTools(t, "zstd")
	work := t.TempDir()
	plain, archive := filepath.Join(work, "a.tar"), filepath.Join(work, "a.tar.zst")
	cache := filepath.Join(work, "cache")
	warnings := func() int {
		r := runBinary(t, nil, false, "ls", archive, "--cache-dir", cache, "--span", "64KiB")
		if r.err != nil {
			t.Fatalf("ls: %v\n%s", r.err, r.stderr)
		}
		return strings.Count(r.stderr, "level=WARN msg=\"stream-only archive")
	}
	for version, word := range []string{"one ", "two "} {
		// Many spans of 64 KiB in one frame.
		body := strings.Repeat(word, 1<<18)
		if err := os.WriteFile(plain, tarbuild.Tar(tarbuild.Member{Name: "f", Body: body}), 0o644); err != nil {
			t.Fatal(err)
		}
		os.Remove(archive)
		if err := tarbuild.Compress(plain, archive, "zstd"); err != nil {
			t.Fatal(err)
		}
		for i, want := range []int{1, 0, 0} {
			if got := warnings(); got != want {
				t.Errorf("version %d, ls %d: got %d warnings, want %d", version+1, i+1, got, want)
			}
		}
	}
}
