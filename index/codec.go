package index

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"slices"

	"github.com/tarmount/tarmount/index/inflate"
)

// The codec registry: everything this package decides by the codec of an
// archive is a field of its entry in registry, looked up with Codec.def.
// No other file switches on a Codec.

// Codec is the compression of the archive as stored.
type Codec uint8

// Codecs.
const (
	CodecNone Codec = iota + 1
	CodecGzip
	CodecZstd
	CodecLZ4
	CodecBzip2
	CodecXz

	codecEnd // one past the last codec
)

// codec is what the package knows of one compression format.
type codec struct {
	id   Codec
	name string
	// sniff reports whether head, the first bytes of a stream (after any
	// skippable frames), starts a stream of this codec.
	sniff func(head []byte) bool
	// newPass returns the index pass decoder over r, which reports to
	// rec, and a function (never nil) that stops what the decoder runs in
	// the background when the pass ends early. Nil for a plain tar, whose
	// stream is scanned as it is stored.
	newPass func(r io.Reader, rec *recorder) (passDecoder, func(), error)
	// resume returns the index pass decoder over r, which yields the
	// object from cp.In on, resumed at checkpoint cp (window is the
	// output before it, decompressed), as newPass. Nil when the pass
	// cannot start at a checkpoint: no partial index is kept for the
	// codec (partial.go).
	resume func(r io.Reader, cp Checkpoint, window []byte, rec *recorder) (passDecoder, func(), error)
	// decodeSpan decodes one span from its checkpoint (a plain tar has
	// no checkpoints: its bytes are read where they lie).
	decodeSpan spanDecoder
	// kinds are the checkpoint kinds an index of this codec may hold.
	kinds []inflate.Kind
	// midKind is the kind of the resume points inside a span served
	// from the local copy that a partial index of this codec may hold
	// (0: none; partial.go). They are never in an index.
	midKind inflate.Kind
	// streamOnly says why a stream-only archive of this codec can be read
	// only from the start of its stream ("": its streams are decoded from
	// their start).
	streamOnly string
}

// spanDecoder decodes exactly size bytes of a span from its checkpoint cp
// into buf (or a buffer of its own when buf is too small). comp holds the
// compressed bytes from cp.In to where the span ends, window the output
// before cp (nil when cp keeps none), and endBit the bit in comp where
// the span ends when the next checkpoint is inside a byte (-1 when the
// span ends with comp).
type spanDecoder func(comp []byte, cp Checkpoint, window []byte, endBit, size int64, buf []byte) ([]byte, error)

// passDecoder is the decoded tar stream of one codec in the index pass. It
// hands every decoded byte to its recorder and reports checkpoints there.
type passDecoder interface {
	io.Reader
	// finish decodes to the end of the archive, checking what trailing
	// checksums say, and returns the decoded size and where the last
	// frame or member ends in the object.
	finish() (tarSize int64, end int64, err error)
}

// trailer is a passDecoder that may ignore data after the end of the
// archive, as its codec's tool does: trailing says so, for a warning, or
// is "".
type trailer interface{ trailing() string }

