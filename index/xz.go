package index

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"hash/crc32"
	"hash/crc64"
	"io"

	"github.com/ulikunitz/xz/lzma"
)

// An xz file is one or more streams, each followed by zero padding in
// multiples of 4 bytes:
//
//	stream        header | block ... | index | footer
//	header        magic fd 37 7a 58 5a 00 | flags 00 CC | crc32 of flags (4)
//	block         block header | LZMA2 chunks, ended by a 00 chunk | zero padding to 4 | check
//	block header  size byte s ((s+1)*4 bytes in all) | flags | [compressed size] |
//	              [uncompressed size] | filter flags (id, props size, props) ... |
//	              zero padding | crc32 of the bytes before (4)
//	index         00 | record count | (unpadded size, uncompressed size) ... |
//	              zero padding to 4 | crc32 of the bytes before (4)
//	footer        crc32 of the next 6 bytes (4) | backward size u32 LE | flags 00 CC | "YZ"
//
// Sizes and counts are variable-length integers (7 bits a byte, low bits
// first). CC is the check type of every block of the stream: 0 none (0
// bytes), 1 CRC32 (4), 4 CRC64 (8), 10 SHA-256 (32). The unpadded size of
// a block is its header, compressed data and check, without padding.
//
// Every block starts with an empty dictionary, so a block start is a
// checkpoint that needs no window: the multi-threaded xz (xz -T, pixz)
// writes blocks of 3 dictionaries (24 MiB at -6, --block-size to choose)
// and records both sizes in each block header. The walker below parses
// the container itself and decodes each block's LZMA2 chunks with
// ulikunitz/xz/lzma.

const (
	xzHeaderLen   = 12
	xzFooterLen   = 12
	xzFilterLZMA2 = 0x21
	// xzMaxDict bounds the LZMA2 dictionary of a block whose size is not
	// known: the largest the xz tools write.
	xzMaxDict = 1536 << 20
)

var (
	xzFooterMagic = []byte("YZ")
	crc64Table    = crc64.MakeTable(crc64.ECMA)
)

// xzCheckSize returns the size of a check type's value, or -1 for the
// types this package cannot verify.
func xzCheckSize(check byte) int {
	switch check {
	case 0:
		return 0
	case 1:
		return 4
	case 4:
		return 8
	case 10:
		return 32
	}
	return -1
}

// xzRecord is a block as the stream index describes it.
type xzRecord struct{ unpadded, size uint64 }

// xzRecords is what the pass keeps of the records of the blocks of the
// stream it is in, for the check of the stream's index: their number and
// a CRC-64 of their encoding in the index. It is also the pass state at a
// block start (passState), so that a pass resumed there checks the index
// of the stream it enters.
type xzRecords struct {
	n   uint64
	sum uint64 // crc64 (ECMA) of the records as the index encodes them
	// unknown: the pass resumed in the stream without the state of the
	// blocks before; its index is not checked against them.
	unknown bool
}

// add counts record r.
func (x *xzRecords) add(r xzRecord) {
	var b [2 * binary.MaxVarintLen64]byte
	e := binary.AppendUvarint(binary.AppendUvarint(b[:0], r.unpadded), r.size)
	x.n++
	x.sum = crc64.Update(x.sum, crc64Table, e)
}

// passState encodes x as the pass state of a checkpoint.
func (x *xzRecords) passState() []byte {
	if x.unknown {
		return nil
	}
	return binary.LittleEndian.AppendUint64(binary.AppendUvarint(nil, x.n), x.sum)
}

// setPassState restores what passState recorded; false when st is not
// such a record.
func (x *xzRecords) setPassState(st []byte) bool {
	n, k := binary.Uvarint(st)
	if k <= 0 || len(st) != k+8 {
		return false
	}
	*x = xzRecords{n: n, sum: binary.LittleEndian.Uint64(st[k:])}
	return true
}

