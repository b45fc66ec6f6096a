package index

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// A walker of one zstd frame that follows, block by block, the state the
// next block depends on besides the window (RFC 8878 3.1.1.3 and 4.1):
//
//	literals   the Huffman tree description last defined (treeless
//	           literals reuse it)
//	sequences  the FSE tables last in force for literal lengths, offsets
//	           and match lengths (repeat mode reuses them)
//	offsets    the three repeat offsets, which every sequence may change
//
// It decodes the sequences' codes and extra bits to follow the repeat
// offsets and the decoded size of each block, but not the literals: the
// literals section header gives their sizes. With that state, the last
// window's worth of output and the frame's remaining blocks, a stock
// decoder continues the frame from a block boundary (zstdresume.go).
//
// The frame is hostile input: every size is checked against the block it
// lies in, and the walker holds at most one block (128 KiB) and its
// tables.

// zstdMaxBlock is the largest block body (RFC 8878 3.1.1.2.4).
const zstdMaxBlock = 128 << 10

// ErrZstdWalk is wrapped by the errors of the zstd block walker: a frame
// it cannot follow (damaged, or beyond what it supports).
var ErrZstdWalk = errors.New("index: zstd block walk")

// The three sequence codes, in the order of the dictionary format's and
// the sequences section's tables differ; these index zstdState.tables.
const (
	zstdLL = iota
	zstdOF
	zstdML
)

// zstdMaxSymbol and zstdMaxLog bound the FSE tables of each code.
var (
	zstdMaxSymbol = [3]int{zstdLL: 35, zstdOF: 31, zstdML: 52}
	zstdMaxLog    = [3]uint8{zstdLL: 9, zstdOF: 8, zstdML: 9}
)

// zstdPredefined are the predefined distributions (RFC 8878 3.1.1.3.2.2).
var zstdPredefined = [3]*fseTable{
	zstdLL: mustFSE(6, []int16{4, 3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 2, 1, 1, 1, 1, 1, -1, -1, -1, -1}),
	zstdOF: mustFSE(5, []int16{1, 1, 1, 1, 1, 1, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1}),
	zstdML: mustFSE(6, []int16{1, 4, 3, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, -1, -1, -1, -1, -1, -1, -1}),
}