// registry holds every codec once, in the order sniffing tries them: a plain
// tar, recognized by a header checksum rather than by a magic number, last.
var registry = []codec{
	{
		id:    CodecGzip,
		name:  "gzip",
		sniff: startsWith(magicGzip),
		newPass: func(r io.Reader, rec *recorder) (passDecoder, func(), error) {
			return passClosing(newGzipPass(r, rec), nil)
		},
		resume: func(r io.Reader, cp Checkpoint, window []byte, rec *recorder) (passDecoder, func(), error) {
			return passClosing(newGzipPassAt(r, cp, window, rec))
		},
		decodeSpan: decodeGzipSpan,
		kinds:      []inflate.Kind{inflate.KindMember, inflate.KindBlock},
	},
	{
		id:    CodecZstd,
		name:  "zstd",
		sniff: startsWith(magicZstd),
		newPass: func(r io.Reader, rec *recorder) (passDecoder, func(), error) {
			return passClosing(newZstdPass(r, rec))
		},
		resume: func(r io.Reader, cp Checkpoint, window []byte, rec *recorder) (passDecoder, func(), error) {
			return passClosing(newZstdPassAt(r, cp, window, rec))
		},
		midKind:    kindZstdBlock,
		decodeSpan: decodeZstdSpan,
		kinds:      []inflate.Kind{kindFrame, kindLocal},
		streamOnly: "it has a zstd frame too big to decode per read (the zstd CLI and tar --zstd write one frame)",
	},
	{
		id:    CodecLZ4,
		name:  "lz4",
		sniff: startsWith(magicLZ4, magicLZ4Legacy),
		newPass: func(r io.Reader, rec *recorder) (passDecoder, func(), error) {
			return passClosing(newLZ4Pass(r, rec), nil)
		},
		resume: func(r io.Reader, cp Checkpoint, window []byte, rec *recorder) (passDecoder, func(), error) {
			return passClosing(newLZ4PassAt(r, cp, window, rec))
		},
		decodeSpan: decodeLZ4Span,
		kinds:      []inflate.Kind{kindFrame, kindLZ4Block, kindLZ4Legacy},
	},
	{
		id:      CodecXz,
		name:    "xz",
		sniff:   startsWith(magicXz),
		newPass: func(r io.Reader, rec *recorder) (passDecoder, func(), error) { return passOf(newXzPass(r, rec)) },
		resume: func(r io.Reader, cp Checkpoint, _ []byte, rec *recorder) (passDecoder, func(), error) {
			return passOf(newXzPassAt(r, cp, rec))
		},
		decodeSpan: decodeXzSpan,
		kinds:      []inflate.Kind{kindXzBlock, kindLocal},
		streamOnly: "it has an xz stream of one block (xz without -T writes one) or a block too big to decode per read",
	},
	{
		id:   CodecBzip2,
		name: "bzip2",
		sniff: func(head []byte) bool {
			return len(head) >= 10 && bytes.HasPrefix(head, magicBzip2) && head[3] >= '1' && head[3] <= '9' &&
				(bytes.HasPrefix(head[4:], []byte{0x31, 0x41, 0x59, 0x26, 0x53, 0x59}) ||
					bytes.HasPrefix(head[4:], []byte{0x17, 0x72, 0x45, 0x38, 0x50, 0x90}))
		},
		newPass: func(r io.Reader, rec *recorder) (passDecoder, func(), error) {
			return passClosing(newBzip2Pass(r, rec), nil)
		},
		resume: func(r io.Reader, cp Checkpoint, _ []byte, rec *recorder) (passDecoder, func(), error) {
			return passClosing(newBzip2PassAt(r, cp, rec))
		},
		decodeSpan: decodeBzip2Span,
		kinds:      []inflate.Kind{kindBzip2Block, kindLocal},
	},
	{
		id:   CodecNone,
		name: "tar",
		sniff: func(head []byte) bool {
			// A tar header, or the end-of-archive marker alone: an
			// empty archive, as tar -t lists it (Go's archive/tar
			// writes one for no members).
			return len(head) >= 512 && looksLikeTar(head[:512]) ||
				len(head) >= 1024 && bytes.Count(head[:1024], []byte{0}) == 1024
		},
		decodeSpan: noSpanDecoder("tar"),
	},
}

// startsWith returns a sniff func that looks for any of magics.
func startsWith(magics ...[]byte) func(head []byte) bool {
	return func(head []byte) bool {
		for _, m := range magics {
			if bytes.HasPrefix(head, m) {
				return true
			}
		}
		return false
	}
}

// unknownCodec stands for a Codec value that no codec registered: it
// decodes nothing.
var unknownCodec = codec{
	name: "unknown",
	newPass: func(io.Reader, *recorder) (passDecoder, func(), error) {
		return nil, nop, fmt.Errorf("%w: no decoder for unknown", ErrUnsupported)
	},
	decodeSpan: noSpanDecoder("unknown"),
}

// noSpanDecoder returns the span decoder of a codec that has none.
func noSpanDecoder(name string) spanDecoder {
	return func([]byte, Checkpoint, []byte, int64, int64, []byte) ([]byte, error) {
		return nil, fmt.Errorf("no span decoder for %s", name)
	}
}

// codecs is registry by Codec; filled once, at init.
var codecs [codecEnd]*codec

