package index

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// codecCase is one way to compress a tar stream: in Go or with a CLI.
type codecCase struct {
	name  string
	codec Codec
	// random: the archive has checkpoints (no span needs the local copy).
	random bool
	// make compresses raw (in the test's temporary directory when it
	// runs a CLI); nil result: skip (the tool is missing).
	make func(t testing.TB, raw []byte) []byte
}

// cli runs a compressor on raw and returns its output; it skips the test
// when the tool is missing.
func cli(name string, args ...string) func(t testing.TB, raw []byte) []byte {
	return func(t testing.TB, raw []byte) []byte {
		t.Helper()
		if _, err := exec.LookPath(name); err != nil {
			testutil.Missing(t, "%s not installed", name)
		}
		in := filepath.Join(t.TempDir(), "in.tar")
		if err := os.WriteFile(in, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		out := in + ".out"
		cmd := exec.Command("sh", "-c", name+" "+strings.Join(args, " ")+` -c "$1" > "$2"`, "sh", in, out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, b)
		}
		data, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
}

// zstdStream is tarbuild.ZstdStream for the codec tables.
func zstdStream(_ testing.TB, raw []byte) []byte { return tarbuild.ZstdStream(raw) }

// zstdFrames compresses each piece bytes of raw as its own frame, with a
// skippable frame between some of them.
func zstdFrames(piece int) func(t testing.TB, raw []byte) []byte {
	return func(t testing.TB, raw []byte) []byte {
		enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		var out []byte
		for i := 0; i < len(raw); i += piece {
			if i/piece%3 == 1 {
				out = append(out, 0x5a, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 'a', 'b', 'c')
			}
			out = enc.EncodeAll(raw[i:min(i+piece, len(raw))], out)
		}
		return out
	}
}

// zstdSeekable is the seekable format with a frame per 300 KiB.
func zstdSeekable(_ testing.TB, raw []byte) []byte { return tarbuild.ZstdSeekable(raw, 300<<10) }

func lz4Go(opts ...lz4.Option) func(t testing.TB, raw []byte) []byte {
	return func(t testing.TB, raw []byte) []byte {
		var buf bytes.Buffer
		w := lz4.NewWriter(&buf)
		if err := w.Apply(append([]lz4.Option{lz4.ConcurrencyOption(1)}, opts...)...); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(raw); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
}

func xzGo(t testing.TB, raw []byte) []byte {
	var buf bytes.Buffer
	w, err := xz.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(raw)
	w.Close()
	return buf.Bytes()
}

// xzGoBlocks writes raw in blocks of size bytes with ulikunitz/xz, which
// records no sizes in its block headers.
func xzGoBlocks(size int64) func(t testing.TB, raw []byte) []byte {
	return func(t testing.TB, raw []byte) []byte {
		var buf bytes.Buffer
		w, err := xz.WriterConfig{BlockSize: size}.NewWriter(&buf)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(raw)
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
}

// padded compresses raw in two halves with c and concatenates the
// results with stream padding (zero bytes, 4 at a time) between and after
// them, as xz -d accepts.
func padded(c func(t testing.TB, raw []byte) []byte) func(t testing.TB, raw []byte) []byte {
	return func(t testing.TB, raw []byte) []byte {
		h := len(raw) / 2
		out := append(c(t, raw[:h]), make([]byte, 8)...)
		return append(append(out, c(t, raw[h:])...), make([]byte, 4)...)
	}
}

// concat compresses raw in two halves with c and concatenates the results.
func concat(c func(t testing.TB, raw []byte) []byte) func(t testing.TB, raw []byte) []byte {
	return func(t testing.TB, raw []byte) []byte {
		h := len(raw) / 2
		return append(c(t, raw[:h]), c(t, raw[h:])...)
	}
}

// codecCases lists every codec and variant, made in Go and by the CLIs.
func codecCases() []codecCase {
	return []codecCase{
		{"gzip", CodecGzip, true, func(t testing.TB, raw []byte) []byte { return tarbuild.GzipLevel(raw, 6) }},
		{"zstd-go-stream", CodecZstd, false, zstdStream},
		{"zstd-go-frames", CodecZstd, true, zstdFrames(256 << 10)},
		{"zstd-go-seekable", CodecZstd, true, zstdSeekable},
		{"zstd-cli", CodecZstd, false, cli("zstd", "-q", "-3")},
		{"zstd-cli-concat", CodecZstd, true, concat(cli("zstd", "-q", "-1"))},
		{"pzstd-cli", CodecZstd, true, cli("pzstd", "-q", "-p", "2", "-1")},
		{"lz4-go", CodecLZ4, true, lz4Go(lz4.BlockSizeOption(lz4.Block256Kb), lz4.ChecksumOption(true))},
		{"lz4-go-blocksum", CodecLZ4, true, lz4Go(lz4.BlockSizeOption(lz4.Block64Kb), lz4.BlockChecksumOption(true))},
		{"lz4-go-legacy", CodecLZ4, true, lz4Go(lz4.LegacyOption(true))},
		{"lz4-cli", CodecLZ4, true, cli("lz4", "-q", "-f")},
		{"lz4-cli-linked", CodecLZ4, true, cli("lz4", "-q", "-f", "-BD", "-B4")},
		{"lz4-cli-blocksum", CodecLZ4, true, cli("lz4", "-q", "-f", "-BX", "-B5", "--content-size")},
		{"lz4-cli-legacy", CodecLZ4, true, cli("lz4", "-q", "-f", "-l")},
		{"lz4-cli-concat", CodecLZ4, true, concat(cli("lz4", "-q", "-f", "-B4"))},
		{"bzip2-cli", CodecBzip2, true, cli("bzip2", "-9")},
		{"bzip2-cli-1", CodecBzip2, true, cli("bzip2", "-1")},
		{"bzip2-cli-concat", CodecBzip2, true, concat(cli("bzip2", "-9"))},
		{"pbzip2-cli", CodecBzip2, true, cli("pbzip2", "-q", "-p2", "-b1", "-9")},
		{"lbzip2-cli", CodecBzip2, true, cli("lbzip2", "-n", "2", "-1")},
		{"xz-go", CodecXz, false, xzGo},
		{"xz-cli", CodecXz, false, cli("xz", "-6")},
		{"xz-cli-blocks", CodecXz, true, cli("xz", "-T2", "--block-size=128KiB")},
		{"xz-cli-blocks-st", CodecXz, true, cli("xz", "-T1", "--block-size=100KiB")},
		{"xz-cli-blocks-concat", CodecXz, true, concat(cli("xz", "-1", "-T2", "--block-size=32KiB"))},
		{"xz-cli-blocks-padded", CodecXz, true, padded(cli("xz", "-T2", "--block-size=32KiB"))},
		{"xz-cli-check-none", CodecXz, true, cli("xz", "-T2", "--block-size=128KiB", "-C", "none")},
		{"xz-cli-check-crc32", CodecXz, true, cli("xz", "-T2", "--block-size=128KiB", "-C", "crc32")},
		{"xz-cli-check-sha256", CodecXz, true, cli("xz", "-T2", "--block-size=128KiB", "-C", "sha256")},
		{"xz-cli-concat", CodecXz, false, concat(cli("xz", "-6"))},
		{"xz-go-blocks", CodecXz, true, xzGoBlocks(128 << 10)},
	}
}

// buildLocal builds the index of obj with a local copy in memory.
func buildLocal(t testing.TB, obj []byte, span int64) (*Index, *memFile) {
	t.Helper()
	local := &memFile{}
	ix, err := Build(context.Background(), bytes.NewReader(obj), fetch.Identity{Size: int64(len(obj)), ETag: `"x"`},
		BuildOptions{Span: span, Local: local})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	local.truncate(ix.TarSize)
	return ix, local
}

// memFile is an in-memory io.WriterAt and io.ReaderAt.
type memFile struct {
	data   []byte
	writes int64 // bytes written
}

func (m *memFile) WriteAt(p []byte, off int64) (int, error) {
	if end := off + int64(len(p)); end > int64(len(m.data)) {
		m.data = append(m.data, make([]byte, end-int64(len(m.data)))...)
	}
	m.writes += int64(len(p))
	return copy(m.data[off:], p), nil
}

func (m *memFile) ReadAt(p []byte, off int64) (int, error) {
	if off >= int64(len(m.data)) {
		return 0, io.EOF
	}
	n := copy(p, m.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (m *memFile) truncate(n int64) {
	if n > int64(len(m.data)) {
		m.data = append(m.data, make([]byte, n-int64(len(m.data)))...)
	}
	m.data = m.data[:n]
}

// TestCodecs builds the index of the sample archive in every codec and
// variant and reads every member back; archives with checkpoints need no
// local copy, stream-only ones are read from it.
func TestCodecs(t *testing.T) {
	full := sampleMembers()
	small := sampleMembers()
	for i := range small {
		// Smaller under the race detector, where xz and bzip2 crawl.
		small[i].data = small[i].data[:min(len(small[i].data), scaled(len(small[i].data)))]
	}
	for _, tc := range codecCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			members, span := full, int64(512<<10)
			if tc.codec == CodecBzip2 || tc.codec == CodecXz {
				members, span = small, 64<<10
			}
			raw := tarBytes(t, members)
			obj := tc.make(t, raw)
			ix, local := buildLocal(t, obj, span)
			if ix.Codec != tc.codec {
				t.Fatalf("codec: got %v, want %v", ix.Codec, tc.codec)
			}
			if ix.TarSize != int64(len(raw)) {
				t.Fatalf("tar size: got %d, want %d", ix.TarSize, len(raw))
			}
			if got := ix.StreamOnly(); got == tc.random {
				t.Fatalf("StreamOnly: got %v, want %v (%d checkpoints)", got, !tc.random, len(ix.Checkpoints))
			}
			if tc.random && local.writes > int64(len(raw)) {
				t.Errorf("local copy got %d bytes, want at most the tar size for an archive with checkpoints", local.writes)
			}
			if !tc.random && !bytes.Equal(local.data, raw) {
				t.Fatalf("local copy differs from the tar stream")
			}
			var la io.ReaderAt
			if !tc.random {
				la = local
			}
			loaded := roundTrip(t, ix)
			r := NewReader(loaded, newMemSource(obj), ReaderOptions{Local: la})
			defer r.Close()
			for _, m := range members {
				id, ok := ix.LookupPath(m.name)
				if !ok || m.typ != 0 || m.name == "dup" {
					continue
				}
				if got := readAll(t, r, id); !bytes.Equal(got, m.data) {
					t.Errorf("%s: content differs", m.name)
				}
			}
		})
	}
}

// TestCodecRandomAccess compares random reads through checkpoints with
// the tar stream for every codec variant that has checkpoints, including
// reads that start or end right at checkpoints.
func TestCodecRandomAccess(t *testing.T) {
	big := randomData(3, scaled(5<<20))
	raw := tarBytes(t, []member{{name: "big", data: big}, {name: "small", data: []byte("tail")}})
	// xz decodes at a tenth of the speed of the others: a smaller file,
	// and the check types are left to TestCodecs.
	bigXz := big[:len(big)/4]
	rawXz := tarBytes(t, []member{{name: "big", data: bigXz}, {name: "small", data: []byte("tail")}})
	for _, tc := range codecCases() {
		if !tc.random || strings.HasPrefix(tc.name, "xz-cli-check-") {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			raw, want, span := raw, big, int64(512<<10)
			if tc.codec == CodecXz {
				raw, want, span = rawXz, bigXz, 256<<10
			}
			obj := tc.make(t, raw)
			ix := build(t, obj, span)
			if ix.StreamOnly() {
				t.Fatal("stream-only")
			}
			t.Logf("%d checkpoints", len(ix.Checkpoints))
			r := NewReader(ix, newMemSource(obj), ReaderOptions{CacheBytes: 2 * span})
			defer r.Close()
			checkRandomReads(t, r, ix, "big", want)
		})
	}
}

// TestConcurrentReadsReuseSpans reads one file from 8 goroutines at once
// through a cache of two spans, so that spans are evicted while other
// readers copy from them and decodes reuse the buffers of evicted spans:
// every read must still give the right bytes (and, under the race
// detector, no decode may write a buffer that a reader still reads), and
// some decodes must have reused a buffer.
func TestConcurrentReadsReuseSpans(t *testing.T) {
	big := randomData(4, 2<<20)
	raw := tarBytes(t, []member{{name: "big", data: big}})
	const span = 64 << 10
	rows := 0
	for _, tc := range codecCases() {
		if !tc.random || (tc.codec != CodecGzip && tc.codec != CodecLZ4 && tc.codec != CodecZstd) {
			continue
		}
		// Only forms with 8 spans or more of this data have spans to
		// evict: not one lz4 block or large frames, not stream-only.
		obj := tc.make(t, raw)
		ix := build(t, obj, span)
		if ix.StreamOnly() || len(ix.Checkpoints) < 8 {
			continue
		}
		rows++
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := NewReader(ix, newMemSource(obj), ReaderOptions{CacheBytes: 2 * span, Readahead: -1})
			defer r.Close()
			id, _ := ix.LookupPath("big")
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					buf := make([]byte, 3*span)
					for range scaled(200) {
						off := rng.Int64N(int64(len(big)))
						n := 1 + rng.IntN(len(buf))
						got, err := r.ReadAt(context.Background(), id, buf[:n], off)
						w := big[off:min(off+int64(n), int64(len(big)))]
						if err != nil && !(err == io.EOF && got == len(w)) {
							t.Errorf("read at %d+%d: %v", off, n, err)
							return
						}
						if !bytes.Equal(buf[:got], w) {
							t.Errorf("read at %d+%d: bytes differ", off, n)
							return
						}
					}
				})
			}
			wg.Wait()
			if r.reuses.Load() == 0 {
				t.Errorf("no decode reused the buffer of an evicted span, in %d decodes", r.Stats().SpanDecodes)
			}
		})
	}
	if rows < 4 {
		t.Fatalf("%d forms have spans to evict, want 4 or more", rows)
	}
}

