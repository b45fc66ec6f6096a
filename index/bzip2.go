package index

import (
	"bytes"
	"compress/bzip2"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"sync"
)

// A bzip2 file is one or more streams back to back (pbzip2 writes one per
// block of input):
//
//	stream     "BZh" | level '1'..'9' | block ... | end mark | zero bits to a byte
//	block      magic 31 41 59 26 53 59 (48 bits) | block CRC (32) | tables and
//	           Huffman-coded data (up to level*100 kB before the first RLE)
//	end mark   magic 17 72 45 38 50 90 (48 bits) | combined CRC (32): each
//	           block's CRC folded in with crc = crc<<1 | crc>>31 ^ block CRC
//
// Bits are packed MSB first, and only the stream header is byte-aligned: a
// block or end mark starts at any bit. A block decodes alone (no window),
// but nothing says where it ends except the magic that follows it. So the
// pass scans for both magics at every bit offset and cuts the bits between
// two matches into an item. A block item is decoded by handing
// compress/bzip2 a stream of its own: "BZh<level>", the item's bits
// realigned to a byte, then an end mark whose combined CRC is the block's
// CRC. That stream decodes cleanly only if the block's CRC holds and its
// data ends exactly where the item does. A magic can occur by chance inside
// compressed data; the block then fails to decode at that cut and is
// merged with the item after it, until it decodes.
//
// Checkpoints (kindBzip2Block) are block starts: In and Bit locate the
// first bit of the block magic, Flags holds the stream's level (1-9). A
// span runs up to the first bit of the next checkpoint, and may cross
// the end of a stream into the next.

const (
	bz2BlockMagic = 0x314159265359
	bz2EndMagic   = 0x177245385090
	// bz2MaxBlockBytes bounds the compressed size of a block: up to
	// 900 000 symbols of at most 20 bits each, plus selectors and tables.
	bz2MaxBlockBytes = 2560 << 10
	// bz2MaxMerges is how many chance magics inside one block are merged
	// past before the block is declared corrupt.
	bz2MaxMerges = 16
	// bz2Chunk is how much compressed input the pass reads at once.
	bz2Chunk = 256 << 10
	// bz2ScanWindow is how far findMagic looks at once for all its
	// patterns, so that a rare pattern does not scan far past a match.
	bz2ScanWindow = 64 << 10
)

// bz2Pattern finds one magic at one bit shift: key is the bytes that the
// magic fills whole, keyOff where they lie after the magic's first byte.
type bz2Pattern struct {
	key    []byte
	keyOff int
	shift  int64
	magic  uint64
}

var bz2Patterns = func() []bz2Pattern {
	var ps []bz2Pattern
	for _, m := range []uint64{bz2BlockMagic, bz2EndMagic} {
		for s := range 8 {
			v := m << 16 >> s
			var b [8]byte
			for i := range b {
				b[i] = byte(v >> (56 - 8*i))
			}
			p := bz2Pattern{key: b[1:6], keyOff: 1, shift: int64(s), magic: m}
			if s == 0 {
				p.key, p.keyOff = b[0:6], 0
			}
			p.key = bytes.Clone(p.key)
			ps = append(ps, p)
		}
	}
	return ps
}()

// bitsAt returns the n (at most 56) bits of p that start at bit off, MSB
// first; bits past the end of p read as zero.
func bitsAt(p []byte, off int64, n uint) uint64 {
	if n == 0 {
		return 0
	}
	i := off / 8
	var v uint64
	for k := range int64(8) {
		v <<= 8
		if i+k < int64(len(p)) {
			v |= uint64(p[i+k])
		}
	}
	return v << (off % 8) >> (64 - n)
}

