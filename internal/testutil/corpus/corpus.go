// Package corpus makes real directory trees for tests: MakeTree writes a
// tree with the features tar formats disagree on (long and unicode names,
// every kind of link, sparse files, xattrs, special modes, owners,
// sub-second times), and TreeOptionsFor says what a tarbuild.Spec can
// store. tarbuild.Archive packs such a tree with GNU tar, bsdtar or Go's
// archive/tar and a chosen compressor, and tarbuild.Extract unpacks an
// archive with GNU tar to get the reference tree to compare a mount against.
//
// The package owns only the making of test data. It knows nothing of
// tarmount's packages and needs root for owners, devices and setuid bits.
//
// Everything here is deterministic: the same TreeOptions give the same names,
// contents, modes, owners and times on every run.
package corpus

import (
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TreeOptions selects what MakeTree writes. The zero value writes every
// feature; the No* fields drop what a format cannot store.
type TreeOptions struct {
	// NoLongNames keeps every path short enough for ustar: components of at
	// most 100 bytes, paths that split into a 155-byte prefix and a 100-byte
	// name, and link targets of at most 100 bytes. Without it the tree has a
	// 200-byte component, a path over 300 bytes and a symlink target and a
	// hard link over 100 bytes.
	NoLongNames bool
	// NoUnicode keeps names and link targets ASCII (Go's archive/tar
	// refuses anything else in ustar headers).
	NoUnicode bool
	// NoXattrs writes no user.* extended attributes.
	NoXattrs bool
	// NoSubsecond gives every entry a whole-second mtime.
	NoSubsecond bool
	// NoBigIDs keeps uid and gid below 2097152 (7 octal digits, the ustar
	// limit). Without it some entries are owned by 3000000:3000001.
	NoBigIDs bool
	// NoSpecialFiles leaves out the fifo and the character device.
	NoSpecialFiles bool
	// NoSparse leaves out the sparse file.
	NoSparse bool
	// NoBigFiles leaves out the multi-MiB pseudo-random files.
	NoBigFiles bool
	// Many adds that many small files spread over a few hundred
	// directories under PathMany.
	Many int
}

// Well-known paths in a tree made by MakeTree, relative to its root.
const (
	PathReadme     = "README.txt"       // a short text file
	PathEmpty      = "empty.txt"        // an empty file
	PathSparse     = "sparse/holes.bin" // SparseSize bytes: data at 0 and at 5 MiB, holes between and at the end
	PathBig        = "big/words-5m.bin" // BigSize bytes of compressible pseudo-random text
	PathBig2       = "big/words-3m.bin" // Big2Size bytes of the same kind
	PathHardLink   = "hard/orig.txt"    // three names: hard/orig.txt, hard/second.txt, dir/third.txt
	PathSymlinkRel = "links/rel"        // -> ../README.txt
	PathSymlinkAbs = "links/abs"        // -> /nonexistent/tarmount-corpus/target
	PathDangling   = "links/dangling"   // -> missing-file
	PathXattr      = "xattr/file.txt"   // user.* xattrs unless NoXattrs
	PathSetuid     = "special/setuid"   // mode 04755
	PathSetgid     = "special/setgid"   // mode 02755
	PathSticky     = "special/sticky"   // directory, mode 01777
	PathMany       = "many"             // the Many small files, below it
)

// Sizes of the well-known files.
const (
	SparseSize      = 8 << 20
	SparseDataSize  = 64 << 10 // each of the two data regions
	SparseData2At   = 5 << 20
	BigSize         = 5<<20 + 123
	Big2Size        = 3 << 20
	longComponentN  = 200
	ustarNameMax    = 100
	smallComponentN = 40
)

// entryMeta is what MakeTree applies after writing content.
type entryMeta struct {
	path     string // relative, slash-separated
	uid, gid int
	mode     os.FileMode // permission and special bits; 0 keeps the default
	chmod    bool
}

type builder struct {
	t    testing.TB
	root string
	opts TreeOptions
	meta []entryMeta
}

// MakeTree writes the corpus tree into dir (created if missing) according
// to opts. It fails the test with t.Fatalf on any error. It must run as root
// (owners, devices, setuid bits). Safe to call from parallel tests with
// different dirs.
func MakeTree(t testing.TB, dir string, opts TreeOptions) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "corpus.MakeTree needs root (chown, mknod, setuid bits)")
	}
	b := &builder{t: t, root: dir, opts: opts}
	b.mkdir(".", 0o755)
	b.build()
	b.applyMeta()
	b.applyTimes()
}

