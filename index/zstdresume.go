package index

import (
	"encoding/binary"
	"fmt"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"
)

// Resuming a zstd frame at a block boundary. klauspost/compress cannot be
// handed a decoder's state, but it takes a dictionary (RFC 8878 5), and a
// dictionary is exactly that state: its entropy tables are "the previous
// ones" for the first block's treeless literals and repeat-mode tables,
// its three offsets the initial repeat offsets, and its content the
// history matches may reach into. So the state the walker (zstdwalk.go)
// followed up to the boundary, with the window of output before it,
// becomes a dictionary, and a synthesized frame header naming it is
// followed by the original frame's remaining blocks as they are stored:
//
//	dictionary  37 a4 30 ec | id | Huffman description | OF, ML, LL FSE
//	            descriptions | 3 repeat offsets (u32 LE) | window bytes
//	frame       28 b5 2f fd | 03 (dict id of 4 bytes, no checksum, no
//	            size) | window descriptor | id | blocks from the boundary
//	            up to the last, verbatim
//
// The original frame's content checksum is not fed to the decoder: the
// pass checks it itself, continuing the XXH64 of the frame's output from
// its state at the boundary (zstdResumePoint.sum).

// zstdMaxResumeWindow bounds the window a resume point keeps: frames with
// a bigger window are not resumed in the middle.
const zstdMaxResumeWindow = 32 << 20

// zstdResumeDictID names the dictionary of a resumed frame.
const zstdResumeDictID = 0x7a72736d

// zstdResumePoint is the state of a frame at a block boundary, as a
// partial index keeps it (with the window and the offsets, which the
// checkpoint holds).
type zstdResumePoint struct {
	window   int64 // the frame's window size
	checksum bool  // the frame ends with a content checksum
	sum      []byte
	state    zstdState
}

// zstdPointVersion tags the encoding of a zstdResumePoint.
const zstdPointVersion = 1

// marshal encodes p:
//
//	version (byte) | flags (byte: 1 checksum) | window (uvarint) |
//	[xxh64 state (uvarint length, bytes)] | 3 repeat offsets (uvarint) |
//	Huffman description (uvarint length, bytes) |
//	for LL, OF, ML: mode (byte: 0 none, 1 RLE, 2 FSE) and RLE symbol
//	(byte) or FSE description
func (p *zstdResumePoint) marshal() []byte {
	e := &encoder{}
	e.byte(zstdPointVersion)
	var flags uint8
	if p.checksum {
		flags |= 1
	}
	e.byte(flags)
	e.uvarint(uint64(p.window))
	if p.checksum {
		e.raw(string(p.sum))
	}
	for _, r := range p.state.reps {
		e.uvarint(uint64(r))
	}
	e.raw(string(p.state.huf))
	for _, t := range p.state.tables {
		switch {
		case t == nil:
			e.byte(0)
		case t.rle:
			e.byte(1)
			e.byte(uint8(len(t.norm) - 1))
		default:
			e.byte(2)
			e.buf = appendNCount(e.buf, t)
		}
	}
	return e.buf
}

// unmarshalZstdResumePoint decodes what marshal wrote. b is hostile: a
// damaged point fails with ErrZstdWalk.
func unmarshalZstdResumePoint(b []byte) (*zstdResumePoint, error) {
	bad := func(what string) (*zstdResumePoint, error) {
		return nil, fmt.Errorf("%w: damaged resume point (%s)", ErrZstdWalk, what)
	}
	if len(b) < 2 || b[0] != zstdPointVersion || b[1]&^1 != 0 {
		return bad("version")
	}
	p := &zstdResumePoint{checksum: b[1]&1 != 0}
	d := &decoder{buf: b[2:]}
	p.window = int64(d.uvarint("window"))
	if p.checksum {
		p.sum = []byte(d.raw("checksum state"))
		var x xxhash.Digest
		if d.err != nil || x.UnmarshalBinary(p.sum) != nil {
			return bad("checksum state")
		}
	}
	for i := range p.state.reps {
		p.state.reps[i] = uint32(d.bounded("repeat offset", zstdMaxResumeWindow))
	}
	if huf := d.raw("huffman"); huf != "" {
		p.state.huf = []byte(huf)
	}
	if d.err != nil || p.window <= 0 || p.window > zstdMaxResumeWindow || len(p.state.huf) > 129 {
		return bad("header")
	}
	for _, r := range p.state.reps {
		if r == 0 {
			return bad("repeat offset")
		}
	}
	rest := d.buf[d.pos:]
	for i := range p.state.tables {
		if len(rest) < 1 {
			return bad("tables")
		}
		mode := rest[0]
		rest = rest[1:]
		switch mode {
		case 0:
		case 1:
			if len(rest) < 1 || int(rest[0]) > zstdMaxSymbol[i] {
				return bad("rle")
			}
			p.state.tables[i] = rleTable(rest[0])
			rest = rest[1:]
		case 2:
			norm, log, n, err := readNCount(rest, zstdMaxSymbol[i], zstdMaxLog[i])
			if err != nil {
				return nil, err
			}
			t, err := newFSETable(log, norm)
			if err != nil {
				return nil, err
			}
			p.state.tables[i], rest = t, rest[n:]
		default:
			return bad("table mode")
		}
	}
	if len(rest) != 0 {
		return bad("trailing bytes")
	}
	return p, nil
}

