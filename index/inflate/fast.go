package inflate

import "unsafe"

// What huffmanFast returns.
const (
	// fastLimit: the input or the output is near its end, where the
	// careful loop takes over.
	fastLimit = iota
	// fastEnd: the end-of-block code was consumed.
	fastEnd
	// fastSlow: the next symbol needs the careful loop (an invalid code,
	// or a match that reaches into the window before out).
	fastSlow
)

// fastInput is the input huffmanFast needs before each symbol: one
// refill of the bit buffer reads 8 bytes.
const fastInput = 8

// kindMask selects the kind of a table entry.
const kindMask = 0xf << 12

// huffmanFast decodes symbols of a Huffman block while at least
// fastInput bytes of input are left and the output is before stop: the
// hot loop of the decoder, with none of the careful loop's checks.
//
// Why it is safe to skip them:
//   - Input: each symbol starts with a refill that loads 8 bytes at
//     inPos, and inPos <= inEnd-fastInput. The bit buffer then holds at
//     least 56 bits, more than one symbol takes (15 + 5 + 15 + 13 for a
//     match), so no zero bits are ever appended (virt stays 0).
//   - Output: op < stop before each symbol, and stop leaves Margin bytes
//     of out after it: a match (at most 258 bytes) and the word copies'
//     overrun (7) fit.
//   - Tables: buildTable makes every primary index and every subtable
//     entry lie inside the table.
//   - Matches: a distance beyond the output of the member decoded so far
//     (op-hist) returns fastSlow before anything is copied.
//
// The caller has refilled nothing it needs back: the bit buffer and
// positions are saved to z on return.
func (z *Reader) huffmanFast(stop int) int {
	bits, nbits := z.bits, z.nbits
	inPos := z.inPos
	inLim := z.inEnd - fastInput
	op, hist := z.op, z.hist
	if z.virt != 0 || inPos > inLim || op >= stop || len(z.lit) == 0 || len(z.dist) == 0 {
		return fastLimit
	}
	inp := unsafe.Pointer(unsafe.SliceData(z.in))
	outp := unsafe.Pointer(unsafe.SliceData(z.out))
	litp := unsafe.Pointer(unsafe.SliceData(z.lit))
	distp := unsafe.Pointer(unsafe.SliceData(z.dist))
	const litMask = 1<<litPrimaryBits - 1
	const distMask = 1<<distPrimaryBits - 1
	status := fastLimit
loop:
	for inPos <= inLim && op < stop {
		bits |= *(*uint64)(unsafe.Add(inp, inPos)) << (nbits & 63)
		inPos += int(63-nbits) >> 3
		nbits |= 56
		// Where this symbol starts, for the careful loop to take it
		// again when it cannot be decoded here.
		sbits, snbits := bits, nbits

		e := *(*uint32)(unsafe.Add(litp, uintptr(bits&litMask)*4))
		if e&kindMask == 0 {
			// Literals come in runs: up to three from one refill (a
			// primary code takes at most litPrimaryBits).
			n := e & 63
			bits >>= n
			nbits -= uint(n)
			*(*byte)(unsafe.Add(outp, op)) = byte(e >> 16)
			op++
			for range 2 {
				e = *(*uint32)(unsafe.Add(litp, uintptr(bits&litMask)*4))
				if e&kindMask != 0 || op >= stop {
					continue loop
				}
				n = e & 63
				bits >>= n
				nbits -= uint(n)
				*(*byte)(unsafe.Add(outp, op)) = byte(e >> 16)
				op++
			}
			continue
		}
		if e&kindMask == kindSub<<12 {
			e = *(*uint32)(unsafe.Add(litp, uintptr(e>>16+uint32(bits>>litPrimaryBits)&(1<<(e&31)-1))*4))
			if e&kindMask == 0 {
				n := e & 63
				bits >>= n
				nbits -= uint(n)
				*(*byte)(unsafe.Add(outp, op)) = byte(e >> 16)
				op++
				continue
			}
		}
		switch e & kindMask {
		case kindLength << 12:
		case kindEnd << 12:
			n := e & 63
			bits >>= n
			nbits -= uint(n)
			status = fastEnd
			break loop
		default:
			bits, nbits = sbits, snbits
			status = fastSlow
			break loop
		}
		// A match: length, then distance.
		total := e & 63
		clen := e >> 8 & 0xf
		length := int(e>>16 + uint32(bits>>clen)&(1<<((total-clen)&31)-1))
		bits >>= total
		nbits -= uint(total)

		d := *(*uint32)(unsafe.Add(distp, uintptr(bits&distMask)*4))
		if d&kindMask == kindSub<<12 {
			d = *(*uint32)(unsafe.Add(distp, uintptr(d>>16+uint32(bits>>distPrimaryBits)&(1<<(d&31)-1))*4))
		}
		if d&kindMask != kindDist<<12 {
			bits, nbits = sbits, snbits
			status = fastSlow
			break
		}
		total2 := d & 63
		clen = d >> 8 & 0xf
		distance := int(d>>16 + uint32(bits>>clen)&(1<<((total2-clen)&31)-1))
		if distance > op-hist {
			bits, nbits = sbits, snbits
			status = fastSlow
			break
		}
		bits >>= total2
		nbits -= uint(total2)

		src := op - distance
		switch {
		case distance >= 8:
			// Word copies, forward: each word read lies before the
			// bytes being written; they may write up to 7 bytes past
			// the match, inside the margin.
			s := unsafe.Add(outp, src)
			d := unsafe.Add(outp, op)
			*(*uint64)(d) = *(*uint64)(s)
			*(*uint64)(unsafe.Add(d, 8)) = *(*uint64)(unsafe.Add(s, 8))
			for k := 16; k < length; k += 8 {
				*(*uint64)(unsafe.Add(d, k)) = *(*uint64)(unsafe.Add(s, k))
			}
		case distance == 1:
			v := uint64(*(*byte)(unsafe.Add(outp, src))) * 0x0101010101010101
			d := unsafe.Add(outp, op)
			for k := 0; k < length; k += 8 {
				*(*uint64)(unsafe.Add(d, k)) = v
			}
		default:
			for k := 0; k < length; k++ {
				*(*byte)(unsafe.Add(outp, op+k)) = *(*byte)(unsafe.Add(outp, src+k))
			}
		}
		op += length
	}
	z.bits, z.nbits, z.inPos, z.op = bits, nbits, inPos, op
	return status
}
