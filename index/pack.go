package index

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index/tarscan"
)

// A packed archive is seekable zstd (the zstd seekable format) whose
// frames each hold one span of the tar stream, followed by this index in
// a skippable frame, followed by the seek table, which lists the index
// frame too (decompressed size 0), as the format allows for skippable
// frames:
//
//	| frame 0 | frame 1 | ... | skippable 0x184D2A5B: index file | skippable 0x184D2A5E: seek table |
//	                                                                 entries (u32 comp, u32 decomp)...
//	                                                                 footer: u32 frames, u8 0, u32 0x8F92EAB1
//
// zstd -d and any seekable zstd reader read it as usual; a mount reads the
// tail with a range request or two and needs no index pass at all. The
// embedded index has no source identity (it is inside the object it
// describes): its Source.Size is where the data frames end, and the
// identity of the object is filled in when it is read.

const (
	seekTableMagic   = 0x184D2A5E
	embedMagic       = 0x184D2A5B
	seekableFooter   = 0x8F92EAB1
	seekFooterSize   = 9
	tailReadBytes    = 64 << 10
	maxSeekTableSize = 1 << 30
)

// ErrNoEmbeddedIndex says that an archive carries no index of its own.
var ErrNoEmbeddedIndex = errors.New("index: no embedded index")

// PackOptions tune Pack.
type PackOptions struct {
	// Span is the decoded size of each frame (DefaultSpan when zero).
	Span int64
	// Level is the zstd level (zstd.SpeedDefault when zero).
	Level  zstd.EncoderLevel
	Limits tarscan.Limits
	Logger *slog.Logger
}

// Pack reads a tar stream from r and writes it to w as a packed archive:
// seekable zstd with frames of one span, the index embedded. It returns
// the index (without a source identity).
func Pack(ctx context.Context, w io.Writer, r io.Reader, opts PackOptions) (*Index, error) {
	if opts.Span <= 0 {
		opts.Span = DefaultSpan
	}
	if opts.Span > 1<<30 {
		return nil, fmt.Errorf("pack: span %d too large", opts.Span)
	}
	if opts.Level == 0 {
		opts.Level = zstd.SpeedDefault
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(opts.Level), zstd.WithEncoderConcurrency(1),
		zstd.WithEncoderCRC(true), zstd.WithWindowSize(zstdWindowFor(opts.Span)))
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	fw := &frameWriter{w: w, enc: enc, span: opts.Span, buf: make([]byte, 0, opts.Span)}
	// The tar scan sees the stream as plain tar; every byte read goes to
	// the frames too.
	scanned, err := Build(ctx, io.TeeReader(r, fw), fetch.Identity{}, BuildOptions{Span: opts.Span, Limits: opts.Limits, Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	if scanned.Codec.compressed() {
		return nil, fmt.Errorf("%w: pack wants a decoded tar stream, got %s", ErrUnsupported, scanned.Codec)
	}
	if _, err := io.Copy(fw, r); err != nil { // what follows the end of the archive
		return nil, err
	}
	if err := fw.flush(); err != nil {
		return nil, err
	}
	ix := scanned
	ix.Codec = CodecZstd
	ix.TarSize = fw.out
	ix.End = CompressedOffset(fw.off)
	ix.Source = fetch.Identity{Size: fw.off}
	ix.Checkpoints = fw.cps
	ix.Digests = fw.digests
	data, err := ix.Marshal()
	if err != nil {
		return nil, err
	}
	if len(data) > 1<<31 {
		return nil, fmt.Errorf("pack: index of %d bytes too large to embed", len(data))
	}
	frame := binary.LittleEndian.AppendUint32(nil, embedMagic)
	frame = binary.LittleEndian.AppendUint32(frame, uint32(len(data)))
	frame = append(frame, data...)
	if _, err := w.Write(frame); err != nil {
		return nil, err
	}
	fw.sizes = append(fw.sizes, [2]uint32{uint32(len(frame)), 0})
	if _, err := w.Write(seekTable(fw.sizes)); err != nil {
		return nil, err
	}
	return ix, nil
}

// zstdWindowFor returns a window that covers a frame of span bytes (the
// frame holds the whole span anyway), within zstd's limits.
func zstdWindowFor(span int64) int {
	w := zstd.MinWindowSize
	for int64(w) < span && w < 8<<20 {
		w *= 2
	}
	return w
}

// seekTable encodes the seek table frame for frames of the given
// compressed and decompressed sizes.
func seekTable(sizes [][2]uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, seekTableMagic)
	b = binary.LittleEndian.AppendUint32(b, uint32(8*len(sizes)+seekFooterSize))
	for _, s := range sizes {
		b = binary.LittleEndian.AppendUint32(b, s[0])
		b = binary.LittleEndian.AppendUint32(b, s[1])
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(sizes)))
	b = append(b, 0)
	return binary.LittleEndian.AppendUint32(b, seekableFooter)
}

// frameWriter cuts what it is given into frames of span bytes.
type frameWriter struct {
	w       io.Writer
	enc     *zstd.Encoder
	span    int64
	buf     []byte
	comp    []byte
	off     int64 // compressed bytes written
	out     int64 // decoded bytes framed
	cps     []Checkpoint
	digests []uint64
	sizes   [][2]uint32
}

