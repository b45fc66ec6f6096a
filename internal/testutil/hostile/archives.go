// Package hostile builds archives that attack whoever reads them, for
// tests: members whose names and links try to reach outside the directory
// they are extracted into (PathCases), and archives that are truncated,
// damaged, absurd or merely extreme (ArchiveCases). Each case says what a
// safe reader does with it, so that the same table drives the package
// tests (materialize, index) and the mount-level tests of the binary.
//
// Archives are written header block by header block with tarbuild's raw
// members, so that a case can hold what archive/tar refuses to write
// (negative sizes, bad checksums, names with NULs). The package knows
// nothing of tarmount's packages.
package hostile

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// ArchiveCase is an archive that is damaged, truncated, absurd or merely
// extreme, and what a reader must make of it: a clear error, or the
// content of its files.
type ArchiveCase struct {
	Name string
	Data []byte
	// Err is a substring of the error (matched without case) that
	// reading the archive must end with; "" when the archive is
	// readable.
	Err string
	// Files are regular files of a readable archive and their content.
	Files map[string]string
	// Refused are names in a readable archive that extraction refuses
	// (and ls lists).
	Refused []string
	// LeftOut says that reading the archive leaves members out with a
	// warning (a damaged header skipped): extraction writes Files, then
	// fails (exit 1), as GNU tar does.
	LeftOut bool
	// Big says the case is slow to extract or list entry by entry
	// (deep trees): tests that run many tools on it may skip parts.
	Big bool
}

// Sample members: small text files around a 512 KiB pseudo-random one
// (stored, not compressed, by every codec), so that the middle of any
// compressed form of Sample lies inside dir/big.
var (
	sampleA   = strings.Repeat("alpha ", 200)
	sampleZ   = "zulu\n"
	sampleBig = func() string {
		r := rand.New(rand.NewPCG(1, 2))
		b := make([]byte, 512<<10)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return string(b)
	}()
)

// Sample is a small readable archive (uncompressed) and where its
// members lie.
func Sample() ([]byte, []tarbuild.Pos) {
	return tarbuild.TarPos(file("a.txt", sampleA), dir("dir/"), file("dir/big", sampleBig), file("z.txt", sampleZ))
}

// SampleFiles is the content of Sample's files.
func SampleFiles() map[string]string {
	return map[string]string{"a.txt": sampleA, "dir/big": sampleBig, "z.txt": sampleZ}
}

// withTail is Sample's members, then ms, as one archive.
func withTail(ms ...tarbuild.Member) []byte {
	return tarbuild.Tar(append([]tarbuild.Member{file("a.txt", sampleA), dir("dir/"), file("dir/big", sampleBig)}, ms...)...)
}

// flip returns b with byte i inverted.
func flip(b []byte, i int) []byte {
	c := bytes.Clone(b)
	c[i] ^= 0xff
	return c
}

