package tarscan

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil"
)

// tree is a small directory tree made for the tool tests.
type tree struct {
	root   string
	xattrs bool // the file system took user xattrs
}

// makeTree builds a tree in a temporary directory. long adds names that
// only gnu and pax formats can hold; v7 leaves out the FIFO.
func makeTree(t *testing.T, long, v7 bool) tree {
	t.Helper()
	root := filepath.Join(t.TempDir(), "root")
	rng := rand.New(rand.NewPCG(3, 4))
	rnd := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "sub", "deeper"), 0o755))
	must(os.WriteFile(filepath.Join(root, "a.txt"), []byte("alpha\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "sub", "b.bin"), rnd(65_537), 0o600))
	must(os.WriteFile(filepath.Join(root, "sub", "empty"), nil, 0o644))
	must(os.WriteFile(filepath.Join(root, "sub", "deeper", "exec"), []byte("#!/bin/sh\n"), 0o755))
	must(os.WriteFile(filepath.Join(root, "ünïcødé.txt"), []byte("unicode\n"), 0o644))
	must(os.Symlink("a.txt", filepath.Join(root, "link")))
	must(os.Link(filepath.Join(root, "a.txt"), filepath.Join(root, "hard")))
	if !v7 {
		must(syscall.Mkfifo(filepath.Join(root, "fifo"), 0o640))
	}
	if long {
		dir := filepath.Join(root, strings.Repeat("d", 150))
		must(os.MkdirAll(dir, 0o755))
		must(os.WriteFile(filepath.Join(dir, strings.Repeat("f", 120)), []byte("long name\n"), 0o644))
		must(os.Symlink(filepath.Join(strings.Repeat("d", 150), strings.Repeat("f", 120)),
			filepath.Join(root, "longlink")))
	}
	tr := tree{root: root}
	if syscall.Setxattr(filepath.Join(root, "a.txt"), "user.mime", []byte("text/plain"), 0) == nil {
		must(syscall.Setxattr(filepath.Join(root, "a.txt"), "user.bin", []byte("x\x00y=\n%"), 0))
		tr.xattrs = true
	}
	return tr
}

// runTool runs a command, skipping the test when it is not installed.
func runTool(t *testing.T, dir string, name string, args ...string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		testutil.Missing(t, "%s not on PATH", name)
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}

// checkTree compares the members against the files of the tree.
func checkTree(t *testing.T, tr tree, data []byte, hs []*Header, wantXattrs bool) {
	t.Helper()
	seen := map[string]bool{}
	xattrsChecked := false
	for _, h := range hs {
		rel := strings.TrimSuffix(strings.TrimPrefix(h.Name, "./"), "/")
		if rel == "" || rel == "." {
			continue
		}
		seen[rel] = true
		p := filepath.Join(tr.root, rel)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: not in the tree: %v", h.Name, err)
			continue
		}
		if h.Typeflag != TypeLink && h.MTime.Sec != fi.ModTime().Unix() {
			t.Errorf("%s: MTime: got %d, want %d", h.Name, h.MTime.Sec, fi.ModTime().Unix())
		}
		if h.Typeflag != TypeLink && h.Mode != int64(fi.Mode().Perm()) {
			t.Errorf("%s: Mode: got %o, want %o", h.Name, h.Mode, fi.Mode().Perm())
		}
		switch h.Typeflag {
		case TypeReg:
			if !fi.Mode().IsRegular() {
				t.Errorf("%s: got a regular file, want mode %v", h.Name, fi.Mode())
				continue
			}
			want, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if got := logical(data, h); !bytes.Equal(got, want) {
				t.Errorf("%s: content: got %d bytes, want %d", h.Name, len(got), len(want))
			}
			if (rel == "a.txt" || rel == "hard") && wantXattrs && tr.xattrs {
				xattrsChecked = true
				want := []Xattr{{"user.bin", "x\x00y=\n%"}, {"user.mime", "text/plain"}}
				got := slices.Clone(h.Xattrs)
				slices.SortFunc(got, func(a, b Xattr) int { return strings.Compare(a.Name, b.Name) })
				if !slices.Equal(got, want) {
					t.Errorf("%s: Xattrs: got %q, want %q", h.Name, got, want)
				}
			}
		case TypeDir:
			if !fi.IsDir() {
				t.Errorf("%s: got a directory, want mode %v", h.Name, fi.Mode())
			}
		case TypeSymlink:
			target, _ := os.Readlink(p)
			if h.Linkname != target {
				t.Errorf("%s: Linkname: got %q, want %q", h.Name, h.Linkname, target)
			}
		case TypeLink:
			other, err := os.Lstat(filepath.Join(tr.root, strings.TrimPrefix(h.Linkname, "./")))
			if err != nil || !os.SameFile(fi, other) {
				t.Errorf("%s: hard link to %q: not the same file", h.Name, h.Linkname)
			}
		case TypeFIFO:
			if fi.Mode()&os.ModeNamedPipe == 0 {
				t.Errorf("%s: got a FIFO, want mode %v", h.Name, fi.Mode())
			}
		}
	}
	if wantXattrs && tr.xattrs && !xattrsChecked {
		t.Errorf("a.txt: no regular member to check xattrs on")
	}
	filepath.WalkDir(tr.root, func(p string, d os.DirEntry, err error) error {
		if rel, _ := filepath.Rel(tr.root, p); rel != "." && !seen[rel] {
			t.Errorf("%s: in the tree but not in the archive", rel)
		}
		return nil
	})
}

// TestTools scans archives of a small tree made by GNU tar and bsdtar in
// each of their formats.
func TestTools(t *testing.T) {
	tests := []struct {
		name   string
		tool   string
		args   []string
		long   bool // the format holds long names
		xattrs bool // the archive carries xattrs
	}{
		{"gnutar-gnu", "tar", []string{"--format=gnu"}, true, false},
		{"gnutar-oldgnu", "tar", []string{"--format=oldgnu"}, true, false},
		{"gnutar-posix", "tar", []string{"--format=posix"}, true, false},
		{"gnutar-posix-xattrs", "tar", []string{"--format=posix", "--xattrs", "--xattrs-include=user.*"}, true, true},
		{"gnutar-ustar", "tar", []string{"--format=ustar"}, false, false},
		{"gnutar-v7", "tar", []string{"--format=v7"}, false, false},
		{"gnutar-label", "tar", []string{"--format=gnu", "--label=VOLUME-1"}, true, false},
		{"bsdtar-pax", "bsdtar", []string{"--format=pax", "--xattrs"}, true, true},
		{"bsdtar-paxr", "bsdtar", []string{"--format=paxr"}, true, false},
		{"bsdtar-ustar", "bsdtar", []string{"--format=ustar"}, false, false},
		{"bsdtar-gnutar", "bsdtar", []string{"--format=gnutar"}, true, false},
		{"bsdtar-v7", "bsdtar", []string{"--format=v7tar"}, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr := makeTree(t, tt.long, strings.HasSuffix(tt.name, "-v7"))
			out := filepath.Join(t.TempDir(), "out.tar")
			runTool(t, tr.root, tt.tool, append(tt.args, "-cf", out, ".")...)
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			hs := compareWithStdlib(t, data)
			checkTree(t, tr, data, hs, tt.xattrs)
			checkTiling(t, hs, data)
		})
	}
}

