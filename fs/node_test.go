package fs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil"
)

// newTestRoot returns the root of a tree over a, attached to a go-fuse
// bridge but not mounted, for calling node methods directly.
func newTestRoot(t *testing.T, a Archive, opts Options) *dirNode {
	t.Helper()
	root, ok := NewRoot(a, opts).(*dirNode)
	if !ok {
		t.Fatalf("NewRoot: got %T, want *dirNode", NewRoot(a, opts))
	}
	fusefs.NewNodeFS(root, fuseOptions(opts))
	return root
}

// lookupPath looks p up from root one name at a time, as the kernel does.
func lookupPath(root *dirNode, p string) (*fusefs.Inode, fuse.EntryOut, syscall.Errno) {
	ino := root.EmbeddedInode()
	var out fuse.EntryOut
	for _, name := range splitPath(p) {
		lu, ok := ino.Operations().(fusefs.NodeLookuper)
		if !ok {
			return nil, out, syscall.ENOTDIR
		}
		out = fuse.EntryOut{}
		child, errno := lu.Lookup(context.Background(), name, &out)
		if errno != 0 {
			return nil, out, errno
		}
		ino = child
	}
	return ino, out, 0
}

func mustLookup(t *testing.T, root *dirNode, p string) *fusefs.Inode {
	t.Helper()
	ino, _, errno := lookupPath(root, p)
	if errno != 0 {
		t.Fatalf("lookup %s: got %v, want success", p, errno)
	}
	return ino
}

