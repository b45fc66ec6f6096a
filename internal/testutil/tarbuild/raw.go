// Package tarbuild is the one tar builder of tarmount's tests. It writes
//
//   - members with Go's archive/tar in any format (Go, GoErr), crafted raw
//     members amid them (Entry.Raw), and the files of a directory (FilesOf);
//   - raw archives header block by header block (Tar, TarPos, Members,
//     Header with defaults, Block with every field as given), so that a
//     test can hold what archive/tar refuses to write: negative sizes, bad
//     or signed checksums, names with NULs, v7, star and GNU layouts;
//   - archives of a directory tree made by GNU tar, bsdtar or Go, with any
//     codec the project reads (Spec, Archive, Make, GoTree), and unpacks
//     them with GNU tar (Extract);
//   - compressed forms of bytes: gzip (one member or many), zstd (one
//     streamed frame, many frames, the seekable format) and lz4 (Gzip,
//     GzipLevel, GzipMembers, ZstdStream, ZstdFrames, ZstdSeekable, LZ4,
//     LZ4Blocks).
//
// The package owns only the making of archives; it knows nothing of
// tarmount's packages, so the tests of every package can use it. Archive
// and Extract run the external tools (scripts/deps.sh installs them).
package tarbuild

import (
	"bytes"
	"fmt"
)

// Type flags.
const (
	TypeReg     byte = '0'
	TypeLink    byte = '1'
	TypeSymlink byte = '2'
	TypeChar    byte = '3'
	TypeBlock   byte = '4'
	TypeDir     byte = '5'
	TypeFIFO    byte = '6'
)

// BlockSize is the size of a tar block: headers and data are padded to it.
const BlockSize = 512

// Member is one member of a raw archive written by Tar. Its header has
// owner names "root" and mtime 1700000000 (see Header).
type Member struct {
	Name string
	Type byte // TypeReg when 0
	Body string
	Link string
	// Mode is the permission bits; 0 means 0644, or 0755 for a
	// directory.
	Mode               int64
	Uid, Gid           int64
	Mtime              int64 // 0 means 1700000000
	Devmajor, Devminor int64
	// PAX records ("key=value") go in an extended header before the
	// member; a name or link that does not fit the header adds its own.
	PAX []string
	// Tweak edits the header block before its checksum is set (unless
	// BadSum).
	Tweak func(block []byte)
	// BadSum leaves the checksum field wrong.
	BadSum bool
	// Raw, when set, is written as it is instead of the member.
	Raw []byte
}

// Pos is where a member lies in a Tar: its first header block (extended
// headers included) and its data.
type Pos struct{ Header, Data int }

// Tar writes members, then the end-of-archive marker (two zero blocks).
func Tar(members ...Member) []byte {
	b, _ := TarPos(members...)
	return b
}

// TarPos is Tar that also says where each member lies.
func TarPos(members ...Member) ([]byte, []Pos) {
	var buf bytes.Buffer
	pos := writeMembers(&buf, members)
	buf.Write(make([]byte, 2*BlockSize))
	return buf.Bytes(), pos
}

// Members writes members as Tar does, without the end-of-archive marker:
// crafted members to put amid others (see Entry.Raw).
func Members(members ...Member) []byte {
	var buf bytes.Buffer
	writeMembers(&buf, members)
	return buf.Bytes()
}

func writeMembers(buf *bytes.Buffer, members []Member) []Pos {
	var pos []Pos
	for _, m := range members {
		start := buf.Len()
		if m.Raw != nil {
			buf.Write(m.Raw)
			pos = append(pos, Pos{start, buf.Len()})
			continue
		}
		writeMember(buf, m)
		pos = append(pos, Pos{start, buf.Len() - Padded(len(m.Body))})
	}
	return pos
}

// Padded rounds n up to a whole number of blocks.
func Padded(n int) int { return (n + BlockSize - 1) &^ (BlockSize - 1) }

func writeMember(buf *bytes.Buffer, m Member) {
	typ := m.Type
	if typ == 0 {
		typ = TypeReg
	}
	recs := m.PAX
	name, link := m.Name, m.Link
	if len(name) > 100 {
		recs = append([]string{"path=" + name}, recs...)
		name = name[:100]
	}
	if len(link) > 100 {
		recs = append([]string{"linkpath=" + link}, recs...)
		link = link[:100]
	}
	if len(recs) > 0 {
		var d bytes.Buffer
		for _, r := range recs {
			d.WriteString(PAXRecord(r))
		}
		buf.Write(Header(Member{Name: "PaxHeaders/x", Type: 'x'}, int64(d.Len())))
		buf.Write(d.Bytes())
		buf.Write(make([]byte, Padded(d.Len())-d.Len()))
	}
	mm := m
	mm.Name, mm.Link, mm.Type = name, link, typ
	size := int64(len(m.Body))
	buf.Write(Header(mm, size))
	buf.WriteString(m.Body)
	buf.Write(make([]byte, Padded(len(m.Body))-len(m.Body)))
}