// findMagic returns the first bit at or after from where a block or
// end-of-stream magic starts whose 48 bits end at or before limit (bits of
// p, MSB first).
func findMagic(p []byte, from, limit int64) (bit int64, magic uint64, ok bool) {
	limit = min(limit, int64(len(p))*8)
	for lo := from / 8; lo*8 < limit; lo += bz2ScanWindow {
		hiByte := min((limit+7)/8, lo+bz2ScanWindow+8)
		best := int64(-1)
		for _, pt := range bz2Patterns {
			pos := lo + int64(pt.keyOff)
			for {
				end := hiByte
				if best >= 0 {
					end = min(end, best/8+int64(pt.keyOff+len(pt.key)))
				}
				if pos+int64(len(pt.key)) > end {
					break
				}
				j := bytes.Index(p[pos:end], pt.key)
				if j < 0 {
					break
				}
				k := pos + int64(j) - int64(pt.keyOff)
				pos += int64(j) + 1
				b := k*8 + pt.shift
				if b < from {
					continue
				}
				if best >= 0 && b >= best || b+48 > limit {
					break
				}
				if bitsAt(p, b, 48) == pt.magic {
					best, magic = b, pt.magic
					break
				}
			}
		}
		if best >= 0 {
			return best, magic, true
		}
	}
	return 0, 0, false
}

// bitWriter packs bits MSB first after buf.
type bitWriter struct {
	buf []byte
	acc uint64 // the low n bits are pending
	n   uint
}

// write appends the low n (at most 48) bits of v.
func (w *bitWriter) write(v uint64, n uint) {
	w.acc = w.acc<<n | v&(1<<n-1)
	w.n += n
	for w.n >= 8 {
		w.n -= 8
		w.buf = append(w.buf, byte(w.acc>>w.n))
	}
}

// copyBits appends bits [from, to) of src; w must be at a byte boundary.
func (w *bitWriter) copyBits(src []byte, from, to int64) {
	s, i, nb := from%8, from/8, (to-from)/8
	if s == 0 {
		w.buf = append(w.buf, src[i:i+nb]...)
	} else {
		for k := i; k < i+nb; k++ {
			w.buf = append(w.buf, src[k]<<s|src[k+1]>>(8-s))
		}
	}
	if rem := uint((to - from) % 8); rem > 0 {
		w.write(bitsAt(src, from+nb*8, rem), rem)
	}
}

// flush pads the last byte with zero bits.
func (w *bitWriter) flush() {
	if w.n > 0 {
		w.write(0, 8-w.n)
	}
}

// bz2Item is the bits [start, end) between two magic matches (absolute bit
// offsets in the file); data holds the bytes from base that cover them.
type bz2Item struct {
	start, end int64
	base       int64
	data       []byte
	magic      uint64 // the 48 bits at start (a magic unless the input is corrupt)
	level      byte   // the level res was decoded with
	res        chan bz2Block
}

// bz2Block is a decoded block item.
type bz2Block struct {
	out []byte
	crc uint32
	err error
}

// bits returns n bits of the item from absolute bit off.
func (it *bz2Item) bits(off int64, n uint) uint64 {
	return bitsAt(it.data, off-it.base*8, n)
}

// merge joins it and next, which follows it.
func (it *bz2Item) merge(next *bz2Item) *bz2Item {
	data := make([]byte, 0, next.base+int64(len(next.data))-it.base)
	data = append(data, it.data[:next.base-it.base]...)
	data = append(data, next.data...)
	return &bz2Item{start: it.start, end: next.end, base: it.base, data: data, magic: it.magic}
}

// decodeBz2Block decodes the block item it as a stream of its own.
func decodeBz2Block(it *bz2Item, level byte) bz2Block {
	from, to := it.start-it.base*8, it.end-it.base*8
	if to-from < 48+32+8 {
		return bz2Block{err: fmt.Errorf("bzip2 block at bit %d: cut short", it.start)}
	}
	crc := uint32(bitsAt(it.data, from+48, 32))
	w := bitWriter{buf: make([]byte, 0, 4+(to-from)/8+12)}
	w.buf = append(w.buf, 'B', 'Z', 'h', '0'+level)
	w.copyBits(it.data, from, to)
	w.write(bz2EndMagic, 48)
	w.write(uint64(crc), 32)
	w.flush()
	out := make([]byte, 0, int(level)*100_000+4096)
	d := bzip2.NewReader(bytes.NewReader(w.buf))
	for {
		if len(out) == cap(out) {
			out = append(out, 0)[:len(out)]
		}
		n, err := d.Read(out[len(out):cap(out)])
		out = out[:len(out)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return bz2Block{err: fmt.Errorf("bzip2 block at bit %d: %v", it.start, err)}
		}
	}
	return bz2Block{out: out, crc: crc}
}