func TestLookupAttr(t *testing.T) {
	a := testArchive()
	root := newTestRoot(t, a, Options{})
	tests := []struct {
		path             string
		mode             uint32
		size             uint64
		nlink, uid, gid  uint32
		rdev             uint32
		blocks           uint64
		mtime            uint64
		mtimens          uint32
		atime, ctime     uint64
		atimens, ctimens uint32
	}{
		{path: "dir", mode: syscall.S_IFDIR | 0o750, nlink: 3, uid: 1000, gid: 1000, mtime: 1_650_000_000, mtimens: 999_999_999, atime: 1_650_000_000, atimens: 999_999_999, ctime: 1_650_000_000, ctimens: 999_999_999},
		{path: "dir/file.txt", mode: syscall.S_IFREG | 0o644, size: uint64(len(helloText)), nlink: 1, blocks: 1, mtime: 1_700_000_000, mtimens: 1, atime: 1_700_000_000, atimens: 1, ctime: 1_700_000_000, ctimens: 1},
		{path: "dir/setuid", mode: syscall.S_IFREG | 0o4755, size: 10, nlink: 1, blocks: 1, mtime: 1_700_000_000, mtimens: 1, atime: 1_700_000_000, atimens: 1, ctime: 1_700_000_000, ctimens: 1},
		{path: "dir/sub", mode: syscall.S_IFDIR | 0o3777, nlink: 2, mtime: 1_650_000_000, mtimens: 500_000_000, atime: 1_650_000_000, atimens: 500_000_000, ctime: 1_650_000_000, ctimens: 500_000_000},
		{path: "empty", mode: syscall.S_IFREG | 0o600, nlink: 1, mtime: 1_700_000_000, mtimens: 1, atime: 1_700_000_000, atimens: 1, ctime: 1_700_000_000, ctimens: 1},
		{path: "big.bin", mode: syscall.S_IFREG | 0o644, size: bigSize, nlink: 1, blocks: (bigSize + 511) / 512, mtime: 1_700_000_000, mtimens: 1, atime: 1_700_000_000, atimens: 1, ctime: 1_700_000_000, ctimens: 1},
		{path: "sparse.img", mode: syscall.S_IFREG | 0o644, size: sparseSize, nlink: 1, blocks: sparseSize / 512, mtime: 1_700_000_000, mtimens: 1, atime: 1_700_000_000, atimens: 1, ctime: 1_700_000_000, ctimens: 1},
		{path: "hl1", mode: syscall.S_IFREG | 0o640, size: 10, nlink: 2, blocks: 1, mtime: 1_700_000_000, mtimens: 1, atime: 1_700_000_000, atimens: 1, ctime: 1_700_000_000, ctimens: 1},
		{path: "dir/hl2", mode: syscall.S_IFREG | 0o640, size: 10, nlink: 2, blocks: 1, mtime: 1_700_000_000, mtimens: 1, atime: 1_700_000_000, atimens: 1, ctime: 1_700_000_000, ctimens: 1},
		{path: "link", mode: syscall.S_IFLNK | 0o777, size: uint64(len("dir/file.txt")), nlink: 1, mtime: 6, atime: 6, ctime: 6},
		{path: "fifo", mode: syscall.S_IFIFO | 0o644, nlink: 1, mtime: 5, atime: 5, ctime: 5},
		{path: "null", mode: syscall.S_IFCHR | 0o666, nlink: 1, rdev: 1<<8 | 3, mtime: 7, atime: 7, ctime: 7},
		{path: "sda", mode: syscall.S_IFBLK | 0o660, nlink: 1, gid: 6, rdev: 8 << 8, mtime: 8, atime: 8, ctime: 8},
		// -1.5 s: one and a half seconds before the epoch.
		{path: "old", mode: syscall.S_IFREG | 0o644, nlink: 1, mtime: uint64(1<<64 - 2), mtimens: 500_000_000, atime: 1_000_000_000, atimens: 2, ctime: 15_023_750_400, ctimens: 3},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			ino, out, errno := lookupPath(root, tc.path)
			if errno != 0 {
				t.Fatalf("lookup: got %v, want success", errno)
			}
			id, _ := a.id(tc.path)
			if got, want := ino.StableAttr().Ino, uint64(id)+1; got != want {
				t.Errorf("StableAttr.Ino: got %d, want %d", got, want)
			}
			if got, want := ino.StableAttr().Gen, uint64(1); got != want {
				t.Errorf("StableAttr.Gen: got %d, want %d", got, want)
			}
			if got, want := ino.StableAttr().Mode, tc.mode&syscall.S_IFMT; got != want {
				t.Errorf("StableAttr.Mode: got %o, want %o", got, want)
			}
			if got, want := out.EntryTimeout(), time.Hour; got != want {
				t.Errorf("entry timeout: got %v, want %v", got, want)
			}
			var ga fuse.AttrOut
			if errno := ino.Operations().(fusefs.NodeGetattrer).Getattr(context.Background(), nil, &ga); errno != 0 {
				t.Fatalf("Getattr: got %v, want success", errno)
			}
			if got, want := ga.Timeout(), time.Hour; got != want {
				t.Errorf("attr timeout: got %v, want %v", got, want)
			}
			if out.Attr != ga.Attr {
				t.Errorf("Lookup and Getattr attributes differ: got %+v and %+v", out.Attr, ga.Attr)
			}
			got := ga.Attr
			want := fuse.Attr{
				Ino: uint64(id) + 1, Mode: tc.mode, Size: tc.size, Nlink: tc.nlink,
				Owner: fuse.Owner{Uid: tc.uid, Gid: tc.gid}, Rdev: tc.rdev,
				Blocks: tc.blocks, Blksize: 128 << 10,
				Mtime: tc.mtime, Mtimensec: tc.mtimens,
				Atime: tc.atime, Atimensec: tc.atimens,
				Ctime: tc.ctime, Ctimensec: tc.ctimens,
			}
			if got != want {
				t.Errorf("attr:\ngot  %+v\nwant %+v", got, want)
			}
		})
	}
}

func TestLookupMissing(t *testing.T) {
	root := newTestRoot(t, testArchive(), Options{})
	for _, p := range []string{"nope", "dir/nope", "dir/sub/deep.txt/x"} {
		t.Run(p, func(t *testing.T) {
			_, _, errno := lookupPath(root, p)
			want := syscall.ENOENT
			if strings.HasPrefix(p, "dir/sub/deep.txt") {
				want = syscall.ENOTDIR // a file has no Lookup
			}
			if errno != want {
				t.Errorf("got %v, want %v", errno, want)
			}
		})
	}
}

func TestRootAttr(t *testing.T) {
	a := testArchive()
	a.entries[index.RootID].e.Mode = 0 // an archive without "./"
	root := newTestRoot(t, a, Options{})
	var out fuse.AttrOut
	if errno := root.Getattr(context.Background(), nil, &out); errno != 0 {
		t.Fatalf("Getattr: got %v, want success", errno)
	}
	if got, want := out.Mode, uint32(syscall.S_IFDIR|0o755); got != want {
		t.Errorf("mode: got %o, want %o", got, want)
	}
	if got, want := out.Ino, uint64(1); got != want {
		t.Errorf("ino: got %d, want %d", got, want)
	}
	if got, want := root.StableAttr().Ino, uint64(1); got != want {
		t.Errorf("StableAttr.Ino: got %d, want %d", got, want)
	}
}

