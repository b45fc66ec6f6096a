package tarscan

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// H is the expected header of a member with mode 0644 (the builder's
// default); Size and StoredSize are size for regular files.
func H(name string, tf byte, size int64, opts ...func(*Header)) Header {
	h := Header{Name: name, Typeflag: tf, Mode: 0o644}
	if tf == TypeReg {
		h.Size, h.StoredSize = size, size
	}
	for _, o := range opts {
		o(&h)
	}
	return h
}

// project drops the offsets, which are checked separately.
func project(h *Header) Header {
	p := *h
	p.DataOffset, p.HeaderOffset = 0, 0
	if len(p.PAX) == 0 {
		p.PAX = nil
	}
	return p
}

// sparse1Data lays out the data of a pax sparse 1.0 member: the map padded
// to a block, then the stored bytes.
// sparseMapValue is chunks as a GNU.sparse.map value.
func sparseMapValue(chunks []SparseChunk) string {
	var b strings.Builder
	for i, c := range chunks {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%d,%d", c.Offset, c.Length)
	}
	return b.String()
}

func sparse1Data(chunks []SparseChunk, stored string) []byte {
	var m bytes.Buffer
	fmt.Fprintf(&m, "%d\n", len(chunks))
	for _, c := range chunks {
		fmt.Fprintf(&m, "%d\n%d\n", c.Offset, c.Length)
	}
	b := m.Bytes()
	b = append(b, make([]byte, padded(int64(len(b)))-int64(len(b)))...)
	return append(b, stored...)
}

// gnuSparseHeader makes an old GNU sparse header ('S') with the first
// four entries in the header; the rest go to extension blocks.
func gnuSparseHeader(name string, realsize int64, chunks []SparseChunk) []byte {
	var stored int64
	for _, c := range chunks {
		stored += c.Length
	}
	putEntries := func(b []byte, cs []SparseChunk) {
		for i, c := range cs {
			tarbuild.PutNumber(b[i*24:i*24+12], c.Offset)
			tarbuild.PutNumber(b[i*24+12:i*24+24], c.Length)
		}
	}
	first := chunks[:min(4, len(chunks))]
	rest := chunks[len(first):]
	var out bytes.Buffer
	out.Write(hb{Name: name, Typeflag: 'S', Mode: 0o644, Size: stored, Layout: tarbuild.GNU, Tweak: func(b []byte) {
		putEntries(b[386:], first)
		if len(rest) > 0 {
			b[482] = 1
		}
		tarbuild.PutNumber(b[483:495], realsize)
	}}.Bytes())
	for len(rest) > 0 {
		blk := make([]byte, blockSize)
		n := min(21, len(rest))
		putEntries(blk, rest[:n])
		rest = rest[n:]
		if len(rest) > 0 {
			blk[504] = 1
		}
		out.Write(blk)
	}
	return out.Bytes()
}

// anyContent in craftedCase.content skips the content check of a member.
const anyContent = "\x01any"

type craftedCase struct {
	name    string
	data    []byte
	lim     Limits
	want    []Header
	content []string // logical content of the members, when set
	err     string   // errKind of the final error
	errHas  string   // text the error must contain
}