// xzDecoder decodes an xz file block by block. In the index pass (rec
// set) it reports a checkpoint at a block start once a span's worth of
// output has passed, verifies every check, the index and the footer of
// every stream, and sends blocks it cannot serve per read to the local
// copy. For a span it starts at a block header of a stream with a given
// check type and ends at the stream's index or the end of its bytes.
type xzDecoder struct {
	cr  *countingReader
	rec *recorder // nil outside the index pass
	// maxOut bounds the output of one block (span decoder: the span's
	// size), and so its dictionary; -1 when unbounded.
	maxOut int64
	big    int64 // blocks decoding to more than this are local (pass)

	flags  [2]byte       // stream flags: 00, check type
	sum    hash.Hash     // of the block's output; nil for no check
	sums   [16]hash.Hash // by check type, made once
	blocks xzRecords     // of the current stream (pass)
	forced bool          // the next block start must be a checkpoint

	inBlock   bool
	lz        *lzma.Reader2
	body      xzBody // the block's compressed data
	headerLen int64
	dataStart int64
	declComp  int64 // compressed size from the block header, -1 unknown
	declSize  int64 // uncompressed size from the block header, -1 unknown
	blockOut  int64
	first     bool // the block is the first of its stream

	end int64 // end of the last stream's footer
	err error
}

// xzBody hands the LZMA2 decoder a block's compressed data, up to the
// size the block header states when it does.
type xzBody struct {
	cr   *countingReader
	left int64 // -1: unbounded
}

