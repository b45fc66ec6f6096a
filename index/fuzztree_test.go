package index

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os/exec"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	seekable "github.com/SaveTheRbtz/zstd-seekable-format-go/pkg"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/ulikunitz/xz"

	"github.com/tarmount/tarmount/fetch"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// Helpers of the fuzz targets that read through an index: a small tar
// tree derived from the fuzz input, the archive in every codec that Go
// can write in-process, and the reference contents from archive/tar.

// fuzzInput hands out the bytes of a fuzz input, then zeros.
type fuzzInput struct {
	b []byte
	i int
}

func (f *fuzzInput) done() bool { return f.i >= len(f.b) }

func (f *fuzzInput) byte() byte {
	if f.done() {
		return 0
	}
	f.i++
	return f.b[f.i-1]
}

// u16 reads two bytes, little endian.
func (f *fuzzInput) u16() int { return int(f.byte()) | int(f.byte())<<8 }

const (
	// fuzzTreeMembers and fuzzTreeBytes bound the tree of one fuzz input,
	// so that an input costs a millisecond or so to compress, index and
	// read.
	fuzzTreeMembers = 12
	fuzzTreeBytes   = 24 << 10
)

// fuzzTree derives a tar archive from b, deterministically: up to
// fuzzTreeMembers members in a few directories, each described by a few
// bytes of b.
//
//	kind byte  bits 0-2: file (0-3), directory, symlink, hard link, sparse file (PAX 1.0)
//	           bits 3-4: directory ("", "d/", "d/e/", "x/"); bits 5-7: file name (f0-f7)
//	files      size (2 bytes), content (1 byte: zeros, text, random, a short repeated pattern;
//	           bit 7: an xattr)
//	sparse     logical size (2 bytes), chunk count (1 byte), then per chunk gap and length
//	           (2 bytes each), content (1 byte)
//
// Names repeat (a later member replaces an earlier one, as tar -x does),
// hard links point at files written before them, and directories and
// files never share a name.
func fuzzTree(b []byte) []byte {
	in := &fuzzInput{b: b}
	var entries []tarbuild.Entry
	mtime := time.Unix(1700000000, 123456789)
	budget := fuzzTreeBytes
	var files []string
	dirs := []string{"", "d/", "d/e/", "x/"}
	for n := 0; n < fuzzTreeMembers && !in.done(); n++ {
		k := in.byte()
		dir := dirs[k>>3&3]
		name := dir + "f" + strconv.Itoa(int(k>>5))
		e := tarbuild.Entry{Name: name, Mode: 0o644, ModTime: mtime, Uid: 1000, Gid: 100, Uname: "user", Gname: "users",
			Type: tar.TypeReg}
		switch k & 7 {
		case 0, 1, 2, 3:
			size := min(fuzzSize(in.u16()), budget)
			c := in.byte()
			e.Body = fuzzContent(c, uint64(n), size)
			budget -= size
			if c&0x80 != 0 {
				e.Xattrs = map[string]string{"user.k" + strconv.Itoa(n): string(e.Body[:min(len(e.Body), 8)])}
			}
			files = append(files, name)
		case 4:
			e.Type, e.Mode = tar.TypeDir, 0o755
			if e.Name = dir; dir == "" {
				e.Name = "x/"
			}
		case 5:
			e.Type, e.Link, e.Mode = tar.TypeSymlink, "../f0", 0o777
		case 6:
			if len(files) == 0 {
				continue
			}
			e.Type, e.Link = tar.TypeLink, files[int(k>>5)%len(files)]
		case 7:
			member, stored := sparseMember(in, name, uint64(n), budget)
			entries = append(entries, tarbuild.Entry{Raw: member})
			budget -= stored
			files = append(files, name)
			continue
		}
		entries = append(entries, e)
	}
	raw, err := tarbuild.GoErr(tar.FormatPAX, entries...)
	if err != nil {
		panic(err) // the headers above are all valid
	}
	return raw
}

// fuzzSize maps two bytes to a size: mostly small, up to 32 KiB.
func fuzzSize(v int) int {
	if v&0x8000 == 0 {
		return v & 0xff
	}
	return v & 0x7fff
}

