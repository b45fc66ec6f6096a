package index

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"

	"github.com/tarmount/tarmount/index/inflate"
)

// Checkpoint kinds beyond gzip's (inflate.KindMember, inflate.KindBlock).
// Every codec that can be entered in the middle has its own; kindLocal
// marks spans that only the local decoded copy can serve.
const (
	// kindFrame: In is the first byte of a zstd frame, an lz4 frame or
	// an lz4 legacy frame (or a skippable frame before one); no window.
	kindFrame inflate.Kind = 16 + iota
	// kindLZ4Block: In is the header of a block inside an lz4 frame whose
	// FLG byte is in Flags; Window holds up to 64 KiB of preceding
	// output when blocks are linked.
	kindLZ4Block
	// kindLZ4Legacy: In is the size field of a block of an lz4 legacy
	// frame; no window.
	kindLZ4Legacy
	// kindLocal: the span cannot be decoded on its own (it lies inside a
	// zstd frame or an xz block too big to decode per read, or in an xz
	// stream of one block): it is read from the local decoded copy that
	// the index pass wrote.
	kindLocal
	// kindBzip2Block: In and Bit locate the first bit of a bzip2 block
	// magic (bits packed MSB first); Flags holds the stream's level (1-9,
	// hundreds of kB per block); no window.
	kindBzip2Block
	// kindXzBlock: In is the header of a block of an xz stream whose
	// check type is in Flags; no window.
	kindXzBlock
)

// Magic numbers, as they appear at the start of a stream.
var (
	magicGzip      = []byte{0x1f, 0x8b}
	magicZstd      = []byte{0x28, 0xb5, 0x2f, 0xfd}
	magicLZ4       = []byte{0x04, 0x22, 0x4d, 0x18}
	magicLZ4Legacy = []byte{0x02, 0x21, 0x4c, 0x18}
	magicBzip2     = []byte("BZh")
	magicXz        = []byte{0xfd, '7', 'z', 'X', 'Z', 0}
)

const (
	zstdMagic      = 0xFD2FB528
	lz4Magic       = 0x184D2204
	lz4LegacyMagic = 0x184C2102
)

// isSkippable reports whether a little-endian magic number starts a
// skippable frame (the same in zstd and lz4: 0x184D2A50 to 0x184D2A5F).
func isSkippable(magic uint32) bool { return magic&0xFFFFFFF0 == 0x184D2A50 }

// sniffPeek is how far sniffing looks past skippable frames at the start.
const sniffPeek = 1 << 20

// sniffStream tells the codec of the stream in p from its first bytes.
// Skippable frames at the start (zstd and lz4 share them) are looked past
// to the first real frame. It returns 0 and the bytes it saw when it knows
// no codec.
func sniffStream(p *peekReader) (Codec, []byte, error) {
	head, err := p.peek(1024)
	if err != nil {
		return 0, nil, err
	}
	off := 0
	for {
		b := head[off:]
		if len(b) >= 8 && isSkippable(binary.LittleEndian.Uint32(b)) {
			next := off + 8 + int(binary.LittleEndian.Uint32(b[4:]))
			if next+4 > sniffPeek {
				return CodecZstd, head, nil // zstd is by far the likelier
			}
			if head, err = p.peek(next + 512); err != nil {
				return 0, nil, err
			}
			if len(head) < next+4 {
				return 0, head, nil
			}
			off = next
			continue
		}
		if c := sniff(b); c != 0 {
			return c, head, nil
		}
		return 0, b, nil
	}
}