// bz2Walker walks the blocks of bzip2 streams in order and decodes them,
// speculatively and in parallel when workers > 1: its goroutines are
// waited for by close, and each ends after one block at most in any case.
type bz2Walker struct {
	// input
	src   io.Reader // nil when buf holds all the input
	buf   []byte    // input from byte bufBase
	base  int64
	eof   bool  // buf holds the rest of the input
	limit int64 // bit where the input ends (once eof)

	// scanning
	open     int64 // start of the item whose end is looked for; -1 after the last
	from     int64 // the next match is looked for from this bit
	scanErr  error
	queue    []*bz2Item
	inFlight int  // block items of queue decoding
	guess    byte // the level the next items are decoded with
	workers  int
	wg       sync.WaitGroup

	// decoding, in order
	pos      int64 // the bit where the next block or end mark starts
	level    byte
	crc      uint32 // combined CRC of the stream's blocks so far
	crcKnown bool   // crc covers the stream from its start
	inStream bool   // after a stream header, before its end mark
	streams  int
	end      int64 // byte after the end of the last stream
	span     bool  // a span: the input may end at a block boundary
	onBlock  func(start int64, level byte)
}

// newBz2Walker walks from a block magic at bit start, in a stream of the
// given level, with the input in buf from byte base (all of it when src is
// nil).
func newBz2Walker(src io.Reader, buf []byte, base, start int64, level byte, workers int) *bz2Walker {
	w := &bz2Walker{
		src: src, buf: buf, base: base,
		open: start, from: start + 1, pos: start,
		guess: level, level: level, inStream: true, workers: workers,
	}
	if src == nil {
		w.eof, w.limit = true, (base+int64(len(buf)))*8
	}
	return w
}

func (w *bz2Walker) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: bzip2: %s", ErrCorrupt, fmt.Sprintf(format, args...))
}

// read appends input to buf, dropping what no item needs any more.
func (w *bz2Walker) read() error {
	if drop := w.open/8 - w.base; drop > 0 && drop <= int64(len(w.buf)) && drop > int64(len(w.buf)/2) {
		n := copy(w.buf, w.buf[drop:])
		w.buf = w.buf[:n]
		w.base += drop
	}
	if cap(w.buf)-len(w.buf) < bz2Chunk {
		nb := make([]byte, len(w.buf), 2*cap(w.buf)+bz2Chunk)
		copy(nb, w.buf)
		w.buf = nb
	}
	n, err := io.ReadAtLeast(w.src, w.buf[len(w.buf):len(w.buf)+bz2Chunk], 1)
	w.buf = w.buf[:len(w.buf)+n]
	if err == io.EOF || err == io.ErrUnexpectedEOF {
		w.eof, w.limit = true, (w.base+int64(len(w.buf)))*8
		return nil
	}
	return err
}

// scan finds the end of the open item and returns the item, or nil after
// the last one.
func (w *bz2Walker) scan() (*bz2Item, error) {
	if w.open < 0 {
		return nil, nil
	}
	for {
		end := (w.base + int64(len(w.buf))) * 8
		if w.eof {
			end = w.limit
		}
		bit, _, ok := findMagic(w.buf, w.from-w.base*8, end-w.base*8)
		next := bit + w.base*8
		if !ok && w.eof {
			next = end
		}
		if ok || w.eof {
			if next-w.open > bz2MaxBlockBytes*8 {
				return nil, w.corrupt("no block boundary within %d bytes of bit %d", bz2MaxBlockBytes, w.open)
			}
			lo, hi := w.open/8, (next+7)/8
			it := &bz2Item{start: w.open, end: next, base: lo, data: bytes.Clone(w.buf[lo-w.base : hi-w.base])}
			it.magic = it.bits(it.start, 48)
			if ok {
				w.open, w.from = next, next+1
			} else {
				w.open = -1
			}
			return it, nil
		}
		if end-w.open > bz2MaxBlockBytes*8 {
			return nil, w.corrupt("no block boundary within %d bytes of bit %d", bz2MaxBlockBytes, w.open)
		}
		// A match not found yet starts at most 55 bits before the end.
		w.from = max(w.from, end-55)
		if err := w.read(); err != nil {
			return nil, err
		}
	}
}

