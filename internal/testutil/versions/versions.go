// Package versions holds two versions of one small tree, as tar members,
// for the tests of upgrading a materialized directory from the first to
// the second: every kind of change an upgrade meets, each on its own path.
//
// It owns only the fixture and what each path is expected to undergo; it
// knows nothing of tarmount's packages.
package versions

import (
	"archive/tar"
	"bytes"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// Paths by what the upgrade from V1 to V2 must do to them.
var (
	// Kept are entries the same in both: neither written nor touched
	// (same inode, same ctime).
	Kept = []string{"d/a.txt", "d/big.bin", "d/sl", "fifo"}
	// Relinked are the names of a file the same in both but for a hard
	// link that V2 no longer has: the inode stays (its link count, and
	// so its ctime, change).
	Relinked = []string{"d/h1", "d/h2"}
	// Retouched differ only in metadata: the same inode, with exactly
	// the new metadata.
	Retouched = map[string]string{"d/mode.txt": "mode", "d/mtime.txt": "mtime", "d/owner.txt": "owner", "d/xattr.txt": "xattr"}
	// Rewritten are regular files whose content changed.
	Rewritten = []string{"d/changed.txt", "d/samesize.txt", "d/bigchanged.bin", "d/h3"}
	// Gone are names V2 lacks.
	Gone = []string{"d/b.txt", "gone"}
	// Files is the number of regular files V2 has (first names).
	Files = 15
	// Written is the number of regular files the upgrade writes: those
	// Rewritten, and those new or of a new type.
	Written = 8
)

var (
	t1 = time.Unix(1700000000, 123456789)
	t2 = time.Unix(1710000000, 987654321)
)

func body(seed byte, n int) []byte {
	b := make([]byte, n)
	x := uint32(seed) + 1
	for i := range b {
		x = x*1664525 + 1013904223
		b[i] = byte(x >> 24)
	}
	return b
}

// common are the members both versions have as they are.
func common() []tarbuild.Entry {
	return []tarbuild.Entry{
		{Name: "d/", Type: tar.TypeDir, Mode: 0o755, ModTime: t1},
		{Name: "d/a.txt", Body: []byte("same in both\n"), ModTime: t1},
		{Name: "d/big.bin", Body: body(1, 700<<10), ModTime: t1},
		{Name: "d/sl", Type: tar.TypeSymlink, Link: "a.txt", ModTime: t1},
		{Name: "d/h1", Body: []byte("linked\n"), ModTime: t1},
		{Name: "d/h2", Type: tar.TypeLink, Link: "d/h1", ModTime: t1},
		{Name: "fifo", Type: tar.TypeFifo, Mode: 0o640, ModTime: t1},
	}
}

// V1 is the first version. outside is a directory outside DIR that a
// symlink of V1 points at, where V2 has a directory.
func V1(outside string) []tarbuild.Entry {
	return append(common(),
		tarbuild.Entry{Name: "d/b.txt", Body: []byte("only in v1\n"), ModTime: t1},
		tarbuild.Entry{Name: "d/mode.txt", Body: []byte("mode\n"), Mode: 0o644, ModTime: t1},
		tarbuild.Entry{Name: "d/mtime.txt", Body: []byte("mtime\n"), ModTime: t1},
		tarbuild.Entry{Name: "d/owner.txt", Body: []byte("owner\n"), Uid: 1000, Gid: 1000, ModTime: t1},
		tarbuild.Entry{Name: "d/xattr.txt", Body: []byte("xattr\n"), Xattrs: map[string]string{"user.k": "1", "user.old": "x"}, ModTime: t1},
		tarbuild.Entry{Name: "d/changed.txt", Body: []byte("v1 content\n"), ModTime: t1},
		tarbuild.Entry{Name: "d/samesize.txt", Body: []byte("aaaa"), ModTime: t1},
		tarbuild.Entry{Name: "d/bigchanged.bin", Body: body(2, 600<<10), ModTime: t1},
		tarbuild.Entry{Name: "d/h3", Type: tar.TypeLink, Link: "d/h1", ModTime: t1},
		tarbuild.Entry{Name: "gone/", Type: tar.TypeDir, ModTime: t1},
		tarbuild.Entry{Name: "gone/sub/", Type: tar.TypeDir, ModTime: t1},
		tarbuild.Entry{Name: "gone/sub/x", Body: []byte("x"), ModTime: t1},
		tarbuild.Entry{Name: "f2d", Body: []byte("a file in v1\n"), ModTime: t1},
		tarbuild.Entry{Name: "d2s/", Type: tar.TypeDir, ModTime: t1},
		tarbuild.Entry{Name: "d2s/y", Body: []byte("y"), ModTime: t1},
		tarbuild.Entry{Name: "s2f", Type: tar.TypeSymlink, Link: "d/a.txt", ModTime: t1},
		tarbuild.Entry{Name: "esc", Type: tar.TypeSymlink, Link: outside, ModTime: t1},
	)
}

// V2 is the second version.
func V2() []tarbuild.Entry {
	big := body(2, 600<<10)
	big[300<<10] ^= 0xff
	return append(common(),
		tarbuild.Entry{Name: "d/mode.txt", Body: []byte("mode\n"), Mode: 0o600, ModTime: t1},
		tarbuild.Entry{Name: "d/mtime.txt", Body: []byte("mtime\n"), ModTime: t2},
		tarbuild.Entry{Name: "d/owner.txt", Body: []byte("owner\n"), Uid: 1001, Gid: 1002, ModTime: t1},
		tarbuild.Entry{Name: "d/xattr.txt", Body: []byte("xattr\n"), Xattrs: map[string]string{"user.k": "2"}, ModTime: t1},
		tarbuild.Entry{Name: "d/changed.txt", Body: []byte("v2 content, longer\n"), ModTime: t1},
		tarbuild.Entry{Name: "d/samesize.txt", Body: []byte("bbbb"), ModTime: t1},
		tarbuild.Entry{Name: "d/bigchanged.bin", Body: big, ModTime: t1},
		tarbuild.Entry{Name: "d/h3", Body: []byte("linked\n"), ModTime: t1},
		tarbuild.Entry{Name: "new/", Type: tar.TypeDir, ModTime: t2},
		tarbuild.Entry{Name: "new/n.txt", Body: []byte("new in v2\n"), ModTime: t2},
		tarbuild.Entry{Name: "f2d/", Type: tar.TypeDir, ModTime: t2},
		tarbuild.Entry{Name: "f2d/in", Body: []byte("in a dir in v2\n"), ModTime: t2},
		tarbuild.Entry{Name: "d2s", Type: tar.TypeSymlink, Link: "d", ModTime: t2},
		tarbuild.Entry{Name: "s2f", Body: []byte("a file in v2\n"), ModTime: t2},
		tarbuild.Entry{Name: "esc/", Type: tar.TypeDir, ModTime: t2},
		tarbuild.Entry{Name: "esc/file", Body: []byte("must stay in DIR\n"), ModTime: t2},
	)
}

// Tar returns members as a PAX tar (Go's archive/tar).
func Tar(members []tarbuild.Entry) ([]byte, error) {
	data, err := tarbuild.GoErr(tar.FormatPAX, members...)
	if err != nil {
		return nil, err
	}
	return bytes.Clone(data), nil
}
