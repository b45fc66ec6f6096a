package tarscan

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"unicode/utf8"
)

// Field positions in a header block; see the package doc for the layout.
const (
	offChksum  = 148
	offMagic   = 257
	offVersion = 263

	gnuSparseEntries    = 4   // sparse entries in a GNU header
	gnuSparseOff        = 386 // first entry in a GNU header
	gnuIsExtended       = 482
	gnuRealSize         = 483
	sparseEntrySize     = 24
	extSparseEntries    = 21 // sparse entries in an extension block
	extIsExtended       = 504
	maxDecimalDigits    = 18 // below 1e18, so no overflow in int64
	maxPAXLenDigits     = 18
	nanosPerSecond      = 1_000_000_000
	maxFractionDigits   = 9
	starTrailerOff      = 508
	starPrefixLen       = 131
	ustarPrefixLen      = 155
	plausiblePrefixSize = offChksum + 8
)

// format is the header layout, told by the magic and version fields.
type format uint8

const (
	formatV7 format = iota
	formatUSTAR
	formatStar
	formatGNU
)

func detectFormat(b *[blockSize]byte) format {
	magic := b[offMagic:offVersion]
	switch {
	case string(magic) == "ustar\x00":
		if string(b[starTrailerOff:]) == "tar\x00" {
			return formatStar
		}
		return formatUSTAR
	case string(magic) == "ustar ":
		return formatGNU
	}
	return formatV7
}

// cstr returns b up to its first NUL.
func cstr(b []byte) []byte {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		return b[:i]
	}
	return b
}

