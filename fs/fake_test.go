package fs

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/tarmount/tarmount/index"
)

// fakeArchive is an in-memory Archive for tests, built with add and link and
// frozen with finish. After finish it is safe for concurrent use.
type fakeArchive struct {
	entries []*fakeEntry
	reads   atomic.Int64 // ReadAt calls
	// blocked receives a value each time a blocking ReadAt starts waiting.
	blocked chan struct{}
}

type fakeEntry struct {
	e        index.Entry
	data     []byte
	children []index.Dirent
	xattrs   []index.Xattr
	readErr  error // every ReadAt fails with it
	block    bool  // ReadAt waits for ctx (at most blockLimit)
	chunk    int   // if set, ReadAt returns at most chunk bytes and no error
}

// blockLimit ends a blocking ReadAt whose ctx is never cancelled, so that a
// broken interrupt path fails a test instead of hanging it.
const blockLimit = 20 * time.Second

var errBlockLimit = errors.New("fake: read was never interrupted")

func newFakeArchive() *fakeArchive {
	a := &fakeArchive{blocked: make(chan struct{}, 16)}
	a.entries = append(a.entries, &fakeEntry{e: index.Entry{Type: index.TypeDir, Mode: 0o755, MTime: index.Time{Sec: 1_600_000_000, Nsec: 123_456_789}}})
	return a
}

// add adds entry e named name in dir parent and returns its id.
func (a *fakeArchive) add(parent index.EntryID, name string, e index.Entry) index.EntryID {
	id := index.EntryID(len(a.entries))
	e.Parent, e.Name = parent, name
	if e.Nlink == 0 {
		e.Nlink = 1
	}
	if e.Type == index.TypeSymlink {
		e.Size = int64(len(e.Linkname))
	}
	a.entries = append(a.entries, &fakeEntry{e: e})
	p := a.entries[parent]
	p.children = append(p.children, index.Dirent{Name: name, ID: id})
	return id
}

func (a *fakeArchive) addFile(parent index.EntryID, name string, mode uint32, data []byte) index.EntryID {
	id := a.add(parent, name, index.Entry{Type: index.TypeReg, Mode: mode, Size: int64(len(data)), MTime: index.Time{Sec: 1_700_000_000, Nsec: 1}})
	a.entries[id].data = data
	return id
}

func (a *fakeArchive) addDir(parent index.EntryID, name string, mode uint32) index.EntryID {
	return a.add(parent, name, index.Entry{Type: index.TypeDir, Mode: mode, MTime: index.Time{Sec: 1_650_000_000, Nsec: 500_000_000}})
}

// link adds a second name for id in dir parent: a hard link.
func (a *fakeArchive) link(parent index.EntryID, name string, id index.EntryID) {
	a.entries[id].e.Nlink++
	p := a.entries[parent]
	p.children = append(p.children, index.Dirent{Name: name, ID: id})
}

// finish sorts the directories and sets their link counts.
func (a *fakeArchive) finish() *fakeArchive {
	for _, fe := range a.entries {
		if fe.e.Type != index.TypeDir {
			continue
		}
		sort.Slice(fe.children, func(i, j int) bool { return fe.children[i].Name < fe.children[j].Name })
		fe.e.Nlink = 2
		for _, c := range fe.children {
			if a.entries[c.ID].e.Type == index.TypeDir {
				fe.e.Nlink++
			}
		}
	}
	return a
}

func (a *fakeArchive) Entry(id index.EntryID) *index.Entry {
	if int(id) >= len(a.entries) {
		return nil
	}
	return &a.entries[id].e
}

func (a *fakeArchive) Children(dir index.EntryID) []index.Dirent {
	return a.entries[dir].children
}

func (a *fakeArchive) Lookup(dir index.EntryID, name string) (index.EntryID, bool) {
	cs := a.entries[dir].children
	i := sort.Search(len(cs), func(i int) bool { return cs[i].Name >= name })
	if i < len(cs) && cs[i].Name == name {
		return cs[i].ID, true
	}
	return 0, false
}

func (a *fakeArchive) Xattrs(id index.EntryID) []index.Xattr {
	return a.entries[id].xattrs
}

