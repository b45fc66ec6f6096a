// Package index owns what tarmount knows about an archive: the tar scan, the
// decompressor checkpoints, the versioned index file, and random-access
// reads of entries through checkpoints.
//
// It reads the archive through a ranged reader (Source) and knows nothing of
// FUSE, HTTP or S3.
package index

import (
	"errors"
	"sort"
	"strings"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index/inflate"
)

// Errors of this package.
var (
	ErrCorrupt        = errors.New("index: corrupt or changed archive data")
	ErrBadIndex       = errors.New("index: invalid index file")
	ErrVersion        = errors.New("index: unsupported index format version")
	ErrIdentity       = errors.New("index: index was built for another version of the source")
	ErrUnsupported    = errors.New("index: unsupported archive format")
	ErrNotFound       = errors.New("index: no such entry")
	ErrNotRegular     = errors.New("index: not a regular file")
	errTooManyEntries = errors.New("index: too many entries")
)

// Checkpoint is a place in the compressed stream where decoding resumes.
// Kind is inflate's for gzip, or one of this package's for other codecs.
type Checkpoint struct {
	Kind inflate.Kind
	In   CompressedOffset
	// Bit is the bit offset (0-7) in byte In of a gzip or bzip2 block.
	Bit uint8
	// Flags is codec state at the checkpoint: the frame's FLG byte for an
	// lz4 block, the stream's level (1-9) for a bzip2 block, the
	// stream's check type for an xz block.
	Flags uint8
	Out   UncompressedOffset
	// window is the preceding output, compressed with DEFLATE (nil when
	// there is none).
	window []byte
	// pass is what the index pass resumed here needs to check the
	// checksums of the member or frame it enters (gzip: its CRC-32 and
	// size so far; lz4: the frame's block size and content hash so far);
	// nil when the pass cannot. Kept in a partial index only.
	pass []byte
}

// Index describes one archive. It is immutable once built or loaded and
// safe for concurrent use.
type Index struct {
	// Source is the identity of the object the index was built from.
	Source fetch.Identity
	Codec  Codec
	// TarSize is the size of the decoded tar stream.
	TarSize int64
	// Span is the decoded distance between checkpoints asked for at build.
	Span int64
	// End is where the compressed data of the last span ends: the end of
	// the last frame or member (trailing skippable frames, such as a seek
	// table or an embedded index, lie beyond it).
	End CompressedOffset
	// Checkpoints are sorted by Out; the first is at 0. Empty for CodecNone.
	Checkpoints []Checkpoint
	// Digests[i] is the xxhash64 of the decoded bytes from Checkpoints[i]
	// to the next checkpoint (or TarSize).
	Digests []uint64

	// Notes are the members the index left out or renamed, one per
	// kind, sorted (LogNotes).
	Notes []Note

	// memberDigests is the digest of each regular file's data, by
	// EntryID (digest.go); nil when the pass recorded none.
	memberDigests []uint64

	strtab  string
	recs    []rec
	dirents []direntRec
	owners  []ownerRec
	extras  []extraRec
	xattrs  []xattrRec
	sparse  []SparseChunk
}

func (ix *Index) str(r strRef) string { return ix.strtab[r.off : r.off+r.n] }

func (ix *Index) extra(r *rec) *extraRec {
	if r.extra == 0 {
		return &extraRec{}
	}
	return &ix.extras[r.extra-1]
}

// Len returns the number of entries (inodes), the root included.
func (ix *Index) Len() int { return len(ix.recs) }

// Entry returns the entry with the given id, or nil if there is none. The
// entry is built for the caller, who may keep it.
func (ix *Index) Entry(id EntryID) *Entry {
	e := new(Entry)
	if !ix.FillEntry(id, e) {
		return nil
	}
	return e
}

// FillEntry sets *e to the entry with the given id and reports whether
// there is one: Entry without an allocation, for callers that go over
// many entries and keep none.
func (ix *Index) FillEntry(id EntryID, e *Entry) bool {
	if int(id) >= len(ix.recs) {
		return false
	}
	r := &ix.recs[id]
	x := ix.extra(r)
	o := &ix.owners[r.owner]
	*e = Entry{
		Parent:     r.parent,
		Name:       ix.str(r.name),
		Type:       r.typ,
		Mode:       uint32(r.mode),
		UID:        r.uid,
		GID:        r.gid,
		Uname:      ix.str(o.uname),
		Gname:      ix.str(o.gname),
		Size:       r.size,
		MTime:      Time{Sec: r.mtime, Nsec: int32(r.mtimeNsec)},
		ATime:      Time{Sec: x.atime, Nsec: int32(x.atimeNsec)},
		CTime:      Time{Sec: x.ctime, Nsec: int32(x.ctimeNsec)},
		Linkname:   ix.str(x.link),
		Devmajor:   x.devmajor,
		Devminor:   x.devminor,
		DataOffset: UncompressedOffset(r.dataOff),
		Nlink:      r.nlink,
		Sparse:     r.sparse,
	}
	return true
}

