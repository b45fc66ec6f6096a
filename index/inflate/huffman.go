package inflate

import (
	"errors"
	"math/bits"
)

// A decode table maps the next bits of the stream (LSB first) to a symbol.
// Each entry is a uint32:
//
//	 31  30          16 15  14  13  12 11    8 7        0
//	+---+--------------+---+---+---+--+-------+----------+
//	|lit|    value     |exc|sub|end|  |  mid  |   low    |
//	+---+--------------+---+---+---+--+-------+----------+
//
//	low    bits to consume at once
//	lit    a literal: value is the byte (the sign bit, for a cheap test)
//	exc    not a literal, length or distance: a subtable pointer (sub),
//	       the end-of-block code (end), or an invalid code (neither)
//	value  literal byte, length or distance base, or subtable start
//
// For a length or a distance, low is the codeword length plus the count
// of extra bits, which follow the codeword, and mid the codeword length:
// the length or distance is value + (bits&(1<<low-1))>>mid, with bits
// the stream from the codeword's first bit. For a literal or the end of
// the block, low is the codeword length.
//
// A subtable pointer sits in the primary table: its low is the primary
// width and its mid the subtable's index width. The subtable is indexed
// by the bits that follow the primary ones, and its entries count only
// those bits: codeword lengths in them leave out the primary width.
const (
	flagLiteral     = 1 << 31
	flagExceptional = 1 << 15
	flagSub         = 1 << 14
	flagEnd         = 1 << 13
)

const (
	litPrimaryBits  = 10
	distPrimaryBits = 8
	clenPrimaryBits = 7
	maxCodeBits     = 15
	maxSymbols      = 288 // the most codewords of a code: the fixed literal/length code
)

// Room for a table with its subtables. A subtable of width w needs at
// least w+1 codewords under its prefix, and a code has at most maxSymbols:
// w = 15-10 = 5 gives the most entries per codeword (32 for 6), so the
// subtables of a literal/length table add at most 288*32/6 = 1536
// entries; those of a distance table (w <= 7) at most 32*128/8 = 512.
// buildTable refuses a code that would not fit all the same.
const (
	litTableSize  = 1<<litPrimaryBits + 1536
	distTableSize = 1<<distPrimaryBits + 512
)

// tables holds a block's literal/length table and, at a fixed offset
// after it, its distance table: the fast loop reaches both from one
// pointer.
type tables [litTableSize + distTableSize]uint32

func (t *tables) lit() []uint32  { return t[:litTableSize] }
func (t *tables) dist() []uint32 { return t[litTableSize:] }

func entry(value, flags, mid, low uint32) uint32 {
	return value<<16 | flags | mid<<8 | low
}

// invalidEntry fills the entries of an incomplete code that no codeword
// reaches: it consumes nothing.
const invalidEntry = flagExceptional

var lengthBase = [29]uint32{3, 4, 5, 6, 7, 8, 9, 10, 11, 13, 15, 17, 19, 23, 27, 31,
	35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258}
var lengthExtra = [29]uint32{0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
	3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0}
var distBase = [30]uint32{1, 2, 3, 4, 5, 7, 9, 13, 17, 25, 33, 49, 65, 97, 129, 193,
	257, 385, 513, 769, 1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577}
var distExtra = [30]uint32{0, 0, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6,
	7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13}

var errBadCode = errors.New("invalid Huffman code lengths")

// A symbolFunc returns the table entry for symbol sym, with clen bits of
// its codeword left to consume at the entry.
type symbolFunc func(sym int, clen uint32) uint32

// symbols holds a symbolFunc's entries for buildTable: that of symbol s
// with clen bits left is base[s] + clen*per[s] (every symbolFunc is
// affine in clen).
type symbols struct {
	base, per [maxSymbols]uint32
}

var (
	litlenSymbols = makeSymbols(litlenSymbol)
	distSymbols   = makeSymbols(distSymbol)
	plainSymbols  = makeSymbols(plainSymbol)
)

func makeSymbols(f symbolFunc) *symbols {
	s := new(symbols)
	for i := range maxSymbols {
		s.base[i] = f(i, 0)
		s.per[i] = f(i, 1) - f(i, 0)
	}
	return s
}

func litlenSymbol(sym int, clen uint32) uint32 {
	switch {
	case sym < 256:
		return entry(uint32(sym), flagLiteral, 0, clen)
	case sym == 256:
		return entry(0, flagExceptional|flagEnd, 0, clen)
	case sym < 286:
		i := sym - 257
		return entry(lengthBase[i], 0, clen, clen+lengthExtra[i])
	}
	return entry(0, flagExceptional, 0, clen)
}

func distSymbol(sym int, clen uint32) uint32 {
	if sym < 30 {
		return entry(distBase[sym], 0, clen, clen+distExtra[sym])
	}
	return entry(0, flagExceptional, clen, clen)
}

func plainSymbol(sym int, clen uint32) uint32 {
	return entry(uint32(sym), flagLiteral, 0, clen)
}

