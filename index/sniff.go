package index

import (
	"bytes"
	"encoding/binary"
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

// sniffStream tells the codec of the stream in p from its first bytes.
// Skippable frames at the start (zstd and lz4 share them) are looked past
// to the first real frame. It returns 0 and the bytes it saw when it knows
// no codec.
func sniffStream(p *peekReader) (Codec, []byte, error) {
	head, err := p.peek(1024)
	if err != nil {
		return 0, nil, err
	}
	off := 0
	for {
		b := head[off:]
		if len(b) >= 8 && isSkippable(binary.LittleEndian.Uint32(b)) {
			next := off + 8 + int(binary.LittleEndian.Uint32(b[4:]))
			if next+4 > sniffPeek {
				return CodecZstd, head, nil // zstd is by far the likelier
			}
			if head, err = p.peek(next + 512); err != nil {
				return 0, nil, err
			}
			if len(head) < next+4 {
				return 0, head, nil
			}
			off = next
			continue
		}
		if c := sniff(b); c != 0 {
			return c, head, nil
		}
		return 0, b, nil
	}
}

// sniff tells the codec from the first bytes of a stream (after any
// skippable frames).
func sniff(head []byte) Codec {
	switch {
	case bytes.HasPrefix(head, magicGzip):
		return CodecGzip
	case bytes.HasPrefix(head, magicZstd):
		return CodecZstd
	case bytes.HasPrefix(head, magicLZ4), bytes.HasPrefix(head, magicLZ4Legacy):
		return CodecLZ4
	case bytes.HasPrefix(head, magicXz):
		return CodecXz
	case len(head) >= 10 && bytes.HasPrefix(head, magicBzip2) && head[3] >= '1' && head[3] <= '9' &&
		(bytes.HasPrefix(head[4:], []byte{0x31, 0x41, 0x59, 0x26, 0x53, 0x59}) ||
			bytes.HasPrefix(head[4:], []byte{0x17, 0x72, 0x45, 0x38, 0x50, 0x90})):
		return CodecBzip2
	case len(head) >= 512 && looksLikeTar(head[:512]):
		return CodecNone
	case len(head) >= 1024 && bytes.Count(head[:1024], []byte{0}) == 1024:
		// The end-of-archive marker alone: an empty archive, as tar
		// -t lists it (Go's archive/tar writes one for no members).
		return CodecNone
	}
	return 0
}

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