func (ix *Index) childRecs(dir EntryID) []direntRec {
	if int(dir) >= len(ix.recs) {
		return nil
	}
	r := &ix.recs[dir]
	return ix.dirents[r.childFirst : r.childFirst+r.childCount]
}

// Children returns the names in directory dir, sorted by name, in a slice
// the caller owns.
func (ix *Index) Children(dir EntryID) []Dirent {
	c := ix.childRecs(dir)
	out := make([]Dirent, len(c))
	for i, d := range c {
		out[i] = Dirent{Name: ix.str(d.name), ID: d.id}
	}
	return out
}

// Lookup finds name in directory dir.
func (ix *Index) Lookup(dir EntryID, name string) (EntryID, bool) {
	c := ix.childRecs(dir)
	i := sort.Search(len(c), func(i int) bool { return ix.str(c[i].name) >= name })
	if i < len(c) && ix.str(c[i].name) == name {
		return c[i].id, true
	}
	return 0, false
}

// LookupPath resolves a slash-separated path from the root without
// following symlinks. "", "." and "/" name the root.
func (ix *Index) LookupPath(p string) (EntryID, bool) {
	id := RootID
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." {
			continue
		}
		next, ok := ix.Lookup(id, part)
		if !ok {
			return 0, false
		}
		id = next
	}
	return id, true
}

// Path returns the first name of id as a slash-separated path from the
// root ("" for the root).
func (ix *Index) Path(id EntryID) string {
	var parts []string
	for id != RootID && int(id) < len(ix.recs) && len(parts) < len(ix.recs) {
		r := &ix.recs[id]
		parts = append(parts, ix.str(r.name))
		id = r.parent
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return strings.Join(parts, "/")
}

// Xattrs returns the extended attributes of id, in a slice the caller owns.
func (ix *Index) Xattrs(id EntryID) []Xattr {
	if int(id) >= len(ix.recs) {
		return nil
	}
	x := ix.extra(&ix.recs[id])
	if x.xattrCount == 0 {
		return nil
	}
	out := make([]Xattr, x.xattrCount)
	for i, a := range ix.xattrs[x.xattrFirst : x.xattrFirst+x.xattrCount] {
		out[i] = Xattr{Name: ix.str(a.name), Value: ix.str(a.value)}
	}
	return out
}

// SparseMap returns the data chunks of a sparse file (shared; do not
// modify), or nil for a file without holes.
func (ix *Index) SparseMap(id EntryID) []SparseChunk {
	if int(id) >= len(ix.recs) {
		return nil
	}
	x := ix.extra(&ix.recs[id])
	return ix.sparse[x.sparseFirst : x.sparseFirst+x.sparseCount]
}

// StoredSize returns the number of data bytes the archive stores for id:
// Size for a regular file, the sum of its chunks for a sparse one.
func (ix *Index) StoredSize(id EntryID) int64 {
	if int(id) >= len(ix.recs) || ix.recs[id].typ != TypeReg {
		return 0
	}
	if !ix.recs[id].sparse {
		return ix.recs[id].size
	}
	return storedSize(&Entry{Type: TypeReg, Sparse: true}, ix.SparseMap(id))
}

// storedSize returns the data bytes stored for entry e with sparse map
// chunks (see StoredSize).
func storedSize(e *Entry, chunks []SparseChunk) int64 {
	if e.Type != TypeReg {
		return 0
	}
	if !e.Sparse {
		return e.Size
	}
	var n int64
	for _, c := range chunks {
		n += c.Length
	}
	return n
}

// StreamOnly reports whether some spans can only be read from the local
// decoded copy that the index pass writes (BuildOptions.Local,
// ReaderOptions.Local): a single-frame zstd archive, an xz stream of one
// block or with blocks too big to decode per read.
func (ix *Index) StreamOnly() bool {
	for i := range ix.Checkpoints {
		if ix.Checkpoints[i].Kind == kindLocal {
			return true
		}
	}
	return false
}

// span returns the index of the checkpoint span that holds off.
func (ix *Index) span(off int64) int {
	cps := ix.Checkpoints
	return sort.Search(len(cps), func(i int) bool { return int64(cps[i].Out) > off }) - 1
}

// spanEnd returns the decoded end of span i.
func (ix *Index) spanEnd(i int) int64 {
	if i+1 < len(ix.Checkpoints) {
		return int64(ix.Checkpoints[i+1].Out)
	}
	return ix.TarSize
}
