// Package treecmp compares two directory trees entry by entry, for tests that
// check a mounted or extracted archive against the tree it was made from.
//
// It owns only the comparison: walking both trees with lstat (symlinks are
// never followed), reading user.* extended attributes, hashing regular file
// content and grouping hard links by (device, inode). It knows nothing about
// archives, FUSE or tarmount's packages.
//
// Every difference is reported as one line of the form
//
//	path: field got X, want Y
//
// where path is slash-separated and relative to the tree roots ("." is the
// root itself).
package treecmp

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/internal/xattr"
)

// Options relaxes the comparison for trees whose source cannot carry every
// attribute. The zero value compares everything exactly.
type Options struct {
	// MTimeResolution is the tolerance for modification times: two mtimes are
	// equal when they differ by less than MTimeResolution. Zero means exact
	// (nanoseconds). Use time.Second for formats that store whole seconds
	// (ustar, GNU), whether the writer truncated or rounded.
	MTimeResolution time.Duration
	// SkipMTime skips every mtime.
	SkipMTime bool
	// SkipDirMTime skips the mtime of directories.
	SkipDirMTime bool
	// SkipSymlinkMTime skips the mtime of symbolic links.
	SkipSymlinkMTime bool
	// SkipRoot skips the attributes (mode, owner, mtime, xattrs) of the two
	// roots themselves; their contents are still compared.
	SkipRoot bool
	// SkipOwner skips uid and gid.
	SkipOwner bool
	// SkipXattrs skips user.* extended attributes.
	SkipXattrs bool
	// SkipHardLinks skips the hard-link grouping and link counts.
	SkipHardLinks bool
	// Ignore, when set, is called with each slash-separated relative path;
	// a path for which it returns true is left out of the comparison, and so
	// is everything below it when it is a directory.
	Ignore func(path string) bool
	// MaxErrors stops reporting after that many differences (one more line
	// then says how many were left out). Zero means report every difference.
	MaxErrors int
}

// Compare walks want and got and reports every difference with t.Errorf. It
// calls t.Fatalf when a tree cannot be walked at all. It is safe to call from
// parallel tests.
func Compare(t testing.TB, want, got string, opts Options) {
	t.Helper()
	diffs, err := Diff(want, got, opts)
	if err != nil {
		t.Fatalf("treecmp: %v", err)
		return
	}
	limit := len(diffs)
	if opts.MaxErrors > 0 && limit > opts.MaxErrors {
		limit = opts.MaxErrors
	}
	for _, d := range diffs[:limit] {
		t.Errorf("%s", d)
	}
	if limit < len(diffs) {
		t.Errorf("treecmp: %d more differences not shown", len(diffs)-limit)
	}
}

