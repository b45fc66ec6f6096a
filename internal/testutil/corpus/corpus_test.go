package corpus

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/internal/testutil/treecmp"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

func requireTools(t *testing.T, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Fatalf("%s not found: run scripts/deps.sh", n)
		}
	}
}

func toolsFor(spec tarbuild.Spec) []string {
	names := []string{"tar"}
	switch spec.Tool {
	case "bsdtar":
		names = append(names, "bsdtar")
	}
	switch spec.Codec {
	case "gzip":
		names = append(names, "gzip")
	case "pigz":
		names = append(names, "pigz")
	}
	return names
}

// trees builds each distinct source tree once per test and shares it
// between parallel subtests, which only read it.
type trees struct {
	base string // made by the parent test, removed after all subtests
	mu   sync.Mutex
	dirs map[TreeOptions]*treeOnce
}

type treeOnce struct {
	once sync.Once
	dir  string
	ok   bool
}

func newTrees(t *testing.T) *trees {
	return &trees{base: t.TempDir(), dirs: map[TreeOptions]*treeOnce{}}
}

func (ts *trees) get(t *testing.T, opts TreeOptions) string {
	t.Helper()
	ts.mu.Lock()
	e := ts.dirs[opts]
	if e == nil {
		e = &treeOnce{dir: filepath.Join(ts.base, fmt.Sprintf("src%d", len(ts.dirs)))}
		ts.dirs[opts] = e
	}
	ts.mu.Unlock()
	e.once.Do(func() {
		MakeTree(t, e.dir, opts)
		e.ok = true
	})
	if !e.ok {
		t.Fatalf("building the source tree failed in another subtest")
	}
	return e.dir
}

// TestRoundTrip builds each archive from its source tree, extracts it with
// GNU tar and compares the result with the source: this checks the corpus,
// the tools' flags and treecmp together. Each spec uses TreeOptionsFor, so
// the comparison is exact (ns mtimes, owners, modes, xattrs, links).
func TestRoundTrip(t *testing.T) {
	var specs []tarbuild.Spec
	for _, tool := range tarbuild.Tools {
		for _, f := range []string{"gnu", "posix", "ustar"} {
			specs = append(specs, tarbuild.Spec{Tool: tool, Format: f, Codec: "none"})
		}
	}
	specs = append(specs,
		tarbuild.Spec{Tool: "gnutar", Format: "pax", Codec: "none"},
		tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"},
		tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "pigz"},
		tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip-multi"},
		tarbuild.Spec{Tool: "bsdtar", Format: "pax", Codec: "pigz"},
		tarbuild.Spec{Tool: "go", Format: "pax", Codec: "gzip-multi"},
		tarbuild.Spec{Tool: "go", Format: "gnu", Codec: "gzip"},
	)
	ts := newTrees(t)
	for _, spec := range specs {
		t.Run(spec.String(), func(t *testing.T) {
			t.Parallel()
			requireTools(t, toolsFor(spec)...)
			opts := TreeOptionsFor(spec)
			src := ts.get(t, opts)
			work := t.TempDir()
			arch := filepath.Join(work, "a"+spec.Ext())
			tarbuild.Archive(t, src, arch, spec)
			checkFormat(t, arch, spec)
			dst := filepath.Join(work, "x")
			tarbuild.Extract(t, arch, dst)
			treecmp.Compare(t, src, dst, treecmp.Options{MaxErrors: 40})
		})
	}
}

// TestManyFiles round-trips a tree with 10k small files.
func TestManyFiles(t *testing.T) {
	if testing.Short() {
		t.Skip("slow")
	}
	requireTools(t, "tar", "gzip")
	t.Parallel()
	src := filepath.Join(t.TempDir(), "src")
	MakeTree(t, src, TreeOptions{Many: 10000, NoBigFiles: true, NoSparse: true})
	n := 0
	filepath.WalkDir(filepath.Join(src, PathMany), func(p string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return nil
	})
	if n != 10000 {
		t.Fatalf("got %d files under %s, want 10000", n, PathMany)
	}
	spec := tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}
	arch := filepath.Join(t.TempDir(), "many.tar.gz")
	tarbuild.Archive(t, src, arch, spec)
	dst := filepath.Join(t.TempDir(), "x")
	tarbuild.Extract(t, arch, dst)
	treecmp.Compare(t, src, dst, treecmp.Options{MaxErrors: 40})
}

