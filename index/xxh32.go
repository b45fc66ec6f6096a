package index

import (
	"encoding/binary"
	"math/bits"
)

// xxh32 is the 32-bit xxHash (seed 0) that lz4 frames use for their
// header, block and content checksums.
type xxh32 struct {
	v     [4]uint32
	total uint64
	buf   [16]byte
	n     int
}

const (
	xxPrime1 uint32 = 2654435761
	xxPrime2 uint32 = 2246822519
	xxPrime3 uint32 = 3266489917
	xxPrime4 uint32 = 668265263
	xxPrime5 uint32 = 374761393
)

func (x *xxh32) reset() {
	p1, p2 := xxPrime1, xxPrime2 // wrapping arithmetic, as the reference does
	*x = xxh32{v: [4]uint32{p1 + p2, p2, 0, -p1}}
}

func xxRound(acc, in uint32) uint32 {
	return bits.RotateLeft32(acc+in*xxPrime2, 13) * xxPrime1
}

func (x *xxh32) write(p []byte) {
	x.total += uint64(len(p))
	if x.n > 0 {
		k := copy(x.buf[x.n:], p)
		x.n += k
		p = p[k:]
		if x.n < 16 {
			return
		}
		x.stripes(x.buf[:])
		x.n = 0
	}
	full := len(p) &^ 15
	x.stripes(p[:full])
	x.n = copy(x.buf[:], p[full:])
}

func (x *xxh32) stripes(p []byte) {
	v0, v1, v2, v3 := x.v[0], x.v[1], x.v[2], x.v[3]
	for ; len(p) >= 16; p = p[16:] {
		v0 = xxRound(v0, binary.LittleEndian.Uint32(p))
		v1 = xxRound(v1, binary.LittleEndian.Uint32(p[4:]))
		v2 = xxRound(v2, binary.LittleEndian.Uint32(p[8:]))
		v3 = xxRound(v3, binary.LittleEndian.Uint32(p[12:]))
	}
	x.v = [4]uint32{v0, v1, v2, v3}
}

func (x *xxh32) sum() uint32 {
	var h uint32
	if x.total >= 16 {
		h = bits.RotateLeft32(x.v[0], 1) + bits.RotateLeft32(x.v[1], 7) +
			bits.RotateLeft32(x.v[2], 12) + bits.RotateLeft32(x.v[3], 18)
	} else {
		h = xxPrime5
	}
	h += uint32(x.total)
	p := x.buf[:x.n]
	for ; len(p) >= 4; p = p[4:] {
		h += binary.LittleEndian.Uint32(p) * xxPrime3
		h = bits.RotateLeft32(h, 17) * xxPrime4
	}
	for _, b := range p {
		h += uint32(b) * xxPrime5
		h = bits.RotateLeft32(h, 11) * xxPrime1
	}
	h ^= h >> 15
	h *= xxPrime2
	h ^= h >> 13
	h *= xxPrime3
	h ^= h >> 16
	return h
}

// xxh32Sum returns the xxh32 of p.
func xxh32Sum(p []byte) uint32 {
	var x xxh32
	x.reset()
	x.write(p)
	return x.sum()
}