func (b *builder) abs(rel string) string { return filepath.Join(b.root, filepath.FromSlash(rel)) }

func (b *builder) check(err error) {
	b.t.Helper()
	if err != nil {
		b.t.Fatalf("corpus: %v", err)
	}
}

func (b *builder) mkdir(rel string, perm os.FileMode) {
	b.t.Helper()
	b.check(os.MkdirAll(b.abs(rel), 0o755))
	b.meta = append(b.meta, entryMeta{path: rel, mode: perm, chmod: true})
}

func (b *builder) file(rel string, data []byte, perm os.FileMode) {
	b.t.Helper()
	b.check(os.MkdirAll(filepath.Dir(b.abs(rel)), 0o755))
	b.check(os.WriteFile(b.abs(rel), data, 0o644))
	b.meta = append(b.meta, entryMeta{path: rel, mode: perm, chmod: true})
}

func (b *builder) symlink(target, rel string) {
	b.t.Helper()
	b.check(os.MkdirAll(filepath.Dir(b.abs(rel)), 0o755))
	b.check(os.Symlink(target, b.abs(rel)))
}

func (b *builder) link(oldRel, newRel string) {
	b.t.Helper()
	b.check(os.MkdirAll(filepath.Dir(b.abs(newRel)), 0o755))
	b.check(os.Link(b.abs(oldRel), b.abs(newRel)))
}

func (b *builder) owner(rel string, uid, gid int) {
	b.meta = append(b.meta, entryMeta{path: rel, uid: uid, gid: gid})
}

func (b *builder) xattr(rel, name string, value []byte) {
	b.t.Helper()
	if b.opts.NoXattrs {
		return
	}
	if err := unix.Lsetxattr(b.abs(rel), name, value, 0); err != nil {
		b.t.Fatalf("corpus: setxattr %s on %s: %v (does this filesystem support user xattrs?)", name, rel, err)
	}
}

