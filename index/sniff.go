package index

import (
	"bytes"
	"fmt"
	"unicode/utf8"
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

// isoMagicOff is where an ISO 9660 image shows its magic number: "CD001"
// after the type byte of its first volume descriptor, which follows the
// 32 KiB system area. isoHeadLen is how far a sniff reads to see it.
const (
	isoMagicOff = 32769
	isoHeadLen  = isoMagicOff + len("CD001")
)

// peekISO is called when the first bytes of p matched no codec, or only
// as the zero blocks of an empty tar: it reads up to isoHeadLen bytes to
// tell an ISO 9660 image, whose system area is often all zeros. head is
// what p holds then.
func peekISO(p *peekReader) (head []byte, iso bool, err error) {
	if head, err = p.peek(isoHeadLen); err != nil {
		return nil, false, err
	}
	return head, isISO(head), nil
}

func isISO(head []byte) bool {
	return len(head) >= isoHeadLen && string(head[isoMagicOff:isoHeadLen]) == "CD001"
}

// notTar are the magic numbers, at offset 0, of archives and images of
// other kinds, to name them (ar: arName; ISO 9660: isISO).
var notTar = []struct {
	magic, name string
}{
	{"PK\x03\x04", "a zip archive"},
	{"PK\x05\x06", "a zip archive"}, // empty
	{"\xed\xab\xee\xdb", "an RPM package"},
	{"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"},
	{"Rar!\x1a\x07", "a RAR archive"},
	{"hsqs", "a squashfs image"},
	{"sqsh", "a squashfs image"}, // big-endian
	{"070701", "a cpio archive"},
	{"070702", "a cpio archive"},
	{"070707", "a cpio archive"},
	{"\xc7\x71", "a cpio archive"}, // binary, little-endian
	{"\x71\xc7", "a cpio archive"}, // binary, big-endian
	{"xar!", "a xar archive"},
	{"MSCF", "a Microsoft Cabinet archive"},
}

// otherData are the magic numbers of data that is not an archive, or
// compressed in a way tarmount does not read.
var otherData = []struct {
	magic, name string
}{
	{"\x5d\x00\x00", "lzma (.lzma) data, which is not supported: recompress as xz or zstd"},
	{"\x89LZO", "lzop data, which is not supported"},
	{"LZIP", "lzip data, which is not supported"},
	{"\x1f\x9d", "compress (.Z) data, which is not supported"},
	{"BZh", "bzip2 data with a damaged header"},
	{"version https://git-lfs.github.com/spec/", "a Git LFS pointer, not the object it points to"},
	{"<", "text or HTML, not an archive"},
}

// describe names what the first bytes of an object that no codec reads
// look like: "not a tar archive: a zip archive". An ISO 9660 image is
// named only when head holds isoHeadLen bytes (see peekISO).
func describe(head []byte) string {
	if len(head) == 0 {
		return "empty object"
	}
	if isISO(head) {
		return "not a tar archive: an ISO 9660 image"
	}
	if bytes.HasPrefix(head, []byte("!<arch>\n")) {
		return "not a tar archive: " + arName(head)
	}
	for _, m := range notTar {
		if bytes.HasPrefix(head, []byte(m.magic)) {
			return "not a tar archive: " + m.name
		}
	}
	for _, m := range otherData {
		if bytes.HasPrefix(head, []byte(m.magic)) {
			return m.name
		}
	}
	if isText(head) {
		return "not a tar archive: text"
	}
	return fmt.Sprintf("not a tar archive or a known compressed format (starts with %x)", head[:min(len(head), 8)])
}

// arName names an ar archive: a Debian package when its first member is
// debian-binary.
//
//	0         8                 24
//	|!<arch>\n|name (16 bytes)  |mtime, uid, gid, mode, size, `\n
func arName(head []byte) string {
	if bytes.HasPrefix(head[min(len(head), 8):], []byte("debian-binary")) {
		return "a Debian package (ar)"
	}
	return "an ar archive"
}

// isText reports whether head starts with text: UTF-8 without control
// characters other than tab, newline, carriage return and form feed.
func isText(head []byte) bool {
	b := head[:min(len(head), 512)]
	// A sequence cut at the end of b is not an error.
	for i := len(b) - 1; i >= max(len(b)-utf8.UTFMax, 0); i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	for _, c := range b {
		if c < 0x20 && c != '\t' && c != '\n' && c != '\r' && c != '\f' || c == 0x7f {
			return false
		}
	}
	return utf8.Valid(b)
}