// fill scans items until as many blocks as workers are decoding ahead
// (and at most a few items per worker are queued), or one item is queued
// when decoding in order.
func (w *bz2Walker) fill() {
	for w.scanErr == nil && w.open >= 0 && (len(w.queue) == 0 || w.workers > 1 && w.inFlight < w.workers && len(w.queue) < 4*w.workers) {
		it, err := w.scan()
		if err != nil {
			w.scanErr = err
			return
		}
		if it == nil {
			return
		}
		switch it.magic {
		case bz2BlockMagic:
			if w.workers > 1 {
				it.level, it.res = w.guess, make(chan bz2Block, 1)
				w.inFlight++
				w.wg.Add(1)
				go func() {
					defer w.wg.Done()
					it.res <- decodeBz2Block(it, it.level)
				}()
			}
		case bz2EndMagic:
			// Guess the level of the next stream for speculative decodes.
			if b := (it.start + 80 + 7) / 8; (b+4)*8 <= it.end {
				if h := it.bits(b*8, 32); h>>8 == 'B'<<16|'Z'<<8|'h' && byte(h) >= '1' && byte(h) <= '9' {
					w.guess = byte(h) - '0'
				}
			}
		}
		w.queue = append(w.queue, it)
	}
}

// pop returns the next item in order, or nil after the last.
func (w *bz2Walker) pop() (*bz2Item, error) {
	w.fill()
	if len(w.queue) == 0 {
		return nil, w.scanErr
	}
	it := w.queue[0]
	w.queue[0] = nil
	w.queue = w.queue[1:]
	return it, nil
}

// result returns the decoded block item it.
func (w *bz2Walker) result(it *bz2Item) bz2Block {
	if it.res != nil {
		r := <-it.res
		w.inFlight--
		it.res = nil
		if it.level == w.level {
			return r
		}
	}
	return decodeBz2Block(it, w.level)
}

// discard drops an item that lies inside a block or end mark passed.
func (w *bz2Walker) discard(it *bz2Item) {
	if it.res != nil {
		<-it.res
		w.inFlight--
		it.res = nil
	}
}

// next returns the output of the next block, verified by its CRC, or
// io.EOF after the end of the input (or, for a span, at its limit).
func (w *bz2Walker) next() ([]byte, error) {
	for {
		it, err := w.pop()
		if err != nil {
			return nil, err
		}
		if it == nil {
			if w.inStream && !(w.span && w.eof && w.pos == w.limit) {
				return nil, w.corrupt("stream cut short at bit %d", w.pos)
			}
			return nil, io.EOF
		}
		if it.start < w.pos {
			w.discard(it)
			continue
		}
		if it.start > w.pos || !w.inStream {
			w.discard(it)
			return nil, w.corrupt("no block or end of stream at bit %d", w.pos)
		}
		switch it.magic {
		case bz2BlockMagic:
			res := w.result(it)
			for merges := 0; res.err != nil; merges++ {
				nx, err := w.pop()
				if err != nil {
					return nil, err
				}
				if nx == nil || merges == bz2MaxMerges || nx.end-it.start > bz2MaxBlockBytes*8 || w.plausible(nx) {
					// The block is damaged, not cut at a chance magic.
					return nil, fmt.Errorf("%w: %v", ErrCorrupt, res.err)
				}
				w.discard(nx)
				it = it.merge(nx)
				res = decodeBz2Block(it, w.level)
			}
			if w.onBlock != nil {
				w.onBlock(it.start, w.level)
			}
			w.crc = (w.crc<<1 | w.crc>>31) ^ res.crc
			w.pos = it.end
			return res.out, nil
		case bz2EndMagic:
			if err := w.endOfStream(it); err != nil {
				return nil, err
			}
		default:
			return nil, w.corrupt("no block or end of stream at bit %d", w.pos)
		}
	}
}