func (b *builder) build() {
	b.t.Helper()
	b.file(PathReadme, []byte("This tree was made by tarmount's internal/testutil/corpus.\nIt has one of everything.\n"), 0o644)
	b.file(PathEmpty, nil, 0o644)
	b.mkdir("emptydir", 0o755)

	// Nested directories and plain modes.
	b.file("dir/a/b/c/deep.txt", []byte("deep\n"), 0o644)
	b.file("dir/a/b/sibling.txt", []byte("sibling\n"), 0o640)
	b.file("dir/private.txt", []byte("private\n"), 0o600)
	b.file("dir/run.sh", []byte("#!/bin/sh\necho hi\n"), 0o755)
	b.file("dir/readonly.txt", []byte("read only\n"), 0o444)
	b.mkdir("dir/a", 0o755)
	b.mkdir("dir/a/b", 0o750)
	b.mkdir("dir/a/b/c", 0o700)
	b.mkdir("dir/noexec", 0o644)
	b.file("dir/name with spaces.txt", []byte("spaces\n"), 0o644)
	b.file("dir/-leading-dash", []byte("dash\n"), 0o644)
	b.file("dir/back\\slash", []byte("backslash\n"), 0o644)

	// Unicode names.
	if !b.opts.NoUnicode {
		b.file("unicode/café.txt", []byte("café\n"), 0o644)
		b.file("unicode/日本/語.txt", []byte("日本語\n"), 0o644)
		b.file("unicode/😀 emoji.txt", []byte("😀\n"), 0o644)
		b.file("unicode/Ωmega/ü/ñ.txt", []byte("ñ\n"), 0o644)
		b.symlink("../unicode/café.txt", "links/unicode-target")
	}

	// Symlinks.
	b.symlink("../README.txt", PathSymlinkRel)
	b.symlink("/nonexistent/tarmount-corpus/target", PathSymlinkAbs)
	b.symlink("missing-file", PathDangling)
	b.symlink("../dir/a", "links/dirlink")
	b.symlink(".", "links/self")

	// Hard links: a group of three in two directories and a pair.
	b.file(PathHardLink, []byte("hard linked content\n"), 0o644)
	b.link(PathHardLink, "hard/second.txt")
	b.link(PathHardLink, "dir/third.txt")
	b.file("hard/pair-a", []byte("pair\n"), 0o600)
	b.link("hard/pair-a", "hard/pair-b")
	b.file("hard/empty-a", nil, 0o644)
	b.link("hard/empty-a", "hard/empty-b")

	b.names()

	// Special modes.
	b.file(PathSetuid, []byte("#!/bin/sh\n"), 0o4755)
	b.file(PathSetgid, []byte("#!/bin/sh\n"), 0o2755)
	b.file("special/setuid-setgid", []byte("both\n"), 0o6750)
	b.mkdir(PathSticky, 0o1777)
	b.mkdir("special/setgid-dir", 0o2775)
	b.file("special/setgid-dir/inherits.txt", []byte("x\n"), 0o664)
	if !b.opts.NoSpecialFiles {
		b.check(unix.Mkfifo(b.abs("special/fifo"), 0o644))
		b.meta = append(b.meta, entryMeta{path: "special/fifo", mode: 0o640, chmod: true})
		b.check(unix.Mknod(b.abs("special/null"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))))
		b.meta = append(b.meta, entryMeta{path: "special/null", mode: 0o666, chmod: true})
	}

	// Owners, applied before modes (chown clears setuid and setgid).
	b.file("owners/user1000.txt", []byte("1000\n"), 0o644)
	b.owner("owners/user1000.txt", 1000, 1000)
	b.file("owners/nobody.txt", []byte("nobody\n"), 0o644)
	b.owner("owners/nobody.txt", 65534, 65534)
	b.file("owners/mixed.txt", []byte("mixed\n"), 0o640)
	b.owner("owners/mixed.txt", 4242, 100)
	b.mkdir("owners/dir1000", 0o755)
	b.owner("owners/dir1000", 1000, 1000)
	b.symlink("user1000.txt", "owners/link1000")
	b.owner("owners/link1000", 1000, 1001)
	b.owner(PathSetuid, 1000, 1000)
	b.owner(PathSetgid, 1000, 1000)
	if !b.opts.NoBigIDs {
		b.file("owners/bigid.txt", []byte("big ids\n"), 0o644)
		b.owner("owners/bigid.txt", 3000000, 3000001)
	}

	// Extended attributes on a file and a directory.
	if !b.opts.NoXattrs {
		b.file(PathXattr, []byte("with xattrs\n"), 0o644)
		b.xattr(PathXattr, "user.comment", []byte("hello xattr"))
		b.xattr(PathXattr, "user.mime_type", []byte("text/plain"))
		b.xattr(PathXattr, "user.unicode", []byte("日本語 é"))
		b.mkdir("xattr/dir", 0o755)
		b.xattr("xattr/dir", "user.dir", []byte("on a directory"))
		b.file("xattr/long-value.txt", []byte("long value\n"), 0o644)
		b.xattr("xattr/long-value.txt", "user.long", []byte(strings.Repeat("0123456789abcdef", 64)))
		b.link(PathXattr, "xattr/file-link.txt")
	}

	if !b.opts.NoSparse {
		b.sparse()
	}
	if !b.opts.NoBigFiles {
		b.file(PathBig, words(1, BigSize), 0o644)
		b.file(PathBig2, words(2, Big2Size), 0o600)
	}
	if b.opts.Many > 0 {
		b.many(b.opts.Many)
	}
}