// sniff tells the codec from the first bytes of a stream (after any
// skippable frames).
func sniff(head []byte) Codec {
	switch {
	case bytes.HasPrefix(head, magicGzip):
		return CodecGzip
	case bytes.HasPrefix(head, magicZstd):
		return CodecZstd
	case bytes.HasPrefix(head, magicLZ4), bytes.HasPrefix(head, magicLZ4Legacy):
		return CodecLZ4
	case bytes.HasPrefix(head, magicXz):
		return CodecXz
	case len(head) >= 10 && bytes.HasPrefix(head, magicBzip2) && head[3] >= '1' && head[3] <= '9' &&
		(bytes.HasPrefix(head[4:], []byte{0x31, 0x41, 0x59, 0x26, 0x53, 0x59}) ||
			bytes.HasPrefix(head[4:], []byte{0x17, 0x72, 0x45, 0x38, 0x50, 0x90})):
		return CodecBzip2
	case len(head) >= 512 && looksLikeTar(head[:512]):
		return CodecNone
	case len(head) >= 1024 && bytes.Count(head[:1024], []byte{0}) == 1024:
		// The end-of-archive marker alone: an empty archive, as tar
		// -t lists it (Go's archive/tar writes one for no members).
		return CodecNone
	}
	return 0
}

// describe names what the first bytes of an unsupported object look like.
func describe(head []byte) string {
	magic := []struct {
		prefix []byte
		name   string
	}{
		{[]byte("PK\x03\x04"), "a zip archive"},
		{[]byte("7z\xbc\xaf\x27\x1c"), "a 7-Zip archive"},
		{[]byte("Rar!"), "a RAR archive"},
		{[]byte{0x5d, 0, 0}, "lzma (.lzma) data, which is not supported: recompress as xz or zstd"},
		{[]byte("\x89LZO"), "lzop data, which is not supported"},
		{[]byte("BZh"), "bzip2 data with a damaged header"},
		{[]byte("<"), "text or HTML, not an archive"},
	}
	for _, m := range magic {
		if bytes.HasPrefix(head, m.prefix) {
			return m.name
		}
	}
	if len(head) == 0 {
		return "empty object"
	}
	return fmt.Sprintf("not a tar archive or a known compressed format (starts with %x)", head[:min(len(head), 8)])
}

// passDecoder is the decoded tar stream of one codec in the index pass. It
// hands every decoded byte to its recorder and reports checkpoints there.
type passDecoder interface {
	io.Reader
	// finish decodes to the end of the archive, checking what trailing
	// checksums say, and returns the decoded size and where the last
	// frame or member ends in the object.
	finish() (tarSize int64, end int64, err error)
}

// recorder collects checkpoints and span digests during the index pass,
// and writes what only the local copy can serve to opts.Local.
type recorder struct {
	ix   *Index
	span int64
	hash xxhash.Digest // the decoded bytes since the last checkpoint
	out  int64         // decoded bytes so far
	// local receives decoded bytes at their offsets while toLocal is
	// set (nil: nowhere).
	local   io.WriterAt
	toLocal bool
	err     error // the first write error of local

	// localSpans: decoded bytes are cut into kindLocal spans every span
	// bytes from localFrom; localIn is their compressed offset.
	localSpans bool
	localFrom  int64
	localIn    int64
	// tentative: a zstd frame of unknown size is being decoded; if it
	// grows too big, its sub-spans become kindLocal spans. sub hashes the
	// bytes since the latest sub-span boundary; pending holds the
	// boundaries passed (end offset and digest of the sub-span ending
	// there); pre is the span hash at the frame start.
	tentative bool
	sub       xxhash.Digest
	pending   []subSpan
	pre       xxhash.Digest
	preOut    int64
	// live, if set, is told of every checkpoint and digest: they are
	// added under its lock.
	live *Live
}

type subSpan struct {
	end    int64
	digest uint64
}

func newRecorder(ix *Index, span int64, local io.WriterAt) *recorder {
	r := &recorder{ix: ix, span: span, local: local}
	r.hash.Reset()
	return r
}

