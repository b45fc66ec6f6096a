package index

import (
	"fmt"
	"io"

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

// passDecoder is the decoded tar stream of one codec in the index pass. It
// hands every decoded byte to its recorder and reports checkpoints there.
type passDecoder interface {
	io.Reader
	// finish decodes to the end of the archive, checking what trailing
	// checksums say, and returns the decoded size and where the last
	// frame or member ends in the object.
	finish() (tarSize int64, end int64, err error)
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
