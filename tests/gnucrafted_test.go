package tests

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// crafted is an archive of TestGNUCrafted, and what GNU tar and bsdtar
// must make of it for the case to test its class: "" (no matter),
// "extract" (one of them extracts it), "gnu" (GNU tar extracts it),
// "bsdtar" (bsdtar alone extracts it) or "fail" (both fail).
type crafted struct {
	name    string
	tools   string
	members []tarbuild.Member
}

const outOfRange = "pax mtime out of range"

// TestGNUCrafted: archives made here for each class of archive that GNU
// tar or bsdtar reads and tarmount once refused or read otherwise (a GNU
// atime or a pax time that does not parse, a pax time out of range, a
// NUL in a pax path, a sparse map of 10,000,001 entries, headers in a
// row, duplicate members, leading prefixes and ".." in names, base-256
// times, a header with a bad checksum, pax global headers that replace
// each other, give a link target or name members) and each that both
// refuse (damaged archives), in every codec, extracted, inspected and
// mounted as checkGoTestdata checks Go's testdata: the tree and the
// warnings of GNU tar (or bsdtar's tree where GNU tar alone fails), or a
// failure of one line that leaves nothing half-written, taken from
// running both here.
func TestGNUCrafted(t *testing.T) {
	needFUSE(t)
	needTools(t, goTestdataTools()...)
	file := func(name, body string, pax ...string) tarbuild.Member {
		return tarbuild.Member{Name: name, Body: body, PAX: pax}
	}
	// raw is a member of header block h (defaults filled in) and body.
	raw := func(h tarbuild.Block, body string) tarbuild.Member {
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Mtime == 0 {
			h.Mtime = 1700000000
		}
		if h.Typeflag == 0 {
			h.Typeflag = tarbuild.TypeReg
		}
		h.Size, h.Uname, h.Gname = int64(len(body)), "root", "root"
		b := append(h.Bytes(), body...)
		return tarbuild.Member{Raw: append(b, make([]byte, tarbuild.Padded(len(body))-len(body))...)}
	}
	// ext is an extended header of type typ (x, g, L or K) holding body.
	ext := func(typ byte, body string) tarbuild.Member {
		if typ == 'L' || typ == 'K' {
			return raw(tarbuild.Block{Name: "././@LongLink", Typeflag: typ, Layout: tarbuild.GNU}, body)
		}
		return raw(tarbuild.Block{Name: "PaxHeaders/x", Typeflag: typ, Layout: tarbuild.USTAR}, body)
	}
	recs := func(kv ...string) string {
		var b strings.Builder
		for _, r := range kv {
			b.WriteString(tarbuild.PAXRecord(r))
		}
		return b.String()
	}
	// badSum is m with a header whose checksum does not match it.
	badSum := func(m tarbuild.Member) tarbuild.Member {
		m.BadSum = true
		return m
	}
	base256 := func(mtime int64) func([]byte) {
		return func(b []byte) { tarbuild.PutBase256(b[136:148], mtime) }
	}
	cases := []crafted{
		// Times.
		{"gnu atime that does not parse", "extract", []tarbuild.Member{
			raw(tarbuild.Block{Name: "f", Layout: tarbuild.GNU, Tweak: func(b []byte) { copy(b[345:357], "aaaaaaaaaaa\x00") }}, "f\n"),
			file("ok", "ok\n")}},
		{"pax mtime not a decimal number", "extract", []tarbuild.Member{
			file("a", "a\n", "mtime=12x34"), file("b", "b\n", "mtime=999xxx9324.432432444444"), file("c", "c\n", "mtime=1.5e3"),
			file("ok", "ok\n")}},
		{"pax atime and ctime that do not parse", "extract", []tarbuild.Member{
			file("a", "a\n", "atime=junk"), file("c", "c\n", "ctime=1.x"), file("ok", "ok\n")}},
		{outOfRange, "extract", []tarbuild.Member{
			file("big", "b\n", "mtime=99999999999999999999"), file("neg", "n\n", "mtime=-99999999999999999999"),
			file("ok", "ok\n")}},
		{"base-256 times past 2262 and before 1901", "extract", []tarbuild.Member{
			{Name: "y2300", Body: "a\n", Tweak: base256(10413792000 + 45296)},
			{Name: "y2446", Body: "b\n", Tweak: base256(15032385535)},
			{Name: "y1901", Body: "c\n", Tweak: base256(-1 << 31)},
			file("ok", "ok\n")}},
		{"time stamps old and in the future", "extract", []tarbuild.Member{
			{Name: "future", Body: "f", Mtime: 15023750400}, {Name: "old", Body: "o", Mtime: -1},
			file("atime-only", "a\n", "atime=15023750400"), file("ok", "ok\n")}},
		// Names.
		{"pax path with a NUL", "extract", []tarbuild.Member{
			file("x", "nul\n", "path=before\x00after"), file("d/y", "nul2\n", "path=d/z\x00"), file("ok", "ok\n")}},
		{"leading prefixes", "", []tarbuild.Member{
			file("/abs", "a\n"), file("//twice", "t\n"), file("./dot", "d\n"), file("ok", "ok\n"),
			{Name: "l1", Type: tarbuild.TypeLink, Link: "/ok"}, {Name: "l2", Type: tarbuild.TypeLink, Link: "x/../../ok"}}},
		{"names with dot-dot", "", []tarbuild.Member{
			file("ok", "ok\n"), file("../up", "u\n"), file("a/../b", "b\n"), file("c/..", "c\n"), file("x/../../y", "y\n")}},
		// Headers in a row.
		{"pax headers in a row", "", []tarbuild.Member{
			ext('x', recs("path=first", "comment=one")), ext('x', recs("path=second")), file("third", "t\n"), file("ok", "ok\n")}},
		{"gnu long names in a row", "", []tarbuild.Member{
			ext('L', strings.Repeat("a", 150)+"\x00"), ext('L', strings.Repeat("b", 120)+"\x00"),
			raw(tarbuild.Block{Name: "short", Layout: tarbuild.GNU}, "l\n"), file("ok", "ok\n")}},
		{"gnu long link names in a row", "", []tarbuild.Member{
			file("ok", "ok\n"), ext('K', strings.Repeat("c", 150)+"\x00"), ext('K', "ok\x00"),
			raw(tarbuild.Block{Name: "link", Typeflag: tarbuild.TypeSymlink, Linkname: "short", Layout: tarbuild.GNU}, "")}},
		{"pax header then gnu long name", "", []tarbuild.Member{
			ext('x', recs("mtime=1000000000")), ext('L', strings.Repeat("d", 130)+"\x00"),
			raw(tarbuild.Block{Name: "short", Layout: tarbuild.GNU}, "m\n"), file("ok", "ok\n")}},
		{"pax global records", "", []tarbuild.Member{
			ext('g', recs("mtime=1000000000", "comment=g")), file("a", "a\n"), ext('g', recs("mtime=1100000000")), file("b", "b\n"),
			file("c", "c\n", "mtime=1200000000")}},
		// Each global header replaces the records before it; of a key
		// given twice, the first counts.
		{"pax global headers replace each other", "gnu", []tarbuild.Member{
			ext('g', recs("mtime=1000000000", "mtime=1100000000", "uid=1234")), file("a", "a\n"),
			ext('g', recs("gid=77")), file("b", "b\n"), ext('g', ""), file("c", "c\n")}},
		// GNU tar links every link after a global linkpath to it.
		{"pax global linkpath", "gnu", []tarbuild.Member{
			file("f1", "one\n"), file("f2", "two\n"), ext('g', recs("linkpath=f1", "mtime=1000000000")),
			{Name: "s", Type: tarbuild.TypeSymlink, Link: "zz"}, {Name: "h", Type: tarbuild.TypeLink, Link: "f2"},
			file("f3", "three\n")}},
		// An empty one: GNU tar makes an empty target and fails.
		{"pax global linkpath empty", "bsdtar", []tarbuild.Member{
			file("f1", "one\n"), ext('g', recs("linkpath=")),
			{Name: "s", Type: tarbuild.TypeSymlink, Link: "f1"}, {Name: "h", Type: tarbuild.TypeLink, Link: "f1"}}},
		// GNU tar gives every member after a global path that name,
		// "." when it is empty, and fails on a file named "."; bsdtar
		// ignores global headers. So does tarmount where they name
		// members (Go's testdata pax-global-records.tar).
		{"pax global path", "bsdtar", []tarbuild.Member{
			ext('g', recs("path=gp", "mtime=1000000000")), file("f1", "one\n"), file("f2", "two\n"),
			ext('g', recs("GNU.sparse.name=gs", "uid=5")), file("f3", "three\n"),
			ext('g', recs("path=")), file("f4", "four\n")}},
		{"pax global path empty", "bsdtar", []tarbuild.Member{
			file("f0", "zero\n"), ext('g', recs("path=", "mtime=1000000000")), {Name: "d", Type: tarbuild.TypeDir},
			file("f1", "one\n"), {Name: "s", Type: tarbuild.TypeSymlink, Link: "f0"}}},
		// Members again.
		{"duplicate members", "extract", []tarbuild.Member{
			file("a", "one\n"), file("a", "two\n"), {Name: "d", Type: tarbuild.TypeDir}, file("d", "file over an empty dir\n"),
			file("g", "g\n"), {Name: "g", Type: tarbuild.TypeDir, Mode: 0o700}, {Name: "g", Type: tarbuild.TypeDir, Mode: 0o750},
			{Name: "s", Type: tarbuild.TypeSymlink, Link: "a"}, file("s", "over a symlink\n"),
			{Name: "h", Type: tarbuild.TypeLink, Link: "a"}, file("a", "three\n")}},
		{"file over a non-empty directory", "fail", []tarbuild.Member{file("e/f", "f\n"), file("e", "e\n"), file("ok", "ok\n")}},
		// Damage.
		{"a header with a bad checksum", "extract", []tarbuild.Member{file("ok", "ok\n"), badSum(file("lost", "l\n")),
			file("after", "a\n"), badSum(file("lost2", "l\n")), {Raw: bytes.Repeat([]byte("g"), 3*tarbuild.BlockSize)},
			file("last", "z\n")}},
		{"member data cut short", "fail", []tarbuild.Member{file("ok", "ok\n"),
			{Raw: tarbuild.Header(tarbuild.Member{Name: "cut"}, 1<<20)}, {Raw: bytes.Repeat([]byte("c"), 4096)}}},
		{"pax record longer than its header", "fail", []tarbuild.Member{file("ok", "ok\n"), ext('x', "50 path=abc\n"), file("p", "p\n")}},
		{"pax header larger than the archive", "fail", []tarbuild.Member{file("ok", "ok\n"),
			{Raw: tarbuild.Header(tarbuild.Member{Name: "PaxHeaders/x", Type: 'x'}, 1<<30)}, {Raw: []byte(recs("path=" + strings.Repeat("X", 2000)))}}},
	}
	cases = append(cases, crafted{"sparse map of 10000001 entries", "extract", []tarbuild.Member{sparseMany(10_000_001), file("ok", "ok\n")}})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			plain := writeTar(t, filepath.Join(work, "plain.tar"), tc.members...)
			ref := goTestdataRef(t, work, plain)
			// Its times are past what the filesystem under the
			// expected tree holds, which clamps them as they are set;
			// the mount says the archive's.
			ref.clamped = tc.name == outOfRange
			switch {
			case tc.tools == "extract" && ref.dir == "":
				t.Fatal("GNU tar and bsdtar both fail: the archive is not of its class")
			case tc.tools == "fail" && ref.dir != "":
				t.Fatalf("%s extracts it: the archive is not of its class", ref.by)
			case tc.tools == "gnu" && ref.by != "GNU tar", tc.tools == "bsdtar" && ref.by != "bsdtar":
				t.Fatalf("the tree to expect comes from %q: the archive is not of its class", ref.by)
			}
			checkEveryCodec(t, work, plain, ref)
		})
	}
}

// sparseMany is a GNU sparse file (pax format 1.0) whose map has n
// entries: two fragments of a block each that are adjacent, with n-4
// empty entries between them, a third apart, and the empty one at the
// end that GNU tar writes; compacted, it is two fragments.
func sparseMany(n int) tarbuild.Member {
	var m bytes.Buffer
	m.WriteString(strconv.Itoa(n) + "\n0\n512\n")
	for range n - 4 {
		m.WriteString("512\n0\n")
	}
	m.WriteString("512\n512\n4096\n512\n5000\n0\n")
	for m.Len()%tarbuild.BlockSize != 0 {
		m.WriteByte(0)
	}
	for _, c := range "abc" {
		m.Write(bytes.Repeat([]byte{byte(c)}, tarbuild.BlockSize))
	}
	return tarbuild.Member{Name: "GNUSparseFile.0/sparse", Body: m.String(),
		PAX: []string{"GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.name=sparse", "GNU.sparse.realsize=5000"}}
}

// writeTar writes the plain tar of members to path and returns path.
func writeTar(t *testing.T, path string, members ...tarbuild.Member) string {
	t.Helper()
	if err := os.WriteFile(path, tarbuild.Tar(members...), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
