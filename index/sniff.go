package index

import (
	"bytes"
	"fmt"
)

// looksLikeTar reports whether block is a tar header with a valid checksum
// (unsigned or, as some old tars wrote, signed).
func looksLikeTar(block []byte) bool {
	field := bytes.TrimLeft(block[148:156], " ")
	if i := bytes.IndexAny(field, " \x00"); i >= 0 {
		field = field[:i]
	}
	if len(field) == 0 {
		return false
	}
	var want int64
	for _, c := range field {
		if c < '0' || c > '7' {
			return false
		}
		want = want*8 + int64(c-'0')
	}
	var unsigned, signed int64
	for i, c := range block {
		if i >= 148 && i < 156 {
			c = ' '
		}
		unsigned += int64(c)
		signed += int64(int8(c))
	}
	return want == unsigned || want == signed
}

// isSkippable reports whether a little-endian magic number starts a
// skippable frame (the same in zstd and lz4: 0x184D2A50 to 0x184D2A5F).
func isSkippable(magic uint32) bool { return magic&0xFFFFFFF0 == 0x184D2A50 }

// sniffPeek is how far sniffing looks past skippable frames at the start.
const sniffPeek = 1 << 20

// describe names what the first bytes of an unsupported object look like.
func describe(head []byte) string {
	magic := []struct {
		prefix []byte
		name   string
	}{
		{[]byte("PK\x03\x04"), "a zip archive"},
		{[]byte("7z\xbc\xaf\x27\x1c"), "a 7-Zip archive"},
		{[]byte("Rar!"), "a RAR archive"},
		{[]byte{0x5d, 0, 0}, "lzma (.lzma) data, which is not supported: recompress as xz or zstd"},
		{[]byte("\x89LZO"), "lzop data, which is not supported"},
		{[]byte("BZh"), "bzip2 data with a damaged header"},
		{[]byte("<"), "text or HTML, not an archive"},
	}
	for _, m := range magic {
		if bytes.HasPrefix(head, m.prefix) {
			return m.name
		}
	}
	if len(head) == 0 {
		return "empty object"
	}
	return fmt.Sprintf("not a tar archive or a known compressed format (starts with %x)", head[:min(len(head), 8)])
}
