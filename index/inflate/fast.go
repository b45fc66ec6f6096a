package inflate

import "unsafe"

// What huffmanFast returns.
const (
	// fastLimit: the input or the output is near its end, where the
	// careful loop takes over.
	fastLimit = iota
	// fastEnd: the end-of-block code was consumed.
	fastEnd
	// fastBadLit, fastBadDist: the stream is corrupt: an invalid
	// literal/length or distance code.
	fastBadLit
	fastBadDist
	// fastFar: a match (farLen, farDist; consumed, not copied) reaches
	// before the member's output in out: into DecodeInto's window, or
	// it is an error.
	fastFar
)

// fastInput is the input huffmanFast needs before each refill of the bit
// buffer, which loads 8 bytes.
const fastInput = 8

// fastLits is the number of literals one turn of huffmanFast's loop may
// write: the output must be that far before stop at its start.
const fastLits = 3

// huffmanFast decodes symbols of a Huffman block while at least
// fastInput bytes of input are left and the output is fastLits bytes
// before stop: the hot loop of the decoder, with none of the careful
// loop's checks.
//
// Each turn of the loop starts with the bit buffer just refilled and the
// entry for its next bits (e) looked up, and decodes up to fastLits
// literals or one match. The next entry is looked up as soon as the bits
// it needs are known, before the refill and the match copy, so that the
// table loads overlap the rest of the work.
//
// Why it is safe to skip the careful loop's checks:
//   - Input: a refill loads 8 bytes at ip, and ip <= inEnd-fastInput
//     before each one. After it the buffer counts at least 56 bits and
//     holds 64 real ones (those above nb are the next input bits, which
//     the next refill ORs in again). A turn consumes at most 3*10 bits of
//     literals or 20+28 of a match, then peeks 10 more: within 64.
//     No zero bits are ever appended (virt stays 0).
//   - Output: dp < stop-2 at the start of a turn, so its literals end at
//     stop at the latest; stop leaves Margin bytes of out after it for a
//     match (at most 258 bytes) and its word copies' overrun (at most 7).
//   - Tables: buildTable makes every primary index and every subtable
//     entry lie inside the table.
//   - Matches: a distance beyond the output of the member decoded so far
//     (op-hist) returns fastFar, for huffman to check and copy.
//
// nb, the count of bits in the buffer, is exact in its low byte only:
// whole entries are subtracted from it, and the low byte never borrows.
//
// The bit buffer and positions are saved to z on return; after an error,
// past the symbol that was found bad.
func (z *Reader) huffmanFast(stop int) int {
	if z.virt != 0 || z.inPos > z.inEnd-fastInput || z.op >= stop-(fastLits-1) || len(z.lit) < litTableSize {
		return fastLimit
	}
	bits, nb := z.bits, uint64(z.nbits)
	// Pointers rather than slices and indexes, which leaves the
	// compiler registers enough to keep the loop's state in them: ip is
	// the next input byte, dp the next output byte; ipEnd, dpEnd and
	// hp (the start of the member's output) bound them.
	inp := unsafe.Pointer(unsafe.SliceData(z.in))
	outp := unsafe.Pointer(unsafe.SliceData(z.out))
	ip := unsafe.Add(inp, z.inPos)
	ipEnd := unsafe.Add(inp, z.inEnd-fastInput)
	dp := unsafe.Add(outp, z.op)
	dpEnd := unsafe.Add(outp, stop-(fastLits-1))
	hp := unsafe.Add(outp, z.hist)
	// The distance table follows the literal/length one (tables).
	litp := unsafe.Pointer(unsafe.SliceData(z.lit))
	const distOff = litTableSize * 4
	const litMask = 1<<litPrimaryBits - 1
	const distMask = 1<<distPrimaryBits - 1
	status := fastLimit

	bits |= *(*uint64)(ip) << (nb & 63)
	ip = unsafe.Add(ip, 7-(nb>>3)&7)
	nb |= 56
	e := *(*uint32)(unsafe.Add(litp, uintptr(bits&litMask)*4))
	for {
		bits >>= e & 63
		nb -= uint64(e)
		if int32(e) < 0 {
			*(*byte)(dp) = byte(e >> 16)
			dp = unsafe.Add(dp, 1)
			e = *(*uint32)(unsafe.Add(litp, uintptr(bits&litMask)*4))
			if int32(e) < 0 {
				bits >>= e & 63
				nb -= uint64(e)
				*(*byte)(dp) = byte(e >> 16)
				dp = unsafe.Add(dp, 1)
				e = *(*uint32)(unsafe.Add(litp, uintptr(bits&litMask)*4))
				if int32(e) < 0 {
					bits >>= e & 63
					nb -= uint64(e)
					*(*byte)(dp) = byte(e >> 16)
					dp = unsafe.Add(dp, 1)
					e = *(*uint32)(unsafe.Add(litp, uintptr(bits&litMask)*4))
				}
			}
		} else {
			if e&flagExceptional != 0 {
				if e&flagSub == 0 {
					if e&flagEnd != 0 {
						status = fastEnd
					} else {
						status = fastBadLit
					}
					break
				}
				s := *(*uint32)(unsafe.Add(litp, uintptr(e>>16+uint32(bits)&(1<<(e>>8&0xf)-1))*4))
				bits >>= s & 63
				nb -= uint64(s)
				if int32(s) < 0 {
					*(*byte)(dp) = byte(s >> 16)
					dp = unsafe.Add(dp, 1)
					e = *(*uint32)(unsafe.Add(litp, uintptr(bits&litMask)*4))
					goto refill
				}
				if s&flagExceptional != 0 {
					if s&flagEnd != 0 {
						status = fastEnd
					} else {
						status = fastBadLit
					}
					break
				}
				e = s
			}
			// A match: the length, then the distance.
			extra := e >> 8 & 0xf
			length := uintptr(e>>16 + uint32(bits)&(1<<extra-1))
			bits >>= extra
			nb -= uint64(extra)
			d := *(*uint32)(unsafe.Add(litp, distOff+uintptr(bits&distMask)*4))
			dext := bits
			if d&flagExceptional != 0 {
				if d&flagSub == 0 {
					status = fastBadDist
					break
				}
				dext = bits >> distPrimaryBits
				nb -= distPrimaryBits
				d = *(*uint32)(unsafe.Add(litp, distOff+uintptr(d>>16+uint32(dext)&(1<<(d>>8&0xf)-1))*4))
				if d&flagExceptional != 0 {
					status = fastBadDist
					break
				}
			}
			distance := uintptr(d>>16 + uint32(dext&(1<<(d&63)-1))>>(d>>8&0xf))
			bits = dext >> (d & 63)
			nb -= uint64(d)
			if uintptr(dp)-uintptr(hp) < distance {
				z.farLen, z.farDist = int(length), int(distance)
				status = fastFar
				break
			}
			e = *(*uint32)(unsafe.Add(litp, uintptr(bits&litMask)*4))

			src := unsafe.Add(dp, -int(distance))
			switch {
			case distance >= 8:
				// Word copies, forward: each word read lies before the
				// bytes being written; they may write up to 7 bytes past
				// the match, inside the margin.
				*(*uint64)(dp) = *(*uint64)(src)
				*(*uint64)(unsafe.Add(dp, 8)) = *(*uint64)(unsafe.Add(src, 8))
				for k := uintptr(16); k < length; k += 8 {
					*(*uint64)(unsafe.Add(dp, k)) = *(*uint64)(unsafe.Add(src, k))
				}
			case distance == 1:
				v := uint64(*(*byte)(src)) * 0x0101010101010101
				for k := uintptr(0); k < length; k += 8 {
					*(*uint64)(unsafe.Add(dp, k)) = v
				}
			default:
				for k := uintptr(0); k < length; k++ {
					*(*byte)(unsafe.Add(dp, k)) = *(*byte)(unsafe.Add(src, k))
				}
			}
			dp = unsafe.Add(dp, length)
		}
	refill:
		if uintptr(ip) > uintptr(ipEnd) || uintptr(dp) >= uintptr(dpEnd) {
			break
		}
		bits |= *(*uint64)(ip) << (nb & 63)
		ip = unsafe.Add(ip, 7-(nb>>3)&7)
		nb |= 56
	}
	z.bits, z.nbits = bits, uint(nb&0xff)
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