// isZero reports whether b holds only zero bytes.
func isZero(b []byte) bool {
	for len(b) >= 8 {
		if binary.LittleEndian.Uint64(b) != 0 {
			return false
		}
		b = b[8:]
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// fieldText is a numeric field trimmed for an error message.
func fieldText(b []byte) string { return string(bytes.TrimRight(b, "\x00")) }

// parseNumeric parses a numeric header field: octal text, or GNU base-256
// when the top bit of the first byte is set. ok is false when the field is
// malformed or its value does not fit an int64. An empty field is 0.
func parseNumeric(b []byte) (v int64, ok bool) {
	if len(b) > 0 && b[0]&0x80 != 0 {
		return parseBase256(b)
	}
	return parseOctal(b)
}

// parseOctal parses octal digits after optional leading spaces or NULs,
// followed by nothing but spaces or NULs.
func parseOctal(b []byte) (int64, bool) {
	i := 0
	for i < len(b) && (b[i] == ' ' || b[i] == 0) {
		i++
	}
	var x int64
	for ; i < len(b) && b[i] >= '0' && b[i] <= '7'; i++ {
		if x > math.MaxInt64>>3 {
			return 0, false
		}
		x = x<<3 | int64(b[i]-'0')
	}
	for ; i < len(b); i++ {
		if b[i] != ' ' && b[i] != 0 {
			return 0, false
		}
	}
	return x, true
}

// parseBase256 parses a GNU base-256 field: after the marker bit (0x80 of
// the first byte) the bits form a big-endian two's-complement number whose
// sign is bit 0x40 of the first byte.
func parseBase256(b []byte) (int64, bool) {
	var sign byte // every byte above the low 8 must equal it
	if b[0]&0x40 != 0 {
		sign = 0xff
	}
	var x uint64
	for i, c := range b {
		if i == 0 {
			c = c&0x3f | sign&0xc0 // drop the marker, extend the sign
		}
		if len(b)-i > 8 {
			if c != sign {
				return 0, false
			}
			continue
		}
		x = x<<8 | uint64(c)
	}
	if n := len(b); n < 8 && sign != 0 {
		x |= math.MaxUint64 << (8 * n)
	}
	v := int64(x)
	if (v < 0) != (sign != 0) {
		return 0, false
	}
	return v, true
}

// checksumOK reports whether the checksum field of b matches the sum of
// its bytes, taken unsigned (POSIX) or signed (some old tars), with the
// field itself counted as spaces.
func checksumOK(b *[blockSize]byte) bool {
	want, ok := parseOctal(b[offChksum : offChksum+8])
	if !ok {
		return false
	}
	var lanes uint64 // four 16-bit lanes; 64 words * 510 fits in 16 bits
	high := 0        // bytes >= 0x80, which differ between the two sums
	for i := 0; i < blockSize; i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		lanes += w&0x00ff00ff00ff00ff + (w>>8)&0x00ff00ff00ff00ff
		high += bits.OnesCount64(w & 0x8080808080808080)
	}
	sum := int64(lanes&0xffff + lanes>>16&0xffff + lanes>>32&0xffff + lanes>>48)
	for _, c := range b[offChksum : offChksum+8] {
		sum += int64(' ') - int64(c)
		if c >= 0x80 {
			high--
		}
	}
	return want == sum || want == sum-256*int64(high)
}

// plausiblePrefix reports whether b, the start of a block cut short, could
// be the start of a tar header: it reaches past the checksum and the
// numeric fields in it parse.
func plausiblePrefix(b []byte) bool {
	if len(b) < plausiblePrefixSize {
		return false
	}
	for _, f := range [][2]int{{100, 108}, {108, 116}, {116, 124}, {124, 136}, {136, 148}} {
		if _, ok := parseNumeric(b[f[0]:f[1]]); !ok {
			return false
		}
	}
	_, ok := parseOctal(b[offChksum : offChksum+8])
	return ok
}

// paxRec locates one "key=value" in a buffer: the key is buf[k0:k1] and the
// value buf[k1+1:v1].
type paxRec struct{ k0, k1, v1 int }

func (r paxRec) key(buf []byte) []byte   { return buf[r.k0:r.k1] }
func (r paxRec) value(buf []byte) []byte { return buf[r.k1+1 : r.v1] }

// parsePAX appends the records of b[from:] to recs. Each record is
// "LEN KEY=VALUE\n" where LEN counts the whole record in decimal. A tail
// of NULs is accepted as padding.
func parsePAX(b []byte, from int, recs []paxRec) ([]paxRec, error) {
	for i := from; i < len(b); {
		if isZero(b[i:]) {
			break
		}
		j, n := i, 0
		for j < len(b) && j-i < maxPAXLenDigits && b[j] >= '0' && b[j] <= '9' {
			n = n*10 + int(b[j]-'0')
			j++
		}
		if j == i || j >= len(b) || b[j] != ' ' {
			return recs, fmt.Errorf("pax record at byte %d: bad length", i-from)
		}
		if n <= j-i+1 || n > len(b)-i {
			return recs, fmt.Errorf("pax record at byte %d: length %d out of range", i-from, n)
		}
		end := i + n
		if b[end-1] != '\n' {
			return recs, fmt.Errorf("pax record at byte %d: no newline at its end", i-from)
		}
		kv := b[j+1 : end-1]
		eq := bytes.IndexByte(kv, '=')
		if eq <= 0 {
			return recs, fmt.Errorf("pax record at byte %d: no key=value", i-from)
		}
		if key := kv[:eq]; !utf8.Valid(key) || bytes.IndexByte(key, 0) >= 0 {
			return recs, fmt.Errorf("pax record at byte %d: key %q is not UTF-8 text", i-from, key)
		}
		recs = append(recs, paxRec{j + 1, j + 1 + eq, end - 1})
		i = end
	}
	return recs, nil
}

// namesMembers reports whether a pax global record names the members
// that follow it. GNU tar gives each of them that name, so that each is
// written over the one before (or, when the name is empty, fails to be
// written over "."); bsdtar ignores every global header.
func namesMembers(key []byte) bool {
	switch string(key) {
	case "path", "GNU.sparse.name":
		return true
	}
	return false
}

// ignoredGlobal reports whether a pax global record is dropped: a size
// and a sparse map only make sense per member (GNU tar takes a global
// size as every member's, and fails at the first of another size).
func ignoredGlobal(key []byte) bool {
	return string(key) == "size" || bytes.HasPrefix(key, []byte("GNU.sparse."))
}

var (
	errSyntax   = errors.New("not a decimal number")
	errOverflow = errors.New("number out of range")
)

// parseDecimal parses a non-negative decimal number.
func parseDecimal(b []byte) (int64, error) {
	if len(b) == 0 {
		return 0, errSyntax
	}
	var x int64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, errSyntax
		}
		d := int64(c - '0')
		if x > (math.MaxInt64-d)/10 {
			return 0, errOverflow
		}
		x = x*10 + d
	}
	return x, nil
}

// parsePAXTime parses "[-]SECONDS[.FRACTION]", keeping 9 fraction digits.
func parsePAXTime(b []byte) (Time, error) {
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	secs, frac, _ := bytes.Cut(b, []byte("."))
	sec, err := parseDecimal(secs)
	if err != nil {
		return Time{}, err
	}
	var ns int64
	for i, c := range frac {
		if c < '0' || c > '9' {
			return Time{}, errSyntax
		}
		if i < maxFractionDigits {
			ns = ns*10 + int64(c-'0')
		}
	}
	for i := len(frac); i < maxFractionDigits; i++ {
		ns *= 10
	}
	if neg {
		return Unix(-sec, -ns), nil
	}
	return Time{Sec: sec, Nsec: int32(ns)}, nil
}

// unescapeURL decodes the %XX escapes of a LIBARCHIVE.xattr name.
func unescapeURL(b []byte) (string, error) {
	if bytes.IndexByte(b, '%') < 0 {
		return string(b), nil
	}
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if b[i] != '%' {
			out = append(out, b[i])
			continue
		}
		if i+2 >= len(b) {
			return "", errors.New("cut %-escape")
		}
		v, err := strconv.ParseUint(string(b[i+1:i+3]), 16, 8)
		if err != nil {
			return "", fmt.Errorf("bad %%-escape %q", b[i:i+3])
		}
		out = append(out, byte(v))
		i += 2
	}
	return string(out), nil
}