func craftedCases() []craftedCase {
	var cases []craftedCase
	add := func(c craftedCase) { cases = append(cases, c) }
	hello := []byte("hello")

	// --- Formats and header fields. ---
	{
		a := &arch{}
		a.file(hb{Name: "v7file", Typeflag: 0, Uid: 7, Gid: 8, Mtime: 1000, Layout: tarbuild.V7}, hello)
		a.hdr(hb{Name: "v7dir/", Typeflag: 0, Mode: 0o755, Layout: tarbuild.V7})
		a.hdr(hb{Name: "v7dir0/", Typeflag: '0', Mode: 0o755, Layout: tarbuild.V7})
		a.hdr(hb{Name: "v7hard", Typeflag: '1', Linkname: "v7file", Layout: tarbuild.V7})
		add(craftedCase{name: "v7", data: a.end(), want: []Header{
			H("v7file", TypeReg, 5, func(h *Header) { h.UID, h.GID, h.MTime = 7, 8, Time{Sec: 1000} }),
			H("v7dir/", TypeDir, 0, func(h *Header) { h.Mode = 0o755 }),
			H("v7dir0/", TypeDir, 0, func(h *Header) { h.Mode = 0o755 }),
			H("v7hard", TypeLink, 0, func(h *Header) { h.Linkname = "v7file" }),
		}, content: []string{"hello", "", "", ""}})
	}
	{
		a := &arch{}
		a.file(hb{Name: "é-signed", Typeflag: '0', Layout: tarbuild.USTAR, SignedSum: true, Uname: "ü"}, hello)
		add(craftedCase{name: "signed checksum", data: a.end(), want: []Header{
			H("é-signed", TypeReg, 5, func(h *Header) { h.Uname = "ü" }),
		}})
	}
	{
		a := &arch{}
		a.Write(hb{Name: "spaces", Typeflag: '0', Layout: tarbuild.USTAR, Tweak: func(b []byte) {
			copy(b[100:108], "    644 ")
			copy(b[108:116], "\x00\x00  12 \x00")
			copy(b[124:136], "         5 \x00")
			copy(b[136:148], "17\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00")
		}}.Bytes())
		a.data(hello)
		add(craftedCase{name: "octal with spaces and NULs", data: a.end(), want: []Header{
			H("spaces", TypeReg, 5, func(h *Header) { h.UID, h.MTime = 0o12, Time{Sec: 0o17} }),
		}, content: []string{"hello"}})
	}
	{
		a := &arch{}
		a.Write(hb{Name: "b256", Typeflag: '0', Layout: tarbuild.GNU, Tweak: func(b []byte) {
			tarbuild.PutBase256(b[124:136], 5)
			tarbuild.PutBase256(b[108:116], 1<<40)
			tarbuild.PutBase256(b[136:148], -1234)
			tarbuild.PutBase256(b[100:108], 0o640)
		}}.Bytes())
		a.data(hello)
		add(craftedCase{name: "base-256", data: a.end(), want: []Header{
			H("b256", TypeReg, 5, func(h *Header) { h.UID, h.MTime, h.Mode = 1<<40, Time{Sec: -1234}, 0o640 }),
		}, content: []string{"hello"}})
	}
	{
		// Times past 2262, where int64 nanoseconds end: ext4 keeps them
		// up to 2446 and GNU tar sets them.
		const y2400, y2446 = 13569465600, 15023750400
		a := &arch{}
		a.Write(hb{Name: "future", Typeflag: '0', Mode: 0o644, Layout: tarbuild.GNU, Tweak: func(b []byte) {
			tarbuild.PutBase256(b[136:148], y2400)
			tarbuild.PutBase256(b[345:357], y2446)
			tarbuild.PutBase256(b[357:369], math.MaxInt64)
		}}.Bytes())
		a.pax('x', "mtime=15023750400.123456789", "atime=-15023750400.5")
		a.hdr(hb{Name: "paxfuture", Typeflag: '0', Layout: tarbuild.USTAR})
		add(craftedCase{name: "times past 2262", data: a.end(), want: []Header{
			H("future", TypeReg, 0, func(h *Header) {
				h.MTime = Time{Sec: y2400}
				h.ATime, h.HasATime, h.CTime, h.HasCTime = Time{Sec: y2446}, true, Time{Sec: math.MaxInt64}, true
			}),
			H("paxfuture", TypeReg, 0, func(h *Header) {
				h.MTime = Time{Sec: y2446, Nsec: 123456789}
				h.ATime, h.HasATime = Time{Sec: -y2446 - 1, Nsec: 500000000}, true
			}),
		}, content: []string{"", ""}})
	}
	for _, bad := range []struct {
		name  string
		tweak func(b []byte)
		has   string
	}{
		{"size base-256 overflow", func(b []byte) { copy(b[124:136], "\x81\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00") }, "size"},
		{"size base-256 63 bits", func(b []byte) { copy(b[124:136], "\x80\x00\x00\x00\x80\x00\x00\x00\x00\x00\x00\x00") }, "size"},
		{"negative size", func(b []byte) { tarbuild.PutBase256(b[124:136], -512) }, "negative size"},
		{"negative uid", func(b []byte) { tarbuild.PutBase256(b[108:116], -1) }, "negative uid"},
		{"octal garbage", func(b []byte) { copy(b[124:136], "0000012x4\x00\x00\x00") }, "size"},
		{"octal digits after space", func(b []byte) { copy(b[100:108], "644 644\x00") }, "mode"},
		{"eight in octal", func(b []byte) { copy(b[136:148], "00000000008\x00") }, "mtime"},
		{"bad devmajor", func(b []byte) { b[156] = '3'; copy(b[329:337], "zz\x00") }, "devmajor"},
	} {
		a := &arch{}
		a.file(hb{Name: "ok", Typeflag: '0', Layout: tarbuild.GNU}, hello)
		a.Write(hb{Name: "bad", Typeflag: '0', Layout: tarbuild.GNU, Size: 5, Tweak: bad.tweak}.Bytes())
		a.data(hello)
		add(craftedCase{name: bad.name, data: a.end(), want: []Header{H("ok", TypeReg, 5)},
			err: "ErrCorrupt", errHas: bad.has})
	}
	{
		// GNU tar and bsdtar ignore an atime or ctime that does not
		// parse (Go's testdata invalid-go17.tar).
		a := &arch{}
		a.Write(hb{Name: "bad-times", Typeflag: '0', Layout: tarbuild.GNU, Mode: 0o644, Size: 5, Atime: 100, Tweak: func(b []byte) {
			copy(b[345:357], "aaaaaaaaaaaa")
			copy(b[357:369], "0000000310\x00\x00")
		}}.Bytes())
		a.data(hello)
		add(craftedCase{name: "bad gnu atime ignored", data: a.end(), want: []Header{
			H("bad-times", TypeReg, 5, func(h *Header) { h.CTime, h.HasCTime = Time{Sec: 200}, true }),
		}})
	}
	{
		a := &arch{}
		a.file(hb{Name: "name", Prefix: "star/prefix", Typeflag: '0', Layout: tarbuild.Star, Atime: 100, Ctime: 200}, hello)
		add(craftedCase{name: "star", data: a.end(), want: []Header{
			H("star/prefix/name", TypeReg, 5, func(h *Header) { h.ATime, h.HasATime, h.CTime, h.HasCTime = Time{Sec: 100}, true, Time{Sec: 200}, true }),
		}})
	}
	{
		a := &arch{}
		a.file(hb{Name: "gnutimes", Typeflag: '0', Layout: tarbuild.GNU, Atime: 100, Ctime: 200}, hello)
		a.file(hb{Name: "ustarprefix", Prefix: "p", Typeflag: '0', Layout: tarbuild.USTAR}, hello)
		add(craftedCase{name: "gnu times and ustar prefix", data: a.end(), want: []Header{
			H("gnutimes", TypeReg, 5, func(h *Header) { h.ATime, h.HasATime, h.CTime, h.HasCTime = Time{Sec: 100}, true, Time{Sec: 200}, true }),
			H("p/ustarprefix", TypeReg, 5),
		}})
	}
	{
		a := &arch{}
		a.hdr(hb{Name: "dev", Typeflag: '3', Layout: tarbuild.USTAR, Devmajor: 5, Devminor: 1})
		a.pax('x', "SCHILY.devmajor=300000", "SCHILY.devminor=70000")
		a.hdr(hb{Name: "bigdev", Typeflag: '4', Layout: tarbuild.USTAR})
		a.hdr(hb{Name: "notdev", Typeflag: '6', Layout: tarbuild.USTAR, Devmajor: 5, Devminor: 1})
		add(craftedCase{name: "devices", data: a.end(), want: []Header{
			H("dev", TypeChar, 0, func(h *Header) { h.Devmajor, h.Devminor = 5, 1 }),
			H("bigdev", TypeBlock, 0, func(h *Header) { h.Devmajor, h.Devminor = 300000, 70000 }),
			H("notdev", TypeFIFO, 0),
		}})
	}

	// --- Type flags. ---
	{
		a := &arch{}
		a.hdr(hb{Name: "VOLUME", Typeflag: 'V', Layout: tarbuild.GNU})
		a.file(hb{Name: "dump/", Typeflag: 'D', Layout: tarbuild.GNU, Mode: 0o755}, []byte("Yfile\x00Nother\x00\x00"))
		a.file(hb{Name: "contig", Typeflag: '7', Layout: tarbuild.USTAR}, hello)
		a.file(hb{Name: "unknown", Typeflag: 'Z', Layout: tarbuild.USTAR}, hello)
		a.file(hb{Name: "hardwithdata", Typeflag: '1', Linkname: "contig", Layout: tarbuild.USTAR}, hello)
		a.file(hb{Name: "after", Typeflag: '0', Layout: tarbuild.USTAR}, hello)
		add(craftedCase{name: "type flags", data: a.end(), want: []Header{
			H("dump/", TypeDir, 0, func(h *Header) { h.Mode = 0o755 }),
			H("contig", TypeReg, 5),
			H("unknown", TypeReg, 5),
			H("hardwithdata", TypeLink, 0, func(h *Header) { h.Linkname = "contig" }),
			H("after", TypeReg, 5),
		}, content: []string{"", "hello", "hello", "", "hello"}})
	}
	{
		a := &arch{}
		a.file(hb{Name: "first", Typeflag: '0', Layout: tarbuild.GNU}, hello)
		a.hdr(hb{Name: "cont", Typeflag: 'M', Layout: tarbuild.GNU, Size: 5})
		add(craftedCase{name: "multi-volume", data: a.end(), want: []Header{H("first", TypeReg, 5)},
			err: "ErrCorrupt", errHas: "multi-volume"})
	}

	// --- GNU long names. ---
	{
		long := strings.Repeat("L", 300)
		a := &arch{}
		a.file(hb{Name: "././@LongLink", Typeflag: 'L', Layout: tarbuild.GNU}, []byte(long+"\x00"))
		a.file(hb{Name: "././@LongLink", Typeflag: 'K', Layout: tarbuild.GNU}, []byte(long+"-target\x00"))
		a.hdr(hb{Name: "short", Typeflag: '2', Linkname: "shortlink", Layout: tarbuild.GNU})
		a.file(hb{Name: "././@LongLink", Typeflag: 'L', Layout: tarbuild.GNU}, []byte("no-nul"))
		a.hdr(hb{Name: "short2", Typeflag: '0', Layout: tarbuild.GNU})
		a.hdr(hb{Name: "plain", Typeflag: '0', Layout: tarbuild.GNU})
		add(craftedCase{name: "gnu long names", data: a.end(), want: []Header{
			H(long, TypeSymlink, 0, func(h *Header) { h.Linkname = long + "-target" }),
			H("no-nul", TypeReg, 0),
			H("plain", TypeReg, 0),
		}})
		b := &arch{}
		b.file(hb{Name: "././@LongLink", Typeflag: 'L', Layout: tarbuild.GNU}, []byte(long+"\x00"))
		b.hdr(hb{Name: "short", Typeflag: '0', Layout: tarbuild.GNU})
		add(craftedCase{name: "gnu long name over the limit", data: b.end(), lim: Limits{MaxNameLen: 100},
			err: "ErrCorrupt", errHas: "long name"})
		c := &arch{}
		c.pax('x', "path="+long)
		c.hdr(hb{Name: "short", Typeflag: '0', Layout: tarbuild.USTAR})
		add(craftedCase{name: "pax path over the limit", data: c.end(), lim: Limits{MaxNameLen: 100},
			err: "ErrCorrupt", errHas: "name limit"})
	}

	// --- Pax records. ---
	{
		a := &arch{}
		a.pax('x', "path=pax/name", "linkpath=pax/target", "uid=123456789", "gid=987654321",
			"uname=paxuser", "gname=paxgroup", "mtime=1700000000.5", "atime=-1.25", "ctime=12.1234567891",
			"size=5", "comment=hi", "SCHILY.xattr.user.a=1", "LIBARCHIVE.xattr.user.b%3Dc=aGk",
			"LIBARCHIVE.xattr.user.pad=aGk=", "hdrcharset=BINARY")
		a.hdr(hb{Name: "ustar", Linkname: "ustarlink", Typeflag: '0', Size: 0, Layout: tarbuild.USTAR, Uname: "u", Gname: "g"})
		a.data(hello)
		a.pax('x', "uname=", "path=", "mtime=99999999999999999")
		a.hdr(hb{Name: "emptyvalues", Typeflag: '0', Layout: tarbuild.USTAR, Uname: "u", Mtime: 5})
		a.pax('X', "path=solaris")
		a.hdr(hb{Name: "x", Typeflag: '0', Layout: tarbuild.USTAR})
		add(craftedCase{name: "pax records", data: a.end(), want: []Header{
			H("pax/name", TypeReg, 5, func(h *Header) {
				h.Linkname, h.UID, h.GID, h.Uname, h.Gname = "pax/target", 123456789, 987654321, "paxuser", "paxgroup"
				h.MTime, h.ATime, h.HasATime, h.CTime, h.HasCTime = Time{1700000000, 500000000}, Time{-2, 750000000}, true, Time{12, 123456789}, true
				h.Xattrs = []Xattr{{"user.a", "1"}, {"user.b=c", "hi"}, {"user.pad", "hi"}}
				h.PAX = map[string]string{"comment": "hi", "hdrcharset": "BINARY"}
			}),
			H("emptyvalues", TypeReg, 0, func(h *Header) { h.Uname, h.MTime = "u", Time{Sec: 99999999999999999} }),
			H("solaris", TypeReg, 0),
		}, content: []string{"hello", "", ""}})
	}
	{
		var recs []string
		for i := range 40 {
			recs = append(recs, fmt.Sprintf("SCHILY.xattr.user.k%02d=%d", i%20, i))
		}
		a := &arch{}
		a.pax('x', "SCHILY.xattr.b=1", "SCHILY.xattr.a=2", "LIBARCHIVE.xattr.b=Mw", "SCHILY.xattr.empty=")
		a.hdr(hb{Name: "order", Typeflag: '0', Layout: tarbuild.USTAR})
		a.pax('x', recs...)
		a.hdr(hb{Name: "many", Typeflag: '0', Layout: tarbuild.USTAR})
		var many []Xattr
		for i := range 20 {
			many = append(many, Xattr{fmt.Sprintf("user.k%02d", i), fmt.Sprint(i + 20)})
		}
		add(craftedCase{name: "xattr order and duplicates", data: a.end(), want: []Header{
			H("order", TypeReg, 0, func(h *Header) { h.Xattrs = []Xattr{{"b", "3"}, {"a", "2"}, {"empty", ""}} }),
			H("many", TypeReg, 0, func(h *Header) { h.Xattrs = many }),
		}})
	}
	{
		// Each global header replaces the records in force, as GNU tar
		// takes them: of a key given twice the first counts, an empty
		// value sets nothing, a size is dropped, and a header with no
		// records leaves none. A linkpath is every member's, as in GNU
		// tar (only links use it).
		a := &arch{}
		a.pax('g', "uname=guser", "mtime=42", "mtime=43", "uid=", "linkpath=glink", "size=99",
			"SCHILY.xattr.user.g=global", "comment=global")
		a.pax('x', "uname=own")
		a.hdr(hb{Name: "one", Typeflag: '0', Layout: tarbuild.USTAR, Uname: "hdr", Uid: 7})
		a.hdr(hb{Name: "two", Typeflag: '2', Linkname: "own", Layout: tarbuild.USTAR, Uname: "hdr"})
		a.pax('g', "comment=changed", "SCHILY.xattr.user.h=more")
		a.hdr(hb{Name: "three", Typeflag: '1', Linkname: "one", Layout: tarbuild.USTAR, Uname: "hdr"})
		a.pax('g')
		a.pax('x', "SCHILY.xattr.user.g=mine")
		a.hdr(hb{Name: "four", Typeflag: '0', Layout: tarbuild.USTAR, Uname: "hdr"})
		add(craftedCase{name: "pax global", data: a.end(), want: []Header{
			H("one", TypeReg, 0, func(h *Header) {
				h.Uname, h.UID, h.MTime, h.Linkname = "own", 7, Time{Sec: 42}, "glink"
				h.Xattrs, h.PAX = []Xattr{{"user.g", "global"}}, map[string]string{"comment": "global"}
			}),
			H("two", TypeSymlink, 0, func(h *Header) {
				h.Uname, h.MTime, h.Linkname = "guser", Time{Sec: 42}, "glink"
				h.Xattrs, h.PAX = []Xattr{{"user.g", "global"}}, map[string]string{"comment": "global"}
			}),
			H("three", TypeLink, 0, func(h *Header) {
				h.Uname, h.Linkname, h.Xattrs, h.PAX = "hdr", "one", []Xattr{{"user.h", "more"}}, map[string]string{"comment": "changed"}
			}),
			H("four", TypeReg, 0, func(h *Header) { h.Uname, h.Xattrs = "hdr", []Xattr{{"user.g", "mine"}} }),
		}})
	}
	{
		// A global header that names the members after it is ignored
		// whole, as bsdtar ignores it, and leaves no records in force
		// (Go's testdata pax-global-records.tar, which GNU tar fails on
		// for its empty path).
		a := &arch{}
		a.pax('g', "uid=5")
		a.hdr(hb{Name: "zero", Typeflag: '0', Layout: tarbuild.USTAR})
		a.pax('g', "mtime=1500000000.0", "path=global1", "uid=bad")
		a.hdr(hb{Name: "file1", Typeflag: '0', Layout: tarbuild.USTAR})
		a.pax('x', "path=file2")
		a.hdr(hb{Name: "file2", Typeflag: '0', Layout: tarbuild.USTAR})
		a.pax('g', "path=")
		a.hdr(hb{Name: "file3", Typeflag: '0', Layout: tarbuild.USTAR})
		a.pax('x', "mtime=1400000000")
		a.hdr(hb{Name: "file4", Typeflag: '0', Layout: tarbuild.USTAR})
		a.pax('g', "gid=7", "GNU.sparse.name=sparse")
		a.hdr(hb{Name: "file5", Typeflag: '0', Layout: tarbuild.USTAR})
		add(craftedCase{name: "pax global header with a name", data: a.end(), want: []Header{
			H("zero", TypeReg, 0, func(h *Header) { h.UID = 5 }),
			H("file1", TypeReg, 0),
			H("file2", TypeReg, 0),
			H("file3", TypeReg, 0),
			H("file4", TypeReg, 0, func(h *Header) { h.MTime = Time{Sec: 1400000000} }),
			H("file5", TypeReg, 0),
		}})
	}
	{
		a := &arch{}
		a.pax('g', "uid=bad")
		add(craftedCase{name: "bad pax global record", data: a.end(), err: "ErrCorrupt", errHas: "header at 0: pax global record"})
		b := &arch{}
		b.pax('g', "comment="+strings.Repeat("c", 600), "other="+strings.Repeat("o", 600))
		add(craftedCase{name: "pax global records over the limit", data: b.end(), lim: Limits{MaxGlobalPAXSize: 1024},
			err: "ErrCorrupt", errHas: "header at 0: pax global records exceed"})
		c := &arch{}
		c.pax('g', "comment="+strings.Repeat("c", 600))
		c.pax('g', "other="+strings.Repeat("o", 600))
		add(craftedCase{name: "pax global records replaced within the limit", data: c.end(), lim: Limits{MaxGlobalPAXSize: 1024}})
		var recs []string
		for i := range 300 {
			recs = append(recs, fmt.Sprintf("k%d=v", i))
		}
		d := &arch{}
		d.pax('g', recs...)
		add(craftedCase{name: "too many pax global records", data: d.end(), err: "ErrCorrupt", errHas: "more than 256"})
	}
	{
		a := &arch{}
		a.pax('g', "comment=only a global header")
		add(craftedCase{name: "only a global header", data: a.end()})
	}
	for _, bad := range []struct {
		name string
		raw  string
		has  string
	}{
		{"length too short", "5 path=abc\n", "no newline"},
		{"length too long", "50 path=abc\n", "out of range"},
		{"length not a number", "x path=abc\n", "bad length"},
		{"huge length", "999999999999999999 path=abc\n", "out of range"},
		{"no space", "12path=abc\n", "bad length"},
		{"no equals sign", tarbuild.PAXRecord("pathabc"), "no key=value"},
		{"empty key", tarbuild.PAXRecord("=abc"), "no key=value"},
		{"non-UTF-8 key", tarbuild.PAXRecord("pa\xffth=abc"), "UTF-8"},
		{"NUL in key", tarbuild.PAXRecord("pa\x00th=abc"), "UTF-8"},
		{"negative size", tarbuild.PAXRecord("size=-1"), "size"},
		{"size overflow", tarbuild.PAXRecord("size=99999999999999999999"), "size"},
		{"bad uid", tarbuild.PAXRecord("uid=1x"), "uid"},
		{"bad base64 xattr", tarbuild.PAXRecord("LIBARCHIVE.xattr.user.a=!!!"), "base64"},
		{"bad url xattr name", tarbuild.PAXRecord("LIBARCHIVE.xattr.user%zz=aGk"), "escape"},
		{"empty xattr name", tarbuild.PAXRecord("SCHILY.xattr.=v"), "xattr name"},
	} {
		a := &arch{}
		a.file(hb{Name: "ok", Typeflag: '0', Layout: tarbuild.USTAR}, nil)
		a.file(hb{Name: "PaxHeaders/bad", Typeflag: 'x', Layout: tarbuild.USTAR}, []byte(bad.raw))
		a.hdr(hb{Name: "bad", Typeflag: '0', Layout: tarbuild.USTAR})
		add(craftedCase{name: "pax " + bad.name, data: a.end(), want: []Header{H("ok", TypeReg, 0)},
			err: "ErrCorrupt", errHas: bad.has})
	}
	// A pax time that is not a number is read as GNU tar reads it: the
	// number it starts with, else ignored and the header's stands (Go's
	// testdata pax-bad-mtime-file.tar: "999xxx9324.43" is 999 s).
	for _, bad := range []struct {
		rec string
		set func(h *Header)
	}{
		{"mtime=999xxx9324.432432444444", func(h *Header) { h.MTime = Time{Sec: 999} }},
		{"mtime=12.3e4", func(h *Header) { h.MTime = Time{Sec: 12, Nsec: 300000000} }},
		{"mtime=-", func(h *Header) {}},
		{"mtime=x1", func(h *Header) {}},
		{"atime=-5x", func(h *Header) { h.ATime, h.HasATime = Time{Sec: -5}, true }},
		{"ctime=1.x", func(h *Header) { h.CTime, h.HasCTime = Time{Sec: 1}, true }},
		// Past the int64 range: the nearest in it, as bsdtar takes it.
		{"mtime=99999999999999999999", func(h *Header) { h.MTime = Time{Sec: math.MaxInt64} }},
		{"mtime=-9223372036854775808.5", func(h *Header) { h.MTime = Time{Sec: -math.MaxInt64} }},
		{"atime=1234567890123456789012x", func(h *Header) { h.ATime, h.HasATime = Time{Sec: math.MaxInt64}, true }},
	} {
		a := &arch{}
		a.pax('x', bad.rec)
		a.hdr(hb{Name: "t", Typeflag: '0', Layout: tarbuild.USTAR, Mtime: 7})
		add(craftedCase{name: "pax time " + bad.rec, data: a.end(), want: []Header{
			H("t", TypeReg, 0, func(h *Header) { h.MTime = Time{Sec: 7}; bad.set(h) }),
		}})
	}
	{
		// Names end at a NUL, as GNU tar and bsdtar read them (Go's
		// testdata pax-nul-path.tar).
		a := &arch{}
		a.pax('x', "path=before\x00after", "linkpath=to\x00x", "uname=u\x00v")
		a.hdr(hb{Name: "l", Typeflag: '2', Layout: tarbuild.USTAR})
		add(craftedCase{name: "pax NUL in a name", data: a.end(), want: []Header{
			H("before", TypeSymlink, 0, func(h *Header) { h.Linkname, h.Uname = "to", "u" }),
		}})
	}
	{
		// Of pax headers in a row, the last counts, as in GNU tar (Go's
		// testdata pax-multi-hdrs.tar).
		a := &arch{}
		a.pax('x', "path=first", "uname=first")
		a.pax('x', "linkpath=second")
		a.hdr(hb{Name: "main", Typeflag: '2', Layout: tarbuild.USTAR})
		add(craftedCase{name: "pax headers in a row", data: a.end(), want: []Header{
			H("main", TypeSymlink, 0, func(h *Header) { h.Linkname = "second" }),
		}})
	}
	{
		a := &arch{}
		a.file(hb{Name: "PaxHeaders/x", Typeflag: 'x', Layout: tarbuild.USTAR}, []byte(tarbuild.PAXRecord("path=nul-padded")+"\x00\x00\x00"))
		a.hdr(hb{Name: "x", Typeflag: '0', Layout: tarbuild.USTAR})
		add(craftedCase{name: "pax NUL padding", data: a.end(), want: []Header{H("nul-padded", TypeReg, 0)}})
	}
	{
		big := tarbuild.PAXRecord("comment=" + strings.Repeat("c", 2000))
		a := &arch{}
		a.file(hb{Name: "PaxHeaders/x", Typeflag: 'x', Layout: tarbuild.USTAR}, []byte(big))
		a.hdr(hb{Name: "x", Typeflag: '0', Layout: tarbuild.USTAR})
		add(craftedCase{name: "pax header over the limit", data: a.end(), lim: Limits{MaxPAXSize: 1024},
			err: "ErrCorrupt", errHas: "exceed the limit"})
		b := &arch{}
		half := tarbuild.PAXRecord("comment=" + strings.Repeat("c", 700))
		b.file(hb{Name: "PaxHeaders/x", Typeflag: 'x', Layout: tarbuild.USTAR}, []byte(half))
		b.file(hb{Name: "PaxHeaders/x", Typeflag: 'x', Layout: tarbuild.USTAR}, []byte(half))
		b.hdr(hb{Name: "x", Typeflag: '0', Layout: tarbuild.USTAR})
		add(craftedCase{name: "pax headers in a row, each under the limit", data: b.end(), lim: Limits{MaxPAXSize: 1024},
			want: []Header{H("x", TypeReg, 0, func(h *Header) { h.PAX = map[string]string{"comment": strings.Repeat("c", 700)} })}})
		c := &arch{}
		c.hdr(hb{Name: "PaxHeaders/x", Typeflag: 'x', Layout: tarbuild.USTAR, Size: 1 << 60})
		add(craftedCase{name: "absurd pax size", data: c.end(), err: "ErrCorrupt", errHas: "exceed the limit"})
		d := &arch{}
		d.hdr(hb{Name: "PaxHeaders/g", Typeflag: 'g', Layout: tarbuild.USTAR, Size: 1 << 40})
		add(craftedCase{name: "absurd global size", data: d.end(), err: "ErrCorrupt", errHas: "exceeds the limit"})
		e := &arch{}
		e.hdr(hb{Name: "L", Typeflag: 'L', Layout: tarbuild.GNU, Size: 1 << 50})
		add(craftedCase{name: "absurd long name size", data: e.end(), err: "ErrCorrupt", errHas: "exceeds the limit"})
		f := &arch{}
		f.hdr(hb{Name: "huge", Typeflag: '0', Layout: tarbuild.GNU, Size: math.MaxInt64})
		add(craftedCase{name: "absurd member size", data: f.end(), err: "ErrCorrupt", errHas: "out of range"})
		g := &arch{}
		g.hdr(hb{Name: "huge", Typeflag: '0', Layout: tarbuild.GNU, Size: 1 << 50})
		add(craftedCase{name: "member size past the end", data: g.end(),
			want: []Header{H("huge", TypeReg, 1<<50)}, err: "ErrTruncated", errHas: "data ends"})
	}

	// --- Sparse files. ---
	{
		a := &arch{}
		a.pax('x', "GNU.sparse.size=100", "GNU.sparse.numblocks=3", "GNU.sparse.offset=0", "GNU.sparse.numbytes=2",
			"GNU.sparse.offset=50", "GNU.sparse.numbytes=3", "GNU.sparse.offset=100", "GNU.sparse.numbytes=0",
			"GNU.sparse.name=real00")
		a.file(hb{Name: "GNUSparseFile.0/real00", Typeflag: '0', Layout: tarbuild.USTAR}, []byte("ab123"))
		a.pax('x', "GNU.sparse.size=10", "GNU.sparse.numblocks=2", "GNU.sparse.map=1,2,5,3")
		a.file(hb{Name: "sparse01", Typeflag: '0', Layout: tarbuild.USTAR}, []byte("xyzuv"))
		a.pax('x', "GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.name=real10", "GNU.sparse.realsize=20")
		a.file(hb{Name: "GNUSparseFile.0/real10", Typeflag: '0', Layout: tarbuild.USTAR},
			sparse1Data([]SparseChunk{{0, 5}, {10, 3}, {20, 0}}, "helloabc"))
		var manyChunks []SparseChunk
		var stored strings.Builder
		for i := range int64(100) {
			manyChunks = append(manyChunks, SparseChunk{i * 1000, 7})
			stored.WriteString("0123456")
		}
		a.pax('x', "GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.name=long10", "GNU.sparse.realsize=100000")
		a.file(hb{Name: "GNUSparseFile.0/long10", Typeflag: '0', Layout: tarbuild.USTAR},
			sparse1Data(manyChunks, stored.String()))
		a.pax('x', "GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.realsize=4096")
		a.file(hb{Name: "allhole", Typeflag: '0', Layout: tarbuild.USTAR}, sparse1Data(nil, ""))
		add(craftedCase{name: "pax sparse", data: a.end(), want: []Header{
			H("real00", TypeReg, 100, func(h *Header) { h.Sparse, h.StoredSize = []SparseChunk{{0, 2}, {50, 3}}, 5 }),
			H("sparse01", TypeReg, 10, func(h *Header) { h.Sparse, h.StoredSize = []SparseChunk{{1, 2}, {5, 3}}, 5 }),
			H("real10", TypeReg, 20, func(h *Header) { h.Sparse, h.StoredSize = []SparseChunk{{0, 5}, {10, 3}}, 8 }),
			H("long10", TypeReg, 100000, func(h *Header) { h.Sparse, h.StoredSize = manyChunks, 700 }),
			H("allhole", TypeReg, 4096, func(h *Header) { h.Sparse, h.StoredSize = []SparseChunk{}, 0 }),
		}, content: []string{
			"ab" + strings.Repeat("\x00", 48) + "123" + strings.Repeat("\x00", 47),
			"\x00xy\x00\x00zuv\x00\x00",
			"hello\x00\x00\x00\x00\x00abc" + strings.Repeat("\x00", 7),
			anyContent, strings.Repeat("\x00", 4096),
		}})
	}
	{
		chunks := []SparseChunk{{0, 1}, {10, 2}, {20, 1}, {30, 1}, {40, 1}, {50, 1}}
		var many []SparseChunk
		var stored strings.Builder
		for i := range int64(30) {
			many = append(many, SparseChunk{i * 10, 1})
			stored.WriteByte('a' + byte(i%26))
		}
		a := &arch{}
		a.Write(gnuSparseHeader("oldgnu", 60, chunks))
		a.data([]byte("abcdefg"))
		a.Write(gnuSparseHeader("oldgnu30", 300, many))
		a.data([]byte(stored.String()))
		a.Write(gnuSparseHeader("oldgnu2", 100, []SparseChunk{{10, 2}, {100, 0}}))
		a.data([]byte("zz"))
		add(craftedCase{name: "old gnu sparse", data: a.end(), want: []Header{
			H("oldgnu", TypeReg, 60, func(h *Header) { h.Sparse, h.StoredSize = chunks, 7 }),
			H("oldgnu30", TypeReg, 300, func(h *Header) { h.Sparse, h.StoredSize = many, 30 }),
			H("oldgnu2", TypeReg, 100, func(h *Header) { h.Sparse, h.StoredSize = []SparseChunk{{10, 2}}, 2 }),
		}, content: []string{"a" + strings.Repeat("\x00", 9) + "bc" + strings.Repeat("\x00", 8) + "d" +
			strings.Repeat("\x00", 9) + "e" + strings.Repeat("\x00", 9) + "f" + strings.Repeat("\x00", 9) + "g" +
			strings.Repeat("\x00", 9), anyContent, strings.Repeat("\x00", 10) + "zz" + strings.Repeat("\x00", 88)}})
		b := &arch{}
		b.Write(gnuSparseHeader("cut", 300, many)[:2*blockSize+100])
		add(craftedCase{name: "old gnu sparse cut in an extension block", data: b.Bytes(),
			err: "ErrTruncated", errHas: "extension block"})
		c := &arch{}
		c.Write(gnuSparseHeader("toomany", 300, many))
		c.data([]byte(stored.String()))
		add(craftedCase{name: "old gnu sparse over the chunk limit", data: c.end(), lim: Limits{MaxSparseChunks: 10},
			err: "ErrCorrupt", errHas: "sparse"})
		d := &arch{}
		d.Write(hb{Name: "notgnu", Typeflag: 'S', Layout: tarbuild.USTAR}.Bytes())
		add(craftedCase{name: "old gnu sparse without gnu magic", data: d.end(), err: "ErrCorrupt", errHas: "GNU magic"})
	}
	for _, bad := range []struct {
		name string
		recs []string
		data []byte
		has  string
	}{
		{"overlap", []string{"GNU.sparse.size=100", "GNU.sparse.map=0,10,5,10"}, make([]byte, 20), "overlaps"},
		{"unsorted", []string{"GNU.sparse.size=100", "GNU.sparse.map=50,10,0,10"}, make([]byte, 20), "overlaps"},
		{"past realsize", []string{"GNU.sparse.size=100", "GNU.sparse.map=95,10"}, make([]byte, 10), "outside"},
		{"sum differs", []string{"GNU.sparse.size=100", "GNU.sparse.map=0,10"}, make([]byte, 20), "stored"},
		{"odd map", []string{"GNU.sparse.size=100", "GNU.sparse.map=0,10,20"}, make([]byte, 10), "odd"},
		{"bad map number", []string{"GNU.sparse.size=100", "GNU.sparse.map=0,1x"}, make([]byte, 10), "decimal"},
		{"numblocks differs", []string{"GNU.sparse.size=100", "GNU.sparse.numblocks=2", "GNU.sparse.map=0,10"}, make([]byte, 10), "numblocks"},
		{"numbytes first", []string{"GNU.sparse.size=100", "GNU.sparse.numbytes=10"}, make([]byte, 10), "numbytes without"},
		{"offset without numbytes", []string{"GNU.sparse.size=100", "GNU.sparse.offset=10"}, nil, "without GNU.sparse.numbytes"},
		{"two offsets", []string{"GNU.sparse.size=100", "GNU.sparse.offset=1", "GNU.sparse.offset=2"}, nil, "two offsets"},
		{"no realsize", []string{"GNU.sparse.map=0,10"}, make([]byte, 10), "realsize"},
		{"version 2", []string{"GNU.sparse.major=2", "GNU.sparse.minor=0", "GNU.sparse.realsize=10"}, make([]byte, 512), "version 2.0"},
		{"1.0 map past data", []string{"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.realsize=10"}, []byte("1\n0\n5\n"), "runs past"},
		{"1.0 map without data", []string{"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.realsize=10"},
			nil, "runs past"},
		{"1.0 map garbage", []string{"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.realsize=10"},
			append([]byte("1\n0\nx\n"), make([]byte, 506)...), "malformed sparse map"},
		{"1.0 map empty number", []string{"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.realsize=10"},
			append([]byte("1\n\n5\n"), make([]byte, 507)...), "malformed sparse map"},
		{"1.0 map huge number", []string{"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.realsize=10"},
			append([]byte("1\n0\n99999999999999999999999\n"), make([]byte, 485)...), "malformed sparse map"},
		{"1.0 map count past its data", []string{"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.realsize=10"},
			append([]byte("999999999\n"), make([]byte, 502)...), "malformed sparse map"},
		{"1.0 chunks past realsize", []string{"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.realsize=10"},
			sparse1Data([]SparseChunk{{8, 5}}, "abcde"), "outside"},
	} {
		a := &arch{}
		a.pax('x', bad.recs...)
		a.file(hb{Name: "bad", Typeflag: '0', Layout: tarbuild.USTAR}, bad.data)
		add(craftedCase{name: "sparse " + bad.name, data: a.end(), err: "ErrCorrupt", errHas: bad.has})
	}
	{
		// Maps are kept compact: empty entries dropped, adjacent ones
		// joined (Go's testdata gnu-sparse-many-zeros.tar.bz2 has ten
		// million entries), and only then held to the limit.
		var chunks []SparseChunk
		for i := range int64(5000) {
			chunks = append(chunks, SparseChunk{i, 0})
		}
		chunks = append(chunks, SparseChunk{6000, 2}, SparseChunk{6002, 3}, SparseChunk{6010, 1}, SparseChunk{7000, 0})
		want := []Header{H("many", TypeReg, 7000, func(h *Header) {
			h.Sparse, h.StoredSize = []SparseChunk{{6000, 5}, {6010, 1}}, 6
		})}
		for _, f := range []struct {
			name string
			recs []string
			data []byte
		}{
			{"1.0", []string{"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.realsize=7000", "GNU.sparse.name=many"},
				sparse1Data(chunks, "abcdef")},
			{"0.1", []string{"GNU.sparse.size=7000", "GNU.sparse.name=many", "GNU.sparse.numblocks=5004", "GNU.sparse.map=" + sparseMapValue(chunks)},
				[]byte("abcdef")},
		} {
			a := &arch{}
			a.pax('x', f.recs...)
			a.file(hb{Name: "GNUSparseFile.0/many", Typeflag: '0', Layout: tarbuild.USTAR}, f.data)
			logical := make([]byte, 7000)
			copy(logical[6000:], "abcde")
			logical[6010] = 'f'
			add(craftedCase{name: "sparse " + f.name + " map compacted", data: a.end(), want: want, content: []string{string(logical)}})
			b := &arch{}
			b.pax('x', f.recs...)
			b.file(hb{Name: "GNUSparseFile.0/many", Typeflag: '0', Layout: tarbuild.USTAR}, f.data)
			add(craftedCase{name: "sparse " + f.name + " map over the limit once compacted", data: b.end(), lim: Limits{MaxSparseChunks: 1},
				err: "ErrCorrupt", errHas: "more than 1"})
		}
	}
	{
		a := &arch{}
		a.pax('x', "GNU.sparse.size=100", "GNU.sparse.map=0,10")
		a.hdr(hb{Name: "dir/", Typeflag: '5', Layout: tarbuild.USTAR, Mode: 0o755})
		add(craftedCase{name: "sparse records on a directory", data: a.end(), want: []Header{
			H("dir/", TypeDir, 0, func(h *Header) { h.Mode = 0o755 }),
		}})
	}

	// --- Archive ends. ---
	{
		a := &arch{}
		a.file(hb{Name: "f", Typeflag: '0', Layout: tarbuild.USTAR}, hello)
		noEnd := bytes.Clone(a.Bytes())
		oneZero := append(bytes.Clone(noEnd), make([]byte, blockSize)...)
		cutZero := append(bytes.Clone(noEnd), make([]byte, blockSize+100)...)
		cutFirstZero := append(bytes.Clone(noEnd), make([]byte, 100)...)
		lone := append(bytes.Clone(oneZero), hb{Name: "g", Typeflag: '0', Layout: tarbuild.USTAR}.Bytes()...)
		lone = append(lone, make([]byte, 1024)...)
		want := []Header{H("f", TypeReg, 5)}
		add(craftedCase{name: "no end marker", data: noEnd, want: want})
		add(craftedCase{name: "one zero block", data: oneZero, want: want})
		add(craftedCase{name: "cut end marker", data: cutZero, want: want})
		add(craftedCase{name: "cut first zero block", data: cutFirstZero, want: want})
		add(craftedCase{name: "lone zero block", data: lone, want: want, err: "ErrCorrupt", errHas: "lone zero block"})
		add(craftedCase{name: "empty stream", data: nil})
		add(craftedCase{name: "only an end marker", data: make([]byte, 1024)})
		b := &arch{}
		b.file(hb{Name: "f", Typeflag: '0', Layout: tarbuild.USTAR}, hello)
		b.pax('x', "path=p")
		// GNU tar ends there too (Go's testdata pax-path-hdr.tar).
		add(craftedCase{name: "stream ends after pax header", data: b.Bytes(), want: want})
		add(craftedCase{name: "zero block after pax header", data: bytes.Clone(b.end()), want: want,
			err: "ErrCorrupt", errHas: "zero block after"})
		c := &arch{}
		c.file(hb{Name: "f", Typeflag: '0', Layout: tarbuild.USTAR}, hello)
		c.Write(hb{Name: "g", Typeflag: '0', Layout: tarbuild.USTAR}.Bytes()[:300])
		add(craftedCase{name: "cut header", data: c.Bytes(), want: want, err: "ErrTruncated", errHas: "300 of 512"})
		d := &arch{}
		d.file(hb{Name: "f", Typeflag: '0', Layout: tarbuild.USTAR}, hello)
		bad := hb{Name: "g", Typeflag: '0', Layout: tarbuild.USTAR}.Bytes()
		bad[0] ^= 1
		d.Write(bad)
		// Skipped to the next header, here the end (TestResync).
		add(craftedCase{name: "bad checksum later", data: d.end(), want: want})
		e := hb{Name: "g", Typeflag: '0', Layout: tarbuild.USTAR}.Bytes()
		e[0] ^= 1
		add(craftedCase{name: "bad checksum first", data: append(e, make([]byte, 1024)...), err: "ErrNotTar", errHas: "bad checksum"})
		f := hb{Name: "g", Typeflag: '0', Layout: tarbuild.USTAR}.Bytes()
		copy(f[148:156], "zzzzzzzz")
		add(craftedCase{name: "unreadable checksum", data: f, err: "ErrNotTar"})
	}
	return cases
}

