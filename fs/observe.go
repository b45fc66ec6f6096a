package fs

import (
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

// ObserveFunc is called once per FUSE request that the mount answers, when
// the answer is ready: op is one of the Op* names, d the time spent serving
// it, errno the error answered (0 on success). It is called from many
// goroutines at once and must be safe for that, and cheap: it runs on the
// read path.
type ObserveFunc func(op string, d time.Duration, errno syscall.Errno)

// Names of the FUSE requests given to ObserveFunc. Requests not listed
// (forget, flush, and the writes that the read-only mount refuses) are
// not observed.
const (
	OpLookup      = "lookup"
	OpGetattr     = "getattr"
	OpAccess      = "access"
	OpOpen        = "open"
	OpRead        = "read"
	OpLseek       = "lseek"
	OpRelease     = "release"
	OpOpendir     = "opendir"
	OpReaddir     = "readdir"
	OpReaddirplus = "readdirplus"
	OpReleasedir  = "releasedir"
	OpReadlink    = "readlink"
	OpGetxattr    = "getxattr"
	OpListxattr   = "listxattr"
	OpStatfs      = "statfs"
)

// Ops lists every op name that ObserveFunc may be given, so that a
// caller can prepare per-op state up front.
var Ops = []string{
	OpLookup, OpGetattr, OpAccess, OpOpen, OpRead, OpLseek, OpRelease, OpOpendir, OpReaddir,
	OpReaddirplus, OpReleasedir, OpReadlink, OpGetxattr, OpListxattr, OpStatfs,
}

// observedFS times the requests of the read side of a mount at go-fuse's
// raw level, where each method is one kernel request: one directory
// listing request, for example, whatever the number of entries it
// returns. It adds two clock reads and one call per request, and no
// allocation.
type observedFS struct {
	fuse.RawFileSystem
	observe ObserveFunc
}

// errnoOf returns the errno of a go-fuse status: 0 for OK.
func errnoOf(st fuse.Status) syscall.Errno {
	if st <= 0 {
		return 0
	}
	return syscall.Errno(st)
}

func (o *observedFS) done(op string, start time.Time, st fuse.Status) {
	o.observe(op, time.Since(start), errnoOf(st))
}

func (o *observedFS) Lookup(cancel <-chan struct{}, header *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	start := time.Now()
	st := o.RawFileSystem.Lookup(cancel, header, name, out)
	if st == fuse.OK && out.NodeId == 0 {
		// go-fuse answers a missing name with a negative entry (node
		// 0) for the kernel to cache: for the observer it is ENOENT.
		o.done(OpLookup, start, fuse.ENOENT)
		return st
	}
	o.done(OpLookup, start, st)
	return st
}

func (o *observedFS) GetAttr(cancel <-chan struct{}, input *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	start := time.Now()
	st := o.RawFileSystem.GetAttr(cancel, input, out)
	o.done(OpGetattr, start, st)
	return st
}

func (o *observedFS) Access(cancel <-chan struct{}, input *fuse.AccessIn) fuse.Status {
	start := time.Now()
	st := o.RawFileSystem.Access(cancel, input)
	o.done(OpAccess, start, st)
	return st
}

func (o *observedFS) Open(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	start := time.Now()
	st := o.RawFileSystem.Open(cancel, input, out)
	o.done(OpOpen, start, st)
	return st
}

func (o *observedFS) Read(cancel <-chan struct{}, input *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	start := time.Now()
	res, st := o.RawFileSystem.Read(cancel, input, buf)
	o.done(OpRead, start, st)
	return res, st
}

func (o *observedFS) Lseek(cancel <-chan struct{}, in *fuse.LseekIn, out *fuse.LseekOut) fuse.Status {
	start := time.Now()
	st := o.RawFileSystem.Lseek(cancel, in, out)
	o.done(OpLseek, start, st)
	return st
}

func (o *observedFS) Release(cancel <-chan struct{}, input *fuse.ReleaseIn) {
	start := time.Now()
	o.RawFileSystem.Release(cancel, input)
	o.done(OpRelease, start, fuse.OK)
}

func (o *observedFS) OpenDir(cancel <-chan struct{}, input *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	start := time.Now()
	st := o.RawFileSystem.OpenDir(cancel, input, out)
	o.done(OpOpendir, start, st)
	return st
}

func (o *observedFS) ReadDir(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	start := time.Now()
	st := o.RawFileSystem.ReadDir(cancel, input, out)
	o.done(OpReaddir, start, st)
	return st
}

func (o *observedFS) ReadDirPlus(cancel <-chan struct{}, input *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	start := time.Now()
	st := o.RawFileSystem.ReadDirPlus(cancel, input, out)
	o.done(OpReaddirplus, start, st)
	return st
}

func (o *observedFS) ReleaseDir(input *fuse.ReleaseIn) {
	start := time.Now()
	o.RawFileSystem.ReleaseDir(input)
	o.done(OpReleasedir, start, fuse.OK)
}

func (o *observedFS) Readlink(cancel <-chan struct{}, header *fuse.InHeader) ([]byte, fuse.Status) {
	start := time.Now()
	out, st := o.RawFileSystem.Readlink(cancel, header)
	o.done(OpReadlink, start, st)
	return out, st
}

func (o *observedFS) GetXAttr(cancel <-chan struct{}, header *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	start := time.Now()
	sz, st := o.RawFileSystem.GetXAttr(cancel, header, attr, dest)
	o.done(OpGetxattr, start, st)
	return sz, st
}

func (o *observedFS) ListXAttr(cancel <-chan struct{}, header *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	start := time.Now()
	sz, st := o.RawFileSystem.ListXAttr(cancel, header, dest)
	o.done(OpListxattr, start, st)
	return sz, st
}

func (o *observedFS) StatFs(cancel <-chan struct{}, input *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	start := time.Now()
	st := o.RawFileSystem.StatFs(cancel, input, out)
	o.done(OpStatfs, start, st)
	return st
}