func TestOwnerMapping(t *testing.T) {
	uid, gid := uint32(4242), uint32(4343)
	tests := []struct {
		name             string
		opts             Options
		wantUID, wantGID uint32
	}{
		{"archive", Options{}, 1000, 1000},
		{"uid", Options{UID: &uid}, 4242, 1000},
		{"gid", Options{GID: &gid}, 1000, 4343},
		{"both", Options{UID: &uid, GID: &gid}, 4242, 4343},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := newTestRoot(t, testArchive(), tc.opts)
			_, out, errno := lookupPath(root, "dir")
			if errno != 0 {
				t.Fatalf("lookup: got %v, want success", errno)
			}
			if out.Uid != tc.wantUID || out.Gid != tc.wantGID {
				t.Errorf("owner: got %d:%d, want %d:%d", out.Uid, out.Gid, tc.wantUID, tc.wantGID)
			}
		})
	}
}

func TestHardLinksShareInode(t *testing.T) {
	root := newTestRoot(t, testArchive(), Options{})
	a, b := mustLookup(t, root, "hl1"), mustLookup(t, root, "dir/hl2")
	if a.StableAttr() != b.StableAttr() {
		t.Errorf("StableAttr: got %+v and %+v, want equal", a.StableAttr(), b.StableAttr())
	}
}

// readAll lists a directory stream.
func readAll(t *testing.T, ds fusefs.DirStream) []fuse.DirEntry {
	t.Helper()
	var got []fuse.DirEntry
	for ds.HasNext() {
		de, errno := ds.Next()
		if errno != 0 {
			t.Fatalf("Next: got %v, want success", errno)
		}
		got = append(got, de)
	}
	ds.Close()
	return got
}

func TestReaddir(t *testing.T) {
	a := testArchive()
	root := newTestRoot(t, a, Options{})
	ino := func(p string) uint64 {
		id, ok := a.id(p)
		if !ok {
			t.Fatalf("no %s in fixture", p)
		}
		return uint64(id) + 1
	}
	tests := []struct {
		dir  string
		want []fuse.DirEntry
	}{
		{"", []fuse.DirEntry{
			{Name: ".", Mode: syscall.S_IFDIR, Ino: 1},
			{Name: "..", Mode: syscall.S_IFDIR, Ino: 1},
			{Name: "big.bin", Mode: syscall.S_IFREG, Ino: ino("big.bin")},
			{Name: "dir", Mode: syscall.S_IFDIR, Ino: ino("dir")},
			{Name: "eio.bin", Mode: syscall.S_IFREG, Ino: ino("eio.bin")},
			{Name: "empty", Mode: syscall.S_IFREG, Ino: ino("empty")},
			{Name: "fifo", Mode: syscall.S_IFIFO, Ino: ino("fifo")},
			{Name: "hl1", Mode: syscall.S_IFREG, Ino: ino("hl1")},
			{Name: "link", Mode: syscall.S_IFLNK, Ino: ino("link")},
			{Name: "null", Mode: syscall.S_IFCHR, Ino: ino("null")},
			{Name: "old", Mode: syscall.S_IFREG, Ino: ino("old")},
			{Name: "sda", Mode: syscall.S_IFBLK, Ino: ino("sda")},
			{Name: "short.bin", Mode: syscall.S_IFREG, Ino: ino("short.bin")},
			{Name: "slow.bin", Mode: syscall.S_IFREG, Ino: ino("slow.bin")},
			{Name: "sparse.img", Mode: syscall.S_IFREG, Ino: ino("sparse.img")},
			{Name: "stale.bin", Mode: syscall.S_IFREG, Ino: ino("stale.bin")},
		}},
		{"dir", []fuse.DirEntry{
			{Name: ".", Mode: syscall.S_IFDIR, Ino: ino("dir")},
			{Name: "..", Mode: syscall.S_IFDIR, Ino: 1},
			{Name: "file.txt", Mode: syscall.S_IFREG, Ino: ino("dir/file.txt")},
			{Name: "hl2", Mode: syscall.S_IFREG, Ino: ino("hl1")},
			{Name: "setuid", Mode: syscall.S_IFREG, Ino: ino("dir/setuid")},
			{Name: "sub", Mode: syscall.S_IFDIR, Ino: ino("dir/sub")},
		}},
		{"dir/sub", []fuse.DirEntry{
			{Name: ".", Mode: syscall.S_IFDIR, Ino: ino("dir/sub")},
			{Name: "..", Mode: syscall.S_IFDIR, Ino: ino("dir")},
			{Name: "deep.txt", Mode: syscall.S_IFREG, Ino: ino("dir/sub/deep.txt")},
		}},
	}
	for _, tc := range tests {
		t.Run("/"+tc.dir, func(t *testing.T) {
			var d *dirNode
			if tc.dir == "" {
				d = root
			} else {
				d = mustLookup(t, root, tc.dir).Operations().(*dirNode)
			}
			ds, errno := d.Readdir(context.Background())
			if errno != 0 {
				t.Fatalf("Readdir: got %v, want success", errno)
			}
			got := readAll(t, ds)
			for i := range tc.want {
				tc.want[i].Off = uint64(i + 1)
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("entries:\ngot  %v\nwant %v", got, tc.want)
			}
		})
	}
}

