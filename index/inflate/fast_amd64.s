//go:build amd64 && !purego

#include "go_asm.h"
#include "textflag.h"

// fastLoop is fastLoopGo (fast.go) by hand; see huffmanFast for why it
// may skip the careful loop's checks. Registers:
//
//	BX  bits        R9   nb (exact in its low byte)
//	SI  ip          R10  ipEnd
//	DI  dp          R11  dpEnd
//	R8  tab         R12  hp
//	DX  the entry being decoded, or the next one, looked up
//	R13 the bits from a length's codeword on, then the match's length
//	R15 the distance entry, then the match's source; AX, CX scratch
//
// Entries (huffman.go): bit 31 literal, bit 15 exceptional, bit 14
// subtable, bit 13 end of block; bits 8-11 mid, 0-7 low.

#define LITMASK $((1<<const_litPrimaryBits)-1)
#define DISTOFF (const_litTableSize*4)

// REFILL tops the bit buffer up to at least 56 bits from the 8 bytes at
// SI: those already held are ORed in again, unchanged.
#define REFILL \
	MOVQ (SI), AX; \
	MOVQ R9, CX; \
	SHLQ CL, AX; \
	ORQ  AX, BX; \
	SHRQ $3, CX; \
	ANDQ $7, CX; \
	SUBQ CX, SI; \
	ADDQ $7, SI; \
	ORQ  $56, R9

// LOOKUP sets DX to the literal/length entry for the next bits, with
// scratch register r.
#define LOOKUP(r) \
	MOVL BX, r; \
	ANDL LITMASK, r; \
	MOVL (R8)(r*4), DX

// SUBINDEX sets AX to the index in the tables of the entry for the next
// bits in the subtable that DX points to: value + bits&(1<<mid-1).
#define SUBINDEX \
	MOVL DX, CX; \
	SHRL $8, CX; \
	ANDL $15, CX; \
	MOVL $1, AX; \
	SHLL CL, AX; \
	DECL AX; \
	ANDL BX, AX; \
	SHRL $16, DX; \
	ADDL DX, AX

// func fastLoop(st *fastState) int
TEXT ·fastLoop(SB), NOSPLIT, $0-16
	MOVQ st+0(FP), AX
	MOVQ fastState_bits(AX), BX
	MOVQ fastState_nb(AX), R9
	MOVQ fastState_ip(AX), SI
	MOVQ fastState_ipEnd(AX), R10
	MOVQ fastState_dp(AX), DI
	MOVQ fastState_dpEnd(AX), R11
	MOVQ fastState_hp(AX), R12
	MOVQ fastState_tab(AX), R8

	// huffmanFast checked ip <= ipEnd and dp < dpEnd.
	REFILL
	LOOKUP(AX)

loop:
	// Consume the entry in DX: its low byte, from bits and nb.
	MOVL DX, CX
	TESTL DX, DX
	JNS  notlit
	SHRQ CL, BX
	SUBQ DX, R9

	// Up to three literals.
	SHRL $16, DX
	MOVB DX, (DI)
	LOOKUP(AX)
	TESTL DX, DX
	JNS  lit1
	MOVL DX, CX
	SHRQ CL, BX
	SUBQ DX, R9
	SHRL $16, DX
	MOVB DX, 1(DI)
	LOOKUP(AX)
	TESTL DX, DX
	JNS  lit2
	MOVL DX, CX
	SHRQ CL, BX
	SUBQ DX, R9
	SHRL $16, DX
	MOVB DX, 2(DI)
	ADDQ $3, DI
	LOOKUP(AX)
	JMP  refill

lit2:
	ADDQ $2, DI
	JMP  refill

lit1:
	INCQ DI
	JMP  refill

notlit:
	MOVQ  BX, R13
	SHRQ  CL, BX
	SUBQ  DX, R9
	TESTL $0x8000, DX
	JNZ   litexc

length:
	// A length, consumed with its extra bits: look up the distance
	// entry, then value + (R13 & (1<<low-1)) >> mid.
	MOVBQZX BX, AX
	MOVL    DISTOFF(R8)(AX*4), R15
	MOVL    DX, CX
	MOVL    $1, AX
	SHLL    CL, AX
	DECL    AX
	ANDL    R13, AX
	MOVL    DX, CX
	SHRL    $8, CX
	SHRL    CL, AX
	SHRL    $16, DX
	LEAQ    (AX)(DX*1), R13

	// The distance.
	MOVL  R15, DX
	TESTL $0x8000, DX
	JNZ   distexc

