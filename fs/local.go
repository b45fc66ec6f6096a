package fs

import (
	"context"
	"os"
	"sync"
	"syscall"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/tarmount/tarmount/index"
)

// Local is where files of the archive may also be complete on local disk
// (a directory being materialized). Implementations are safe for
// concurrent use.
type Local interface {
	// OpenLocal opens the local copy of file id for reading if it is
	// complete, else returns false. The caller closes the file.
	OpenLocal(id index.EntryID) (*os.File, bool)
}

// Handover from the archive to the local copy. A file opened while its
// local copy is complete is read from that copy: through the kernel's
// FUSE passthrough when it has it (reads, mmap and splice then go to the
// local file without reaching this process), else by pread here. A file
// opened before is read from the archive until it is closed.
//
// The kernel refuses (EIO at open) to have one inode open in passthrough
// and in cached mode at once, so each file node counts its open handles
// of each kind: while cached handles are open, a new local handle is not
// offered for passthrough; while passthrough handles are open, a new
// archive handle bypasses the page cache (FOPEN_DIRECT_IO).
type openCounts struct {
	mu          sync.Mutex
	cached      int // guarded by mu: open handles in the kernel's cached mode
	passthrough int // guarded by mu: open handles offered for passthrough
}

// localHandle is an open file read from the local copy.
type localHandle struct {
	f           *os.File
	n           *fileNode
	passthrough bool
}

var _ fusefs.FilePassthroughFder = (*localHandle)(nil)

// PassthroughFd offers the local file to the kernel, unless cached
// handles of the inode were open when this one was made.
func (h *localHandle) PassthroughFd() (int, bool) {
	return int(h.f.Fd()), h.passthrough
}

var _ fusefs.FileReleaser = (*localHandle)(nil)

func (h *localHandle) Release(ctx context.Context) syscall.Errno {
	h.n.counts.mu.Lock()
	if h.passthrough {
		h.n.counts.passthrough--
	} else {
		h.n.counts.cached--
	}
	h.n.counts.mu.Unlock()
	h.f.Close()
	return 0
}

func (h *localHandle) read(dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.f.ReadAt(dest, off)
	if err != nil && n == 0 && off < h.size() {
		return nil, h.n.t.fail("read local", h.n.id, off, err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *localHandle) size() int64 {
	if st, err := h.f.Stat(); err == nil {
		return st.Size()
	}
	return 0
}

// archiveHandle is an open file read from the archive.
type archiveHandle struct {
	n      *fileNode
	direct bool // not in the kernel's cached mode (FOPEN_DIRECT_IO)
}

var _ fusefs.FileReleaser = (*archiveHandle)(nil)

func (h *archiveHandle) Release(ctx context.Context) syscall.Errno {
	if !h.direct {
		h.n.counts.mu.Lock()
		h.n.counts.cached--
		h.n.counts.mu.Unlock()
	}
	return 0
}

// openLocalOrArchive opens n from its local copy when it is complete, else
// from the archive.
func (n *fileNode) openLocalOrArchive() (fusefs.FileHandle, uint32) {
	const flags = fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH
	c := &n.counts
	if f, ok := n.t.local.OpenLocal(n.id); ok {
		c.mu.Lock()
		defer c.mu.Unlock()
		h := &localHandle{f: f, n: n, passthrough: c.cached == 0}
		if h.passthrough {
			c.passthrough++
		} else {
			c.cached++
		}
		return h, flags
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.passthrough > 0 {
		return &archiveHandle{n: n, direct: true}, fuse.FOPEN_DIRECT_IO | fuse.FOPEN_NOFLUSH
	}
	c.cached++
	return &archiveHandle{n: n}, flags
}