// Header returns the ustar header block of m with the given size field.
func Header(m Member, size int64) []byte {
	mode := m.Mode
	if mode == 0 {
		mode = 0o644
		if m.Type == TypeDir {
			mode = 0o755
		}
	}
	mtime := m.Mtime
	if mtime == 0 {
		mtime = 1700000000
	}
	b := Block{Name: m.Name, Linkname: m.Link, Typeflag: m.Type, Mode: mode, Uid: m.Uid, Gid: m.Gid, Size: size,
		Mtime: mtime, Uname: "root", Gname: "root", Devmajor: m.Devmajor, Devminor: m.Devminor, Layout: USTAR,
		Tweak: m.Tweak}.Bytes()
	if m.BadSum {
		b[148] ^= 1
	}
	return b
}

// Layout is the layout of a raw header block: which magic it has and
// where its fields after the link name lie.
type Layout uint8

// The layouts Block writes.
const (
	V7    Layout = iota // no magic, no owner names or devices
	USTAR               // "ustar\x0000", prefix of 155 bytes
	Star                // "ustar\x0000", prefix of 131 bytes, atime, ctime, "tar\x00" at 508
	GNU                 // "ustar  \x00", atime and ctime
)

// Block is one header block as it is: every field is written as given,
// zero as zero, with no defaults (see Member for a header with them).
type Block struct {
	Name, Linkname     string
	Typeflag           byte
	Mode, Uid, Gid     int64
	Size, Mtime        int64
	Uname, Gname       string
	Devmajor, Devminor int64
	Layout             Layout
	Prefix             string
	Atime, Ctime       int64 // GNU and Star; written when non-zero
	// SignedSum computes the checksum over signed bytes, as some old
	// tars did.
	SignedSum bool
	// Tweak edits the block before its checksum is set.
	Tweak func(block []byte)
}

// Bytes returns the header block.
func (h Block) Bytes() []byte {
	b := make([]byte, BlockSize)
	copy(b[0:100], h.Name)
	PutNumber(b[100:108], h.Mode)
	PutNumber(b[108:116], h.Uid)
	PutNumber(b[116:124], h.Gid)
	PutNumber(b[124:136], h.Size)
	PutNumber(b[136:148], h.Mtime)
	b[156] = h.Typeflag
	copy(b[157:257], h.Linkname)
	switch h.Layout {
	case USTAR, Star:
		copy(b[257:265], "ustar\x0000")
	case GNU:
		copy(b[257:265], "ustar  \x00")
	}
	if h.Layout != V7 {
		copy(b[265:297], h.Uname)
		copy(b[297:329], h.Gname)
		PutNumber(b[329:337], h.Devmajor)
		PutNumber(b[337:345], h.Devminor)
	}
	switch h.Layout {
	case USTAR:
		copy(b[345:500], h.Prefix)
	case Star:
		copy(b[345:476], h.Prefix)
		if h.Atime != 0 {
			PutNumber(b[476:488], h.Atime)
		}
		if h.Ctime != 0 {
			PutNumber(b[488:500], h.Ctime)
		}
		copy(b[508:], "tar\x00")
	case GNU:
		if h.Atime != 0 {
			PutNumber(b[345:357], h.Atime)
		}
		if h.Ctime != 0 {
			PutNumber(b[357:369], h.Ctime)
		}
	}
	if h.Tweak != nil {
		h.Tweak(b)
	}
	setChecksum(b, h.SignedSum)
	return b
}

// PutNumber writes v into a numeric header field: octal text when it
// fits, else GNU base-256 (which also holds negative numbers).
func PutNumber(f []byte, v int64) {
	if s := fmt.Sprintf("%0*o", len(f)-1, v); v >= 0 && len(s) == len(f)-1 {
		copy(f, s+"\x00")
		return
	}
	PutBase256(f, v)
}

// PutBase256 writes v into a numeric header field in GNU base-256, even
// when octal would do.
func PutBase256(f []byte, v int64) {
	for i := len(f) - 1; i >= 0; i-- {
		f[i] = byte(v)
		v >>= 8
	}
	f[0] |= 0x80
}

// SetChecksum fills the checksum field of header block b.
func SetChecksum(b []byte) { setChecksum(b, false) }

func setChecksum(b []byte, signed bool) {
	copy(b[148:156], "        ")
	sum := 0
	for _, c := range b {
		if signed {
			sum += int(int8(c))
		} else {
			sum += int(c)
		}
	}
	copy(b[148:156], fmt.Sprintf("%06o\x00 ", sum&0o777777))
}

// PAXRecord formats "key=value" as a pax record with its length.
func PAXRecord(kv string) string {
	n := len(kv) + 2
	for {
		s := fmt.Sprintf("%d %s\n", n, kv)
		if len(s) == n {
			return s
		}
		n = len(s)
	}
}