func (a *fakeArchive) ReadAt(ctx context.Context, id index.EntryID, p []byte, off int64) (int, error) {
	a.reads.Add(1)
	fe := a.entries[id]
	if fe.block {
		select {
		case a.blocked <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(blockLimit):
			return 0, errBlockLimit
		}
	}
	if fe.readErr != nil {
		return 0, fe.readErr
	}
	if off >= int64(len(fe.data)) {
		return 0, io.EOF
	}
	if fe.chunk > 0 && len(p) > fe.chunk {
		p = p[:fe.chunk]
		return copy(p, fe.data[off:]), nil
	}
	n := copy(p, fe.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (a *fakeArchive) Len() int { return len(a.entries) }

// errChangedRead is a read of a source that changed, as the index reader
// returns it.
var errChangedRead = fmt.Errorf("read span 3: read compressed: %w: ETag \"b\", was \"a\"", index.ErrChanged)

// Fixture layout and contents, shared by unit and mount tests.
const (
	helloText   = "hello, world\n"
	sparseSize  = 3 << 20
	sparseData  = "DATA in the middle of holes"
	sparseAt    = 1 << 20
	bigSize     = 1<<20 + 123
	shortSize   = 100
	shortStored = 50
)

// testArchive builds the fixture:
//
//	/                 dir 0755
//	  big.bin         1 MiB + 123 random bytes, served in 1000-byte reads
//	  dir/            dir 0750, owner 1000:1000, xattr user.dir
//	    file.txt      "hello, world\n", xattrs user.comment and user.empty
//	    hl2           hard link to /hl1
//	    setuid        mode 4755
//	    sub/          dir 1777 (sticky), setgid
//	      deep.txt
//	  eio.bin         ReadAt fails with a plain error (EIO)
//	  empty           0 bytes, mode 0600
//	  fifo            FIFO 0644
//	  hl1             "hard link\n", nlink 2
//	  link            symlink to dir/file.txt
//	  null            char device 1:3
//	  old             mtime before 1970, atime and ctime set
//	  sda             block device 8:0
//	  short.bin       size 100, but only 50 bytes stored (EIO)
//	  slow.bin        ReadAt waits for cancellation
//	  sparse.img      3 MiB, marked sparse, data at 1 MiB
//	  stale.bin       ReadAt fails because the source changed (ESTALE)
func testArchive() *fakeArchive {
	a := newFakeArchive()
	root := index.RootID
	rng := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, bigSize)
	for i := range big {
		big[i] = byte(rng.UintN(256))
	}
	id := a.addFile(root, "big.bin", 0o644, big)
	a.entries[id].chunk = 1000

	dir := a.add(root, "dir", index.Entry{Type: index.TypeDir, Mode: 0o750, UID: 1000, GID: 1000, MTime: index.Time{Sec: 1_650_000_000, Nsec: 999_999_999}})
	a.entries[dir].xattrs = []index.Xattr{{Name: "user.dir", Value: "d"}}
	file := a.addFile(dir, "file.txt", 0o644, []byte(helloText))
	a.entries[file].xattrs = []index.Xattr{{Name: "user.comment", Value: "hi there"}, {Name: "user.empty", Value: ""}}
	a.addFile(dir, "setuid", 0o4755, []byte("#!/bin/sh\n"))
	sub := a.addDir(dir, "sub", 0o3777)
	a.addFile(sub, "deep.txt", 0o444, []byte("deep\n"))

	a.addFile(root, "empty", 0o600, nil)
	id = a.addFile(root, "eio.bin", 0o644, make([]byte, 10))
	a.entries[id].readErr = errors.New("fake: decoder exploded")
	a.add(root, "fifo", index.Entry{Type: index.TypeFIFO, Mode: 0o644, MTime: index.Time{Sec: 5}})
	hl := a.addFile(root, "hl1", 0o640, []byte("hard link\n"))
	a.link(dir, "hl2", hl)
	a.add(root, "link", index.Entry{Type: index.TypeSymlink, Mode: 0o777, Linkname: "dir/file.txt", MTime: index.Time{Sec: 6}})
	a.add(root, "null", index.Entry{Type: index.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3, MTime: index.Time{Sec: 7}})
	a.add(root, "old", index.Entry{Type: index.TypeReg, Mode: 0o644, MTime: index.Time{Sec: -2, Nsec: 500_000_000}, ATime: index.Time{Sec: 1_000_000_000, Nsec: 2},
		CTime: index.Time{Sec: 15_023_750_400, Nsec: 3}}) // ctime in 2446, past int64 nanoseconds
	a.add(root, "sda", index.Entry{Type: index.TypeBlock, Mode: 0o660, GID: 6, Devmajor: 8, Devminor: 0, MTime: index.Time{Sec: 8}})
	id = a.addFile(root, "short.bin", 0o644, make([]byte, shortStored))
	a.entries[id].e.Size = shortSize
	id = a.addFile(root, "slow.bin", 0o644, make([]byte, 10))
	a.entries[id].block = true
	sparse := make([]byte, sparseSize)
	copy(sparse[sparseAt:], sparseData)
	id = a.addFile(root, "sparse.img", 0o644, sparse)
	a.entries[id].e.Sparse = true
	id = a.addFile(root, "stale.bin", 0o644, make([]byte, 10))
	a.entries[id].readErr = errChangedRead
	return a.finish()
}

// id returns the id of path p ("dir/file.txt") in a.
func (a *fakeArchive) id(p string) (index.EntryID, bool) {
	id := index.RootID
	for _, name := range splitPath(p) {
		var ok bool
		if id, ok = a.Lookup(id, name); !ok {
			return 0, false
		}
	}
	return id, true
}

func splitPath(p string) []string {
	return strings.FieldsFunc(p, func(r rune) bool { return r == '/' })
}