// ArchiveCases returns the hostile-archive cases.
func ArchiveCases() []ArchiveCase {
	tarData, pos := Sample()
	gz := tarbuild.Gzip(tarData)
	zst, frames := tarbuild.ZstdFrames(tarData, 64<<10)
	lz := tarbuild.LZ4(tarData, false)
	lzSums := tarbuild.LZ4(tarData, true)
	files := SampleFiles()
	small := map[string]string{"a.txt": sampleA}
	var cases []ArchiveCase
	add := func(c ArchiveCase) { cases = append(cases, c) }

	// --- Truncated. ---
	add(ArchiveCase{Name: "truncated mid-header", Data: tarData[:pos[2].Header+100], Err: "truncated"})
	add(ArchiveCase{Name: "truncated mid-data", Data: tarData[:pos[2].Data+1000], Err: "truncated"})
	add(ArchiveCase{Name: "truncated mid-gzip-member", Data: gz[:len(gz)/2], Err: "truncated"})
	add(ArchiveCase{Name: "gzip trailer missing", Data: gz[:len(gz)-8], Err: "truncated"})
	add(ArchiveCase{Name: "truncated mid-zstd-frame", Data: zst[:(frames[2]+frames[3])/2], Err: "cut short"})
	add(ArchiveCase{Name: "truncated mid-lz4-frame", Data: lz[:len(lz)/2], Err: "cut short"})
	add(ArchiveCase{Name: "lz4 end mark missing", Data: lz[:len(lz)-8], Err: "cut short"})

	// --- Headers. ---
	add(ArchiveCase{Name: "bad checksum in the first header", Data: flip(tarData, 10), Err: "not a tar archive"})
	// Skipped, with its data, up to the next header, as GNU tar and
	// bsdtar do; extraction then fails for the member it left out.
	add(ArchiveCase{Name: "bad checksum in a later header", Data: flip(tarData, pos[2].Header+10),
		Files: map[string]string{"a.txt": sampleA, "z.txt": sampleZ}, Refused: []string{"dir/big"}, LeftOut: true})
	add(ArchiveCase{Name: "negative size", Err: "negative size", Data: withTail(tarbuild.Member{Name: "neg", Body: "x",
		Tweak: func(b []byte) { tarbuild.PutNumber(b[124:136], -512) }})})
	add(ArchiveCase{Name: "size of 2^62", Err: "out of range", Data: withTail(tarbuild.Member{Name: "huge",
		Tweak: func(b []byte) { tarbuild.PutNumber(b[124:136], 1<<62) }})})
	add(ArchiveCase{Name: "size of MaxInt64", Err: "out of range", Data: withTail(tarbuild.Member{Name: "huge",
		Tweak: func(b []byte) { tarbuild.PutNumber(b[124:136], math.MaxInt64) }})})
	add(ArchiveCase{Name: "size past the end", Err: "truncated", Data: withTail(tarbuild.Member{Name: "past", Body: "short",
		Tweak: func(b []byte) { tarbuild.PutNumber(b[124:136], 10<<20) }})})
	add(ArchiveCase{Name: "size not a number", Err: "size", Data: withTail(tarbuild.Member{Name: "nan",
		Tweak: func(b []byte) { copy(b[124:136], "0000012x4\x00\x00\x00") }})})
	add(ArchiveCase{Name: "lone zero block then a member", Err: "zero block", Data: func() []byte {
		b := bytes.Clone(tarData[:pos[3].Header])
		b = append(b, make([]byte, tarbuild.BlockSize)...)
		return append(b, tarbuild.Tar(file("after", "x"))...)
	}()})

	// --- Pax records. ---
	add(ArchiveCase{Name: "pax record length past the header", Err: "pax",
		Data: withTail(tarbuild.Member{Raw: rawPAX("50 path=abc\n")}, file("p", "x"))})
	add(ArchiveCase{Name: "pax record without a key", Err: "pax",
		Data: withTail(tarbuild.Member{Raw: rawPAX(tarbuild.PAXRecord("=abc"))}, file("p", "x"))})
	add(ArchiveCase{Name: "pax header claims 100 MiB", Err: "limit",
		Data: withTail(tarbuild.Member{Raw: tarbuild.Header(tarbuild.Member{Name: "PaxHeaders/x", Type: 'x'}, 100<<20)})})
	add(ArchiveCase{Name: "pax header claims 15 MiB and ends", Err: "truncated",
		Data: append(withTail()[:pos[3].Header], tarbuild.Header(tarbuild.Member{Name: "PaxHeaders/x", Type: 'x'}, 15<<20)...)})
	add(ArchiveCase{Name: "pax record of 15 MiB", Files: small,
		Data: tarbuild.Tar(tarbuild.Member{Name: "big-comment", Body: "c", PAX: []string{"comment=" + strings.Repeat("c", 15<<20)}}, file("a.txt", sampleA))})
	// A pax time that does not parse is ignored, as GNU tar does.
	add(ArchiveCase{Name: "pax mtime garbage", Files: map[string]string{"a.txt": sampleA, "dir/big": sampleBig, "t": "tee"},
		Data: withTail(tarbuild.Member{Name: "t", Body: "tee", PAX: []string{"mtime=12a"}})})

	// --- Sparse maps. ---
	add(ArchiveCase{Name: "sparse chunks overlap", Err: "overlap",
		Data: withTail(tarbuild.Member{Name: "s", Body: strings.Repeat("s", 20), PAX: []string{"GNU.sparse.size=100", "GNU.sparse.map=0,10,5,10"}})})
	add(ArchiveCase{Name: "sparse offset overflows int64", Err: "sparse",
		Data: withTail(tarbuild.Member{Name: "s", Body: strings.Repeat("s", 100),
			PAX: []string{fmt.Sprintf("GNU.sparse.size=%d", int64(math.MaxInt64)), fmt.Sprintf("GNU.sparse.map=%d,100", int64(math.MaxInt64-10))}})})
	add(ArchiveCase{Name: "sparse length overflows int64", Err: "sparse",
		Data: withTail(tarbuild.Member{Name: "s", Body: strings.Repeat("s", 10),
			PAX: []string{"GNU.sparse.size=100", fmt.Sprintf("GNU.sparse.map=0,10,20,%d", int64(math.MaxInt64))}})})
	add(ArchiveCase{Name: "sparse negative offset", Err: "sparse",
		Data: withTail(tarbuild.Member{Name: "s", Body: strings.Repeat("s", 10), PAX: []string{"GNU.sparse.size=100", "GNU.sparse.map=-5,10"}})})
	add(ArchiveCase{Name: "sparse file of 1 TiB", Files: map[string]string{"a.txt": sampleA, "z.txt": sampleZ},
		Data: tarbuild.Tar(file("a.txt", sampleA), tarbuild.Member{Name: "tib", Body: "end",
			PAX: []string{fmt.Sprintf("GNU.sparse.size=%d", int64(1)<<40), fmt.Sprintf("GNU.sparse.map=%d,3", int64(1)<<40-3)}},
			file("z.txt", sampleZ))})

	// --- Names and nesting. ---
	add(ArchiveCase{Name: "name of 64 KiB in one component", Files: small, Refused: []string{strings.Repeat("n", 64<<10)},
		Data: tarbuild.Tar(file("a.txt", sampleA), file(strings.Repeat("n", 64<<10), "long"))})
	// Deeper than the directories extraction may keep open (a quarter
	// of RLIMIT_NOFILE): it opens them again as it needs them.
	add(ArchiveCase{Name: "name of 64 KiB in 32768 components", Files: small, Big: true,
		Data: tarbuild.Tar(file("a.txt", sampleA), file(strings.Repeat("a/", 32767)+"f", "deep"))})
	add(ArchiveCase{Name: "name with a NUL", Files: small, Refused: []string{"nul\x00name"},
		Data: tarbuild.Tar(file("a.txt", sampleA), tarbuild.Member{Name: "x", Body: "nul", PAX: []string{"path=nul\x00name"}})})
	deep := []tarbuild.Member{file("a.txt", sampleA)}
	for i := 1; i <= 10000; i++ {
		deep = append(deep, dir(strings.Repeat("d/", i)))
	}
	deep = append(deep, file(strings.Repeat("d/", 10000)+"bottom", "at the bottom"))
	// 100 MB of tar (each member names its whole path), 300 kB gzipped.
	add(ArchiveCase{Name: "10000 levels of directories", Files: small, Big: true, Data: tarbuild.Gzip(tarbuild.Tar(deep...))})

	// --- Readable oddities. ---
	add(ArchiveCase{Name: "zero-length file", Files: map[string]string{"empty": "", "a.txt": sampleA},
		Data: tarbuild.Tar(file("empty", ""), file("a.txt", sampleA))})
	garbage := make([]byte, 4096)
	for i := range garbage {
		garbage[i] = byte(i*7 + 3)
	}
	add(ArchiveCase{Name: "garbage after the end blocks", Files: files, Data: append(bytes.Clone(tarData), garbage...)})
	add(ArchiveCase{Name: "garbage after the end blocks, gzipped", Files: files, Data: tarbuild.Gzip(append(bytes.Clone(tarData), garbage...))})
	add(ArchiveCase{Name: "garbage after the gzip member", Files: files, Data: append(bytes.Clone(gz), garbage...)})

	// --- Damaged compressed streams. ---
	add(ArchiveCase{Name: "bad gzip crc", Data: flip(gz, len(gz)-6), Err: "checksum"})
	add(ArchiveCase{Name: "bad gzip size", Data: flip(gz, len(gz)-2), Err: "checksum"})
	add(ArchiveCase{Name: "bad gzip method", Data: func() []byte { b := bytes.Clone(gz); b[2] = 7; return b }(), Err: "gzip"})
	add(ArchiveCase{Name: "corrupt zstd frame", Data: flip(zst, frames[1]+20), Err: "zstd"})
	add(ArchiveCase{Name: "corrupt zstd frame header", Data: flip(zst, frames[2]+4), Err: "zstd"})
	add(ArchiveCase{Name: "corrupt lz4 block", Data: flip(lz, len(lz)/2), Err: "checksum"})
	add(ArchiveCase{Name: "corrupt lz4 block with block checksums", Data: flip(lzSums, len(lzSums)/2), Err: "checksum"})
	add(ArchiveCase{Name: "corrupt lz4 frame header", Data: flip(lz, 5), Err: "lz4"})
	return cases
}

// rawPAX is a pax extended header holding records as they are.
func rawPAX(records string) []byte {
	var b bytes.Buffer
	b.Write(tarbuild.Header(tarbuild.Member{Name: "PaxHeaders/x", Type: 'x'}, int64(len(records))))
	b.WriteString(records)
	b.Write(make([]byte, tarbuild.Padded(len(records))-len(records)))
	return b.Bytes()
}