// write takes decoded bytes in order.
func (r *recorder) write(p []byte) {
	if r.toLocal && r.local != nil && r.err == nil {
		r.err = writeSparse(r.local, p, r.out)
	}
	if !r.localSpans && !r.tentative {
		r.hash.Write(p)
		r.out += int64(len(p))
		return
	}
	for len(p) > 0 {
		next := r.out + r.span - (r.out-r.localFrom)%r.span
		n := int(min(int64(len(p)), next-r.out))
		r.hash.Write(p[:n])
		r.sub.Write(p[:n])
		r.out += int64(n)
		p = p[n:]
		if r.out == next {
			if r.localSpans {
				r.mark(Checkpoint{Kind: kindLocal, In: CompressedOffset(r.localIn), Out: UncompressedOffset(r.out)})
			} else {
				r.pending = append(r.pending, subSpan{r.out, r.sub.Sum64()})
			}
			r.sub.Reset()
		}
	}
}

// last returns the latest checkpoint, or nil.
func (r *recorder) last() *Checkpoint {
	if n := len(r.ix.Checkpoints); n > 0 {
		return &r.ix.Checkpoints[n-1]
	}
	return nil
}

// due reports whether a span's worth of bytes passed since the last
// checkpoint.
func (r *recorder) due() bool {
	l := r.last()
	return l == nil || r.out-int64(l.Out) >= r.span
}

// mark records a checkpoint at the current offset (c.Out must equal it).
// One at the same offset as the last replaces it.
func (r *recorder) mark(c Checkpoint) {
	r.publish(func() {
		ix := r.ix
		if l := r.last(); l != nil && l.Out == c.Out {
			*l = c
			return
		}
		if len(ix.Checkpoints) > 0 {
			ix.Digests = append(ix.Digests, r.hash.Sum64())
		}
		r.hash.Reset()
		ix.Checkpoints = append(ix.Checkpoints, c)
	})
}

// publish runs f, which adds checkpoints or digests, under the lock of
// r.live (if any), and tells it.
func (r *recorder) publish(f func()) {
	if r.live == nil {
		f()
		return
	}
	r.live.update(f)
}

// beginLocal makes every later byte, up to endLocal, go to the local copy
// in kindLocal spans; in is the compressed offset reported for them.
func (r *recorder) beginLocal(in int64) {
	r.toLocal = true
	r.localSpans = true
	r.localFrom = r.out
	r.localIn = in
	r.sub.Reset()
	r.mark(Checkpoint{Kind: kindLocal, In: CompressedOffset(in), Out: UncompressedOffset(r.out)})
}

// endLocal ends the local spans.
func (r *recorder) endLocal() {
	r.toLocal = false
	r.localSpans = false
}

// beginTentative starts a frame whose size is not known: its bytes go to
// the local copy in case it turns out too big to decode per read.
func (r *recorder) beginTentative(in int64) {
	r.toLocal = true
	r.tentative = true
	r.localFrom = r.out
	r.localIn = in
	r.sub.Reset()
	r.pending = r.pending[:0]
	r.pre = r.hash
	r.preOut = r.out
}

// promote turns the tentative frame into local spans: a kindLocal
// checkpoint at its start and at every sub-span boundary passed.
func (r *recorder) promote() {
	r.publish(func() {
		ix := r.ix
		if l := r.last(); l != nil && int64(l.Out) == r.preOut {
			*l = Checkpoint{Kind: kindLocal, In: CompressedOffset(r.localIn), Out: l.Out}
		} else {
			ix.Digests = append(ix.Digests, r.pre.Sum64())
			ix.Checkpoints = append(ix.Checkpoints, Checkpoint{Kind: kindLocal, In: CompressedOffset(r.localIn), Out: UncompressedOffset(r.preOut)})
		}
		for _, s := range r.pending {
			ix.Digests = append(ix.Digests, s.digest)
			ix.Checkpoints = append(ix.Checkpoints, Checkpoint{Kind: kindLocal, In: CompressedOffset(r.localIn), Out: UncompressedOffset(s.end)})
		}
	})
	r.pending = r.pending[:0]
	r.hash = r.sub
	r.tentative = false
	r.localSpans = true
}