// Diff is Compare without a testing.TB: it returns the difference lines in a
// stable order (by path, then field), or an error when a tree cannot be
// walked.
func Diff(want, got string, opts Options) ([]string, error) {
	w, err := scan(want, opts)
	if err != nil {
		return nil, fmt.Errorf("walk want %s: %w", want, err)
	}
	g, err := scan(got, opts)
	if err != nil {
		return nil, fmt.Errorf("walk got %s: %w", got, err)
	}
	var out []string
	add := func(p, field string, gotV, wantV any) {
		out = append(out, fmt.Sprintf("%s: %s got %v, want %v", p, field, gotV, wantV))
	}

	paths := make([]string, 0, len(w.entries)+len(g.entries))
	for p := range w.entries {
		paths = append(paths, p)
	}
	for p := range g.entries {
		if _, ok := w.entries[p]; !ok {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)

	for _, p := range paths {
		we, wok := w.entries[p]
		ge, gok := g.entries[p]
		switch {
		case !gok:
			add(p, "presence", "missing", we.typ)
			continue
		case !wok:
			add(p, "presence", ge.typ, "absent")
			continue
		}
		if we.typ != ge.typ {
			add(p, "type", ge.typ, we.typ)
			continue
		}
		if p == "." && opts.SkipRoot {
			continue
		}
		if wp, gp := we.perm(), ge.perm(); wp != gp {
			add(p, "mode", fmt.Sprintf("%04o", gp), fmt.Sprintf("%04o", wp))
		}
		if !opts.SkipOwner {
			if we.uid != ge.uid {
				add(p, "uid", ge.uid, we.uid)
			}
			if we.gid != ge.gid {
				add(p, "gid", ge.gid, we.gid)
			}
		}
		// Directory sizes depend on the filesystem, not on the tree.
		if we.typ != "dir" && we.size != ge.size {
			add(p, "size", ge.size, we.size)
		}
		if (we.typ == "chardev" || we.typ == "blockdev") && we.rdev != ge.rdev {
			add(p, "rdev", fmt.Sprintf("%d:%d", unix.Major(ge.rdev), unix.Minor(ge.rdev)),
				fmt.Sprintf("%d:%d", unix.Major(we.rdev), unix.Minor(we.rdev)))
		}
		if checkMTime(we.typ, opts) && !mtimeEqual(we.mtime, ge.mtime, opts.MTimeResolution) {
			add(p, "mtime", fmtTime(ge.mtime), fmtTime(we.mtime))
		}
		if we.typ == "symlink" && we.target != ge.target {
			add(p, "target", fmt.Sprintf("%q", ge.target), fmt.Sprintf("%q", we.target))
		}
		if !opts.SkipXattrs {
			diffXattrs(p, we.xattrs, ge.xattrs, add)
		}
		if we.typ == "file" && we.size == ge.size {
			wh, err := fileSHA256(filepath.Join(want, filepath.FromSlash(p)))
			if err != nil {
				return nil, err
			}
			gh, err := fileSHA256(filepath.Join(got, filepath.FromSlash(p)))
			if err != nil {
				// A read error in got is a difference, not a failure to walk:
				// it is what a broken mount looks like.
				add(p, "content", "read error: "+err.Error(), "sha256 "+wh)
			} else if wh != gh {
				add(p, "content", "sha256 "+gh, "sha256 "+wh)
			}
		}
		if !opts.SkipHardLinks && we.typ != "dir" {
			if we.nlink != ge.nlink {
				add(p, "nlink", ge.nlink, we.nlink)
			}
		}
	}
	if !opts.SkipHardLinks {
		out = append(out, diffLinks(w, g)...)
	}
	return out, nil
}

func checkMTime(typ string, opts Options) bool {
	if opts.SkipMTime {
		return false
	}
	switch typ {
	case "dir":
		return !opts.SkipDirMTime
	case "symlink":
		return !opts.SkipSymlinkMTime
	}
	return true
}

func mtimeEqual(a, b time.Time, res time.Duration) bool {
	if res <= 0 {
		return a.Equal(b)
	}
	d := a.Sub(b)
	if d < 0 {
		d = -d
	}
	return d < res
}

func fmtTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000000000Z")
}

func diffXattrs(p string, want, got map[string]string, add func(p, field string, g, w any)) {
	keys := make([]string, 0, len(want)+len(got))
	for k := range want {
		keys = append(keys, k)
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		wv, wok := want[k]
		gv, gok := got[k]
		field := "xattr " + k
		switch {
		case !gok:
			add(p, field, "absent", fmt.Sprintf("%q", wv))
		case !wok:
			add(p, field, fmt.Sprintf("%q", gv), "absent")
		case wv != gv:
			add(p, field, fmt.Sprintf("%q", gv), fmt.Sprintf("%q", wv))
		}
	}
}

// diffLinks compares the partition of non-directory paths by (dev, ino). A
// path whose link group differs is reported once per distinct pair of groups.
func diffLinks(w, g *tree) []string {
	var out []string
	seen := map[string]bool{}
	paths := make([]string, 0, len(w.entries))
	for p, e := range w.entries {
		if e.typ == "dir" {
			continue
		}
		if ge, ok := g.entries[p]; !ok || ge.typ == "dir" {
			continue
		}
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		wg := w.group(p)
		gg := g.group(p)
		if slices.Equal(wg, gg) {
			continue
		}
		key := strings.Join(wg, "\x00") + "\x01" + strings.Join(gg, "\x00")
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, fmt.Sprintf("%s: hard links got %v, want %v", p, gg, wg))
	}
	return out
}