// plausible reports whether item it, which follows a block that failed
// to decode when cut where it starts, is a block that decodes or an end
// of stream followed by a stream header or the end of the input: then
// that block is damaged, and merging it with what follows would only
// waste decodes.
func (w *bz2Walker) plausible(it *bz2Item) bool {
	switch it.magic {
	case bz2BlockMagic:
		return w.result(it).err == nil
	case bz2EndMagic:
		padded := (it.start + 80 + 7) / 8 * 8
		if w.eof && it.end == w.limit && padded >= w.limit {
			return true
		}
		if h := it.bits(padded, 32); it.end == padded+32 && h>>8 == 'B'<<16|'Z'<<8|'h' && byte(h) >= '1' && byte(h) <= '9' {
			return true
		}
	}
	return false
}

// endOfStream checks the end mark that item it starts with and reads the
// header of the stream after it, if any.
func (w *bz2Walker) endOfStream(it *bz2Item) error {
	trailer := it.start + 80
	padded := (trailer + 7) / 8 * 8
	// Chance magics inside the combined CRC or the next header end the
	// item too early.
	for it.end < min(padded+32, w.limit) {
		nx, err := w.pop()
		if err != nil {
			return err
		}
		if nx == nil {
			break
		}
		w.discard(nx)
		it = it.merge(nx)
	}
	if trailer > it.end {
		return w.corrupt("end of stream cut short at bit %d", it.start)
	}
	if crc := uint32(it.bits(it.start+48, 32)); w.crcKnown && crc != w.crc {
		return w.corrupt("stream checksum mismatch at bit %d", it.start)
	}
	w.inStream = false
	w.streams++
	w.end = padded / 8
	if w.eof && padded >= w.limit {
		w.pos = w.limit
		return nil
	}
	if padded+32 > it.end {
		return w.corrupt("data after the end of a stream at byte %d", padded/8)
	}
	h := it.bits(padded, 32)
	if h>>8 != 'B'<<16|'Z'<<8|'h' || byte(h) < '1' || byte(h) > '9' {
		return w.corrupt("data after the end of a stream at byte %d", padded/8)
	}
	w.level, w.crc, w.crcKnown, w.inStream = byte(h)-'0', 0, true, true
	w.pos = padded + 32
	return nil
}

// close waits for the speculative decodes.
func (w *bz2Walker) close() {
	for _, it := range w.queue {
		w.discard(it)
	}
	w.queue = nil
	w.wg.Wait()
}

// bzip2Workers is how many blocks the pass decodes at once.
func bzip2Workers() int { return min(runtime.GOMAXPROCS(0), 8) }

// bzip2Pass decodes bzip2 streams block by block in the index pass,
// reporting a checkpoint at a block start once a span's worth of output
// has passed, and checks every block and stream CRC.
type bzip2Pass struct {
	w   *bz2Walker
	rec *recorder
	out []byte
	err error
}

func newBzip2Pass(r io.Reader, rec *recorder) *bzip2Pass {
	// The first block starts after the stream header; its level is read
	// with it.
	return newBzip2PassFrom(newBz2Walker(r, nil, 0, 32, 0, bzip2Workers()), rec)
}

// newBzip2PassAt resumes the pass at cp, a block start; r yields the
// stream from cp.In on. The stream it enters has its combined CRC
// checked at its end mark, with the CRC of the blocks before cp that the
// first pass recorded at cp.
func newBzip2PassAt(r io.Reader, cp Checkpoint, rec *recorder) (*bzip2Pass, error) {
	if cp.Kind != kindBzip2Block || cp.Flags < 1 || cp.Flags > 9 {
		return nil, fmt.Errorf("%w: a bzip2 pass resumes at a block start, not at checkpoint kind %d level %d", ErrCorrupt, cp.Kind, cp.Flags)
	}
	w := newBz2Walker(r, nil, int64(cp.In), int64(cp.In)*8+int64(cp.Bit), cp.Flags, bzip2Workers())
	if len(cp.pass) == 4 {
		w.crc, w.crcKnown = binary.LittleEndian.Uint32(cp.pass), true
	}
	return newBzip2PassFrom(w, rec), nil
}