// TestCrafted runs hand-made archives through every kind of reader.
func TestCrafted(t *testing.T) {
	for _, tc := range craftedCases() {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == "" {
				tc.err = "nil"
			}
			for _, rk := range readerKinds {
				s := NewScanner(rk.wrap(tc.data), tc.lim)
				var hs []*Header
				var err error
				var contents [][]byte
				for {
					var h *Header
					if h, err = s.Next(); err != nil {
						break
					}
					hs = append(hs, h)
					var c []byte
					if h.DataOffset+h.StoredSize <= int64(len(tc.data)) {
						c = logical(tc.data, h)
					}
					contents = append(contents, c)
				}
				if err == io.EOF {
					err = nil
				}
				if got := errKind(err); got != tc.err {
					t.Fatalf("%s: error: got %v, want %s", rk.name, err, tc.err)
				}
				if err != nil && !strings.Contains(err.Error(), tc.errHas) {
					t.Errorf("%s: error: got %q, want it to contain %q", rk.name, err, tc.errHas)
				}
				if err != nil {
					if _, again := s.Next(); again != err {
						t.Errorf("%s: error after error: got %v, want %v", rk.name, again, err)
					}
				}
				if len(hs) != len(tc.want) {
					t.Fatalf("%s: got %d members, want %d", rk.name, len(hs), len(tc.want))
				}
				for i := range hs {
					if got := project(hs[i]); !reflect.DeepEqual(got, tc.want[i]) {
						t.Errorf("%s: member %d:\n got %+v\nwant %+v", rk.name, i, got, tc.want[i])
					}
					if tc.content != nil && tc.content[i] != anyContent && string(contents[i]) != tc.content[i] {
						t.Errorf("%s: member %d content: got %q, want %q", rk.name, i, clip(contents[i]), clip([]byte(tc.content[i])))
					}
				}
				if err == nil {
					checkTiling(t, hs, tc.data)
				}
			}
		})
	}
}