// dict returns the dictionary that continues the frame after the
// boundary, with window (the output before it, at most p.window bytes)
// as its content.
func (p *zstdResumePoint) dict(window []byte) ([]byte, error) {
	if int64(len(window)) > p.window {
		return nil, fmt.Errorf("%w: window of %d bytes over the frame's %d", ErrZstdWalk, len(window), p.window)
	}
	d := binary.LittleEndian.AppendUint32(nil, 0xec30a437)
	d = binary.LittleEndian.AppendUint32(d, zstdResumeDictID)
	huf := p.state.huf
	if huf == nil {
		// No literals were compressed yet, so none can be treeless:
		// any valid tree will do (two symbols, weights 1 and the
		// implied 1).
		huf = []byte{128, 0x10}
	}
	d = append(d, huf...)
	for _, i := range [3]int{zstdOF, zstdML, zstdLL} {
		t := p.state.tables[i]
		if t == nil || t.rle {
			// Repeat mode before any table is corrupt anyway; an RLE
			// table (no state bits) has no dictionary form, and
			// resume checked that no block repeats it.
			t = zstdPredefined[i]
		}
		d = appendNCount(d, t)
	}
	for _, r := range p.state.reps {
		// Kept as they are, even past the window: early in a frame
		// the initial 4 and 8 may be used once there is more output.
		d = binary.LittleEndian.AppendUint32(d, r)
	}
	return append(d, window...), nil
}

// checkRLE fails when an RLE table of p's is repeated by the next block
// with sequences in cr: a dictionary cannot hold a table without state
// bits, so the frame cannot be resumed there. It looks that far ahead in
// cr's buffer only.
func (p *zstdResumePoint) checkRLE(cr *countingReader) error {
	rle := false
	for _, t := range p.state.tables {
		rle = rle || t != nil && t.rle
	}
	if !rle {
		return nil
	}
	w := newZstdWalker(0, p.window, nil)
	w.at.state = p.state
	ahead := cr.peek(256 << 10)
	for len(ahead) > 0 && w.seqBlocks == 0 && !w.done && w.err == nil {
		k := min(len(ahead), 4096)
		w.write(ahead[:k])
		ahead = ahead[k:]
	}
	if w.rleRepeated || w.seqBlocks == 0 && !w.done {
		return fmt.Errorf("%w: an RLE sequence table is repeated after the boundary", ErrZstdWalk)
	}
	return nil
}

// windowDescriptor returns the frame header byte that gives the smallest
// window at least size (RFC 8878 3.1.1.1.2).
func windowDescriptor(size int64) byte {
	for e := range 32 {
		base := int64(1) << (10 + e)
		for m := range 8 {
			if base+int64(m)*(base/8) >= size {
				return byte(e<<3 | m)
			}
		}
	}
	return 0xff
}

// resumedFrameReader yields the synthesized header of a resumed frame,
// then the original frame's blocks from cr up to the last (not its
// checksum), then io.EOF.
type resumedFrameReader struct {
	head []byte
	fr   zstdFrameReader
}

func (r *resumedFrameReader) Read(p []byte) (int, error) {
	if len(r.head) > 0 {
		n := copy(p, r.head)
		r.head = r.head[n:]
		return n, nil
	}
	return r.fr.Read(p)
}

// resume returns a decoder of the rest of the frame after the boundary,
// reading its blocks from cr (at the header of the block after the
// boundary) and leaving the frame's checksum unread; window is the output
// before the boundary (at most p.window bytes; fewer only when the frame
// had not decoded more); tee, if set, sees the blocks as they are read.
func (p *zstdResumePoint) resume(cr *countingReader, window []byte, tee func([]byte)) (*zstd.Decoder, error) {
	if err := p.checkRLE(cr); err != nil {
		return nil, err
	}
	dict, err := p.dict(window)
	if err != nil {
		return nil, err
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(false),
		zstd.WithDecoderMaxWindow(zstdMaxResumeWindow), zstd.WithDecoderDicts(dict))
	if err != nil {
		return nil, fmt.Errorf("%w: resume dictionary refused: %w", ErrZstdWalk, err)
	}
	head := binary.LittleEndian.AppendUint32(nil, zstdMagic)
	head = append(head, 0x03, windowDescriptor(p.window))
	head = binary.LittleEndian.AppendUint32(head, zstdResumeDictID)
	r := &resumedFrameReader{head: head}
	r.fr = zstdFrameReader{cr: cr, checksum: false, tee: tee}
	if err := dec.Reset(r); err != nil {
		dec.Close()
		return nil, err
	}
	return dec, nil
}

// zstdWindowSize returns the window size a frame header gives (RFC 8878
// 3.1.1.1.2): the content size for a single-segment frame.
func zstdWindowSize(b []byte, h zstdFrame) int64 {
	if b[4]&0x20 != 0 {
		return h.contentSize
	}
	wd := b[5]
	base := int64(1) << (10 + wd>>3)
	return base + int64(wd&7)*(base/8)
}