// Baselines and extra bits of literal length codes 16-35 and match length
// codes 32-52 (below those, the value is the code, plus 3 for a match
// length, with no extra bits).
var (
	zstdLLBase = [...]uint32{16, 18, 20, 22, 24, 28, 32, 40, 48, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536}
	zstdLLBits = [...]uint8{1, 1, 1, 1, 2, 2, 3, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	zstdMLBase = [...]uint32{35, 37, 39, 41, 43, 47, 51, 59, 67, 83, 99, 131, 259, 515, 1027, 2051, 4099, 8195, 16387, 32771, 65539}
	zstdMLBits = [...]uint8{1, 1, 1, 1, 2, 2, 3, 3, 4, 4, 5, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
)

// fseTable is an FSE distribution and its decoding table. An RLE table
// (one symbol, no state bits) keeps the distribution of one symbol at
// accuracy 5, which decodes the same, for the dictionary format.
type fseTable struct {
	log   uint8
	rle   bool
	norm  []int16 // by symbol; -1 is "less than 1"
	cells []fseCell
}

type fseCell struct {
	sym    uint8
	nbBits uint8
	base   uint16
}

func mustFSE(log uint8, norm []int16) *fseTable {
	t, err := newFSETable(log, norm)
	if err != nil {
		panic(err)
	}
	return t
}

// newFSETable builds the decoding table of a distribution whose counts
// sum to 1<<log (RFC 8878 4.1.1).
func newFSETable(log uint8, norm []int16) (*fseTable, error) {
	t := &fseTable{log: log, norm: norm}
	if err := t.build(); err != nil {
		return nil, err
	}
	return t, nil
}

// build makes t's decoding table, if it has none yet.
func (t *fseTable) build() error {
	if t.cells != nil {
		return nil
	}
	size := 1 << t.log
	cells := make([]fseCell, size)
	next := make([]uint16, len(t.norm))
	high := size - 1
	for s, c := range t.norm {
		if c == -1 {
			cells[high].sym = uint8(s)
			high--
			next[s] = 1
		} else {
			next[s] = uint16(c)
		}
	}
	step := size>>1 + size>>3 + 3
	pos := 0
	for s, c := range t.norm {
		for range max(c, 0) {
			cells[pos].sym = uint8(s)
			pos = (pos + step) & (size - 1)
			for pos > high {
				pos = (pos + step) & (size - 1)
			}
		}
	}
	if pos != 0 {
		return fmt.Errorf("%w: FSE distribution does not fill its table", ErrZstdWalk)
	}
	for u := range cells {
		c := &cells[u]
		n := next[c.sym]
		next[c.sym]++
		if n == 0 {
			return fmt.Errorf("%w: FSE symbol without probability", ErrZstdWalk)
		}
		c.nbBits = t.log - uint8(bits.Len16(n)-1)
		c.base = n<<c.nbBits - uint16(size)
	}
	t.cells = cells
	return nil
}

// rleTable returns the table of RLE mode: symbol sym in every state.
func rleTable(sym uint8) *fseTable {
	norm := make([]int16, int(sym)+1)
	norm[sym] = 32
	t := mustFSE(5, norm)
	t.rle = true
	return t
}

// readNCount reads an FSE table description (RFC 8878 4.1.1) for a code
// whose symbols go up to maxSym, with an accuracy of at most maxLog; it
// returns the distribution and the bytes the description took.
func readNCount(b []byte, maxSym int, maxLog uint8) ([]int16, uint8, int, error) {
	br := fwdBits{b: b}
	log := uint8(br.read(4)) + 5
	if log > maxLog {
		return nil, 0, 0, fmt.Errorf("%w: FSE accuracy %d over %d", ErrZstdWalk, log, maxLog)
	}
	remaining := int32(1)<<log + 1
	threshold := int32(1) << log
	nbBits := log + 1
	norm := make([]int16, 0, maxSym+1)
	prev0 := false
	for remaining > 1 {
		if prev0 {
			for {
				r := br.read(2)
				for range r {
					norm = append(norm, 0)
				}
				if r != 3 {
					break
				}
				if len(norm) > maxSym || br.over() {
					return nil, 0, 0, fmt.Errorf("%w: FSE description runs over", ErrZstdWalk)
				}
			}
		}
		if len(norm) > maxSym || br.over() {
			return nil, 0, 0, fmt.Errorf("%w: FSE description runs over", ErrZstdWalk)
		}
		limit := 2*threshold - 1 - remaining
		var v int32
		if low := int32(br.peek(nbBits - 1)); low < limit {
			v = low
			br.skip(nbBits - 1)
		} else {
			v = int32(br.peek(nbBits)) & (2*threshold - 1)
			if v >= threshold {
				v -= limit
			}
			br.skip(nbBits)
		}
		c := v - 1
		if c < -1 || abs32(c) >= remaining {
			return nil, 0, 0, fmt.Errorf("%w: FSE count out of range", ErrZstdWalk)
		}
		remaining -= abs32(c)
		norm = append(norm, int16(c))
		prev0 = c == 0
		for remaining < threshold && nbBits > 1 {
			nbBits--
			threshold >>= 1
		}
	}
	if remaining != 1 || br.over() {
		return nil, 0, 0, fmt.Errorf("%w: FSE description damaged", ErrZstdWalk)
	}
	return norm, log, (br.pos + 7) / 8, nil
}

func abs32(v int32) int32 {
	if v < 0 {
		return -v
	}
	return v
}

// appendNCount appends the description of t's distribution, which
// readNCount reads back.
func appendNCount(dst []byte, t *fseTable) []byte {
	var bw fwdWriter
	bw.write(uint64(t.log-5), 4)
	remaining := int32(1)<<t.log + 1
	threshold := int32(1) << t.log
	nbBits := t.log + 1
	prev0 := false
	for s := 0; remaining > 1; {
		if prev0 {
			start := s
			for s < len(t.norm) && t.norm[s] == 0 {
				s++
			}
			n := s - start
			for ; n >= 3; n -= 3 {
				bw.write(3, 2)
			}
			bw.write(uint64(n), 2)
		}
		c := int32(t.norm[s])
		s++
		v := c + 1
		limit := 2*threshold - 1 - remaining
		switch {
		case v < limit:
			bw.write(uint64(v), nbBits-1)
		case v >= threshold:
			bw.write(uint64(v+limit), nbBits)
		default:
			bw.write(uint64(v), nbBits)
		}
		remaining -= abs32(c)
		prev0 = c == 0
		for remaining < threshold && nbBits > 1 {
			nbBits--
			threshold >>= 1
		}
	}
	return append(dst, bw.bytes()...)
}

// fwdBits reads a bit stream little-endian, least significant bit first
// (FSE table descriptions). Past the end it reads zeros and over says so.
type fwdBits struct {
	b   []byte
	pos int // in bits
}

func (r *fwdBits) peek(n uint8) uint64 {
	var v uint64
	for i := uint8(0); i < n; i++ {
		p := r.pos + int(i)
		if p>>3 < len(r.b) && r.b[p>>3]>>(p&7)&1 != 0 {
			v |= 1 << i
		}
	}
	return v
}

func (r *fwdBits) skip(n uint8)        { r.pos += int(n) }
func (r *fwdBits) read(n uint8) uint64 { v := r.peek(n); r.skip(n); return v }
func (r *fwdBits) over() bool          { return r.pos > 8*len(r.b) }
func (w *fwdWriter) bytes() []byte     { return w.b }
func (w *fwdWriter) write(v uint64, n uint8) {
	for i := uint8(0); i < n; i++ {
		if w.n&7 == 0 {
			w.b = append(w.b, 0)
		}
		w.b[len(w.b)-1] |= byte(v>>i&1) << (w.n & 7)
		w.n++
	}
}

type fwdWriter struct {
	b []byte
	n int
}

// revBits reads the sequences' bit stream backwards from its end marker
// (RFC 8878 4.1): value holds b[pos:pos+8], the next bits most
// significant first, of which used are read. A stream shorter than 8
// bytes is read from small, behind pad zeros.
type revBits struct {
	b     []byte
	pos   int
	value uint64
	used  uint
	pad   int
	small [8]byte
}

func (r *revBits) init(b []byte) error {
	if len(b) == 0 || b[len(b)-1] == 0 {
		return fmt.Errorf("%w: sequences bit stream without its end marker", ErrZstdWalk)
	}
	r.pad = 0
	if len(b) < 8 {
		r.pad = 8 - len(b)
		r.small = [8]byte{}
		copy(r.small[r.pad:], b)
		b = r.small[:]
	}
	r.b, r.pos = b, len(b)-8
	r.value = binary.LittleEndian.Uint64(b[r.pos:])
	r.used = uint(bits.LeadingZeros8(b[len(b)-1])) + 1
	return nil
}

// reload moves to the bytes holding the next bits: at least 57 are then
// unread, as far as the stream has them.
func (r *revBits) reload() {
	if k := int(r.used >> 3); r.pos >= k {
		r.pos -= k
		r.used &= 7
	} else {
		r.used -= uint(r.pos) * 8
		r.pos = 0
	}
	r.value = binary.LittleEndian.Uint64(r.b[r.pos:])
}

// read returns the next n bits (n <= 32, and reload before running
// out). Past the start of the stream it reads zeros, and over says so.
func (r *revBits) read(n uint8) uint32 {
	v := uint32(r.value << (r.used & 63) >> 1 >> (63 - n))
	if r.used >= 64 {
		v = 0
	}
	r.used += uint(n)
	return v
}

// left is the number of bits not read; negative once over.
func (r *revBits) left() int { return 8*(r.pos-r.pad) + 64 - int(r.used) }

func (r *revBits) over() bool { return r.left() < 0 }

// zstdState is what the block after a boundary depends on besides the
// window. Its tables are shared, never changed once built.
type zstdState struct {
	huf    []byte       // Huffman tree description last defined (nil: none yet)
	tables [3]*fseTable // by zstdLL, zstdOF, zstdML; nil: none yet
	reps   [3]uint32
}

func newZstdState() zstdState { return zstdState{reps: [3]uint32{1, 4, 8}} }

// zstdBoundary is a block boundary of a frame and the state there.
type zstdBoundary struct {
	in    int64 // offset of the next block's header from the frame start
	out   int64 // bytes the frame decoded to before it
	state zstdState
}

// zstdWalker follows one frame whose header it is given (parseZstdFrame);
// write feeds it the frame's bytes from the first block header on, in
// order, in pieces of any size. It is not safe for concurrent use.
type zstdWalker struct {
	at      zstdBoundary // the boundary before the block being collected
	window  int64        // the frame's window size
	blk     []byte       // the block being collected, header included
	need    int          // its length, once the header is in (0: not yet)
	last    bool         // it is the frame's last block
	done    bool         // the last block was walked
	err     error
	onBound func(b zstdBoundary) // told of each boundary after a block, but the last
	// seqBlocks counts the blocks walked with sequences; rleRepeated
	// says one of them repeated an RLE table (resume checks it).
	seqBlocks   int
	rleRepeated bool
	// lazy: the sequences are not decoded (the pass's tracker decodes
	// those it needs later, zstdSeqs): the boundaries' repeat offsets and
	// decoded sizes are unknown, and seq holds the last block's
	// sequences (nil: none), in blk.
	lazy bool
	seq  zstdSeqs
	raw  int64 // the last block's decoded size when raw or RLE, else -1
	// sequence decoding scratch
	stream revBits
}

func newZstdWalker(headerLen int, window int64, onBound func(zstdBoundary)) *zstdWalker {
	return &zstdWalker{at: zstdBoundary{in: int64(headerLen), state: newZstdState()}, window: window, onBound: onBound,
		blk: make([]byte, 0, 3+zstdMaxBlock+8)}
}

// write takes the next bytes of the frame after its header. Bytes after
// the last block (the checksum) are ignored.
func (w *zstdWalker) write(p []byte) error {
	for len(p) > 0 && w.err == nil && !w.done {
		if w.need == 0 {
			k := min(3-len(w.blk), len(p))
			w.blk = append(w.blk, p[:k]...)
			p = p[k:]
			if len(w.blk) < 3 {
				return nil
			}
			h := uint32(w.blk[0]) | uint32(w.blk[1])<<8 | uint32(w.blk[2])<<16
			body, last, err := zstdBlockBody(h)
			if err != nil {
				w.err = fmt.Errorf("%w: %w", ErrZstdWalk, err)
				return w.err
			}
			w.need, w.last = 3+int(body), last
		}
		k := min(w.need-len(w.blk), len(p))
		w.blk = append(w.blk, p[:k]...)
		p = p[k:]
		if len(w.blk) == w.need {
			w.err = w.block()
		}
	}
	return w.err
}

// block walks the collected block and moves to the boundary after it.
func (w *zstdWalker) block() error {
	h := uint32(w.blk[0]) | uint32(w.blk[1])<<8 | uint32(w.blk[2])<<16
	size := int64(h >> 3)
	var out int64
	w.seq = zstdSeqs{}
	w.raw = -1
	if (h>>1)&3 < 2 {
		w.raw = size
	}
	switch (h >> 1) & 3 {
	case 0, 1: // raw, RLE
		out = size
	case 2:
		n, err := w.compressed(w.blk[3:])
		if err != nil {
			return fmt.Errorf("block at %d: %w", w.at.in, err)
		}
		out = n
	}
	if !w.lazy && (out > zstdMaxBlock || out > w.window && w.window > 0) {
		return fmt.Errorf("%w: block at %d decodes to %d bytes", ErrZstdWalk, w.at.in, out)
	}
	w.at.in += int64(len(w.blk))
	w.at.out += out
	w.blk, w.need = w.blk[:0], 0
	if w.last {
		w.done = true
		return nil
	}
	if w.onBound != nil {
		w.onBound(w.at)
	}
	return nil
}

// compressed walks a compressed block's body and returns its decoded size.
func (w *zstdWalker) compressed(b []byte) (int64, error) {
	st := &w.at.state
	w.seq = zstdSeqs{}
	if len(b) < 1 {
		return 0, fmt.Errorf("%w: empty compressed block", ErrZstdWalk)
	}
	// Literals section header (RFC 8878 3.1.1.3.1.1).
	typ, format := b[0]&3, b[0]>>2&3
	var regen, comp, hlen int
	switch {
	case typ < 2 && format&1 == 0:
		regen, hlen = int(b[0]>>3), 1
	case typ < 2 && format == 1:
		hlen = 2
	case typ < 2:
		hlen = 3
	case format < 2:
		hlen = 3
	default:
		hlen = int(format) + 2
	}
	if len(b) < hlen {
		return 0, fmt.Errorf("%w: literals header cut short", ErrZstdWalk)
	}
	switch {
	case typ < 2 && hlen == 2:
		regen = int(b[0]>>4) + int(b[1])<<4
	case typ < 2 && hlen == 3:
		regen = int(b[0]>>4) + int(b[1])<<4 + int(b[2])<<12
	case hlen == 3:
		regen = int(b[0]>>4) + int(b[1]&0x3f)<<4
		comp = int(b[1]>>6) + int(b[2])<<2
	case hlen == 4:
		regen = int(b[0]>>4) + int(b[1])<<4 + int(b[2]&3)<<12
		comp = int(b[2]>>2) + int(b[3])<<6
	case hlen == 5:
		regen = int(b[0]>>4) + int(b[1])<<4 + int(b[2]&0x3f)<<12
		comp = int(b[2]>>6) + int(b[3])<<2 + int(b[4])<<10
	}
	b = b[hlen:]
	switch typ {
	case 0:
		comp = regen
	case 1:
		comp = 1
	}
	if regen > zstdMaxBlock || comp > len(b) {
		return 0, fmt.Errorf("%w: literals of %d bytes in a block of %d", ErrZstdWalk, comp, len(b))
	}
	switch typ {
	case 2:
		if comp < 1 {
			return 0, fmt.Errorf("%w: compressed literals without a tree", ErrZstdWalk)
		}
		n := 1 + int(b[0])
		if b[0] >= 128 {
			n = 1 + (int(b[0])-127+1)/2
		}
		if n > comp {
			return 0, fmt.Errorf("%w: Huffman tree description runs over its literals", ErrZstdWalk)
		}
		if st.huf == nil || string(st.huf) != string(b[:n]) {
			st.huf = append([]byte(nil), b[:n]...)
		}
	case 3:
		if st.huf == nil {
			return 0, fmt.Errorf("%w: treeless literals before any tree", ErrZstdWalk)
		}
	}
	b = b[comp:]
	// Sequences section header (RFC 8878 3.1.1.3.2.1).
	if len(b) < 1 {
		return 0, fmt.Errorf("%w: sequences section missing", ErrZstdWalk)
	}
	var nseq int
	switch {
	case b[0] == 0:
		return int64(regen), nil
	case b[0] < 128:
		nseq, b = int(b[0]), b[1:]
	case b[0] < 255:
		if len(b) < 2 {
			return 0, fmt.Errorf("%w: sequences header cut short", ErrZstdWalk)
		}
		nseq, b = (int(b[0])-128)<<8+int(b[1]), b[2:]
	default:
		if len(b) < 3 {
			return 0, fmt.Errorf("%w: sequences header cut short", ErrZstdWalk)
		}
		nseq, b = int(b[1])+int(b[2])<<8+0x7f00, b[3:]
	}
	if len(b) < 1 || b[0]&3 != 0 {
		return 0, fmt.Errorf("%w: sequences modes damaged", ErrZstdWalk)
	}
	modes := b[0]
	b = b[1:]
	w.seqBlocks++
	for i, shift := range [3]uint8{zstdLL: 6, zstdOF: 4, zstdML: 2} {
		switch modes >> shift & 3 {
		case 0:
			st.tables[i] = zstdPredefined[i]
		case 1:
			if len(b) < 1 || int(b[0]) > zstdMaxSymbol[i] {
				return 0, fmt.Errorf("%w: RLE sequence code damaged", ErrZstdWalk)
			}
			st.tables[i] = rleTable(b[0])
			b = b[1:]
		case 2:
			norm, log, n, err := readNCount(b, zstdMaxSymbol[i], zstdMaxLog[i])
			if err != nil {
				return 0, err
			}
			st.tables[i] = &fseTable{log: log, norm: norm} // built when decoded
			b = b[n:]
		case 3:
			if st.tables[i] == nil {
				return 0, fmt.Errorf("%w: repeated sequence table before any", ErrZstdWalk)
			}
			w.rleRepeated = w.rleRepeated || st.tables[i].rle
		}
	}
	w.seq = zstdSeqs{bits: b, n: nseq, literals: regen, tables: st.tables}
	if w.lazy {
		return int64(regen), nil
	}
	reps := [3]symRep{{-1, st.reps[0]}, {-1, st.reps[1]}, {-1, st.reps[2]}}
	ml, err := w.seq.decode(&w.stream, &reps)
	if err != nil {
		return 0, err
	}
	st.reps = [3]uint32{reps[0].v, reps[1].v, reps[2].v}
	return int64(regen) + ml, nil
}

// zstdSeqs is the sequences section of a compressed block: its bit
// stream, the number of sequences, the literals' size and the tables in
// force for them.
type zstdSeqs struct {
	bits     []byte
	n        int
	literals int
	tables   [3]*fseTable
}

// symRep is a repeat offset: the value v (base < 0), or v less than the
// initial repeat offset number base, when decoding started without
// knowing them (zstdTracker resolves the repeat offsets at a boundary
// from the blocks before it).
type symRep struct {
	base int8
	v    uint32
}

// decode decodes the sequences (RFC 8878 4.1) with r, updating reps, and
// returns the sum of the match lengths.
func (q *zstdSeqs) decode(r *revBits, reps *[3]symRep) (int64, error) {
	if q.n == 0 {
		return 0, nil
	}
	if err := r.init(q.bits); err != nil {
		return 0, err
	}
	llt, oft, mlt := q.tables[zstdLL], q.tables[zstdOF], q.tables[zstdML]
	for _, t := range []*fseTable{llt, oft, mlt} {
		if err := t.build(); err != nil {
			return 0, err
		}
	}
	llc, ofc, mlc := llt.cells, oft.cells, mlt.cells
	var lls, ofs, mls uint32
	if !llt.rle {
		lls = r.read(llt.log)
	}
	if !oft.rle {
		ofs = r.read(oft.log)
	}
	if !mlt.rle {
		mls = r.read(mlt.log)
	}
	var matched, lits int64
	rp := *reps
	for i := range q.n {
		lc, oc, mc := llc[lls&uint32(len(llc)-1)], ofc[ofs&uint32(len(ofc)-1)], mlc[mls&uint32(len(mlc)-1)]
		if oc.sym > 31 || mc.sym > 52 || lc.sym > 35 {
			return 0, fmt.Errorf("%w: sequence code out of range", ErrZstdWalk)
		}
		r.reload()
		ofv := uint32(1)<<oc.sym + r.read(oc.sym)
		if oc.sym > 24 {
			r.reload() // up to 32 bits of lengths follow
		}
		mlv := uint32(mc.sym) + 3
		if mc.sym >= 32 {
			mlv = zstdMLBase[mc.sym-32] + r.read(zstdMLBits[mc.sym-32])
		}
		llv := uint32(lc.sym)
		if lc.sym >= 16 {
			llv = zstdLLBase[lc.sym-16] + r.read(zstdLLBits[lc.sym-16])
		}
		switch {
		case ofv > 3:
			rp = [3]symRep{{-1, ofv - 3}, rp[0], rp[1]}
		case ofv == 1 && llv != 0:
		case ofv == 1 || ofv == 2 && llv != 0:
			rp = [3]symRep{rp[1], rp[0], rp[2]}
		case ofv == 2 || llv != 0:
			rp = [3]symRep{rp[2], rp[0], rp[1]}
		default:
			n := rp[0]
			switch {
			case n.base >= 0:
				n.v++ // one less than it
			case n.v <= 1:
				return 0, fmt.Errorf("%w: repeat offset of zero", ErrZstdWalk)
			default:
				n.v--
			}
			rp = [3]symRep{n, rp[0], rp[1]}
		}
		matched += int64(mlv)
		lits += int64(llv)
		if i < q.n-1 {
			r.reload() // 26 bits of states at most
			if !llt.rle {
				lls = uint32(lc.base) + r.read(lc.nbBits)
			}
			if !mlt.rle {
				mls = uint32(mc.base) + r.read(mc.nbBits)
			}
			if !oft.rle {
				ofs = uint32(oc.base) + r.read(oc.nbBits)
			}
		}
		if r.over() || matched > zstdMaxBlock || lits > int64(q.literals) {
			return 0, fmt.Errorf("%w: sequences damaged", ErrZstdWalk)
		}
	}
	if n := r.left(); n != 0 {
		return 0, fmt.Errorf("%w: sequences bit stream has %d bits left", ErrZstdWalk, n)
	}
	*reps = rp
	return matched, nil
}