// countingReader serves data and counts the bytes handed out.
type countingReader struct {
	data []byte
	n    int
}

func (c *countingReader) Read(p []byte) (int, error) {
	if c.n == len(c.data) {
		return 0, io.EOF
	}
	m := copy(p, c.data[c.n:])
	c.n += m
	return m, nil
}

// TestStopsAtEndMarker checks that nothing after the end marker is read.
func TestStopsAtEndMarker(t *testing.T) {
	a := &arch{}
	a.file(hb{Name: "f", Typeflag: '0', Layout: tarbuild.USTAR}, []byte("hello"))
	end := a.Len() + 1024
	data := append(a.end(), bytes.Repeat([]byte("garbage!"), 1000)...)
	r := &countingReader{data: data}
	s := NewScanner(r, Limits{})
	if _, err := s.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Fatalf("Next: got %v, want io.EOF", err)
	}
	if r.n != end {
		t.Errorf("bytes read: got %d, want %d", r.n, end)
	}
	if s.Offset() != int64(end) {
		t.Errorf("Offset: got %d, want %d", s.Offset(), end)
	}
	if _, err := s.Next(); err != io.EOF {
		t.Errorf("Next after the end: got %v, want io.EOF", err)
	}
}

// TestRead reads member data through the Scanner.
func TestRead(t *testing.T) {
	a := &arch{}
	a.file(hb{Name: "a", Typeflag: '0', Layout: tarbuild.USTAR}, []byte("first file"))
	a.file(hb{Name: "b", Typeflag: '0', Layout: tarbuild.USTAR}, bytes.Repeat([]byte("0123456789"), 100))
	a.hdr(hb{Name: "d/", Typeflag: '5', Layout: tarbuild.USTAR})
	a.file(hb{Name: "c", Typeflag: '0', Layout: tarbuild.USTAR}, []byte("third"))
	data := a.end()
	for _, rk := range readerKinds {
		t.Run(rk.name, func(t *testing.T) {
			s := NewScanner(rk.wrap(data), Limits{})
			for _, want := range []struct {
				name, content string
				readAll       bool
			}{{"a", "first file", true}, {"b", strings.Repeat("0123456789", 100), false}, {"d/", "", true}, {"c", "third", true}} {
				h, err := s.Next()
				if err != nil {
					t.Fatal(err)
				}
				if h.Name != want.name {
					t.Fatalf("Name: got %q, want %q", h.Name, want.name)
				}
				if !want.readAll {
					p := make([]byte, 15)
					if n, err := io.ReadFull(s, p); err != nil || string(p[:n]) != want.content[:15] {
						t.Fatalf("%s: partial read: got %q, %v, want %q", h.Name, p[:n], err, want.content[:15])
					}
					if got := s.Offset(); got != h.DataOffset+15 {
						t.Errorf("%s: Offset: got %d, want %d", h.Name, got, h.DataOffset+15)
					}
					continue
				}
				got, err := io.ReadAll(s)
				if err != nil || string(got) != want.content {
					t.Fatalf("%s: ReadAll: got %q, %v, want %q", h.Name, got, err, want.content)
				}
			}
			if _, err := s.Next(); err != io.EOF {
				t.Fatalf("Next: got %v, want io.EOF", err)
			}
		})
	}
	t.Run("truncated", func(t *testing.T) {
		s := NewScanner(bytes.NewReader(data[:512+5]), Limits{})
		if _, err := s.Next(); err != nil {
			t.Fatal(err)
		}
		_, err := io.ReadAll(s)
		if got := errKind(err); got != "ErrTruncated" {
			t.Fatalf("ReadAll: got %v, want ErrTruncated", err)
		}
	})
}