// names writes the long-name part of the tree.
func (b *builder) names() {
	b.t.Helper()
	if b.opts.NoLongNames {
		// Components of 40 bytes, a path of about 200 bytes: still needs
		// the ustar prefix field, but fits it.
		c := strings.Repeat("m", smallComponentN)
		rel := "names/" + strings.Join([]string{c + "1", c + "2", c + "3", c + "4"}, "/") + "/" + strings.Repeat("n", 30) + ".txt"
		b.file(rel, []byte("medium\n"), 0o644)
		b.file("names/"+strings.Repeat("x", 90), []byte("ninety\n"), 0o644)
		return
	}
	long := strings.Repeat("L", longComponentN)
	b.file("names/"+long+".txt", []byte("200-byte component\n"), 0o644)
	deep := "names/" + long[:150] + "/" + strings.Repeat("D", 100) + "/" + strings.Repeat("E", 60) + "/" + strings.Repeat("F", 80) + ".txt"
	b.file(deep, []byte("path over 300 bytes\n"), 0o644)
	// A symlink whose target is over 100 bytes, and a hard link to a long path.
	b.symlink(strings.Repeat("../", 1)+"names/"+long+".txt", "links/long-target")
	b.link(deep, "names/short-hardlink-to-long")
	b.link("names/"+long+".txt", "names/"+strings.Repeat("H", 120)+".hardlink")
}

func (b *builder) sparse() {
	b.t.Helper()
	b.check(os.MkdirAll(b.abs("sparse"), 0o755))
	f, err := os.Create(b.abs(PathSparse))
	b.check(err)
	defer f.Close()
	_, err = f.WriteAt(words(3, SparseDataSize), 0)
	b.check(err)
	_, err = f.WriteAt(words(4, SparseDataSize), SparseData2At)
	b.check(err)
	b.check(f.Truncate(SparseSize))
	b.check(f.Close())
	b.meta = append(b.meta, entryMeta{path: PathSparse, mode: 0o644, chmod: true})
}

func (b *builder) many(n int) {
	b.t.Helper()
	dirs := n / 40
	if dirs < 1 {
		dirs = 1
	}
	if dirs > 300 {
		dirs = 300
	}
	for i := range n {
		d := fmt.Sprintf("%s/d%03d/s%d", PathMany, i%dirs, (i/dirs)%3)
		rel := fmt.Sprintf("%s/f%06d.txt", d, i)
		b.check(os.MkdirAll(b.abs(d), 0o755))
		b.check(os.WriteFile(b.abs(rel), fmt.Appendf(nil, "small file %d\n%s", i, strings.Repeat("z", i%97)), 0o644))
	}
}

// words returns n bytes of pseudo-random text drawn from a small vocabulary:
// deterministic for a seed, and compressible about 2-3x like real data.
func words(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 0x7a72_6d6f_756e_74))
	vocab := make([]string, 512)
	const letters = "abcdefghijklmnopqrstuvwxyz"
	for i := range vocab {
		w := make([]byte, 2+r.IntN(9))
		for j := range w {
			w[j] = letters[r.IntN(len(letters))]
		}
		vocab[i] = string(w)
	}
	out := make([]byte, 0, n+16)
	col := 0
	for len(out) < n {
		if r.IntN(16) == 0 {
			out = fmt.Appendf(out, "%08x", r.Uint32())
		} else {
			out = append(out, vocab[r.IntN(len(vocab))]...)
		}
		col++
		if col%12 == 0 {
			out = append(out, '\n')
		} else {
			out = append(out, ' ')
		}
	}
	return out[:n]
}

// applyMeta applies owners, then modes (chown clears setuid/setgid).
func (b *builder) applyMeta() {
	b.t.Helper()
	for _, m := range b.meta {
		if m.uid != 0 || m.gid != 0 {
			b.check(os.Lchown(b.abs(m.path), m.uid, m.gid))
		}
	}
	for _, m := range b.meta {
		if m.chmod {
			b.check(unix.Chmod(b.abs(m.path), uint32(m.mode.Perm())|specialBits(m.mode)))
		}
	}
}