// TestGNUIncremental scans a GNU incremental archive, whose directories
// are dumpdir ('D') members carrying a listing as data.
func TestGNUIncremental(t *testing.T) {
	tr := makeTree(t, true, false)
	dir := t.TempDir()
	out := filepath.Join(dir, "inc.tar")
	runTool(t, tr.root, "tar", "--format=gnu", "--listed-incremental="+filepath.Join(dir, "snar"), "-cf", out, ".")
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(data, []byte{'D'}) {
		t.Fatalf("no dumpdir in the archive")
	}
	hs, err := scanAll(data, Limits{})
	if err != nil {
		t.Fatalf("scan: got %v, want nil", err)
	}
	dirs := 0
	for _, h := range hs {
		if h.Typeflag == TypeDir {
			dirs++
			if h.Size != 0 || h.StoredSize != 0 {
				t.Errorf("%s: dumpdir sizes: got %d/%d, want 0/0", h.Name, h.Size, h.StoredSize)
			}
		}
	}
	if dirs < 3 {
		t.Errorf("got %d directories, want at least 3", dirs)
	}
	checkTree(t, tr, data, hs, false)
	checkTiling(t, hs, data)
}

// sparseFile describes a sparse file: data chunks of random bytes at the
// given offsets, holes elsewhere, size bytes in all.
type sparseFile struct {
	name   string
	size   int64
	chunks []SparseChunk
}

