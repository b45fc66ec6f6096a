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
//     (op-hist) returns fastSlow before anything is consumed or copied.
//
// The bit buffer and positions are saved to z on return; a symbol that
// returned fastSlow is left unconsumed for the careful loop.
func (z *Reader) huffmanFast(stop int) int {
	bits, nbits := z.bits, z.nbits
	if z.virt != 0 || z.inPos > z.inEnd-fastInput || z.op >= stop || len(z.lit) == 0 || len(z.dist) == 0 {
		return fastLimit
	}
	// Pointers rather than slices and indexes, which leaves the
	// compiler registers enough to keep the loop's state in them: ip is
	// the next input byte, dp the next output byte; ipEnd, dpEnd and
	// hp (the start of the member's output) bound them.
	inp := unsafe.Pointer(unsafe.SliceData(z.in))
	outp := unsafe.Pointer(unsafe.SliceData(z.out))
	ip := unsafe.Add(inp, z.inPos)
	ipEnd := unsafe.Add(inp, z.inEnd-fastInput)
	dp := unsafe.Add(outp, z.op)
	dpEnd := unsafe.Add(outp, stop)
	hp := unsafe.Add(outp, z.hist)
	litp := unsafe.Pointer(unsafe.SliceData(z.lit))
	distp := unsafe.Pointer(unsafe.SliceData(z.dist))
	const litMask = 1<<litPrimaryBits - 1
	const distMask = 1<<distPrimaryBits - 1
	status := fastLimit
loop:
	for uintptr(ip) <= uintptr(ipEnd) && uintptr(dp) < uintptr(dpEnd) {
		bits |= *(*uint64)(ip) << (nbits & 63)
		ip = unsafe.Add(ip, int(63-nbits)>>3)
		nbits |= 56

		e := *(*uint32)(unsafe.Add(litp, uintptr(bits&litMask)*4))
		if e&kindMask == 0 {
			// Literals come in runs: up to three from one refill (a
			// primary code takes at most litPrimaryBits).
			bits >>= e & 63
			nbits -= uint(e & 63)
			*(*byte)(dp) = byte(e >> 16)
			dp = unsafe.Add(dp, 1)
			for range 2 {
				e = *(*uint32)(unsafe.Add(litp, uintptr(bits&litMask)*4))
				if e&kindMask != 0 || uintptr(dp) >= uintptr(dpEnd) {
					continue loop
				}
				bits >>= e & 63
				nbits -= uint(e & 63)
				*(*byte)(dp) = byte(e >> 16)
				dp = unsafe.Add(dp, 1)
			}
			continue
		}
		if e&kindMask == kindSub<<12 {
			e = *(*uint32)(unsafe.Add(litp, uintptr(e>>16+uint32(bits>>litPrimaryBits)&(1<<(e&31)-1))*4))
			if e&kindMask == 0 {
				bits >>= e & 63
				nbits -= uint(e & 63)
				*(*byte)(dp) = byte(e >> 16)
				dp = unsafe.Add(dp, 1)
				continue
			}
		}
		switch e & kindMask {
		case kindLength << 12:
		case kindEnd << 12:
			bits >>= e & 63
			nbits -= uint(e & 63)
			status = fastEnd
			break loop
		default:
			status = fastSlow
			break loop
		}
		// A match: length, then distance. Nothing is consumed until
		// both are known good, so that the careful loop can take the
		// symbol again when they are not.
		total := e & 63
		length := int(e>>16 + uint32(bits>>(e>>8&0xf))&(1<<((total-e>>8&0xf)&31)-1))
		mb := bits >> total
		d := *(*uint32)(unsafe.Add(distp, uintptr(mb&distMask)*4))
		if d&kindMask == kindSub<<12 {
			d = *(*uint32)(unsafe.Add(distp, uintptr(d>>16+uint32(mb>>distPrimaryBits)&(1<<(d&31)-1))*4))
		}
		if d&kindMask != kindDist<<12 {
			status = fastSlow
			break
		}
		dtotal := d & 63
		distance := uintptr(d>>16 + uint32(mb>>(d>>8&0xf))&(1<<((dtotal-d>>8&0xf)&31)-1))
		if uintptr(dp)-uintptr(hp) < distance {
			// Before the member's output in out: DecodeInto's window
			// (pre), in the first WindowSize bytes of a span, or an
			// error for the careful loop to report.
			op := int(uintptr(dp) - uintptr(outp))
			if int(distance) > op-z.hist+len(z.pre) {
				status = fastSlow
				break
			}
			bits = mb >> dtotal
			nbits -= uint(total + dtotal)
			z.copyPre(op, int(distance), length)
			dp = unsafe.Add(dp, length)
			continue
		}
		bits = mb >> dtotal
		nbits -= uint(total + dtotal)

		src := unsafe.Add(dp, -int(distance))
		switch {
		case distance >= 8:
			// Word copies, forward: each word read lies before the
			// bytes being written; they may write up to 7 bytes past
			// the match, inside the margin.
			*(*uint64)(dp) = *(*uint64)(src)
			*(*uint64)(unsafe.Add(dp, 8)) = *(*uint64)(unsafe.Add(src, 8))
			for k := 16; k < length; k += 8 {
				*(*uint64)(unsafe.Add(dp, k)) = *(*uint64)(unsafe.Add(src, k))
			}
		case distance == 1:
			v := uint64(*(*byte)(src)) * 0x0101010101010101
			for k := 0; k < length; k += 8 {
				*(*uint64)(unsafe.Add(dp, k)) = v
			}
		default:
			for k := 0; k < length; k++ {
				*(*byte)(unsafe.Add(dp, k)) = *(*byte)(unsafe.Add(src, k))
			}
		}
		dp = unsafe.Add(dp, length)
	}
	z.bits, z.nbits = bits, nbits
	z.inPos = int(uintptr(ip) - uintptr(inp))
	z.op = int(uintptr(dp) - uintptr(outp))
	return status
}

// copyPre copies a match of length bytes at distance that starts before
// out, in the window pre that precedes it (DecodeInto), to out[op:]. The
// caller has checked that pre reaches that far back.
func (z *Reader) copyPre(op, distance, length int) {
	out, pre := z.out, z.pre
	for k := range length {
		if s := op - distance + k; s < 0 {
			out[op+k] = pre[len(pre)+s]
		} else {
			out[op+k] = out[s]
		}
	}
}