// TestDiscardUsed checks that a reader with Discard is used to skip data.
func TestDiscardUsed(t *testing.T) {
	a := &arch{}
	a.file(hb{Name: "a", Typeflag: '0', Layout: tarbuild.USTAR}, make([]byte, 10000))
	a.file(hb{Name: "b", Typeflag: '0', Layout: tarbuild.USTAR}, make([]byte, 10000))
	r := &discard64Reader{r: bytes.NewReader(a.end())}
	hs, err := scanReader(r, Limits{})
	if err != nil || len(hs) != 2 {
		t.Fatalf("scan: got %d members, %v, want 2, nil", len(hs), err)
	}
	if r.discards != 2 {
		t.Errorf("Discard calls: got %d, want 2", r.discards)
	}
}

// TestBase64Values checks xattr values of every length through base64,
// padded or not.
func TestBase64Values(t *testing.T) {
	for n := range 7 {
		v := strings.Repeat("\xfe", n)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding} {
			a := &arch{}
			a.pax('x', "LIBARCHIVE.xattr.user.v="+enc.EncodeToString([]byte(v)))
			a.hdr(hb{Name: "f", Typeflag: '0', Layout: tarbuild.USTAR})
			hs, err := scanAll(a.end(), Limits{})
			if err != nil {
				t.Fatalf("len %d: %v", n, err)
			}
			if want := []Xattr{{"user.v", v}}; !reflect.DeepEqual(hs[0].Xattrs, want) {
				t.Errorf("len %d: got %q, want %q", n, hs[0].Xattrs, want)
			}
		}
	}
}