// checkFormat scans the raw headers of the archive and checks that the tool
// wrote the format asked for (GNU tar, for one, silently switches to posix
// when given --xattrs). Go's archive/tar cannot tell: it reports bsdtar's
// space-terminated numbers as FormatUnknown.
func checkFormat(t *testing.T, path string, spec tarbuild.Spec) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var r io.Reader = bufio.NewReader(f)
	if spec.Codec != "none" {
		zr, err := gzip.NewReader(r)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		r = zr
	}
	kinds, err := scanHeaders(r)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	t.Logf("%s: header kinds %v", spec, kinds)
	switch spec.Format {
	case "gnu":
		if !kinds["gnu-magic"] || kinds["ustar-magic"] || kinds["pax"] {
			t.Errorf("%s: header kinds %v, want GNU magic and no pax headers", path, kinds)
		}
	case "ustar":
		if kinds["gnu-magic"] || kinds["pax"] || kinds["gnu-long"] || kinds["gnu-sparse"] {
			t.Errorf("%s: header kinds %v, want plain ustar", path, kinds)
		}
	case "pax", "posix":
		if kinds["gnu-magic"] || !kinds["pax"] || kinds["gnu-long"] {
			t.Errorf("%s: header kinds %v, want ustar magic and pax headers", path, kinds)
		}
	}
}

// scanHeaders walks a tar stream block by block and reports which kinds of
// header it holds: "ustar-magic", "gnu-magic", "pax" (x or g), "gnu-long"
// (L or K), "gnu-sparse" (S).
func scanHeaders(r io.Reader) (map[string]bool, error) {
	kinds := map[string]bool{}
	var blk [512]byte
	for {
		if _, err := io.ReadFull(r, blk[:]); err != nil {
			return nil, fmt.Errorf("read header: %w", err)
		}
		if blk == [512]byte{} {
			return kinds, nil
		}
		switch string(blk[257:265]) {
		case "ustar\x0000":
			kinds["ustar-magic"] = true
		case "ustar  \x00":
			kinds["gnu-magic"] = true
		default:
			return nil, fmt.Errorf("unknown magic %q", blk[257:265])
		}
		switch blk[156] {
		case 'x', 'g':
			kinds["pax"] = true
		case 'L', 'K':
			kinds["gnu-long"] = true
		case 'S':
			kinds["gnu-sparse"] = true
		}
		size, err := parseSize(blk[124:136])
		if err != nil {
			return nil, err
		}
		if blk[156] == 'S' && blk[482] != 0 {
			// Extension blocks of the old GNU sparse map come first.
			for {
				if _, err := io.ReadFull(r, blk[:]); err != nil {
					return nil, err
				}
				if blk[504] == 0 {
					break
				}
			}
		}
		switch blk[156] {
		case '1', '2', '3', '4', '5', '6':
			size = 0 // no data, whatever the field says
		}
		if _, err := io.CopyN(io.Discard, r, (size+511)/512*512); err != nil {
			return nil, fmt.Errorf("skip data: %w", err)
		}
	}
}

func parseSize(b []byte) (int64, error) {
	if b[0]&0x80 != 0 { // base-256
		var n int64
		for i, c := range b {
			if i == 0 {
				c &= 0x7f
			}
			n = n<<8 | int64(c)
		}
		return n, nil
	}
	s := strings.Trim(string(b), " \x00")
	var n int64
	for _, c := range s {
		if c < '0' || c > '7' {
			return 0, fmt.Errorf("bad size field %q", b)
		}
		n = n*8 + int64(c-'0')
	}
	return n, nil
}

func TestMakeTreeDeterministic(t *testing.T) {
	t.Parallel()
	a, b := filepath.Join(t.TempDir(), "a"), filepath.Join(t.TempDir(), "b")
	MakeTree(t, a, TreeOptions{Many: 50})
	MakeTree(t, b, TreeOptions{Many: 50})
	treecmp.Compare(t, a, b, treecmp.Options{})
}