// fuzzContent returns size bytes of a kind chosen by c, seeded by c and
// seed.
func fuzzContent(c byte, seed uint64, size int) []byte {
	out := make([]byte, size)
	rng := rand.New(rand.NewPCG(seed, uint64(c)))
	switch c & 3 {
	case 0: // zeros
	case 1:
		for i := range out {
			out[i] = "abcdefghijklmnopqrstuvwxyz \n0123"[rng.IntN(32)]
		}
	case 2:
		for i := range out {
			out[i] = byte(rng.Uint32())
		}
	case 3:
		pat := make([]byte, 1+int(c>>2&31))
		for i := range pat {
			pat[i] = byte(rng.Uint32())
		}
		for i := range out {
			out[i] = pat[i%len(pat)]
		}
	}
	return out
}

// sparseMember writes a sparse file in GNU tar's PAX 1.0 format, which
// archive/tar reads but does not write: a PAX header, then a ustar header
// whose data is the chunk map (decimal lines, padded to a block) and the
// chunks. It returns the member and the bytes of chunk data stored.
func sparseMember(in *fuzzInput, name string, seed uint64, budget int) ([]byte, int) {
	size := int64(in.u16())
	var chunks []SparseChunk
	var stored int
	end := int64(0)
	for n := int(in.byte() % 4); n > 0; n-- {
		off := end + int64(in.u16()%4096)
		length := min(int64(1+in.u16()%4096), size-off, int64(budget-stored))
		if length <= 0 {
			break
		}
		chunks = append(chunks, SparseChunk{Offset: off, Length: length})
		stored += int(length)
		end = off + length
	}
	data := fuzzContent(in.byte(), seed, stored)
	sparseMap := strconv.Itoa(len(chunks)) + "\n"
	for _, c := range chunks {
		sparseMap += fmt.Sprintf("%d\n%d\n", c.Offset, c.Length)
	}
	body := make([]byte, tarbuild.Padded(len(sparseMap)), tarbuild.Padded(len(sparseMap))+len(data))
	copy(body, sparseMap)
	body = append(body, data...)
	return tarbuild.Members(tarbuild.Member{
		Name: path.Dir(name) + "/GNUSparseFile.0/" + path.Base(name), Body: string(body), Uid: 1000, Gid: 100,
		PAX: []string{"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.name=" + name,
			"GNU.sparse.realsize=" + strconv.FormatInt(size, 10)},
	}), stored
}

// tarContents reads raw sequentially with archive/tar and returns the
// content of every name that ends up a regular file (hard links included,
// sparse files expanded), as tar -x leaves them.
func tarContents(t testing.TB, raw []byte) map[string][]byte {
	t.Helper()
	tr := tar.NewReader(bytes.NewReader(raw))
	want := map[string][]byte{}
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return want
		}
		if err != nil {
			t.Fatalf("archive/tar: %v", err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		switch h.Typeflag {
		case tar.TypeReg:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("archive/tar: %s: %v", name, err)
			}
			want[name] = data
		case tar.TypeLink:
			if data, ok := want[h.Linkname]; ok {
				want[name] = data
			} else {
				delete(want, name)
			}
		default:
			delete(want, name)
		}
	}
}

// sortedNames returns the keys of m in order.
func sortedNames(m map[string][]byte) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// fuzzVariant is one way to compress a tar stream in Go, in-process.
// piece sizes the frames, members, blocks or flushes (for a packed
// archive, its span); opt picks the codec's options.
type fuzzVariant struct {
	name  string
	codec Codec
	// embedded: the index is read from the archive (LoadEmbedded).
	embedded bool
	make     func(t testing.TB, raw []byte, piece int, opt byte) []byte
}

// fuzzZstdEncoder is shared by the fuzz targets (EncodeAll is safe for
// concurrent use; a new encoder costs more than compressing a small tree).
var fuzzZstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1), zstd.WithEncoderLevel(zstd.SpeedFastest),
		zstd.WithEncoderCRC(true), zstd.WithWindowSize(1<<16))
	if err != nil {
		panic(err)
	}
	return enc
})

// gzipLevels are the levels opt picks from.
var gzipLevels = []int{gzip.NoCompression, gzip.HuffmanOnly, gzip.BestSpeed, gzip.DefaultCompression, gzip.BestCompression}

// pieces calls fn for each piece bytes of raw (once for an empty raw).
func pieces(raw []byte, piece int, fn func(p []byte)) {
	for i := 0; i == 0 || i < len(raw); i += piece {
		fn(raw[i:min(i+piece, len(raw))])
	}
}

