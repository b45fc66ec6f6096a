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

// fastRun bounds the output of one call of the fast loop, which the
// scheduler cannot preempt while it runs in assembly: DecodeInto asks
// for whole spans at once, the Reader for chunkSize bytes.
const fastRun = 256 << 10

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
//     stop at the latest; stop leaves Margin (258+16) bytes of out after
//     it for a match of at most 258 bytes, which the word copies write in
//     at most 272 bytes from dp (32 at least, then 16 at a time; the Go
//     loop's 8-byte words at most 264): dp+272 <= stop+269.
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
//
// The loop itself is fastLoop: in assembly on amd64 (fast_amd64.s), else
// fastLoopGo, which the tests also run on amd64 (useGoLoop).
func (z *Reader) huffmanFast(stop int) int {
	stop = min(stop, z.op+fastRun)
	if z.virt != 0 || z.inPos > z.inEnd-fastInput || z.op >= stop-(fastLits-1) || len(z.lit) < litTableSize {
		return fastLimit
	}
	inp := unsafe.Pointer(unsafe.SliceData(z.in))
	outp := unsafe.Pointer(unsafe.SliceData(z.out))
	st := fastState{
		bits:  z.bits,
		nb:    uint64(z.nbits),
		ip:    unsafe.Add(inp, z.inPos),
		ipEnd: unsafe.Add(inp, z.inEnd-fastInput),
		dp:    unsafe.Add(outp, z.op),
		dpEnd: unsafe.Add(outp, stop-(fastLits-1)),
		hp:    unsafe.Add(outp, z.hist),
		tab:   unsafe.Pointer(unsafe.SliceData(z.lit)),
	}
	var status int
	if useGoLoop {
		status = fastLoopGo(&st)
	} else {
		status = fastLoop(&st)
	}
	z.bits, z.nbits = st.bits, uint(st.nb&0xff)
	z.inPos = int(uintptr(st.ip) - uintptr(inp))
	z.op = int(uintptr(st.dp) - uintptr(outp))
	if status == fastFar {
		z.farLen, z.farDist = int(st.farLen), int(st.farDist)
	}
	return status
}

// useGoLoop makes huffmanFast run fastLoopGo where fastLoop is in
// assembly; for tests.
var useGoLoop = false

// fastState is the fast loop's state: read on entry, written back on
// return. fast_amd64.s finds its fields by the offsets in go_asm.h.
type fastState struct {
	bits uint64
	nb   uint64 // exact in its low byte only
	// ip is the next input byte, dp the next output byte; ipEnd and
	// dpEnd bound them, hp is the start of the member's output.
	ip, ipEnd unsafe.Pointer
	dp, dpEnd unsafe.Pointer
	hp        unsafe.Pointer
	// tab is the block's tables: the literal/length table, then at
	// litTableSize entries the distance table.
	tab unsafe.Pointer
	// The match a fastFar leaves to huffman.
	farLen, farDist uintptr
}

// fastLoopGo is huffmanFast's loop in Go.
func fastLoopGo(st *fastState) int {
	// Locals rather than st's fields, which the compiler keeps in
	// registers.
	bits, nb := st.bits, st.nb
	ip, ipEnd := st.ip, st.ipEnd
	dp, dpEnd := st.dp, st.dpEnd
	hp := st.hp
	litp := st.tab
	const distOff = litTableSize * 4
	const litMask = 1<<litPrimaryBits - 1
	const distMask = 1<<distPrimaryBits - 1
	status := fastLimit

	bits |= *(*uint64)(ip) << (nb & 63)
	ip = unsafe.Add(ip, 7-(nb>>3)&7)
	nb |= 56
	e := *(*uint32)(unsafe.Add(litp, uintptr(bits&litMask)*4))
	for {
		sym := bits // the bits from this symbol's first on
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
			ext := sym // the bits a length's extra bits are taken from
			if e&flagExceptional != 0 {
				if e&flagSub == 0 {
					if e&flagEnd != 0 {
						status = fastEnd
					} else {
						status = fastBadLit
					}
					break
				}
				ext = bits
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
			length := uintptr(e>>16 + uint32(ext&(1<<(e&63)-1))>>(e>>8&0xf))
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
				st.farLen, st.farDist = length, distance
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
	st.bits, st.nb = bits, nb
	st.ip, st.dp = ip, dp
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