type entry struct {
	typ    string
	mode   uint32 // st_mode
	uid    uint32
	gid    uint32
	size   int64
	mtime  time.Time
	rdev   uint64
	nlink  uint64
	dev    uint64
	ino    uint64
	target string
	xattrs map[string]string
}

// perm returns the permission bits including setuid, setgid and sticky.
func (e *entry) perm() uint32 { return e.mode & 0o7777 }

type inodeKey struct{ dev, ino uint64 }

type tree struct {
	entries map[string]*entry
	links   map[inodeKey][]string // non-directories only, sorted
}

// group returns the sorted paths sharing p's inode (at least p itself).
func (t *tree) group(p string) []string {
	e := t.entries[p]
	return t.links[inodeKey{e.dev, e.ino}]
}

func scan(root string, opts Options) (*tree, error) {
	t := &tree{entries: map[string]*entry{}, links: map[inodeKey][]string{}}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." && opts.Ignore != nil && opts.Ignore(rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(path, &st); err != nil {
			return &os.PathError{Op: "lstat", Path: path, Err: err}
		}
		e := &entry{
			typ:   typeName(st.Mode),
			mode:  st.Mode,
			uid:   st.Uid,
			gid:   st.Gid,
			size:  st.Size,
			mtime: time.Unix(st.Mtim.Sec, st.Mtim.Nsec),
			rdev:  st.Rdev,
			nlink: uint64(st.Nlink),
			dev:   st.Dev,
			ino:   st.Ino,
		}
		if e.typ == "symlink" {
			if e.target, err = os.Readlink(path); err != nil {
				return err
			}
		}
		if !opts.SkipXattrs {
			if e.xattrs, err = xattr.User(path); err != nil {
				return err
			}
		}
		t.entries[rel] = e
		if e.typ != "dir" {
			k := inodeKey{e.dev, e.ino}
			t.links[k] = append(t.links[k], rel)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, ps := range t.links {
		sort.Strings(ps)
	}
	return t, nil
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "file"
	case unix.S_IFDIR:
		return "dir"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "chardev"
	case unix.S_IFBLK:
		return "blockdev"
	}
	return fmt.Sprintf("type%#o", mode&unix.S_IFMT)
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if fi.Size() > sparseDigestFrom {
		return sparseDigest(f, fi.Size())
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// sparseDigestFrom is the size above which a file's content is compared
// by sparseDigest: a sparse file of tens of GB (Go's testdata has two of
// 60 GB) is read only where it holds data.
const sparseDigestFrom = 1 << 30

// sparseDigest returns a digest of the content of f, size bytes, that is
// the same for the same content whatever its holes: a SHA-256 over the
// offset and bytes of every 4 KiB page that is not all zeros, then the
// size. It reads only the data regions that SEEK_DATA and SEEK_HOLE report
// (all of the file where the filesystem does not tell).
func sparseDigest(f *os.File, size int64) (string, error) {
	const page = 4096
	h := sha256.New()
	buf := make([]byte, 1<<20)
	fd := int(f.Fd())
	var num [8]byte
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == unix.ENXIO {
			break // holes to the end
		}
		if err != nil {
			data = off
		}
		hole, err := unix.Seek(fd, data, unix.SEEK_HOLE)
		if err != nil || hole <= data {
			hole = size
		}
		for p := data &^ (page - 1); p < hole; {
			n, err := f.ReadAt(buf[:min(int64(len(buf)), hole-p)], p)
			if n == 0 && err != nil {
				return "", fmt.Errorf("read %s at %d: %w", f.Name(), p, err)
			}
			for i := 0; i < n; i += page {
				pg := buf[i:min(i+page, n)]
				if !allZero(pg) {
					binary.LittleEndian.PutUint64(num[:], uint64(p)+uint64(i))
					h.Write(num[:])
					h.Write(pg)
				}
			}
			p += int64(n)
		}
		off = hole
	}
	binary.LittleEndian.PutUint64(num[:], uint64(size))
	h.Write(num[:])
	return "sparse " + hex.EncodeToString(h.Sum(nil)), nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