// newBzip2PassFrom makes the pass over walker w, which reports a
// checkpoint at a block start once a span's worth of output has passed.
// Its pass state is the combined CRC of the stream's blocks before it.
func newBzip2PassFrom(w *bz2Walker, rec *recorder) *bzip2Pass {
	w.onBlock = func(start int64, level byte) {
		if rec.due() {
			c := Checkpoint{Kind: kindBzip2Block, In: CompressedOffset(start / 8), Bit: uint8(start % 8), Flags: level, Out: UncompressedOffset(rec.out)}
			if w.crcKnown {
				c.pass = binary.LittleEndian.AppendUint32(nil, w.crc)
			}
			rec.mark(c)
		}
	}
	return &bzip2Pass{w: w, rec: rec}
}

func (p *bzip2Pass) Read(b []byte) (int, error) {
	for len(p.out) == 0 {
		if p.err != nil {
			return 0, p.err
		}
		if p.w.level == 0 {
			p.err = p.header()
			continue
		}
		p.out, p.err = p.w.next()
		p.rec.write(p.out)
	}
	n := copy(b, p.out)
	p.out = p.out[n:]
	return n, nil
}

// header reads the first stream header.
func (p *bzip2Pass) header() error {
	w := p.w
	for !w.eof && len(w.buf) < 4 {
		if err := w.read(); err != nil {
			return err
		}
	}
	if len(w.buf) < 4 || !bytes.HasPrefix(w.buf, magicBzip2) || w.buf[3] < '1' || w.buf[3] > '9' {
		return w.corrupt("bad stream header")
	}
	w.level = w.buf[3] - '0'
	w.guess, w.crcKnown = w.level, true
	return nil
}

func (p *bzip2Pass) finish() (int64, int64, error) {
	defer p.close()
	for p.err == nil {
		p.out = nil
		if _, err := p.Read(nil); err != nil && err != io.EOF {
			return 0, 0, err
		}
	}
	if p.err != io.EOF {
		return 0, 0, p.err
	}
	return p.rec.out, p.w.end, nil
}

// close waits for the decodes still running.
func (p *bzip2Pass) close() { p.w.close() }

// decodeBzip2Span decodes size bytes from checkpoint cp; comp holds the
// compressed bytes from cp.In, of which the first endBit bits belong to
// the span (all of them when endBit is negative).
func decodeBzip2Span(comp []byte, cp Checkpoint, _ []byte, endBit, size int64, buf []byte) ([]byte, error) {
	if endBit < 0 {
		endBit = int64(len(comp)) * 8
	}
	if cp.Kind != kindBzip2Block || cp.Flags < 1 || cp.Flags > 9 {
		return nil, fmt.Errorf("checkpoint kind %d level %d in a bzip2 stream", cp.Kind, cp.Flags)
	}
	base := int64(cp.In)
	endBit = min(endBit, int64(len(comp))*8)
	w := newBz2Walker(nil, comp, base, base*8+int64(cp.Bit), cp.Flags, 1)
	w.limit = base*8 + endBit
	w.span = true
	data := buf[:0]
	if first := min(size, maxSpanPrealloc); int64(cap(data)) < first {
		data = make([]byte, 0, first)
	}
	for {
		b, err := w.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if int64(len(data)+len(b)) > size {
			return nil, fmt.Errorf("span decodes to more than %d bytes", size)
		}
		data = append(data, b...)
	}
	if int64(len(data)) != size {
		return nil, fmt.Errorf("span decodes to %d bytes, want %d", len(data), size)
	}
	return data, nil
}