func fuzzVariants() []fuzzVariant {
	return []fuzzVariant{
		{"tar", CodecNone, false, func(_ testing.TB, raw []byte, _ int, _ byte) []byte { return raw }},
		{"gzip-flushed", CodecGzip, false, func(_ testing.TB, raw []byte, piece int, opt byte) []byte {
			// One member; a flush every piece bytes ends a DEFLATE block
			// there, where a checkpoint with a window may go.
			var buf bytes.Buffer
			w, _ := gzip.NewWriterLevel(&buf, gzipLevels[int(opt)%len(gzipLevels)])
			pieces(raw, piece, func(p []byte) {
				w.Write(p)
				if opt&0x80 == 0 {
					w.Flush()
				}
			})
			w.Close()
			return buf.Bytes()
		}},
		{"gzip-members", CodecGzip, false, func(_ testing.TB, raw []byte, piece int, opt byte) []byte {
			var buf bytes.Buffer
			w, _ := gzip.NewWriterLevel(&buf, gzipLevels[int(opt)%len(gzipLevels)])
			pieces(raw, piece, func(p []byte) {
				w.Reset(&buf) // a new member; a new writer costs more than a small piece
				w.Write(p)
				w.Close()
			})
			return buf.Bytes()
		}},
		{"zstd-frames", CodecZstd, false, func(_ testing.TB, raw []byte, piece int, opt byte) []byte {
			var out []byte
			i := 0
			pieces(raw, piece, func(p []byte) {
				if opt&(1<<(i%8)) != 0 {
					out = append(out, 0x5a, 0x2a, 0x4d, 0x18, 3, 0, 0, 0, 'a', 'b', 'c')
				}
				out = fuzzZstdEncoder().EncodeAll(p, out)
				i++
			})
			return out
		}},
		{"zstd-seekable", CodecZstd, false, func(t testing.TB, raw []byte, piece int, _ byte) []byte {
			var buf bytes.Buffer
			w, err := seekable.NewWriter(&buf, fuzzZstdEncoder())
			if err != nil {
				t.Fatal(err)
			}
			pieces(raw, piece, func(p []byte) {
				if _, err := w.Write(p); err != nil {
					t.Fatal(err)
				}
			})
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			return buf.Bytes()
		}},
		{"zstd-pack", CodecZstd, true, func(t testing.TB, raw []byte, piece int, _ byte) []byte {
			var buf bytes.Buffer
			if _, err := Pack(context.Background(), &buf, bytes.NewReader(raw), PackOptions{Span: int64(piece), Level: zstd.SpeedFastest}); err != nil {
				t.Fatalf("Pack: %v", err)
			}
			return buf.Bytes()
		}},
		{"zstd-one-frame", CodecZstd, false, func(_ testing.TB, raw []byte, _ int, _ byte) []byte {
			return fuzzZstdEncoder().EncodeAll(raw, nil)
		}},
		{"lz4-frames", CodecLZ4, false, func(t testing.TB, raw []byte, piece int, opt byte) []byte {
			var out []byte
			pieces(raw, piece, func(p []byte) {
				opts := []lz4.Option{lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(opt&1 != 0), lz4.BlockChecksumOption(opt&2 != 0)}
				if opt&4 != 0 {
					opts = append(opts, lz4.SizeOption(uint64(len(p))))
				}
				out = append(out, lz4Go(opts...)(t, p)...)
			})
			return out
		}},
		{"lz4-legacy", CodecLZ4, false, func(t testing.TB, raw []byte, piece int, _ byte) []byte {
			var out []byte
			pieces(raw, piece, func(p []byte) { out = append(out, lz4Go(lz4.LegacyOption(true))(t, p)...) })
			return out
		}},
		{"xz-blocks", CodecXz, false, func(t testing.TB, raw []byte, piece int, opt byte) []byte {
			return xzFuzz(t, raw, int64(piece), opt)
		}},
		{"xz-one-block", CodecXz, false, func(t testing.TB, raw []byte, _ int, opt byte) []byte {
			return xzFuzz(t, raw, 0, opt)
		}},
	}
}

