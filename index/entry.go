package index

import "github.com/tarmount/tarmount/index/tarscan"

// EntryID names one inode of the archive tree. IDs are dense, start at
// RootID and are stable for a given index file: the filesystem uses them
// as inode numbers, so hard links (several names, one EntryID) share an
// inode.
type EntryID uint32

// RootID is the archive's top directory. It always exists, even when the
// archive has no entry for "." or "./".
const RootID EntryID = 0

// Type is the kind of an entry.
type Type uint8

// Entry types. Hard links are not a type: a hard link is a second name
// (Dirent) for the EntryID of its target.
const (
	TypeReg Type = iota + 1
	TypeDir
	TypeSymlink
	TypeChar
	TypeBlock
	TypeFIFO
)

func (t Type) String() string {
	switch t {
	case TypeReg:
		return "file"
	case TypeDir:
		return "dir"
	case TypeSymlink:
		return "symlink"
	case TypeChar:
		return "char"
	case TypeBlock:
		return "block"
	case TypeFIFO:
		return "fifo"
	}
	return "unknown"
}

// UncompressedOffset is a byte offset in the decoded tar stream.
type UncompressedOffset int64

// CompressedOffset is a byte offset in the source object as stored.
type CompressedOffset int64

// Entry is one inode: everything a tar header says about a member, with
// the location of its data in the decoded tar stream.
//
// Entries belong to their Index and must not be modified.
type Entry struct {
	// Parent is the directory holding the entry's first name; RootID for
	// the root itself.
	Parent EntryID
	// Name is the entry's first name within Parent ("" for the root).
	Name string
	Type Type
	// Mode holds the permission bits with setuid, setgid and sticky
	// (mask 07777); the file type is in Type.
	Mode         uint32
	UID, GID     uint32
	Uname, Gname string
	// Size is the logical size: the real size of a sparse file, the
	// length of Linkname for a symlink, 0 for directories and devices.
	Size int64
	// ATime and CTime are zero when the archive does not record them.
	MTime, ATime, CTime Time
	// Linkname is the target of a symlink.
	Linkname string
	// Devmajor and Devminor are set for TypeChar and TypeBlock.
	Devmajor, Devminor uint32
	// DataOffset is where the member's stored data starts in the decoded
	// tar stream. For a sparse file the stored data is the concatenation
	// of its data chunks (see Index.Sparse).
	DataOffset UncompressedOffset
	// Nlink is the number of names of a file (hard links + 1), or 2 plus
	// the number of subdirectories of a directory.
	Nlink uint32
	// Sparse is true when the file has a sparse map (Index.SparseMap).
	Sparse bool
}

// The stored form of the tree. Records have a fixed size and hold no
// pointers: strings are references into one string table, and what few
// entries have (access and change times, link targets, devices, xattrs,
// sparse maps) sits in a side table. A million entries then load as a few
// large allocations that the garbage collector never scans.

// strRef is a string in Index.strtab.
type strRef struct{ off, n uint32 }

// rec is one entry.
type rec struct {
	parent     EntryID
	name       strRef
	typ        Type
	sparse     bool
	mode       uint16
	uid, gid   uint32
	owner      uint32 // index in Index.owners
	mtimeNsec  uint32 // fills the padding before size
	size       int64
	mtime      int64 // seconds
	dataOff    int64
	nlink      uint32
	extra      uint32 // 1 + index in Index.extras; 0 when there is none
	childFirst uint32 // range in Index.dirents (directories)
	childCount uint32
}

// extraRec holds the fields most entries lack.
type extraRec struct {
	atime, ctime             int64 // seconds
	atimeNsec, ctimeNsec     uint32
	link                     strRef
	devmajor, devminor       uint32
	xattrFirst, xattrCount   uint32 // range in Index.xattrs
	sparseFirst, sparseCount uint32 // range in Index.sparse
}

type direntRec struct {
	name strRef
	id   EntryID
}

type xattrRec struct{ name, value strRef }

type ownerRec struct{ uname, gname strRef }

// Dirent is one name in a directory. Several Dirents may point at the same
// EntryID when the archive has hard links.
type Dirent struct {
	Name string
	ID   EntryID
}

// Xattr is one extended attribute recorded in the archive (from pax
// SCHILY.xattr.* or LIBARCHIVE.xattr.* records).
type Xattr struct {
	Name  string
	Value string
}

// SparseChunk is one data region of a sparse file: Length bytes at logical
// Offset. Bytes outside every chunk read as zeros. Chunks are sorted by
// Offset, do not overlap, and their data is stored back to back starting at
// the entry's DataOffset.
type SparseChunk struct {
	Offset int64
	Length int64
}

// Time is a time recorded in the archive: seconds since the Unix epoch and
// nanoseconds (see tarscan.Time).
type Time = tarscan.Time

// nanosPerSecond bounds the nanoseconds of a stored Time.
const nanosPerSecond = 1_000_000_000