// buildTable fills the start of table for the canonical Huffman code with
// the given codeword lengths. Over-subscribed and incomplete codes are
// rejected, but for an empty code and a single one-bit codeword, whose
// unused entries fail when decoded.
func buildTable(table []uint32, lengths []uint8, primary uint, syms *symbols) error {
	if len(lengths) > maxSymbols {
		return errBadCode
	}
	// Two counts, added up after, so that runs of one length do not
	// wait on the same counter.
	var count, count2 [maxCodeBits + 1]int
	for i := 1; i < len(lengths); i += 2 {
		count[lengths[i-1]&maxCodeBits]++
		count2[lengths[i]&maxCodeBits]++
	}
	if len(lengths)%2 == 1 {
		count[lengths[len(lengths)-1]&maxCodeBits]++
	}
	for l := range count {
		count[l] += count2[l]
	}
	count[0] = 0 // unused symbols
	left := 1
	for l := 1; l <= maxCodeBits; l++ {
		left <<= 1
		left -= count[l]
		if left < 0 {
			return errBadCode
		}
	}
	// Like zlib and Go's decoder, accept an incomplete code only when it
	// is empty (no distance codes) or a single one-bit codeword.
	if left > 0 {
		codes := 0
		for l := 1; l <= maxCodeBits; l++ {
			codes += count[l]
		}
		if !(codes == 0 || codes == 1 && count[1] == 1) {
			return errBadCode
		}
	}
	// The canonical first codeword of each length, and the symbols in
	// canonical order (by length, then symbol): those of length l start
	// at first[l].
	var next [maxCodeBits + 1]uint32
	var first [maxCodeBits + 2]int
	code := uint32(0)
	for l := 1; l <= maxCodeBits; l++ {
		code = (code + uint32(count[l-1])) << 1
		next[l] = code
		first[l+1] = first[l] + count[l]
	}
	var sorted [maxSymbols]uint16
	at := first
	for s, l := range lengths {
		if l != 0 {
			sorted[at[l&maxCodeBits]] = uint16(s)
			at[l&maxCodeBits]++
		}
	}

	size := 1 << primary
	primaryMask := uint32(size - 1)
	// The longest codeword under each primary prefix decides the width
	// of that prefix's subtable; subs lists those prefixes.
	var subBits [1 << litPrimaryBits]uint8
	var subs [maxSymbols]uint16
	nsubs := 0
	for l := primary + 1; l <= maxCodeBits; l++ {
		for c := next[l]; c < next[l]+uint32(count[l]); c++ {
			p := reverse(c, l) & primaryMask
			if subBits[p] == 0 {
				subs[nsubs] = uint16(p)
				nsubs++
			}
			subBits[p] = uint8(l - primary) // lengths only grow
		}
	}
	total := size
	for _, p := range subs[:nsubs] {
		total += 1 << subBits[p]
	}
	if total > len(table) {
		return errBadCode
	}
	table = table[:total]
	if left > 0 {
		// Only an incomplete code leaves entries unfilled; a complete
		// one fills every primary and subtable entry below.
		for i := range table {
			table[i] = invalidEntry
		}
	}
	// The primary entries, one length at a time: with those of the
	// codewords up to width bits in table[:1<<width], doubling that
	// part gives the entries at width+1 of all but the longer codewords,
	// which are then written in.
	width := uint(0)
	for l := uint(1); l <= primary; l++ {
		if count[l] == 0 {
			continue
		}
		if width == 0 {
			width = l
		}
		for ; width < l; width++ {
			copy(table[1<<width:2<<width], table[:1<<width])
		}
		c := next[l]
		for _, s := range sorted[first[l]:first[l+1]] {
			table[reverse(c, l)] = syms.base[s] + uint32(l)*syms.per[s]
			c++
		}
	}
	if width > 0 {
		for ; width < primary; width++ {
			copy(table[1<<width:2<<width], table[:1<<width])
		}
	}
	// Then the subtables.
	at2 := size
	for _, p := range subs[:nsubs] {
		w := subBits[p]
		table[p] = entry(uint32(at2), flagExceptional|flagSub, uint32(w), uint32(primary))
		at2 += 1 << w
	}
	for l := primary + 1; l <= maxCodeBits; l++ {
		c := next[l]
		for _, s := range sorted[first[l]:first[l+1]] {
			r := reverse(c, l)
			c++
			e := syms.base[s] + uint32(l-primary)*syms.per[s]
			sub := table[r&primaryMask]
			start := sub >> 16
			w := sub >> 8 & 0xf
			for i := r >> primary; i < 1<<w; i += 1 << (l - primary) {
				table[start+i] = e
			}
		}
	}
	return nil
}

// reverse returns the n low bits of code in reverse order.
func reverse(code uint32, n uint) uint32 {
	return bits.Reverse32(code) >> (32 - n)
}

// lookup returns the entry of table t (primary bits wide) for the next
// bits of the stream (nbits of them), going through a subtable pointer:
// its primary bits are then consumed.
func lookup(t []uint32, bits uint64, nbits, primary uint) (uint32, uint64, uint) {
	e := t[bits&(1<<primary-1)]
	if e&flagSub != 0 {
		bits >>= primary
		nbits -= primary
		e = t[e>>16+uint32(bits)&(1<<(e>>8&0xf)-1)]
	}
	return e, bits, nbits
}

// extra returns the length or distance of entry e, with bits the stream
// from its codeword's first bit.
func extra(e uint32, bits uint64) int {
	return int(e>>16 + uint32(bits&(1<<(e&0xff)-1))>>(e>>8&0xf))
}

// match decodes the rest of a match whose length entry is e, with bits
// (nbits of them) the stream from the length's codeword on: the length,
// then the distance. ok is false when the distance code is invalid.
func match(e uint32, bits uint64, nbits uint, dist []uint32) (length, distance int, _ uint64, _ uint, ok bool) {
	length = extra(e, bits)
	bits >>= e & 0xff
	nbits -= uint(e & 0xff)
	d, bits, nbits := lookup(dist, bits, nbits, distPrimaryBits)
	if d&flagExceptional != 0 {
		return 0, 0, bits, nbits, false
	}
	return length, extra(d, bits), bits >> (d & 0xff), nbits - uint(d&0xff), true
}