// xzFuzz compresses raw with ulikunitz/xz in blocks of blockSize bytes
// (0: one block), with a small dictionary (the default 8 MiB would cost
// more to allocate than the tree to compress), the check picked by opt.
func xzFuzz(t testing.TB, raw []byte, blockSize int64, opt byte) []byte {
	var buf bytes.Buffer
	checks := []byte{xz.CRC32, xz.CRC64, xz.SHA256, xz.None}
	c := checks[int(opt)%len(checks)]
	w, err := xz.WriterConfig{DictCap: 1 << 16, BlockSize: blockSize, CheckSum: c, NoCheckSum: c == xz.None}.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(raw)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// cliVariant is an archive made by a CLI, for codecs Go cannot write
// (bzip2) and variants it does not (lz4 linked blocks); the tool must be
// installed (scripts/deps.sh installs them all).
type cliVariant struct {
	name, tool string
	codec      Codec
	args       []string
	// parts: raw is compressed in this many parts, concatenated.
	parts int
}

func cliVariants() []cliVariant {
	return []cliVariant{
		{"bzip2-cli-concat", "bzip2", CodecBzip2, []string{"-1"}, 3},
		{"lz4-cli-linked", "lz4", CodecLZ4, []string{"-q", "-f", "-BD", "-B4", "--content-size"}, 1},
		{"xz-cli-blocks", "xz", CodecXz, []string{"-T1", "--block-size=3KiB", "-C", "crc32"}, 1},
	}
}

// make compresses raw, or returns nil when the tool is missing.
func (v cliVariant) make(t testing.TB, raw []byte) []byte {
	if _, err := exec.LookPath(v.tool); err != nil {
		return nil
	}
	var out []byte
	for i := 0; i < v.parts; i++ {
		out = append(out, cli(v.tool, v.args...)(t, raw[len(raw)*i/v.parts:len(raw)*(i+1)/v.parts])...)
	}
	return out
}

// fuzzIndex returns the index of obj as a mount would use it: built by
// the index pass (with its local copy) or read from the archive, then
// saved and loaded again.
func fuzzIndex(t testing.TB, obj []byte, embedded bool, span int64) (*Index, *memFile) {
	t.Helper()
	id := fetch.Identity{Size: int64(len(obj)), ETag: `"fuzz"`}
	local := &memFile{}
	var ix *Index
	var err error
	if embedded {
		ix, err = LoadEmbedded(context.Background(), newMemSource(obj), id)
	} else {
		ix, err = Build(context.Background(), bytes.NewReader(obj), id, BuildOptions{Span: span, Local: local})
	}
	if err != nil {
		t.Fatalf("index of a valid archive: %v", err)
	}
	local.truncate(ix.TarSize)
	data, err := ix.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := Unmarshal(data)
	if err != nil {
		t.Fatalf("Unmarshal of a fresh index: %v", err)
	}
	return loaded, local
}

// fuzzSeedTree is a tree with every kind of member fuzzTree makes, for
// the seeds of the targets that start from fixed archives.
var fuzzSeedTree = []byte{
	0x00, 0xb8, 0x8b, 0x81, // f0: 3000 bytes of text, an xattr
	0x0c,                   // d/ (directory)
	0x28, 0x00, 0x90, 0x1b, // d/f1: 4096 bytes, a repeated 7-byte pattern
	0x15,                   // d/e/f0: symlink
	0x47, 0x00, 0x50, 0x02, // f2: sparse, 20480 bytes logical, 2 chunks:
	0x10, 0x00, 0x00, 0x0a, // gap 16, 2561 bytes
	0xa0, 0x0f, 0x00, 0x04, // gap 4000, 1025 bytes
	0x02,                   // random
	0x66,                   // f3: hard link to f0
	0x60, 0x50, 0xa3, 0x02, // f3: 9040 bytes of random data, replaces the link
	0x18, 0x00, 0x00, 0x00, // x/f0: empty
}

// fuzzSmallIndexTree is fuzzSeedTree with contents of zeros and short
// patterns, whose checkpoint windows compress to little.
var fuzzSmallIndexTree = []byte{
	0x00, 0xb8, 0x8b, 0x8f, // f0: 3000 bytes, a 4-byte pattern, an xattr
	0x0c,                   // d/ (directory)
	0x28, 0x00, 0x90, 0x1b, // d/f1: 4096 bytes, a repeated 7-byte pattern
	0x15,                   // d/e/f0: symlink
	0x47, 0x00, 0x50, 0x02, // f2: sparse, 20480 bytes logical, 2 chunks:
	0x10, 0x00, 0x00, 0x0a, // gap 16, 2561 bytes
	0xa0, 0x0f, 0x00, 0x04, // gap 4000, 1025 bytes
	0x13,                   // a 5-byte pattern
	0x66,                   // f3: hard link to f0
	0x60, 0x50, 0xa3, 0x00, // f3: 9040 zeros, replaces the link
	0x18, 0x00, 0x00, 0x00, // x/f0: empty
}