// checkRandomReads reads name at offsets around every checkpoint and at
// random and compares with want.
func checkRandomReads(t *testing.T, r *Reader, ix *Index, name string, want []byte) {
	t.Helper()
	id, _ := ix.LookupPath(name)
	base := int64(ix.Entry(id).DataOffset)
	var offsets []int64
	for _, cp := range ix.Checkpoints {
		for _, d := range []int64{-3, -1, 0, 1, 2} {
			if o := int64(cp.Out) - base + d; o >= 0 && o < int64(len(want)) {
				offsets = append(offsets, o)
			}
		}
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < scaled(100); i++ {
		offsets = append(offsets, rng.Int64N(int64(len(want))))
	}
	for _, off := range offsets {
		n := 1 + rng.IntN(scaled(1<<20))
		buf := make([]byte, n)
		got, err := r.ReadAt(context.Background(), id, buf, off)
		w := want[off:min(off+int64(n), int64(len(want)))]
		if err != nil && !(err == io.EOF && got == len(w)) {
			t.Fatalf("read at %d+%d: %v", off, n, err)
		}
		if !bytes.Equal(buf[:got], w) {
			t.Fatalf("read at %d+%d: bytes differ", off, n)
		}
	}
}

// TestCodecCorruption flips bytes in archives of every codec: the index
// pass fails, or reads fail with ErrCorrupt; wrong bytes never come out.
func TestCodecCorruption(t *testing.T) {
	data := randomData(5, 2<<20)
	raw := tarBytes(t, []member{{name: "f", data: data}})
	for _, tc := range codecCases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := tc.make(t, raw)
			for _, frac := range []int{3, 6, 9} {
				bad := bytes.Clone(obj)
				bad[len(bad)*frac/10] ^= 0x55
				local := &memFile{}
				ix, err := Build(context.Background(), bytes.NewReader(bad), fetch.Identity{Size: int64(len(bad))}, BuildOptions{Span: 256 << 10, Local: local})
				if err != nil {
					continue // the pass noticed
				}
				// A pass may miss damage that no checksum covers; reads
				// through the good archive's index must then not return
				// wrong bytes.
				good := build(t, obj, 256<<10)
				for _, x := range []*Index{ix, good} {
					r := NewReader(x, newMemSource(bad), ReaderOptions{Local: local})
					id, ok := x.LookupPath("f")
					if !ok {
						r.Close()
						continue
					}
					buf := make([]byte, len(data))
					n, err := r.ReadAt(context.Background(), id, buf, 0)
					if err != nil && err != io.EOF && !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrNoLocalCopy) {
						t.Errorf("flip at %d/10: got %v, want ErrCorrupt", frac, err)
					}
					if err == nil && x == ix && !bytes.Equal(buf[:n], data) {
						t.Logf("flip at %d/10: the damaged archive decodes to other bytes, consistently", frac)
					}
					if err == nil && x == good && !bytes.Equal(buf[:n], data) {
						t.Errorf("flip at %d/10: wrong bytes through the good index", frac)
					}
					r.Close()
				}
			}
		})
	}
}