func TestDirHandle(t *testing.T) {
	a := testArchive()
	root := newTestRoot(t, a, Options{})
	fh, flags, errno := root.OpendirHandle(context.Background(), 0)
	if errno != 0 {
		t.Fatalf("OpendirHandle: got %v, want success", errno)
	}
	if want := uint32(fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE); flags != want {
		t.Errorf("flags: got %#x, want %#x", flags, want)
	}
	h := fh.(*dirStream)
	ctx := context.Background()
	var names []string
	for {
		de, errno := h.Readdirent(ctx)
		if errno != 0 {
			t.Fatalf("Readdirent: got %v, want success", errno)
		}
		if de == nil {
			break
		}
		names = append(names, de.Name)
		if de.Name == "." || de.Name == ".." {
			continue
		}
		// readdirplus looks up the name just listed.
		var out fuse.EntryOut
		child, errno := h.Lookup(ctx, de.Name, &out)
		if errno != 0 {
			t.Fatalf("Lookup(%s): got %v, want success", de.Name, errno)
		}
		if child.StableAttr().Ino != de.Ino || out.Ino != de.Ino {
			t.Errorf("Lookup(%s): got ino %d (attr %d), want %d", de.Name, child.StableAttr().Ino, out.Ino, de.Ino)
		}
	}
	if got, want := len(names), len(a.Children(index.RootID))+2; got != want {
		t.Errorf("entries: got %d, want %d", got, want)
	}
	// A name other than the last listed is still found.
	var out fuse.EntryOut
	if _, errno := h.Lookup(ctx, "dir", &out); errno != 0 {
		t.Errorf("Lookup(dir) after listing: got %v, want success", errno)
	}

	// Resume after the 4th entry, as the kernel does after a short buffer.
	if errno := h.Seekdir(ctx, 4); errno != 0 {
		t.Fatalf("Seekdir(4): got %v, want success", errno)
	}
	de, errno := h.Readdirent(ctx)
	if errno != 0 || de == nil {
		t.Fatalf("Readdirent after Seekdir: got %v, %v, want an entry", de, errno)
	}
	if got, want := de.Name, names[4]; got != want {
		t.Errorf("after Seekdir(4): got %q, want %q", got, want)
	}
	if got, want := de.Off, uint64(5); got != want {
		t.Errorf("offset after Seekdir(4): got %d, want %d", got, want)
	}
	if errno := h.Seekdir(ctx, 1000); errno != syscall.EINVAL {
		t.Errorf("Seekdir past the end: got %v, want EINVAL", errno)
	}
	h.Releasedir(ctx, 0)
}