dist:
	// value + (bits & (1<<low-1)) >> mid; consume low bits.
	MOVL DX, CX
	MOVL $1, AX
	SHLL CL, AX
	DECL AX
	ANDL BX, AX
	SHRQ CL, BX
	SUBQ DX, R9
	MOVL DX, CX
	SHRL $8, CX
	SHRL CL, AX
	SHRL $16, DX
	ADDL DX, AX

	// A distance beyond the member's output in out is huffman's.
	MOVQ DI, CX
	SUBQ R12, CX
	CMPQ CX, AX
	JB   far

	// Look up the next entry, then copy length (R13) bytes from
	// distance (AX) back: forward, in words that may write past the end
	// of the match (into the margin), each read lying before the bytes
	// it writes.
	LOOKUP(CX)
	MOVQ DI, R15
	SUBQ AX, R15
	LEAQ (DI)(R13*1), CX
	CMPQ AX, $16
	JB   short
	MOVOU (R15), X0
	MOVOU X0, (DI)
	MOVOU 16(R15), X1
	MOVOU X1, 16(DI)
	CMPQ  R13, $32
	JBE   copied
	ADDQ  $32, DI
	ADDQ  $32, R15

copy16:
	MOVOU (R15), X0
	MOVOU X0, (DI)
	ADDQ  $16, R15
	ADDQ  $16, DI
	CMPQ  DI, CX
	JB    copy16

copied:
	MOVQ CX, DI
	JMP  refill

short:
	CMPQ AX, $8
	JB   tiny
	MOVQ (R15), AX
	MOVQ AX, (DI)
	MOVQ 8(R15), AX
	MOVQ AX, 8(DI)
	CMPQ R13, $16
	JBE  copied
	ADDQ $16, DI
	ADDQ $16, R15

copy8:
	MOVQ (R15), AX
	MOVQ AX, (DI)
	ADDQ $8, R15
	ADDQ $8, DI
	CMPQ DI, CX
	JB   copy8
	MOVQ CX, DI
	JMP  refill

tiny:
	CMPQ AX, $1
	JNE  bytes
	MOVBQZX (R15), AX
	MOVQ    $0x0101010101010101, R15
	IMULQ   R15, AX

rle:
	MOVQ AX, (DI)
	ADDQ $8, DI
	CMPQ DI, CX
	JB   rle
	MOVQ CX, DI
	JMP  refill

bytes:
	MOVB (R15), AX
	MOVB AX, (DI)
	INCQ R15
	INCQ DI
	CMPQ DI, CX
	JB   bytes

refill:
	// The next entry is in DX; go on while input and output allow.
	CMPQ SI, R10
	JHI  limit
	CMPQ DI, R11
	JCC  limit
	REFILL
	JMP  loop

litexc:
	TESTL $0x4000, DX
	JZ    litend

	// A subtable: the primary bits are consumed; the next mid bits
	// index the subtable, which starts at value.
	SUBINDEX
	MOVL (R8)(AX*4), DX
	MOVL DX, CX
	MOVQ BX, R13
	SHRQ CL, BX
	SUBQ DX, R9
	TESTL DX, DX
	JNS  subnotlit
	SHRL $16, DX
	MOVB DX, (DI)
	INCQ DI
	LOOKUP(AX)
	JMP  refill

subnotlit:
	TESTL $0x8000, DX
	JZ    length

litend:
	// The end of the block, or an invalid code.
	MOVQ  $const_fastBadLit, AX
	TESTL $0x2000, DX
	JZ    exit
	MOVQ  $const_fastEnd, AX
	JMP   exit

distexc:
	TESTL $0x4000, DX
	JZ    baddist
	SHRQ  $const_distPrimaryBits, BX
	SUBQ  $const_distPrimaryBits, R9
	SUBINDEX
	MOVL  DISTOFF(R8)(AX*4), DX
	TESTL $0x8000, DX
	JZ    dist

baddist:
	MOVQ $const_fastBadDist, AX
	JMP  exit

far:
	MOVQ st+0(FP), CX
	MOVQ R13, fastState_farLen(CX)
	MOVQ AX, fastState_farDist(CX)
	MOVQ $const_fastFar, AX
	JMP  exit

limit:
	MOVQ $const_fastLimit, AX

exit:
	MOVQ st+0(FP), CX
	MOVQ BX, fastState_bits(CX)
	MOVQ R9, fastState_nb(CX)
	MOVQ SI, fastState_ip(CX)
	MOVQ DI, fastState_dp(CX)
	MOVQ AX, ret+8(FP)
	RET
