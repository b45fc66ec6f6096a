package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
)

// Errors of a broken index.
var (
	errMissingEntry = errors.New("fs: index has no entry for a listed id")
	errLoop         = errors.New("fs: index lists a directory inside itself or the root inside a directory")
)

// Node types: one per kind of entry, sharing node for attributes, extended
// attributes, statfs and the refusal of metadata writes.
//
// Nodes hold no mutable state: everything comes from the immutable Archive,
// so every method is safe for concurrent use.
type (
	node struct {
		fusefs.Inode
		t  *tree
		id index.EntryID
	}
	dirNode  struct{ node }
	fileNode struct {
		node
		handover handover // passthrough or not, once it has a local copy
	}
	symlinkNode struct{ node }
	// specialNode is a FIFO or a device: the kernel serves its I/O.
	specialNode struct{ node }
)

func newDirNode(t *tree, id index.EntryID) *dirNode {
	return &dirNode{node{t: t, id: id}}
}

// newNode makes the node for entry e with id id.
func newNode(t *tree, id index.EntryID, e *index.Entry) fusefs.InodeEmbedder {
	switch fileType(id, e) {
	case syscall.S_IFDIR:
		return &dirNode{node{t: t, id: id}}
	case syscall.S_IFLNK:
		return &symlinkNode{node{t: t, id: id}}
	case syscall.S_IFREG:
		return &fileNode{node: node{t: t, id: id}}
	default:
		return &specialNode{node{t: t, id: id}}
	}
}

// fileType returns the S_IF* bits of entry e with id id. The root is a
// directory whatever the index says; an unknown type is served as a regular
// file (whose reads the archive may refuse).
func fileType(id index.EntryID, e *index.Entry) uint32 {
	if id == index.RootID {
		return syscall.S_IFDIR
	}
	switch e.Type {
	case index.TypeDir:
		return syscall.S_IFDIR
	case index.TypeSymlink:
		return syscall.S_IFLNK
	case index.TypeChar:
		return syscall.S_IFCHR
	case index.TypeBlock:
		return syscall.S_IFBLK
	case index.TypeFIFO:
		return syscall.S_IFIFO
	default:
		return syscall.S_IFREG
	}
}

func stableAttr(id index.EntryID, e *index.Entry) fusefs.StableAttr {
	return fusefs.StableAttr{Mode: fileType(id, e), Ino: inodeNumber(id), Gen: 1}
}

// entry returns the entry of n, or an errno for a broken index.
func (n *node) entry(op string) (*index.Entry, syscall.Errno) {
	e := n.t.a.Entry(n.id)
	if e == nil {
		return nil, n.t.fail(op, n.id, 0, errMissingEntry)
	}
	return e, 0
}

// fillAttr fills out with the attributes of entry e with id id.
func (t *tree) fillAttr(id index.EntryID, e *index.Entry, out *fuse.Attr) {
	typ := fileType(id, e)
	perm := e.Mode & 07777
	if id == index.RootID && perm == 0 {
		// An archive without a "./" entry leaves the root's mode
		// unset; 0000 would lock everybody but root out.
		perm = 0o755
	}
	if typ == syscall.S_IFLNK {
		// Linux gives every symlink 0777, whatever the archive says
		// (GNU tar and bsdtar extract them so).
		perm = 0o777
	}
	out.Ino = inodeNumber(id)
	out.Mode = typ | perm
	out.Nlink = max(e.Nlink, 1)
	out.Uid, out.Gid = e.UID, e.GID
	if t.uid != nil {
		out.Uid = *t.uid
	}
	if t.gid != nil {
		out.Gid = *t.gid
	}
	switch typ {
	case syscall.S_IFREG:
		size := uint64(max(e.Size, 0))
		out.Size = size
		// Sparse files too: the index does not expose the length of
		// their data chunks here, so this counts the holes.
		out.Blocks = (size + 511) / 512
	case syscall.S_IFLNK:
		out.Size = uint64(len(e.Linkname))
	case syscall.S_IFCHR, syscall.S_IFBLK:
		// fuse_attr.rdev is 32 bits in the kernel's new_encode_dev
		// layout, which is the low half of glibc's Mkdev for the 12-bit
		// majors and 20-bit minors the kernel supports.
		out.Rdev = uint32(unix.Mkdev(e.Devmajor, e.Devminor))
	}
	out.Blksize = blockSizeBytes
	mtime := e.MTime
	atime, ctime := e.ATime, e.CTime
	if atime.IsZero() {
		atime = mtime
	}
	if ctime.IsZero() {
		ctime = mtime
	}
	// Seconds before 1970 wrap to the two's complement the kernel reads
	// back as negative.
	out.Mtime, out.Mtimensec = uint64(mtime.Sec), uint32(mtime.Nsec)
	out.Atime, out.Atimensec = uint64(atime.Sec), uint32(atime.Nsec)
	out.Ctime, out.Ctimensec = uint64(ctime.Sec), uint32(ctime.Nsec)
}