func init() {
	for i := range registry {
		c := &registry[i]
		if c.id <= 0 || c.id >= codecEnd || codecs[c.id] != nil {
			panic(fmt.Sprintf("index: codec %d (%s) registered twice or out of range", c.id, c.name))
		}
		codecs[c.id] = c
	}
}

// def returns the registered codec c, or unknownCodec.
func (c Codec) def() *codec {
	if c < codecEnd && codecs[c] != nil {
		return codecs[c]
	}
	return &unknownCodec
}

// known reports whether c is a registered codec.
func (c Codec) known() bool { return c.def() != &unknownCodec }

// compressed reports whether an archive in codec c is decoded through
// checkpoints; a plain tar's bytes are read where they lie.
func (c Codec) compressed() bool { return c.def().compressed() }

// Compressed reports whether an archive in codec c must be decoded; a
// plain tar's bytes are its members' bytes, read where they lie.
func (c Codec) Compressed() bool { return c.compressed() }

func (c *codec) compressed() bool { return c.newPass != nil }

func (c Codec) String() string { return c.def().name }

// StreamOnlyReason says why an archive in codec c can be read only from
// the start of its stream, for the log line of a stream-only archive.
func (c Codec) StreamOnlyReason() string {
	if r := c.def().streamOnly; r != "" {
		return r
	}
	return c.String() + " streams are decoded from their start"
}

// kindAllowed reports whether a checkpoint of kind k may appear in an
// archive compressed with c.
// resumable reports whether a pass over an archive in c can resume from a
// partial index: a plain tar at any member, a compressed one when its
// pass can start at a checkpoint.
func (c Codec) resumable() bool { return !c.compressed() || c.def().resume != nil }

func kindAllowed(c Codec, k inflate.Kind) bool { return slices.Contains(c.def().kinds, k) }

func nop() {}

// passOf returns a pass decoder built by a codec's constructor, with
// nothing to stop.
func passOf[D passDecoder](d D, err error) (passDecoder, func(), error) {
	if err != nil {
		return nil, nop, err
	}
	return d, nop, nil
}

// passClosing is passOf for a decoder that runs work in the background,
// which its close stops.
func passClosing[D interface {
	passDecoder
	close()
}](d D, err error) (passDecoder, func(), error) {
	if err != nil {
		return nil, nop, err
	}
	return d, d.close, nil
}

// newPass returns the index pass decoder of a compressed codec over r (see
// codec.newPass).
func newPass(r io.Reader, c Codec, rec *recorder) (passDecoder, func(), error) {
	if c.def().newPass == nil {
		return nil, nop, fmt.Errorf("%w: no decoder for %s", ErrUnsupported, c)
	}
	return c.def().newPass(r, rec)
}

// sniffStream tells the codec of the stream in p from its first bytes.
// Skippable frames at the start (zstd and lz4 share them) are looked past
// to the first real frame. It returns 0 and the bytes it saw when it knows
// no codec; first bytes that match none, or are zeros (an empty tar, or
// the system area of an ISO 9660 image), make it read 32 KiB ahead to
// tell an ISO image (peekISO).
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
		c := sniff(b)
		if off == 0 && (c == 0 || c == CodecNone && !looksLikeTar(b[:512])) {
			// Unknown, or zero blocks: an empty tar, or the system
			// area of an ISO 9660 image.
			h, iso, err := peekISO(p)
			switch {
			case err != nil:
				return 0, nil, err
			case iso || c == 0:
				return 0, h, nil
			}
		}
		if c == 0 {
			return 0, b, nil
		}
		return c, head, nil
	}
}

// sniff tells the codec from the first bytes of a stream (after any
// skippable frames), or 0.
func sniff(head []byte) Codec {
	for i := range registry {
		if registry[i].sniff(head) {
			return registry[i].id
		}
	}
	return 0
}

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
	// kindZstdBlock: only in a partial index, as the point where the pass
	// resumes inside a zstd frame served from the local copy: In is the
	// header of the block after the boundary, Window the output before
	// it (the frame's window, at most 32 MiB), and the pass state the
	// walker's state there (zstdTracker.point).
	kindZstdBlock
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