// TestResync: a header with a bad checksum after the archive's first is
// skipped, with whatever follows it, up to the next header or the end of
// the archive, as GNU tar and bsdtar do; each run of damaged blocks counts
// once in Resyncs, and the members after it start at their own headers.
// A bad first header is not a tar archive, and one after an extended
// header stays an error.
func TestResync(t *testing.T) {
	bad := func(a *arch, name string) *arch {
		h := hb{Name: name, Mode: 0o644, Size: 2}
		b := h.Bytes()
		b[0] ^= 0x20 // the checksum no longer matches
		a.Write(b)
		return a.data([]byte("x\n"))
	}
	scan := func(data []byte) ([]string, []int64, int, error) {
		s := NewScanner(bytes.NewReader(data), Limits{})
		var names []string
		var offs []int64
		for {
			h, err := s.Next()
			if err == io.EOF {
				return names, offs, s.Resyncs(), nil
			}
			if err != nil {
				return names, offs, s.Resyncs(), err
			}
			names, offs = append(names, h.Name), append(offs, h.HeaderOffset)
		}
	}
	t.Run("between members", func(t *testing.T) {
		a := &arch{}
		a.file(hb{Name: "a"}, []byte("a\n"))
		bad(a, "b")
		a.data(bytes.Repeat([]byte("g"), 3*blockSize)) // garbage
		a.file(hb{Name: "c"}, []byte("c\n"))
		bad(a, "d")
		a.file(hb{Name: "e"}, []byte("e\n"))
		names, offs, resyncs, err := scan(a.end())
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"a", "c", "e"}; !slices.Equal(names, want) || resyncs != 2 {
			t.Fatalf("got %q and %d resyncs, want %q and 2", names, resyncs, want)
		}
		if want := []int64{0, 7 * blockSize, 11 * blockSize}; !slices.Equal(offs, want) {
			t.Fatalf("header offsets: got %v, want %v", offs, want)
		}
	})
	t.Run("to the end", func(t *testing.T) {
		a := &arch{}
		a.file(hb{Name: "a"}, []byte("a\n"))
		bad(a, "b")
		names, _, resyncs, err := scan(a.Bytes()) // no end marker
		if err != nil || !slices.Equal(names, []string{"a"}) || resyncs != 1 {
			t.Fatalf("got %q, %d resyncs, %v; want [a], 1, nil", names, resyncs, err)
		}
	})
	t.Run("first header", func(t *testing.T) {
		a := &arch{}
		bad(a, "a")
		a.file(hb{Name: "b"}, []byte("b\n"))
		if _, _, _, err := scan(a.end()); !errors.Is(err, ErrNotTar) {
			t.Fatalf("got %v, want ErrNotTar", err)
		}
	})
	t.Run("after an extended header", func(t *testing.T) {
		a := &arch{}
		a.file(hb{Name: "a"}, []byte("a\n"))
		a.pax('x', "path=long")
		bad(a, "b")
		a.file(hb{Name: "c"}, []byte("c\n"))
		if _, _, _, err := scan(a.end()); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("got %v, want ErrCorrupt", err)
		}
	})
}