// endTentative ends a tentative frame that stayed small enough.
func (r *recorder) endTentative() {
	r.tentative = false
	r.toLocal = false
	r.pending = r.pending[:0]
}

// finish closes the last span.
func (r *recorder) finish() {
	r.publish(func() {
		if len(r.ix.Checkpoints) > 0 {
			r.ix.Digests = append(r.ix.Digests, r.hash.Sum64())
		}
	})
}

// sparseBlock is the unit writeSparse leaves as a hole when it is all
// zeros.
const sparseBlock = 4096

var zeroBlock [sparseBlock]byte

// writeSparse writes p at off to w, leaving aligned all-zero blocks
// unwritten so that the file stays sparse (the caller sets its final
// size).
func writeSparse(w io.WriterAt, p []byte, off int64) error {
	for len(p) > 0 {
		n := int(min(int64(len(p)), sparseBlock-off%sparseBlock))
		// Runs of non-zero blocks are written in one call.
		if off%sparseBlock == 0 && n == sparseBlock && bytes.Equal(p[:n], zeroBlock[:]) {
			p, off = p[n:], off+int64(n)
			continue
		}
		end := n
		for end < len(p) {
			k := min(len(p)-end, sparseBlock)
			if k == sparseBlock && bytes.Equal(p[end:end+k], zeroBlock[:]) {
				break
			}
			end += k
		}
		if _, err := w.WriteAt(p[:end], off); err != nil {
			return fmt.Errorf("write local copy at %d: %w", off, err)
		}
		p, off = p[end:], off+int64(end)
	}
	return nil
}

// NewDecoder returns the decoded tar stream of an archive in any codec
// this package reads, sniffed from its first bytes, with every checksum
// the codec has verified as it goes. It keeps no checkpoints and writes
// no local copy.
func NewDecoder(r io.Reader) (io.Reader, Codec, error) {
	pr := &peekReader{r: r}
	codec, head, err := sniffStream(pr)
	if err != nil {
		return nil, 0, err
	}
	// A recorder with a span this long keeps one checkpoint: nothing accumulates.
	rec := newRecorder(&Index{}, 1<<50, nil)
	switch codec {
	case 0:
		return nil, 0, fmt.Errorf("%w: %s", ErrUnsupported, describe(head))
	case CodecNone:
		return pr, codec, nil
	}
	dec, _, err := newPass(pr, codec, rec)
	if err != nil {
		return nil, 0, err
	}
	return &finishingReader{dec: dec}, codec, nil
}

// newPass returns the index pass decoder of a compressed codec over r,
// reporting to rec, and a function (never nil) that stops what the
// decoder runs in the background when the pass ends early.
func newPass(r io.Reader, codec Codec, rec *recorder) (passDecoder, func(), error) {
	none := func() {}
	var dec passDecoder
	var err error
	switch codec {
	case CodecGzip:
		dec = newGzipPass(r, rec)
	case CodecZstd:
		dec, err = newZstdPass(r, rec)
	case CodecLZ4:
		dec = newLZ4Pass(r, rec)
	case CodecBzip2:
		b := newBzip2Pass(r, rec)
		return b, b.close, nil
	case CodecXz:
		dec, err = newXzPass(r, rec)
	default:
		err = fmt.Errorf("%w: no decoder for %s", ErrUnsupported, codec)
	}
	if err != nil {
		return nil, none, err
	}
	return dec, none, nil
}

// finishingReader reads a pass decoder and, at its end, lets it check the
// trailing checksums.
type finishingReader struct {
	dec  passDecoder
	done bool
}

func (f *finishingReader) Read(p []byte) (int, error) {
	if f.done {
		return 0, io.EOF
	}
	n, err := f.dec.Read(p)
	if err == io.EOF {
		f.done = true
		if _, _, ferr := f.dec.finish(); ferr != nil {
			return n, ferr
		}
	}
	return n, err
}