func (f *frameWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), int(f.span)-len(f.buf))
		f.buf = append(f.buf, p[:k]...)
		p = p[k:]
		if int64(len(f.buf)) == f.span {
			if err := f.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

func (f *frameWriter) flush() error {
	if len(f.buf) == 0 {
		return nil
	}
	f.comp = f.enc.EncodeAll(f.buf, f.comp[:0])
	if _, err := f.w.Write(f.comp); err != nil {
		return err
	}
	f.cps = append(f.cps, Checkpoint{Kind: kindFrame, In: CompressedOffset(f.off), Out: UncompressedOffset(f.out)})
	f.digests = append(f.digests, xxhash.Sum64(f.buf))
	f.sizes = append(f.sizes, [2]uint32{uint32(len(f.comp)), uint32(len(f.buf))})
	f.off += int64(len(f.comp))
	f.out += int64(len(f.buf))
	f.buf = f.buf[:0]
	return nil
}

// MayEmbed reports whether an archive whose first byte is first may hold
// an index embedded by Pack: a zstd stream, which starts with a zstd
// frame or a skippable one. For any other LoadEmbedded would only find
// none.
func MayEmbed(first byte) bool {
	return first == magicZstd[0] || first&0xF0 == 0x50
}

// MayEmbedName reports whether an archive named name (a path or a URL)
// likely holds an index embedded by Pack, as far as its name tells: a
// zstd name (.zst, .zstd, .tzst). It is a hint, for asking for the end
// of the archive early; MayEmbed decides, from the archive's first byte.
func MayEmbedName(name string) bool {
	name = strings.ToLower(name)
	if i := strings.IndexAny(name, "?#"); i >= 0 {
		name = name[:i]
	}
	for _, ext := range []string{".zst", ".zstd", ".tzst"} {
		if strings.HasSuffix(name, ext) {
			return true
		}
	}
	return false
}

// LoadEmbedded reads the index that Pack embedded in the archive behind
// src, whose identity is id, from the seek table at its end: one range
// request for the tail, one more when the index does not fit in it. It
// returns ErrNoEmbeddedIndex for any other archive.
func LoadEmbedded(ctx context.Context, src Source, id fetch.Identity) (*Index, error) {
	size := id.Size
	if size < seekFooterSize+8 {
		return nil, ErrNoEmbeddedIndex
	}
	tailOff := max(0, size-tailReadBytes)
	tail := make([]byte, size-tailOff)
	if err := readFullAt(ctx, src, tail, tailOff); err != nil {
		return nil, err
	}
	foot := tail[len(tail)-seekFooterSize:]
	if binary.LittleEndian.Uint32(foot[5:]) != seekableFooter {
		return nil, ErrNoEmbeddedIndex
	}
	frames := int64(binary.LittleEndian.Uint32(foot))
	entry := int64(8)
	if foot[4]&0x80 != 0 {
		entry = 12
	}
	tableSize := 8 + frames*entry + seekFooterSize
	if frames < 2 || tableSize > min(size, maxSeekTableSize) {
		return nil, ErrNoEmbeddedIndex
	}
	table, err := readTail(ctx, src, tail, tailOff, size-tableSize, tableSize)
	if err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(table) != seekTableMagic || int64(binary.LittleEndian.Uint32(table[4:])) != tableSize-8 {
		return nil, ErrNoEmbeddedIndex
	}
	var dataEnd, tarSize int64
	entries := table[8 : 8+frames*entry]
	for i := int64(0); i < frames-1; i++ {
		e := entries[i*entry:]
		dataEnd += int64(binary.LittleEndian.Uint32(e))
		tarSize += int64(binary.LittleEndian.Uint32(e[4:]))
	}
	last := entries[(frames-1)*entry:]
	frameLen := int64(binary.LittleEndian.Uint32(last))
	if binary.LittleEndian.Uint32(last[4:]) != 0 || dataEnd+frameLen != size-tableSize || frameLen < 8 {
		return nil, ErrNoEmbeddedIndex
	}
	frame, err := readTail(ctx, src, tail, tailOff, dataEnd, frameLen)
	if err != nil {
		return nil, err
	}
	if binary.LittleEndian.Uint32(frame) != embedMagic || int64(binary.LittleEndian.Uint32(frame[4:])) != frameLen-8 {
		return nil, ErrNoEmbeddedIndex
	}
	ix, err := Unmarshal(frame[8:])
	if err != nil {
		return nil, fmt.Errorf("embedded index: %w", err)
	}
	if ix.Codec != CodecZstd || ix.Source.Size != dataEnd || int64(ix.End) != dataEnd || ix.TarSize != tarSize || ix.StreamOnly() {
		return nil, fmt.Errorf("%w: embedded index does not match the seek table", ErrBadIndex)
	}
	ix.Source = id
	return ix, nil
}

// readTail returns n bytes at off, from tail (which holds the object from
// tailOff) when it has them, else with a range request.
func readTail(ctx context.Context, src Source, tail []byte, tailOff, off, n int64) ([]byte, error) {
	if off >= tailOff {
		return tail[off-tailOff : off-tailOff+n], nil
	}
	b := make([]byte, n)
	if err := readFullAt(ctx, src, b, off); err != nil {
		return nil, err
	}
	return b, nil
}

func readFullAt(ctx context.Context, src Source, p []byte, off int64) error {
	if err := readFull(ctx, src.ReadAt, p, off); err != nil {
		return fmt.Errorf("read archive tail at %d: %w", off, err)
	}
	return nil
}