var _ fusefs.NodeGetattrer = (*node)(nil)

func (n *node) Getattr(ctx context.Context, f fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	e, errno := n.entry("getattr")
	if errno != 0 {
		return errno
	}
	n.t.fillAttr(n.id, e, &out.Attr)
	out.SetTimeout(n.t.cacheTime())
	return 0
}

var _ fusefs.NodeGetxattrer = (*node)(nil)

// Getxattr copies the value of attr into dest. An empty dest asks for the
// size; a dest too small gets ERANGE and the size.
//
// The root of a mount with a Status function also answers StatusXattr.
func (n *node) Getxattr(ctx context.Context, attr string, dest []byte) (uint32, syscall.Errno) {
	if attr == StatusXattr && n.id == index.RootID && n.t.status != nil {
		return xattrValue(n.t.status(), dest)
	}
	for _, x := range n.t.a.Xattrs(n.id) {
		if x.Name == attr {
			return xattrValue(x.Value, dest)
		}
	}
	return 0, syscall.ENODATA
}

// xattrValue copies value into dest with getxattr's size rules.
func xattrValue[T string | []byte](value T, dest []byte) (uint32, syscall.Errno) {
	size := uint32(len(value))
	if len(dest) == 0 {
		return size, 0
	}
	if len(dest) < len(value) {
		return size, syscall.ERANGE
	}
	return uint32(copy(dest, value)), 0
}

var _ fusefs.NodeListxattrer = (*node)(nil)

// Listxattr copies the attribute names, each ending in NUL, into dest, with
// the same size rules as Getxattr.
func (n *node) Listxattr(ctx context.Context, dest []byte) (uint32, syscall.Errno) {
	xs := n.t.a.Xattrs(n.id)
	size := 0
	for _, x := range xs {
		size += len(x.Name) + 1
	}
	if len(dest) == 0 {
		return uint32(size), 0
	}
	if len(dest) < size {
		return uint32(size), syscall.ERANGE
	}
	off := 0
	for _, x := range xs {
		off += copy(dest[off:], x.Name)
		dest[off] = 0
		off++
	}
	return uint32(size), 0
}

var _ fusefs.NodeStatfser = (*node)(nil)

// Statfs reports a full, read-only filesystem: Files is the number of
// entries, Blocks the 4 KiB blocks of all regular files.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	t := n.t
	var blocks uint64
	if t.growing() {
		blocks = t.countBlocks() // not final: counted again next time
	} else {
		t.statfsOnce.Do(func() { t.statfsBlocks = t.countBlocks() })
		blocks = t.statfsBlocks
	}
	*out = fuse.StatfsOut{
		Blocks:  blocks,
		Files:   uint64(t.a.Len()),
		Bsize:   statfsBlockSizeBytes,
		Frsize:  statfsBlockSizeBytes,
		NameLen: 255,
	}
	return 0
}