func TestOpen(t *testing.T) {
	root := newTestRoot(t, testArchive(), Options{})
	f := mustLookup(t, root, "dir/file.txt").Operations().(*fileNode)
	tests := []struct {
		name      string
		flags     uint32
		wantErrno syscall.Errno
	}{
		{"rdonly", syscall.O_RDONLY, 0},
		{"rdonly-nonblock", syscall.O_RDONLY | syscall.O_NONBLOCK | syscall.O_CLOEXEC, 0},
		{"wronly", syscall.O_WRONLY, syscall.EROFS},
		{"rdwr", syscall.O_RDWR, syscall.EROFS},
		{"append", syscall.O_WRONLY | syscall.O_APPEND, syscall.EROFS},
		{"trunc", syscall.O_RDONLY | syscall.O_TRUNC, syscall.EROFS},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fh, flags, errno := f.Open(context.Background(), tc.flags)
			if errno != tc.wantErrno {
				t.Fatalf("errno: got %v, want %v", errno, tc.wantErrno)
			}
			if fh != nil {
				t.Errorf("file handle: got %v, want nil", fh)
			}
			if errno == 0 && flags&fuse.FOPEN_KEEP_CACHE == 0 {
				t.Errorf("flags: got %#x, want FOPEN_KEEP_CACHE set", flags)
			}
		})
	}
}

func TestRead(t *testing.T) {
	a := testArchive()
	root := newTestRoot(t, a, Options{})
	data := func(p string) []byte {
		id, _ := a.id(p)
		return a.entries[id].data
	}
	big := data("big.bin")
	tests := []struct {
		name      string
		path      string
		off       int64
		size      int
		want      []byte
		wantErrno syscall.Errno
	}{
		{"whole", "dir/file.txt", 0, 4096, []byte(helloText), 0},
		{"middle", "dir/file.txt", 7, 5, []byte("world"), 0},
		{"tail", "dir/file.txt", 7, 100, []byte("world\n"), 0},
		{"at-eof", "dir/file.txt", int64(len(helloText)), 10, []byte{}, 0},
		{"past-eof", "dir/file.txt", 1 << 40, 10, []byte{}, 0},
		{"empty-file", "empty", 0, 10, []byte{}, 0},
		{"zero-size", "dir/file.txt", 0, 0, []byte{}, 0},
		{"negative-offset", "dir/file.txt", -1, 10, nil, syscall.EINVAL},
		{"hard-link", "dir/hl2", 0, 100, []byte("hard link\n"), 0},
		{"big-chunked", "big.bin", 5000, 128 << 10, big[5000 : 5000+128<<10], 0},
		{"big-end", "big.bin", bigSize - 100, 128 << 10, big[bigSize-100:], 0},
		{"sparse-hole", "sparse.img", 4096, 8, make([]byte, 8), 0},
		{"sparse-data", "sparse.img", sparseAt, len(sparseData), []byte(sparseData), 0},
		{"eio", "eio.bin", 0, 10, nil, syscall.EIO},
		{"estale", "stale.bin", 0, 10, nil, syscall.ESTALE},
		{"shorter-than-size", "short.bin", 0, 4096, nil, syscall.EIO},
		{"shorter-than-size-tail", "short.bin", shortStored + 10, 10, nil, syscall.EIO},
		{"stored-part-of-short", "short.bin", 0, 20, make([]byte, 20), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustLookup(t, root, tc.path).Operations().(*fileNode)
			dest := make([]byte, tc.size)
			res, errno := f.Read(context.Background(), nil, dest, tc.off)
			if errno != tc.wantErrno {
				t.Fatalf("errno: got %v, want %v", errno, tc.wantErrno)
			}
			if errno != 0 {
				return
			}
			got, status := res.Bytes(nil)
			if !status.Ok() {
				t.Fatalf("Bytes: got %v, want OK", status)
			}
			if !bytes.Equal(got, tc.want) {
				t.Errorf("data: got %d bytes %.40q, want %d bytes %.40q", len(got), got, len(tc.want), tc.want)
			}
			if len(got) > 0 && &got[0] != &dest[0] {
				t.Errorf("data: got a new buffer, want the request's buffer reused")
			}
		})
	}
}

func TestReadInterrupted(t *testing.T) {
	root := newTestRoot(t, testArchive(), Options{})
	f := mustLookup(t, root, "slow.bin").Operations().(*fileNode)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan syscall.Errno, 1)
	go func() {
		_, errno := f.Read(ctx, nil, make([]byte, 10), 0)
		done <- errno
	}()
	time.Sleep(10 * time.Millisecond)
	cancel()
	select {
	case errno := <-done:
		if errno != syscall.EINTR {
			t.Errorf("got %v, want EINTR", errno)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Read did not return after cancel")
	}
}