// specialBits maps the Go-style 0o4000/0o2000/0o1000 bits (as written in
// the literals above) or os.ModeSetuid etc. to the unix bits.
func specialBits(m os.FileMode) uint32 {
	var out uint32
	if m&0o4000 != 0 || m&os.ModeSetuid != 0 {
		out |= unix.S_ISUID
	}
	if m&0o2000 != 0 || m&os.ModeSetgid != 0 {
		out |= unix.S_ISGID
	}
	if m&0o1000 != 0 || m&os.ModeSticky != 0 {
		out |= unix.S_ISVTX
	}
	return out
}

// applyTimes gives every entry a deterministic mtime (and atime): files and
// links first, then directories from the deepest up, so that nothing touches
// a directory after its time is set.
func (b *builder) applyTimes() {
	b.t.Helper()
	var dirs, others []string
	err := filepath.WalkDir(b.root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(b.root, p)
		if err != nil {
			return err
		}
		if d.IsDir() {
			dirs = append(dirs, rel)
		} else {
			others = append(others, rel)
		}
		return nil
	})
	b.check(err)
	sort.Slice(dirs, func(i, j int) bool {
		di, dj := strings.Count(dirs[i], string(filepath.Separator)), strings.Count(dirs[j], string(filepath.Separator))
		if dirs[i] == "." {
			di = -1
		}
		if dirs[j] == "." {
			dj = -1
		}
		if di != dj {
			return di > dj
		}
		return dirs[i] < dirs[j]
	})
	for _, rel := range append(others, dirs...) {
		ts := b.mtime(filepath.ToSlash(rel))
		spec := unix.NsecToTimespec(ts.UnixNano())
		err := unix.UtimesNanoAt(unix.AT_FDCWD, b.abs(rel), []unix.Timespec{spec, spec}, unix.AT_SYMLINK_NOFOLLOW)
		if err != nil {
			b.t.Fatalf("corpus: set times of %s: %v", rel, err)
		}
	}
}

// mtime is a deterministic time for a path: spread over 1995-2019 (in the
// past, or GNU tar warns on extraction), with
// sub-second parts unless NoSubsecond. Some entries get fixed times (the
// epoch, a whole second) to cover edge cases.
func (b *builder) mtime(rel string) time.Time {
	switch rel {
	case PathEmpty:
		return time.Unix(0, 0)
	case PathReadme:
		return time.Unix(1600000000, 0)
	}
	h := fnv.New64a()
	h.Write([]byte(rel))
	v := h.Sum64()
	sec := int64(788918400 + v%(25*365*24*3600))
	var nsec int64
	if !b.opts.NoSubsecond {
		nsec = int64((v >> 32) % 1e9)
	}
	return time.Unix(sec, nsec)
}

// TreeOptionsFor returns the TreeOptions that drop what spec cannot store,
// as found by this package's tests with GNU tar 1.34, bsdtar 3.6 and Go 1.26
// (see TestRoundTrip, which then compares exactly):
//
//   - gnu: no xattrs (bsdtar drops them silently, Go refuses them, and GNU
//     tar given --xattrs silently writes posix instead, so Archive does not
//     pass it) and whole-second mtimes. Long names and links (././@LongLink),
//     big ids (base-256) and devices are fine. GNU tar stores the sparse
//     file as old GNU sparse ('S'); bsdtar and Go store its holes as data.
//   - ustar: as gnu, and no long names (ustar splits up to 155+100 bytes),
//     no ids of 2097152 or more; GNU tar refuses --sparse, so the sparse
//     file is stored whole; Go refuses non-ASCII names and link targets.
//   - pax/posix: everything; GNU tar and bsdtar store the sparse file as
//     GNU.sparse 1.0, Go as data. GNU tar's pax headers carry atime and
//     ctime, so its archives differ from run to run; Go's do not.
func TreeOptionsFor(spec tarbuild.Spec) TreeOptions {
	var o TreeOptions
	switch spec.Format {
	case "gnu":
		o.NoXattrs = true
		o.NoSubsecond = true
	case "ustar":
		o.NoXattrs = true
		o.NoSubsecond = true
		o.NoLongNames = true
		o.NoBigIDs = true
		o.NoUnicode = spec.Tool == "go"
	}
	return o
}