func TestMakeTreeFeatures(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "t")
	MakeTree(t, dir, TreeOptions{})
	p := func(rel string) string { return filepath.Join(dir, filepath.FromSlash(rel)) }

	// Sparse file: right size, data where promised, holes that use no space.
	var st unix.Stat_t
	if err := unix.Stat(p(PathSparse), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size != SparseSize {
		t.Errorf("%s: size got %d, want %d", PathSparse, st.Size, SparseSize)
	}
	if alloc := st.Blocks * 512; alloc >= SparseSize/2 {
		t.Errorf("%s: allocated got %d bytes, want well under %d (holes)", PathSparse, alloc, SparseSize)
	}
	data, err := os.ReadFile(p(PathSparse))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data[:SparseDataSize], words(3, SparseDataSize)) ||
		!bytes.Equal(data[SparseData2At:SparseData2At+SparseDataSize], words(4, SparseDataSize)) {
		t.Errorf("%s: data regions differ from words(3) and words(4)", PathSparse)
	}
	if bytes.ContainsFunc(data[SparseDataSize:SparseData2At], func(r rune) bool { return r != 0 }) ||
		bytes.ContainsFunc(data[SparseData2At+SparseDataSize:], func(r rune) bool { return r != 0 }) {
		t.Errorf("%s: holes are not zero", PathSparse)
	}

	// Big files are compressible, but not trivially.
	big, err := os.ReadFile(p(PathBig))
	if err != nil {
		t.Fatal(err)
	}
	if len(big) != BigSize {
		t.Errorf("%s: size got %d, want %d", PathBig, len(big), BigSize)
	}
	var zbuf bytes.Buffer
	zw := gzip.NewWriter(&zbuf)
	zw.Write(big[:1<<20])
	zw.Close()
	if ratio := float64(1<<20) / float64(zbuf.Len()); ratio < 1.5 || ratio > 6 {
		t.Errorf("%s: gzip ratio got %.2f, want between 1.5 and 6", PathBig, ratio)
	}

	// Hard links: three names for one inode.
	var a, b, c unix.Stat_t
	unix.Stat(p(PathHardLink), &a)
	unix.Stat(p("hard/second.txt"), &b)
	unix.Stat(p("dir/third.txt"), &c)
	if a.Nlink != 3 || a.Ino != b.Ino || a.Ino != c.Ino {
		t.Errorf("%s: nlink %d, inodes %d %d %d, want 3 names of one inode", PathHardLink, a.Nlink, a.Ino, b.Ino, c.Ino)
	}

	// Special modes survive chown.
	for rel, want := range map[string]uint32{PathSetuid: unix.S_ISUID | 0o755, PathSetgid: unix.S_ISGID | 0o755, PathSticky: unix.S_ISVTX | 0o777} {
		if err := unix.Lstat(p(rel), &st); err != nil {
			t.Fatal(err)
		}
		if got := st.Mode & 0o7777; got != want {
			t.Errorf("%s: mode got %04o, want %04o", rel, got, want)
		}
	}
	if err := unix.Lstat(p(PathSetuid), &st); err == nil && (st.Uid != 1000 || st.Gid != 1000) {
		t.Errorf("%s: owner got %d:%d, want 1000:1000", PathSetuid, st.Uid, st.Gid)
	}

	// Names: a 200-byte component and a path over 300 bytes.
	var longComp, longPath bool
	filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if len(d.Name()) >= 200 {
			longComp = true
		}
		if len(rel) > 300 {
			longPath = true
		}
		return nil
	})
	if !longComp || !longPath {
		t.Errorf("long names: got 200-byte component %v, path over 300 bytes %v, want both", longComp, longPath)
	}

	// Xattrs and sub-second times.
	buf := make([]byte, 64)
	n, err := unix.Lgetxattr(p(PathXattr), "user.comment", buf)
	if err != nil || string(buf[:n]) != "hello xattr" {
		t.Errorf("%s: user.comment got %q, %v, want %q", PathXattr, buf[:max(n, 0)], err, "hello xattr")
	}
	unix.Lstat(p(PathSymlinkRel), &st)
	if st.Mtim.Nsec == 0 {
		t.Errorf("%s: mtime has no sub-second part", PathSymlinkRel)
	}
	if target, _ := os.Readlink(p(PathDangling)); target != "missing-file" {
		t.Errorf("%s: target got %q, want %q", PathDangling, target, "missing-file")
	}
}