func TestReadlink(t *testing.T) {
	root := newTestRoot(t, testArchive(), Options{})
	l := mustLookup(t, root, "link").Operations().(*symlinkNode)
	got, errno := l.Readlink(context.Background())
	if errno != 0 {
		t.Fatalf("Readlink: got %v, want success", errno)
	}
	if want := "dir/file.txt"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestGetxattr(t *testing.T) {
	root := newTestRoot(t, testArchive(), Options{})
	tests := []struct {
		name      string
		path      string
		attr      string
		size      int
		wantN     uint32
		want      string
		wantErrno syscall.Errno
	}{
		{"size-query", "dir/file.txt", "user.comment", 0, 8, "", 0},
		{"exact", "dir/file.txt", "user.comment", 8, 8, "hi there", 0},
		{"large", "dir/file.txt", "user.comment", 100, 8, "hi there", 0},
		{"too-small", "dir/file.txt", "user.comment", 3, 8, "", syscall.ERANGE},
		{"empty-value", "dir/file.txt", "user.empty", 10, 0, "", 0},
		{"empty-value-size", "dir/file.txt", "user.empty", 0, 0, "", 0},
		{"missing", "dir/file.txt", "user.nope", 10, 0, "", syscall.ENODATA},
		{"dir", "dir", "user.dir", 10, 1, "d", 0},
		{"none", "empty", "user.comment", 10, 0, "", syscall.ENODATA},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := mustLookup(t, root, tc.path).Operations().(fusefs.NodeGetxattrer)
			dest := make([]byte, tc.size)
			got, errno := n.Getxattr(context.Background(), tc.attr, dest)
			if errno != tc.wantErrno || got != tc.wantN {
				t.Fatalf("got (%d, %v), want (%d, %v)", got, errno, tc.wantN, tc.wantErrno)
			}
			if errno == 0 && tc.size > 0 && string(dest[:got]) != tc.want {
				t.Errorf("value: got %q, want %q", dest[:got], tc.want)
			}
		})
	}
}

func TestListxattr(t *testing.T) {
	root := newTestRoot(t, testArchive(), Options{})
	const list = "user.comment\x00user.empty\x00"
	tests := []struct {
		name      string
		path      string
		size      int
		wantN     uint32
		want      string
		wantErrno syscall.Errno
	}{
		{"size-query", "dir/file.txt", 0, uint32(len(list)), "", 0},
		{"exact", "dir/file.txt", len(list), uint32(len(list)), list, 0},
		{"large", "dir/file.txt", 1000, uint32(len(list)), list, 0},
		{"too-small", "dir/file.txt", 5, uint32(len(list)), "", syscall.ERANGE},
		{"none", "empty", 100, 0, "", 0},
		{"none-size", "empty", 0, 0, "", 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := mustLookup(t, root, tc.path).Operations().(fusefs.NodeListxattrer)
			dest := make([]byte, tc.size)
			got, errno := n.Listxattr(context.Background(), dest)
			if errno != tc.wantErrno || got != tc.wantN {
				t.Fatalf("got (%d, %v), want (%d, %v)", got, errno, tc.wantN, tc.wantErrno)
			}
			if errno == 0 && tc.size > 0 && string(dest[:got]) != tc.want {
				t.Errorf("list: got %q, want %q", dest[:got], tc.want)
			}
		})
	}
}

func TestStatfs(t *testing.T) {
	a := testArchive()
	root := newTestRoot(t, a, Options{})
	var wantBlocks uint64
	for _, fe := range a.entries {
		if fe.e.Type == index.TypeReg {
			wantBlocks += (uint64(fe.e.Size) + 4095) / 4096
		}
	}
	for _, p := range []string{"", "dir/file.txt"} {
		var out fuse.StatfsOut
		n := root.EmbeddedInode()
		if p != "" {
			n = mustLookup(t, root, p)
		}
		if errno := n.Operations().(fusefs.NodeStatfser).Statfs(context.Background(), &out); errno != 0 {
			t.Fatalf("Statfs(%q): got %v, want success", p, errno)
		}
		want := fuse.StatfsOut{Blocks: wantBlocks, Files: uint64(a.Len()), Bsize: 4096, Frsize: 4096, NameLen: 255}
		if out != want {
			t.Errorf("Statfs(%q):\ngot  %+v\nwant %+v", p, out, want)
		}
	}
}