var sparseFiles = []sparseFile{
	{"three", 7 << 20, []SparseChunk{{0, 4096}, {5 << 20, 8192}}},
	{"many", 3 << 20, func() []SparseChunk { // needs GNU extension blocks
		var cs []SparseChunk
		for i := range int64(30) {
			cs = append(cs, SparseChunk{i * 64 << 10, 4096})
		}
		return cs
	}()},
	{"allhole", 1 << 20, nil},
	{"datatail", 2 << 20, []SparseChunk{{1 << 20, 1 << 20}}},
}

func writeSparse(t *testing.T, dir string, sf sparseFile) []byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(5, uint64(len(sf.chunks))))
	content := make([]byte, sf.size)
	f, err := os.Create(filepath.Join(dir, sf.name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, c := range sf.chunks {
		b := content[c.Offset : c.Offset+c.Length]
		for i := range b {
			b[i] = byte(rng.Uint32()) | 1 // no zero block inside a chunk
		}
		if _, err := f.WriteAt(b, c.Offset); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Truncate(sf.size); err != nil {
		t.Fatal(err)
	}
	return content
}

// TestSparse scans sparse files archived by GNU tar in the old GNU format
// and in pax sparse formats 0.0, 0.1 and 1.0, and by bsdtar.
func TestSparse(t *testing.T) {
	tests := []struct {
		name    string
		tool    string
		args    []string
		exact   bool // the map must equal the written chunks
		version string
	}{
		{"gnu", "tar", []string{"--sparse", "--hole-detection=raw", "--format=gnu"}, true, ""},
		{"posix-0.0", "tar", []string{"--sparse", "--hole-detection=raw", "--format=posix", "--sparse-version=0.0"}, true, "GNU.sparse.offset"},
		{"posix-0.1", "tar", []string{"--sparse", "--hole-detection=raw", "--format=posix", "--sparse-version=0.1"}, true, "GNU.sparse.map"},
		{"posix-1.0", "tar", []string{"--sparse", "--hole-detection=raw", "--format=posix", "--sparse-version=1.0"}, true, "GNU.sparse.major=1"},
		{"bsdtar-pax", "bsdtar", []string{"--format=pax", "--read-sparse"}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "src")
			if err := os.Mkdir(src, 0o755); err != nil {
				t.Fatal(err)
			}
			contents := map[string][]byte{}
			var names []string
			for _, sf := range sparseFiles {
				contents[sf.name] = writeSparse(t, src, sf)
				names = append(names, sf.name)
			}
			out := filepath.Join(dir, "out.tar")
			runTool(t, src, tt.tool, append(append(tt.args, "-cf", out), names...)...)
			data, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if tt.version != "" && !bytes.Contains(data, []byte(tt.version)) {
				t.Fatalf("archive has no %q record", tt.version)
			}
			hs := compareWithStdlib(t, data)
			if len(hs) != len(sparseFiles) {
				t.Fatalf("got %d members, want %d", len(hs), len(sparseFiles))
			}
			for i, sf := range sparseFiles {
				h := hs[i]
				if h.Name != sf.name {
					t.Errorf("member %d: Name: got %q, want %q", i, h.Name, sf.name)
				}
				if h.Size != sf.size {
					t.Errorf("%s: Size: got %d, want %d", sf.name, h.Size, sf.size)
				}
				if got := logical(data, h); !bytes.Equal(got, contents[sf.name]) {
					t.Errorf("%s: rebuilt content differs from the file", sf.name)
				}
				if tt.exact {
					want := sf.chunks
					if want == nil {
						want = []SparseChunk{}
					}
					if h.Sparse == nil || !slices.Equal(h.Sparse, want) {
						t.Errorf("%s: Sparse: got %v, want %v", sf.name, h.Sparse, want)
					}
				}
				var sum int64
				for _, c := range h.Sparse {
					sum += c.Length
				}
				if h.Sparse != nil && sum != h.StoredSize {
					t.Errorf("%s: StoredSize: got %d, want the chunk sum %d", sf.name, h.StoredSize, sum)
				}
				// Stored chunk data at DataOffset equals the file's data.
				pos := h.DataOffset
				for _, c := range h.Sparse {
					if got, want := data[pos:pos+c.Length], contents[sf.name][c.Offset:c.Offset+c.Length]; !bytes.Equal(got, want) {
						t.Errorf("%s: chunk at %d stored at %d differs", sf.name, c.Offset, pos)
					}
					pos += c.Length
				}
			}
			checkTiling(t, hs, data)
		})
	}
}