func (b *xzBody) Read(p []byte) (int, error) {
	if b.left == 0 {
		return 0, io.ErrUnexpectedEOF
	}
	if b.left > 0 && int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.cr.Read(p)
	if b.left > 0 {
		b.left -= int64(n)
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

func newXzPass(r io.Reader, rec *recorder) (*xzDecoder, error) {
	d := newXzPassFrom(r, 0, rec)
	if err := d.streamHeader(); err != nil {
		return nil, err
	}
	return d, nil
}

// newXzPassAt resumes the pass at cp, a block start; r yields the file
// from cp.In on. The stream it enters has its index checked against its
// blocks with the records of the blocks before cp that the first pass
// recorded at cp.
func newXzPassAt(r io.Reader, cp Checkpoint, rec *recorder) (*xzDecoder, error) {
	if cp.Kind != kindXzBlock {
		return nil, fmt.Errorf("%w: an xz pass resumes at a block start, not at checkpoint kind %d", ErrCorrupt, cp.Kind)
	}
	d := newXzPassFrom(r, int64(cp.In), rec)
	if err := d.setCheck(cp.Flags); err != nil {
		return nil, err
	}
	d.blocks.unknown = !d.blocks.setPassState(cp.pass)
	return d, nil
}

// newXzPassFrom is the pass decoder over r, which yields the file from
// off on.
func newXzPassFrom(r io.Reader, off int64, rec *recorder) *xzDecoder {
	return &xzDecoder{cr: newCountingReader(r, off), rec: rec, maxOut: -1, big: maxFrameSpan(rec.span)}
}

// newXzSpan returns a decoder of the blocks in comp, which starts at the
// block header of checkpoint cp; its blocks decode to at most size bytes.
func newXzSpan(comp []byte, cp Checkpoint, size int64) (*xzDecoder, error) {
	if cp.Kind != kindXzBlock {
		return nil, fmt.Errorf("checkpoint kind %d in an xz stream", cp.Kind)
	}
	d := &xzDecoder{cr: newCountingReader(bytes.NewReader(comp), int64(cp.In)), maxOut: size}
	if err := d.setCheck(cp.Flags); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *xzDecoder) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: xz at %d: %s", ErrCorrupt, d.cr.off, fmt.Sprintf(format, args...))
}

func (d *xzDecoder) readFull(p []byte) error {
	if _, err := io.ReadFull(d.cr, p); err != nil {
		return d.corrupt("stream cut short")
	}
	return nil
}

// setCheck takes the check type of a stream.
func (d *xzDecoder) setCheck(check byte) error {
	if check > 15 {
		return d.corrupt("bad stream flags")
	}
	if xzCheckSize(check) < 0 {
		return fmt.Errorf("%w: xz check type %d", ErrUnsupported, check)
	}
	d.flags = [2]byte{0, check}
	if d.sums[check] == nil {
		switch check {
		case 1:
			d.sums[check] = crc32.NewIEEE()
		case 4:
			d.sums[check] = crc64.New(crc64Table)
		case 10:
			d.sums[check] = sha256.New()
		}
	}
	d.sum = d.sums[check]
	return nil
}

// checkValue returns the check of the block's output as stored.
func (d *xzDecoder) checkValue(buf []byte) []byte {
	switch s := d.sum.(type) {
	case nil:
		return buf
	case hash.Hash32:
		return binary.LittleEndian.AppendUint32(buf, s.Sum32())
	case hash.Hash64:
		return binary.LittleEndian.AppendUint64(buf, s.Sum64())
	default:
		return s.Sum(buf)
	}
}

// streamHeader reads a stream header.
func (d *xzDecoder) streamHeader() error {
	var h [xzHeaderLen]byte
	if err := d.readFull(h[:]); err != nil {
		return err
	}
	if !bytes.Equal(h[:6], magicXz) {
		return d.corrupt("not an xz stream")
	}
	if crc32.ChecksumIEEE(h[6:8]) != binary.LittleEndian.Uint32(h[8:]) {
		return d.corrupt("stream header checksum mismatch")
	}
	if h[6] != 0 {
		return d.corrupt("bad stream flags")
	}
	d.blocks = xzRecords{}
	return d.setCheck(h[7])
}

// xzVarint reads a variable-length integer from b; n is 0 when b holds
// none that is valid (at most 9 bytes, no needless zero byte at the end).
func xzVarint(b []byte) (v uint64, n int) {
	for i := 0; i < len(b) && i < 9; i++ {
		v |= uint64(b[i]&0x7f) << (7 * i)
		if b[i]&0x80 == 0 {
			if b[i] == 0 && i > 0 {
				return 0, 0
			}
			return v, i + 1
		}
	}
	return 0, 0
}

// next moves to the next block, through the index, footer and padding of
// a stream that ends and the header of the next. It returns io.EOF at the
// end of the file, and in a span decoder at the end of the stream or of
// its bytes.
func (d *xzDecoder) next() error {
	for {
		b := d.cr.peek(1)
		if len(b) == 0 {
			if d.rec == nil {
				return io.EOF
			}
			return d.corrupt("stream cut short")
		}
		if b[0] != 0 {
			return d.blockStart()
		}
		if d.rec == nil {
			return io.EOF
		}
		if err := d.streamEnd(); err != nil {
			return err
		}
		d.end = d.cr.off
		// Stream padding, then the end or another stream.
		for {
			p := d.cr.peek(4)
			if len(p) == 0 {
				return io.EOF
			}
			if len(p) == 4 && bytes.Equal(p, []byte{0, 0, 0, 0}) {
				d.cr.discard(4)
				continue
			}
			if len(p) < 4 || !bytes.HasPrefix(magicXz, p) {
				return d.corrupt("data after the end of a stream")
			}
			break
		}
		if err := d.streamHeader(); err != nil {
			return err
		}
		// A span never crosses the end of a stream.
		d.forced = true
	}
}

// blockStart reads a block header and starts decoding the block.
func (d *xzDecoder) blockStart() error {
	start := d.cr.off
	var hb [1024]byte
	if err := d.readFull(hb[:1]); err != nil {
		return err
	}
	h := hb[:(int(hb[0])+1)*4]
	if err := d.readFull(h[1:]); err != nil {
		return err
	}
	if crc32.ChecksumIEEE(h[:len(h)-4]) != binary.LittleEndian.Uint32(h[len(h)-4:]) {
		return d.corrupt("block header checksum mismatch")
	}
	flags := h[1]
	if flags&0x3c != 0 {
		return d.corrupt("reserved block flags set")
	}
	b := h[2 : len(h)-4]
	field := func(what string) (uint64, error) {
		v, n := xzVarint(b)
		if n == 0 {
			return 0, d.corrupt("bad %s in block header", what)
		}
		b = b[n:]
		return v, nil
	}
	d.declComp, d.declSize = -1, -1
	if flags&0x40 != 0 {
		v, err := field("compressed size")
		if err != nil {
			return err
		}
		if v == 0 || v > 1<<62 {
			return d.corrupt("bad compressed size %d in block header", v)
		}
		d.declComp = int64(v)
	}
	if flags&0x80 != 0 {
		v, err := field("uncompressed size")
		if err != nil {
			return err
		}
		if v > 1<<62 {
			return d.corrupt("bad uncompressed size %d in block header", v)
		}
		d.declSize = int64(v)
	}
	var dict int64
	for i := 0; i <= int(flags&3); i++ {
		id, err := field("filter id")
		if err != nil {
			return err
		}
		size, err := field("filter properties")
		if err != nil {
			return err
		}
		if size > uint64(len(b)) {
			return d.corrupt("filter properties beyond the block header")
		}
		props := b[:size]
		b = b[size:]
		if id != xzFilterLZMA2 || flags&3 != 0 {
			return fmt.Errorf("%w: xz filter %#x (only LZMA2 alone is supported)", ErrUnsupported, id)
		}
		if size != 1 || props[0]&0xc0 != 0 {
			return d.corrupt("bad LZMA2 properties")
		}
		if dict, err = lzma.DecodeDictCap(props[0]); err != nil {
			return d.corrupt("bad LZMA2 dictionary size")
		}
	}
	for _, c := range b {
		if c != 0 {
			return d.corrupt("non-zero block header padding")
		}
	}
	if d.maxOut >= 0 && d.declSize > d.maxOut {
		return d.corrupt("block of %d bytes in a span of %d", d.declSize, d.maxOut)
	}
	// A block never refers to bytes before its start: a dictionary as
	// big as its output is enough.
	for _, bound := range []int64{d.declSize, d.maxOut} {
		if bound >= 0 {
			dict = min(dict, max(bound, lzma.MinDictCap))
		}
	}
	if dict > xzMaxDict {
		return fmt.Errorf("%w: xz dictionary of %d MiB", ErrUnsupported, dict>>20)
	}
	d.first = d.blocks.n == 0 && !d.blocks.unknown
	if rec := d.rec; rec != nil {
		if d.forced || rec.due() {
			rec.mark(Checkpoint{Kind: kindXzBlock, In: CompressedOffset(start), Flags: d.flags[1], Out: UncompressedOffset(rec.out),
				pass: d.blocks.passState()})
		}
		d.forced = false
		switch {
		case d.declSize > d.big:
			rec.beginLocal(start)
		case d.declSize < 0 || d.first:
			// A stream of one block is served from the local copy
			// (see endBlock).
			rec.beginTentative(start)
		}
	}
	d.headerLen = int64(len(h))
	d.dataStart = d.cr.off
	d.body = xzBody{cr: d.cr, left: d.declComp}
	lz, err := lzma.Reader2Config{DictCap: int(dict)}.NewReader2(&d.body)
	if err != nil {
		return d.corrupt("%v", err)
	}
	d.lz = lz
	d.blockOut = 0
	if d.sum != nil {
		d.sum.Reset()
	}
	d.inBlock = true
	return nil
}

// endBlock checks the end of a block whose LZMA2 data ended.
func (d *xzDecoder) endBlock() error {
	d.inBlock = false
	comp := d.cr.off - d.dataStart
	if d.declComp >= 0 && comp != d.declComp {
		return d.corrupt("block of %d compressed bytes, its header says %d", comp, d.declComp)
	}
	if d.declSize >= 0 && d.blockOut != d.declSize {
		return d.corrupt("block of %d bytes, its header says %d", d.blockOut, d.declSize)
	}
	var tail [3 + 32]byte
	pad := int((4 - comp%4) % 4)
	n := xzCheckSize(d.flags[1])
	if err := d.readFull(tail[:pad+n]); err != nil {
		return err
	}
	for _, c := range tail[:pad] {
		if c != 0 {
			return d.corrupt("non-zero block padding")
		}
	}
	var want [32]byte
	if !bytes.Equal(tail[pad:pad+n], d.checkValue(want[:0])) {
		return d.corrupt("block check mismatch")
	}
	rec := d.rec
	if rec == nil {
		return nil
	}
	d.blocks.add(xzRecord{uint64(d.headerLen + comp + int64(n)), uint64(d.blockOut)})
	switch {
	case rec.localSpans:
		rec.endLocal()
		d.forced = true
	case rec.tentative:
		if p := d.cr.peek(1); d.first && len(p) == 1 && p[0] == 0 {
			// A stream of one block: it could be entered at its start
			// only, as if the archive had no checkpoints.
			rec.promote()
			rec.endLocal()
			d.forced = true
		} else {
			rec.endTentative()
		}
	}
	return nil
}

// streamEnd reads the index and footer of a stream and checks them
// against the blocks decoded.
func (d *xzDecoder) streamEnd() error {
	start := d.cr.off
	sum := crc32.NewIEEE()
	var one [1]byte
	byteOf := func() (byte, error) {
		if err := d.readFull(one[:]); err != nil {
			return 0, err
		}
		sum.Write(one[:])
		return one[0], nil
	}
	varint := func() (uint64, error) {
		var b [9]byte
		for i := range b {
			c, err := byteOf()
			if err != nil {
				return 0, err
			}
			b[i] = c
			if c&0x80 == 0 {
				if v, n := xzVarint(b[:i+1]); n > 0 {
					return v, nil
				}
				break
			}
		}
		return 0, d.corrupt("bad integer in the stream index")
	}
	if _, err := byteOf(); err != nil { // the indicator, 00
		return err
	}
	count, err := varint()
	if err != nil {
		return err
	}
	if count != d.blocks.n && !d.blocks.unknown {
		return d.corrupt("stream index lists %d blocks, the stream has %d", count, d.blocks.n)
	}
	var listed xzRecords
	for range count {
		var r xzRecord
		if r.unpadded, err = varint(); err != nil {
			return err
		}
		if r.size, err = varint(); err != nil {
			return err
		}
		listed.add(r)
	}
	if listed.sum != d.blocks.sum && !d.blocks.unknown {
		return d.corrupt("stream index records do not match the blocks of the stream")
	}
	for (d.cr.off-start)%4 != 0 {
		if c, err := byteOf(); err != nil || c != 0 {
			return d.corrupt("bad stream index padding")
		}
	}
	var tail [4 + xzFooterLen]byte
	if err := d.readFull(tail[:]); err != nil {
		return err
	}
	if binary.LittleEndian.Uint32(tail[:4]) != sum.Sum32() {
		return d.corrupt("stream index checksum mismatch")
	}
	f := tail[4:]
	if crc32.ChecksumIEEE(f[4:10]) != binary.LittleEndian.Uint32(f[:4]) {
		return d.corrupt("stream footer checksum mismatch")
	}
	size := d.cr.off - xzFooterLen - start
	if int64(binary.LittleEndian.Uint32(f[4:]))+1 != size/4 || !bytes.Equal(f[8:10], d.flags[:]) ||
		!bytes.Equal(f[10:], xzFooterMagic) {
		return d.corrupt("stream footer does not match the stream")
	}
	return nil
}

func (d *xzDecoder) Read(p []byte) (int, error) {
	if d.err != nil {
		return 0, d.err
	}
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if !d.inBlock {
			if err := d.next(); err != nil {
				d.err = err
				return 0, err
			}
		}
		n, err := d.lz.Read(p)
		if n > 0 {
			d.blockOut += int64(n)
			if d.declSize >= 0 && d.blockOut > d.declSize || d.maxOut >= 0 && d.blockOut > d.maxOut {
				d.err = d.corrupt("block decodes to more bytes than its header or span says")
				return 0, d.err
			}
			if d.sum != nil {
				d.sum.Write(p[:n])
			}
			if rec := d.rec; rec != nil {
				rec.write(p[:n])
				if rec.tentative && rec.out-rec.localFrom > d.big {
					rec.promote()
				}
			}
		}
		if err == io.EOF {
			if err := d.endBlock(); err != nil {
				d.err = err
				return n, err
			}
			if n > 0 {
				return n, nil
			}
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				err = d.corrupt("%v", err)
			}
			d.err = err
			return n, err
		}
		return n, nil
	}
}

func (d *xzDecoder) finish() (int64, int64, error) {
	if _, err := io.Copy(io.Discard, d); err != nil {
		return 0, 0, err
	}
	if d.err != io.EOF {
		return 0, 0, d.err
	}
	return d.rec.out, d.end, nil
}

// decodeXzSpan decodes the blocks in comp, which start at the block
// header of cp, into exactly size bytes.
func decodeXzSpan(comp []byte, cp Checkpoint, _ []byte, _, size int64, buf []byte) ([]byte, error) {
	d, err := newXzSpan(comp, cp, size)
	if err != nil {
		return nil, err
	}
	out, err := readSpan(d, size, buf)
	if err != nil {
		return nil, err
	}
	// The last block ends here: its check is verified.
	var one [1]byte
	n, err := d.Read(one[:])
	if n > 0 {
		return nil, fmt.Errorf("blocks decode to more than %d bytes", size)
	}
	if err != io.EOF {
		return nil, err
	}
	return out, nil
}