func TestWriteOpsEROFS(t *testing.T) {
	root := newTestRoot(t, testArchive(), Options{})
	ctx := context.Background()
	file := mustLookup(t, root, "dir/file.txt").Operations().(*fileNode)
	var eo fuse.EntryOut
	var ao fuse.AttrOut
	tests := []struct {
		op    string
		errno func() syscall.Errno
	}{
		{"setattr", func() syscall.Errno { return file.Setattr(ctx, nil, &fuse.SetAttrIn{}, &ao) }},
		{"setattr-dir", func() syscall.Errno { return root.Setattr(ctx, nil, &fuse.SetAttrIn{}, &ao) }},
		{"setxattr", func() syscall.Errno { return file.Setxattr(ctx, "user.x", []byte("y"), 0) }},
		{"removexattr", func() syscall.Errno { return file.Removexattr(ctx, "user.comment") }},
		{"create", func() syscall.Errno { _, _, _, e := root.Create(ctx, "new", syscall.O_WRONLY, 0o644, &eo); return e }},
		{"tmpfile", func() syscall.Errno { _, _, _, e := root.Tmpfile(ctx, syscall.O_WRONLY, 0o644, &eo); return e }},
		{"mkdir", func() syscall.Errno { _, e := root.Mkdir(ctx, "new", 0o755, &eo); return e }},
		{"mknod", func() syscall.Errno { _, e := root.Mknod(ctx, "new", syscall.S_IFIFO|0o644, 0, &eo); return e }},
		{"unlink", func() syscall.Errno { return root.Unlink(ctx, "empty") }},
		{"rmdir", func() syscall.Errno { return root.Rmdir(ctx, "dir") }},
		{"rename", func() syscall.Errno { return root.Rename(ctx, "empty", root, "empty2", 0) }},
		{"link", func() syscall.Errno { _, e := root.Link(ctx, file, "new", &eo); return e }},
		{"symlink", func() syscall.Errno { _, e := root.Symlink(ctx, "target", "new", &eo); return e }},
		{"open-write", func() syscall.Errno { _, _, e := file.Open(ctx, syscall.O_WRONLY); return e }},
	}
	for _, tc := range tests {
		t.Run(tc.op, func(t *testing.T) {
			if got := tc.errno(); got != syscall.EROFS {
				t.Errorf("got %v, want EROFS", got)
			}
		})
	}
}

func TestToErrno(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"nil", nil, 0},
		{"not-exist", iofs.ErrNotExist, syscall.ENOENT},
		{"not-exist-wrapped", fmt.Errorf("open x: %w", os.ErrNotExist), syscall.ENOENT},
		{"canceled", context.Canceled, syscall.EINTR},
		{"canceled-wrapped", fmt.Errorf("fetch block 3: %w", context.Canceled), syscall.EINTR},
		{"deadline", context.DeadlineExceeded, syscall.EIO},
		{"source-changed", index.ErrChanged, syscall.ESTALE},
		{"source-changed-wrapped", errChangedRead, syscall.ESTALE},
		{"corrupt-not-stale", fmt.Errorf("span 2: %w", index.ErrCorrupt), syscall.EIO},
		{"syscall-errno", syscall.ENOSPC, syscall.ENOSPC},
		{"syscall-errno-wrapped", &os.PathError{Op: "read", Path: "x", Err: syscall.EACCES}, syscall.EACCES},
		{"unexpected-eof", io.ErrUnexpectedEOF, syscall.EIO},
		{"other", errors.New("boom"), syscall.EIO},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := toErrno(tc.err); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// recordHandler collects log records.
type recordHandler struct {
	records chan slog.Record
}

func (h recordHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h recordHandler) Handle(_ context.Context, r slog.Record) error {
	h.records <- r.Clone()
	return nil
}
func (h recordHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h recordHandler) WithGroup(string) slog.Handler      { return h }