func TestTreeOptionsDropFeatures(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "t")
	MakeTree(t, dir, TreeOptions{NoLongNames: true, NoXattrs: true, NoSubsecond: true, NoBigIDs: true,
		NoSpecialFiles: true, NoSparse: true, NoBigFiles: true})
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if len(d.Name()) > ustarNameMax || len(rel) > 250 {
			t.Errorf("%s: name too long for ustar", rel)
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return err
		}
		if st.Mtim.Nsec != 0 {
			t.Errorf("%s: mtime has a sub-second part", rel)
		}
		if st.Uid >= 1<<21 || st.Gid >= 1<<21 {
			t.Errorf("%s: owner %d:%d too big for ustar", rel, st.Uid, st.Gid)
		}
		if m := st.Mode & unix.S_IFMT; m == unix.S_IFIFO || m == unix.S_IFCHR {
			t.Errorf("%s: special file", rel)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			target, _ := os.Readlink(path)
			if len(target) > ustarNameMax {
				t.Errorf("%s: link target too long for ustar", rel)
			}
		}
		if sz, _ := unix.Llistxattr(path, nil); sz > 0 {
			names := make([]byte, sz)
			unix.Llistxattr(path, names)
			if strings.Contains(string(names), "user.") {
				t.Errorf("%s: has user xattrs", rel)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{PathSparse, PathBig, PathXattr} {
		if _, err := os.Lstat(filepath.Join(dir, rel)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: got %v, want not there", rel, err)
		}
	}
}

// gzipMembers counts the gzip members of a file.
func gzipMembers(t *testing.T, path string) (members int, total int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	br := bufio.NewReader(f)
	zr, err := gzip.NewReader(br)
	if err != nil {
		t.Fatal(err)
	}
	for {
		zr.Multistream(false)
		n, err := io.Copy(io.Discard, zr)
		if err != nil {
			t.Fatal(err)
		}
		total += n
		members++
		if err := zr.Reset(br); err == io.EOF {
			return members, total
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

func TestCodecs(t *testing.T) {
	t.Parallel()
	requireTools(t, "tar", "gzip", "pigz")
	src := filepath.Join(t.TempDir(), "src")
	MakeTree(t, src, TreeOptions{NoSparse: true})
	tests := []struct {
		codec       string
		wantMembers func(tarSize int64) int
	}{
		{"gzip", func(int64) int { return 1 }},
		{"pigz", func(int64) int { return 1 }},
		{"gzip-multi", func(n int64) int { return int((n + tarbuild.MultiPieceSize - 1) / tarbuild.MultiPieceSize) }},
	}
	// Go's writer is deterministic (GNU tar's posix headers carry atime
	// and ctime), so each compressed archive must hold these exact bytes.
	plain := filepath.Join(t.TempDir(), "a.tar")
	tarbuild.Archive(t, src, plain, tarbuild.Spec{Tool: "go", Format: "pax", Codec: "none"})
	st, err := os.Stat(plain)
	if err != nil {
		t.Fatal(err)
	}
	want, err := os.ReadFile(plain)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.codec, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "a.tar.gz")
			tarbuild.Archive(t, src, out, tarbuild.Spec{Tool: "go", Format: "pax", Codec: tt.codec})
			members, total := gzipMembers(t, out)
			if total != st.Size() {
				t.Errorf("uncompressed size got %d, want %d", total, st.Size())
			}
			if w := tt.wantMembers(st.Size()); members != w {
				t.Errorf("gzip members got %d, want %d", members, w)
			}
			f, _ := os.Open(out)
			defer f.Close()
			zr, err := gzip.NewReader(f)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(zr)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("decompressed archive differs from the plain one")
			}
		})
	}
}

func TestArchiveRefusesWhatFormatCannotHold(t *testing.T) {
	t.Parallel()
	requireTools(t, "tar", "bsdtar")
	src := filepath.Join(t.TempDir(), "src")
	MakeTree(t, src, TreeOptions{NoSparse: true, NoBigFiles: true})
	for _, spec := range []tarbuild.Spec{
		{Tool: "gnutar", Format: "ustar", Codec: "none"},
		{Tool: "bsdtar", Format: "ustar", Codec: "none"},
		{Tool: "go", Format: "ustar", Codec: "none"},
		{Tool: "go", Format: "gnu", Codec: "none"}, // xattrs
	} {
		err := tarbuild.Make(src, filepath.Join(t.TempDir(), "a.tar"), spec)
		if err == nil {
			t.Errorf("%s of a full tree: got no error, want one", spec)
		}
	}
}