// countBlocks counts the 4 KiB blocks of all regular files (at least 1).
func (t *tree) countBlocks() uint64 {
	var blocks uint64
	for i := range t.a.Len() {
		e := t.a.Entry(index.EntryID(i))
		if e != nil && e.Type == index.TypeReg && e.Size > 0 {
			blocks += (uint64(e.Size) + statfsBlockSizeBytes - 1) / statfsBlockSizeBytes
		}
	}
	return max(blocks, 1)
}

// Metadata writes. The "ro" mount option makes the kernel refuse them before
// they reach us; these answer EROFS should the mount be made writable.

var _ fusefs.NodeSetattrer = (*node)(nil)

func (n *node) Setattr(ctx context.Context, f fusefs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	return syscall.EROFS
}

var _ fusefs.NodeSetxattrer = (*node)(nil)

func (n *node) Setxattr(ctx context.Context, attr string, data []byte, flags uint32) syscall.Errno {
	return syscall.EROFS
}

var _ fusefs.NodeRemovexattrer = (*node)(nil)

func (n *node) Removexattr(ctx context.Context, attr string) syscall.Errno {
	return syscall.EROFS
}

// Directories.

var _ fusefs.NodeLookuper = (*dirNode)(nil)

// Lookup finds name in the directory and returns its inode, made on first
// use; hard links resolve to the inode already known for their id. In a
// Growing archive it first waits until the name is known or the index
// complete.
func (n *dirNode) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	if n.t.growing() {
		if err := n.t.grow.WaitName(ctx, n.id, name); err != nil {
			return nil, n.t.fail("lookup", n.id, 0, err)
		}
	}
	id, ok := n.t.a.Lookup(n.id, name)
	if !ok {
		return nil, syscall.ENOENT
	}
	return n.child(ctx, id, out)
}

// child returns the inode of entry id, a child of n, and fills out.
func (n *dirNode) child(ctx context.Context, id index.EntryID, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	e := n.t.a.Entry(id)
	if e == nil {
		return nil, n.t.fail("lookup", id, 0, errMissingEntry)
	}
	if id == index.RootID || id == n.id {
		// A directory containing itself or the root: a broken index
		// that would make the kernel loop.
		return nil, n.t.fail("lookup", id, 0, fmt.Errorf("entry %d in directory %d: %w", id, n.id, errLoop))
	}
	n.t.fillAttr(id, e, &out.Attr)
	timeout := n.t.cacheTime()
	out.SetEntryTimeout(timeout)
	out.SetAttrTimeout(timeout)
	return n.NewInode(ctx, newNode(n.t, id, e), stableAttr(id, e)), 0
}

var _ fusefs.NodeReaddirer = (*dirNode)(nil)

// Readdir lists ".", ".." and the directory's children in name order.
func (n *dirNode) Readdir(ctx context.Context) (fusefs.DirStream, syscall.Errno) {
	if errno := n.waitListing(ctx); errno != 0 {
		return nil, errno
	}
	return n.newDirStream(), 0
}

var _ fusefs.NodeOpendirHandler = (*dirNode)(nil)

// OpendirHandle opens the directory with FOPEN_CACHE_DIR: the kernel keeps
// the listing, which never changes. A partial listing of a Growing archive
// is not kept.
func (n *dirNode) OpendirHandle(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	if errno := n.waitListing(ctx); errno != 0 {
		return nil, 0, errno
	}
	if n.t.growing() {
		return n.newDirStream(), 0, 0
	}
	return n.newDirStream(), fuse.FOPEN_CACHE_DIR | fuse.FOPEN_KEEP_CACHE, 0
}

// waitListing waits, in a Growing archive, until the listing of the
// directory is complete, unless partial listings were asked for.
func (n *dirNode) waitListing(ctx context.Context) syscall.Errno {
	if !n.t.growing() || n.t.partial {
		return 0
	}
	if err := n.t.grow.WaitListing(ctx); err != nil {
		return n.t.fail("readdir", n.id, 0, err)
	}
	return 0
}

var _ fusefs.NodeCreater = (*dirNode)(nil)

func (n *dirNode) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fusefs.Inode, fusefs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}