func TestErrorLoggedOnce(t *testing.T) {
	h := recordHandler{records: make(chan slog.Record, 100)}
	root := newTestRoot(t, testArchive(), Options{Logger: slog.New(h)})
	f := mustLookup(t, root, "dir/file.txt") // warm up: no errors
	_ = f
	eio := mustLookup(t, root, "eio.bin").Operations().(*fileNode)
	for range 3 {
		if _, errno := eio.Read(context.Background(), nil, make([]byte, 10), 4); errno != syscall.EIO {
			t.Fatalf("Read: got %v, want EIO", errno)
		}
	}
	close(h.records)
	var errorRecords []slog.Record
	for r := range h.records {
		if r.Level == slog.LevelError {
			errorRecords = append(errorRecords, r)
		}
	}
	if len(errorRecords) != 1 {
		t.Fatalf("Error records: got %d, want 1", len(errorRecords))
	}
	attrs := map[string]string{}
	errorRecords[0].Attrs(func(a slog.Attr) bool {
		attrs[a.Key] = a.Value.String()
		return true
	})
	for k, want := range map[string]string{"path": "/eio.bin", "off": "4", "op": "read", "err": "fake: decoder exploded"} {
		if attrs[k] != want {
			t.Errorf("attr %s: got %q, want %q", k, attrs[k], want)
		}
	}
}

func TestParseMountinfoLine(t *testing.T) {
	tests := []struct {
		line       string
		point, typ string
		ok         bool
	}{
		{`36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue`, "/mnt2", "ext3", true},
		{`100 25 0:55 / /tmp/a\040b\134c rw,nosuid,nodev - fuse.tarmount-test https://x/y.tar ro,user_id=0`, `/tmp/a b\c`, "fuse.tarmount-test", true},
		{`101 25 0:56 / /m rw shared:5 master:3 - fuse src rw`, "/m", "fuse", true},
		{`garbage`, "", "", false},
	}
	for _, tc := range tests {
		point, typ, ok := parseMountinfoLine(tc.line)
		if point != tc.point || typ != tc.typ || ok != tc.ok {
			t.Errorf("parse %q: got (%q, %q, %v), want (%q, %q, %v)", tc.line, point, typ, ok, tc.point, tc.typ, tc.ok)
		}
	}
}

func TestUnmountNotMounted(t *testing.T) {
	dir := t.TempDir()
	if err := Unmount(dir); !errors.Is(err, ErrNotMounted) {
		t.Errorf("Unmount(plain dir): got %v, want ErrNotMounted", err)
	}
	if err := Unmount(dir + "/missing"); !errors.Is(err, ErrNotMounted) {
		t.Errorf("Unmount(missing): got %v, want ErrNotMounted", err)
	}
}

func TestUnmountRefusesOtherFilesystems(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root to mount a tmpfs")
	}
	dir := t.TempDir()
	if err := unix.Mount("tarmount-test", dir, "tmpfs", 0, "size=1m"); err != nil {
		testutil.Missing(t, "mount tmpfs: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Errorf("unmount tmpfs: %v", err)
		}
	})
	if err := Unmount(dir); !errors.Is(err, ErrNotFUSE) {
		t.Errorf("Unmount(tmpfs): got %v, want ErrNotFUSE", err)
	}
	if typ, found, err := mountType(dir); err != nil || !found || typ != "tmpfs" {
		t.Errorf("after refusal: got (%q, %v, %v), want the tmpfs still mounted", typ, found, err)
	}
}

func TestBrokenIndex(t *testing.T) {
	a := testArchive()
	dir, _ := a.id("dir")
	a.link(dir, "zloop", index.RootID)
	// Both names sort last, so the listing stays sorted.
	a.entries[dir].children = append(a.entries[dir].children, index.Dirent{Name: "zmissing", ID: 9999})
	root := newTestRoot(t, a, Options{})
	for _, p := range []string{"dir/zloop", "dir/zmissing"} {
		if _, _, errno := lookupPath(root, p); errno != syscall.EIO {
			t.Errorf("lookup %s: got %v, want EIO", p, errno)
		}
	}
	ds, errno := mustLookup(t, root, "dir").Operations().(*dirNode).Readdir(context.Background())
	if errno != 0 {
		t.Fatalf("Readdir: got %v, want success", errno)
	}
	var last syscall.Errno
	for ds.HasNext() {
		_, last = ds.Next()
	}
	if last != syscall.EIO {
		t.Errorf("Readdir of the missing entry: got %v, want EIO", last)
	}
}
