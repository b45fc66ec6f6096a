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
// The kernel fails an open (EIO) that would put one inode in passthrough
// and in cached mode at once, or give it a second backing file. go-fuse
// keeps one backing file per node, registered by the first open whose
// handle offers one and shared by every later open while any is open;
// but it drops a reference at every release while one is registered,
// also for a handle that never took one. A node whose handles mixed the
// two kinds could so lose its backing file while the kernel still uses
// it, and every open after fail until the last one closes. So each file
// node chooses once, at its first open: passthrough if the local copy is
// complete then, else reads here for good (cached, as the kernel keeps
// its pages). A passthrough node whose copy cannot be opened later gives
// passthrough up for good. Every handle implements PassthroughFd, so that
// each takes a reference while the node has a backing file; the only
// handles without one are then those opened while it has none, and it
// never gets one again (no handle offers its file any more).
type handover struct {
	mu   sync.Mutex
	mode handoverMode // guarded by mu
}

type handoverMode uint8

const (
	handoverUnset       handoverMode = iota // not opened yet
	handoverPassthrough                     // local handles offer their file
	handoverServer                          // reads come here, for good
)

// passthrough reports whether the node offers its local copy for
// passthrough now. go-fuse asks (PassthroughFd) under its own lock, after
// Open returned: the answer must be the mode then, not at Open, so that no
// backing file is registered once the node has given passthrough up.
func (c *handover) passthrough() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mode == handoverPassthrough
}

// localHandle is an open file read from the local copy.
type localHandle struct {
	f *os.File
	n *fileNode
}

var _ fusefs.FilePassthroughFder = (*localHandle)(nil)

// PassthroughFd offers the local file to the kernel if the node chose
// passthrough. go-fuse asks only when the node has no backing file; while
// it has one, every handle that implements this shares it.
func (h *localHandle) PassthroughFd() (int, bool) {
	return int(h.f.Fd()), h.n.handover.passthrough()
}

var _ fusefs.FileReleaser = (*localHandle)(nil)

func (h *localHandle) Release(ctx context.Context) syscall.Errno {
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
	n *fileNode
}

var _ fusefs.FilePassthroughFder = (*archiveHandle)(nil)

// PassthroughFd offers nothing: there is no local file. It is there so
// that go-fuse gives the handle a reference to the node's backing file
// when it has one (then the local copy is complete and the kernel reads
// it), as it drops one at every release.
func (h *archiveHandle) PassthroughFd() (int, bool) {
	return -1, false
}

// openLocalOrArchive opens n from its local copy when it is complete, else
// from the archive, and makes the node's choice of handover (see
// handover).
func (n *fileNode) openLocalOrArchive() (fusefs.FileHandle, uint32) {
	const flags = fuse.FOPEN_KEEP_CACHE | fuse.FOPEN_NOFLUSH
	f, local := n.t.local.OpenLocal(n.id)
	c := &n.handover
	c.mu.Lock()
	if c.mode == handoverUnset {
		c.mode = handoverServer
		if local {
			c.mode = handoverPassthrough
		}
	}
	if !local && c.mode == handoverPassthrough {
		c.mode = handoverServer
	}
	c.mu.Unlock()
	if local {
		return &localHandle{f: f, n: n}, flags
	}
	return &archiveHandle{n: n}, flags
}
