package fs

import (
	"context"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/tarmount/tarmount/index"
)

// dirStream lists one directory: ".", "..", then the children in name order.
// The offset of an entry is its position plus one, so the listing can be
// resumed anywhere (Seekdir).
//
// It is both the DirStream of Readdir and the handle of an open directory.
// go-fuse serializes the calls on one handle, so it needs no lock.
type dirStream struct {
	dir       *dirNode
	parentIno uint64
	children  []index.Dirent // shared with the Archive

	pos  int          // next position: 0 ".", 1 "..", k+2 children[k]
	last index.Dirent // the child Readdirent returned last; ID valid when Name != ""
}

func (n *dirNode) newDirStream() *dirStream {
	parent := n.id
	if e := n.t.a.Entry(n.id); e != nil && n.id != index.RootID {
		parent = e.Parent
	}
	return &dirStream{
		dir:       n,
		parentIno: inodeNumber(parent),
		children:  n.t.a.Children(n.id),
	}
}

const dotEntries = 2 // "." and ".."

func (d *dirStream) HasNext() bool {
	return d.pos < len(d.children)+dotEntries
}

func (d *dirStream) Next() (fuse.DirEntry, syscall.Errno) {
	var de fuse.DirEntry
	var errno syscall.Errno
	switch d.pos {
	case 0:
		de = fuse.DirEntry{Name: ".", Mode: syscall.S_IFDIR, Ino: inodeNumber(d.dir.id)}
	case 1:
		de = fuse.DirEntry{Name: "..", Mode: syscall.S_IFDIR, Ino: d.parentIno}
	default:
		c := d.children[d.pos-dotEntries]
		de = fuse.DirEntry{Name: c.Name, Ino: inodeNumber(c.ID)}
		if e := d.dir.t.a.Entry(c.ID); e != nil {
			de.Mode = fileType(c.ID, e)
			d.last = c
		} else {
			errno = d.dir.t.fail("readdir", c.ID, 0, errMissingEntry)
		}
	}
	d.pos++
	de.Off = uint64(d.pos)
	return de, errno
}

func (d *dirStream) Close() {}

var _ fusefs.FileReaddirenter = (*dirStream)(nil)

func (d *dirStream) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	if !d.HasNext() {
		return nil, 0
	}
	de, errno := d.Next()
	if errno != 0 {
		return nil, errno
	}
	return &de, 0
}

var _ fusefs.FileSeekdirer = (*dirStream)(nil)

func (d *dirStream) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	if off > uint64(len(d.children)+dotEntries) {
		return syscall.EINVAL
	}
	d.pos = int(off)
	d.last = index.Dirent{}
	return 0
}

var _ fusefs.FileLookuper = (*dirStream)(nil)

// Lookup serves readdirplus: the name is usually the one just listed, whose
// id is known without a search.
func (d *dirStream) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fusefs.Inode, syscall.Errno) {
	if d.last.Name != "" && name == d.last.Name {
		return d.dir.child(ctx, d.last.ID, out)
	}
	return d.dir.Lookup(ctx, name, out)
}

var _ fusefs.FileReleasedirer = (*dirStream)(nil)

func (d *dirStream) Releasedir(ctx context.Context, releaseFlags uint32) {}