var _ fusefs.NodeTmpfiler = (*dirNode)(nil)

func (n *dirNode) Tmpfile(ctx context.Context, flags uint32, mode uint32, out *fuse.EntryOut) (*fusefs.Inode, fusefs.FileHandle, uint32, syscall.Errno) {
	return nil, nil, 0, syscall.EROFS
}

var _ fusefs.NodeMkdirer = (*dirNode)(nil)

func (n *dirNode) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

var _ fusefs.NodeMknoder = (*dirNode)(nil)

func (n *dirNode) Mknod(ctx context.Context, name string, mode uint32, dev uint32, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

var _ fusefs.NodeUnlinker = (*dirNode)(nil)

func (n *dirNode) Unlink(ctx context.Context, name string) syscall.Errno {
	return syscall.EROFS
}

var _ fusefs.NodeRmdirer = (*dirNode)(nil)

func (n *dirNode) Rmdir(ctx context.Context, name string) syscall.Errno {
	return syscall.EROFS
}

var _ fusefs.NodeRenamer = (*dirNode)(nil)

func (n *dirNode) Rename(ctx context.Context, name string, newParent fusefs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	return syscall.EROFS
}

var _ fusefs.NodeLinker = (*dirNode)(nil)

func (n *dirNode) Link(ctx context.Context, target fusefs.InodeEmbedder, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

var _ fusefs.NodeSymlinker = (*dirNode)(nil)

func (n *dirNode) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	return nil, syscall.EROFS
}

// Regular files.

var _ fusefs.NodeOpener = (*fileNode)(nil)

// Open allows reading only. Files keep their page cache across opens
// (FOPEN_KEEP_CACHE) and close without a FLUSH round trip (FOPEN_NOFLUSH).
// No file handle is needed: reads go to the node.
func (n *fileNode) Open(ctx context.Context, flags uint32) (fusefs.FileHandle, uint32, syscall.Errno) {
	if flags&syscall.O_ACCMODE != syscall.O_RDONLY || flags&syscall.O_TRUNC != 0 {
		return nil, 0, syscall.EROFS
	}
	if n.t.local != nil {
		h, fl := n.openLocalOrArchive()
		return h, fl, 0
	}
	return nil, fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH, 0
}

var _ fusefs.NodeReader = (*fileNode)(nil)

// Read reads into dest, the request's buffer, and returns it. It returns
// fewer bytes than asked only at the end of the file: the kernel takes a
// short read for the end and would shrink its idea of the size. ctx is the
// request's: an interrupt cancels the archive read and answers EINTR.
func (n *fileNode) Read(ctx context.Context, f fusefs.FileHandle, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	e, errno := n.entry("read")
	if errno != 0 {
		return nil, errno
	}
	if off < 0 {
		return nil, syscall.EINVAL
	}
	if off >= e.Size || len(dest) == 0 {
		return fuse.ReadResultData(nil), 0
	}
	buf := dest[:min(int64(len(dest)), e.Size-off)]
	if h, ok := f.(*localHandle); ok {
		return h.read(buf, off)
	}
	done := 0
	for done < len(buf) {
		k, err := n.t.a.ReadAt(ctx, n.id, buf[done:], off+int64(done))
		done += k
		if done == len(buf) {
			break // io.EOF with the last byte is fine
		}
		if err == io.EOF {
			err = fmt.Errorf("file ends at %d, before its size %d: %w", off+int64(done), e.Size, io.ErrUnexpectedEOF)
		} else if err == nil && k == 0 {
			err = io.ErrNoProgress
		}
		if err != nil {
			return nil, n.t.fail("read", n.id, off+int64(done), err)
		}
	}
	return fuse.ReadResultData(buf), 0
}

// Symbolic links.

var _ fusefs.NodeReadlinker = (*symlinkNode)(nil)

func (n *symlinkNode) Readlink(ctx context.Context) ([]byte, syscall.Errno) {
	e, errno := n.entry("readlink")
	if errno != 0 {
		return nil, errno
	}
	return []byte(e.Linkname), 0
}
