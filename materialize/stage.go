package materialize

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/index/tarscan"
)

// stager is what a one-pass extraction (Stage) holds between the index
// build and Run: the files it staged, by data offset, the stage
// directories it spread named ones over, the slabs it copies member data
// into, the directories of DIR it made or opened to place files early,
// and the descriptors they may take.
//
// Concurrency: Stage runs on one goroutine, before Run; the fields marked
// "Stage's goroutine" are used by it alone, then by Run once it waited
// for wg, then by Close once the writers stopped. mu guards dirs and
// staged, which writers (a file falling back to a stage directory) and
// Run use too; it is a leaf lock: nothing else is locked while it is held.
// The writers finish staged files (wg, fds) and return slabs (slabDone).
type stager struct {
	// set once, by Open
	root      earlyDir            // DIR (the lifecycle's descriptor, never closed here)
	fdBudget  int64               // unnamed staged files kept open at most (fds)
	slabBytes int64               // the size of a slab
	sem       *semaphore.Weighted // the job's memory budget, shared with span decoding

	mu sync.Mutex
	// dirs are tmp/bXX, made on first use (dir), guarded by mu: named
	// staged files are spread over them, since creates and unlinks in
	// one directory serialize on its lock.
	dirs   [stageBuckets]int
	staged map[int64]*wfile // guarded by mu: by DataOffset
	// placed is where the files that Stage placed early are, complete,
	// by DataOffset (OpenPlaced); changed is closed when one is added,
	// nil while nobody waits (PlacedChanged). Guarded by mu.
	placed  map[int64]string
	changed chan struct{}
	// order holds the data offsets of the files Stage staged, in archive
	// order, from front on those not placed yet (StagedBefore); trusted
	// are the files an earlier job's Stage placed that Run takes as
	// complete (TrustPlaced), by data offset. Guarded by mu.
	order   []int64
	front   int
	trusted map[int64]string

	wg  sync.WaitGroup // staged files not fully written
	fds atomic.Int64   // staged files made unnamed and kept open; beyond fdBudget they are named
	// slabFree holds slabs whose pieces are all written, for the next
	// ones (its own lock: writers put, Stage gets).
	slabFree bufList

	// Stage's goroutine
	slab      *slab               // the slab Stage copies member data into; Run lets it go
	early     map[string]earlyDir // the directories Stage made or opened, by path; Run closes them
	earlyMade []string            // the directories Stage made, parents first
}

// init readies a stager for Open: nothing staged yet, no stage directory
// made.
func (s *stager) init(sem *semaphore.Weighted, slabBytes int64) {
	s.sem, s.slabBytes, s.slabFree, s.root = sem, slabBytes, bufList{max: stageFreeSlabs}, earlyDir{fd: -1}
	s.staged, s.early, s.placed, s.trusted = map[int64]*wfile{}, map[string]earlyDir{}, map[int64]string{}, map[int64]string{}
	for i := range s.dirs {
		s.dirs[i] = -1
	}
}

// Stage takes the data of one member during a one-pass index build
// (index.BuildOptions.OnMember): a regular file's data is copied to the
// writer pool, which writes it to a temporary file; Run later moves it
// into place with its metadata. Other members are only screened. It
// blocks while the pool holds MemoryBytes.
func (j *Job) Stage(h *tarscan.Header, data io.Reader) error {
	j.Screen(h)
	if j.life.complete || j.life.replace || h.Typeflag != tarscan.TypeReg || h.StoredSize <= 0 {
		// An upgrade writes only what changed, which Run finds out
		// once the index is whole, and reads it from spans.
		return nil
	}
	wf := &wfile{size: h.Size, sparse: h.Sparse != nil, fd: -1}
	off := h.DataOffset
	var perm uint32
	switch dir, base, p, ok := j.stage.earlyPlace(h.Name); {
	case ok && !j.life.noTmpfile.Load():
		// Written in its own directory, unnamed, and linked under its
		// name once complete: Run only has to check it.
		perm, wf.made = j.meta.createPerm(uint32(h.Mode), dir.plain)
		wf.dir, wf.anon, wf.early, wf.path = dir.fd, true, base, p
	case j.stage.fds.Add(1) <= j.stage.fdBudget && !j.life.noTmpfile.Load():
		// Unnamed, in the tmp directory, and kept open until Run
		// links it into place: no directory entry to make or remove.
		perm, wf.made = j.meta.createPerm(uint32(h.Mode), j.life.rootPlain)
		wf.dir, wf.anon = j.life.tmpFd, true
	default:
		perm, wf.made = j.meta.createPerm(uint32(h.Mode), j.life.rootPlain)
		dir, err := j.stage.dir(j.life.tmpFd, stageBucket(off))
		if err != nil {
			return err
		}
		wf.dir, wf.tmp = dir, stagedName(off)
	}
	wf.opener = func(w *wfile) (int, error) {
		if !w.anon {
			return createTmp(w.dir, w.tmp, perm, w.size, w.sparse)
		}
		fd, err := unix.Openat(w.dir, ".", unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, perm)
		if err == unix.EOPNOTSUPP || err == unix.EISDIR || err == unix.EINVAL {
			j.life.noTmpfile.Store(true)
			w.anon, w.early, w.tmp = false, "", stagedName(off)
			if w.dir, err = j.stage.dir(j.life.tmpFd, stageBucket(off)); err != nil {
				return -1, err
			}
			return createTmp(w.dir, w.tmp, perm, w.size, w.sparse)
		}
		if err != nil {
			return -1, fmt.Errorf("create a staged file: %w", err)
		}
		if err := presize(fd, w.size, w.sparse); err != nil {
			unix.Close(fd)
			return -1, err
		}
		return fd, nil
	}
	// The metadata goes on at once, from the header: Run then only
	// links the file into place when the index says the same.
	meta := &appliedMeta{entry: index.HeaderEntry(h), xattrs: index.HeaderXattrs(h)}
	name := h.Name
	wf.finish = func(wf *wfile) error {
		defer j.stage.wg.Done()
		fd, err := wf.file()
		if err == nil {
			err = setMetaFd(fd, &meta.entry, meta.xattrs, j.meta, wf.made, j.warn, constPath(name))
		}
		if err == nil {
			wf.meta = meta
		}
		if err == nil && wf.early != "" {
			if err = j.stage.placeEarly(wf, fd, off, j.life.tmpFd, j.life.placed[off]); err == nil && wf.placed {
				// Journaled first: StagedBefore flushes what it saw.
				j.life.jr.AddPlaced(off, wf.path)
				j.stage.setPlaced(off, wf.path)
			}
		}
		if wf.anon && err == nil {
			return nil // kept open for Run
		}
		if cerr := wf.close(); err == nil {
			err = cerr
		}
		return err
	}
	var chunks []index.SparseChunk
	for _, c := range h.Sparse {
		chunks = append(chunks, index.SparseChunk{Offset: c.Offset, Length: c.Length})
	}
	j.stage.mu.Lock()
	j.stage.staged[h.DataOffset] = wf
	j.stage.order = append(j.stage.order, h.DataOffset)
	j.stage.mu.Unlock()
	j.stage.wg.Add(1)
	wf.pending.Store(1)
	for stored := int64(0); stored < h.StoredSize; {
		n := min(j.stage.slabBytes, h.StoredSize-stored)
		s, err := j.stage.slabFor(j.pool.ctx, n)
		if err != nil {
			return j.pool.failure()
		}
		buf := s.buf[s.used : s.used+int(n) : s.used+int(n)]
		if _, err := io.ReadFull(data, buf); err != nil {
			return err
		}
		s.used += int(n)
		pcs := logicalPieces(chunks, wf.sparse, stored, buf)
		// The slab goes back with the last piece written from it.
		s.refs.Add(int32(len(pcs)))
		for _, p := range pcs {
			wf.pending.Add(1)
			if err := j.pool.submit(func() error {
				defer j.stage.slabDone(s)
				return j.writePiece(wf, p.at, p.data)
			}); err != nil {
				return err
			}
		}
		stored += n
	}
	return wf.pieceDone()
}

// stageFreeSlabs is how many written slabs Stage keeps for reuse.
const stageFreeSlabs = 32

// slab is a buffer that Stage fills with the data of members one after
// the other, so that small members share one and, once written, it is
// reused: a fresh buffer per member cost its allocation, its page faults
// and the collections they bring about.
type slab struct {
	buf  []byte
	used int          // bytes filled (only Stage's goroutine)
	refs atomic.Int32 // pieces not yet written, +1 while Stage may fill it
}

// slabFor returns the slab that the next n bytes (at most slabBytes) of
// member data go into: the current one while they fit, else a new one
// (reused when one is free) once the memory budget has room for it. It
// fails when ctx is done first.
func (s *stager) slabFor(ctx context.Context, n int64) (*slab, error) {
	if sl := s.slab; sl != nil && int64(len(sl.buf)-sl.used) >= n {
		return sl, nil
	}
	s.dropSlab()
	if err := s.sem.Acquire(ctx, s.slabBytes); err != nil {
		return nil, err
	}
	buf := s.slabFree.get()
	if buf == nil {
		buf = make([]byte, s.slabBytes)
	}
	sl := &slab{buf: buf}
	sl.refs.Store(1)
	s.slab = sl
	return sl, nil
}

// dropSlab lets the current slab go once its pieces are written.
func (s *stager) dropSlab() {
	if s.slab != nil {
		s.slabDone(s.slab)
		s.slab = nil
	}
}

// slabDone ends one reference to sl: the last gives it back (to slabFree
// and to the memory budget). Writers call it.
func (s *stager) slabDone(sl *slab) {
	if sl.refs.Add(-1) == 0 {
		s.slabFree.put(sl.buf)
		s.sem.Release(s.slabBytes)
	}
}

// wait returns once every staged file is written, or with ctx's error.
func (s *stager) wait(ctx context.Context) error {
	staged := make(chan struct{})
	go func() {
		s.wg.Wait()
		close(staged)
	}()
	select {
	case <-staged:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// earlyDir is a directory a one-pass job made (or found) while staging.
type earlyDir struct {
	fd    int  // -1: files below it are not placed early
	plain bool // made by this job in a plain directory (plainDir)
}

// earlyPlace returns where a member named member goes in DIR, for Stage to
// write it there at once: its directory (made as needed), its name and
// its path as the index has it (index.CleanName). It returns false when
// the member cannot be placed early: a refused name, a directory that
// cannot be made without removing something in the way, or too many
// directories open. Only Stage calls it.
func (s *stager) earlyPlace(member string) (dir earlyDir, base, p string, ok bool) {
	p, ok = index.CleanName(member)
	if !ok || p == "" {
		return earlyDir{}, "", "", false
	}
	parent, base := "", p
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		parent, base = p[:i], p[i+1:]
	}
	if !validName(base) || (parent == "" && base == stateDirName) {
		return earlyDir{}, "", "", false
	}
	dir = s.earlyDir(parent)
	return dir, base, p, dir.fd >= 0
}

// earlyDir returns directory p of DIR, making it (mode 0700, as Run does)
// and its parents when missing. It never removes anything and never
// follows a symbolic link: whatever is in the way makes it fail (fd -1).
func (s *stager) earlyDir(p string) earlyDir {
	if p == "" {
		return s.root
	}
	if d, ok := s.early[p]; ok {
		return d
	}
	d := earlyDir{fd: -1}
	parentPath, base := "", p
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		parentPath, base = p[:i], p[i+1:]
	}
	if validName(base) && !(parentPath == "" && base == stateDirName) {
		// Counted once the parents are made: a deep path makes many
		// at once. Past the budget they fail (fd -1) and are kept so.
		if parent := s.earlyDir(parentPath); parent.fd >= 0 && len(s.early) < int(s.fdBudget/2) {
			err := unix.Mkdirat(parent.fd, base, 0o700)
			if err == nil || err == unix.EEXIST {
				if err == nil {
					s.earlyMade = append(s.earlyMade, p)
				}
				if fd, oerr := openDirBeneath(parent.fd, base); oerr == nil {
					d = earlyDir{fd: fd, plain: err == nil && parent.plain}
				}
			}
		}
	}
	s.early[p] = d
	return d
}

// closeEarly closes the directories Stage opened.
func (s *stager) closeEarly() {
	for p, d := range s.early {
		if d.fd >= 0 {
			unix.Close(d.fd)
		}
		delete(s.early, p)
	}
}

// placeEarly links the complete staged file wf, open at fd, under its
// name. When the name is taken (a member listed twice, an earlier run's
// file), the file stays staged for Run, which replaces what is there if
// the index says so: kept open and unnamed within the budget, else named
// in a stage directory of tmpFd. What an earlier job's Stage placed there
// for the same member (prior, its path as the journal says) is replaced
// at once: it holds the same bytes, not yet checked.
func (s *stager) placeEarly(wf *wfile, fd int, off int64, tmpFd int, prior string) error {
	err := linkFd(fd, wf.dir, wf.early)
	if err == unix.EEXIST && prior == wf.path {
		tmp := "p" + stagedName(off)
		unix.Unlinkat(tmpFd, tmp, 0)
		if err = linkFd(fd, tmpFd, tmp); err == nil {
			// A regular file or a symlink there is replaced, never
			// followed; a directory stays (EISDIR).
			if err = unix.Renameat(tmpFd, tmp, wf.dir, wf.early); err != nil {
				unix.Unlinkat(tmpFd, tmp, 0)
				err = unix.EEXIST
			}
		}
	}
	if err == nil {
		wf.placed = true
		wf.anon = false // closed now
		return nil
	}
	if err != unix.EEXIST {
		return err
	}
	wf.early, wf.path = "", ""
	if s.fds.Add(1) <= s.fdBudget {
		return nil // kept open, unnamed
	}
	dir, err := s.dir(tmpFd, stageBucket(off))
	if err != nil {
		return err
	}
	wf.anon, wf.dir, wf.tmp = false, dir, stagedName(off)
	unix.Unlinkat(dir, wf.tmp, 0)
	return linkFd(fd, dir, wf.tmp)
}

// setPlaced records that the file whose data starts at off is complete
// under its name p, and wakes those waiting for one (PlacedChanged).
func (s *stager) setPlaced(off int64, p string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.placed[off] = p
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// StagedBefore reports whether every file Stage was handed whose data
// starts before need of the tar stream is complete in DIR under its name,
// with its header's metadata, and said so in the journal, written out
// (durable against a crash of the process): a stopped one-pass
// extraction may then resume its pass at need, trusting them
// (TrustPlaced). A file Stage could not place under its name (taken, or
// its directory not made) holds it back until Run. Safe for concurrent
// use; it is cheap when it reports false.
func (j *Job) StagedBefore(need int64) bool {
	s := &j.stage
	s.mu.Lock()
	for s.front < len(s.order) {
		if _, ok := s.placed[s.order[s.front]]; !ok {
			break
		}
		s.front++
	}
	if s.front > 1024 && 2*s.front > len(s.order) {
		s.order = append(s.order[:0], s.order[s.front:]...)
		s.front = 0
	}
	held := s.front == len(s.order) || s.order[s.front] >= need
	s.mu.Unlock()
	return held && j.life.jr != nil && j.life.jr.Flush() == nil
}

// Placed reports whether an earlier job's Stage placed the regular file
// whose data starts at dataOffset of the tar stream under the member name
// name, as the journal says (TrustPlaced may then take it). Safe for
// concurrent use.
func (j *Job) Placed(dataOffset int64, name string) bool {
	p, ok := index.CleanName(name)
	return ok && p != "" && j.life.placed[dataOffset] == p
}

// TrustPlaced makes Run take the files an earlier job's Stage placed
// (the journal says where) whose data starts before `before` as
// complete, when the index puts them at that path: Run applies the
// index's metadata and makes their other names, and writes no data. A
// one-pass extraction whose pass resumed at before calls it before Run,
// its stopped pass having kept that resume point once StagedBefore(before)
// said so. Abandon removes them too. Safe for concurrent use.
func (j *Job) TrustPlaced(before int64) {
	s := &j.stage
	s.mu.Lock()
	defer s.mu.Unlock()
	for off, p := range j.life.placed {
		if off < before {
			s.trusted[off] = p
			s.placed[off] = p // OpenPlaced serves it, IsTrusted says why
		}
	}
}

// IsTrusted reports whether the file whose data starts at dataOffset is
// one TrustPlaced took: placed by an earlier job, whose bytes the caller
// of OpenPlaced checks itself. Safe for concurrent use.
func (j *Job) IsTrusted(dataOffset int64) bool {
	j.stage.mu.Lock()
	defer j.stage.mu.Unlock()
	_, ok := j.stage.trusted[dataOffset]
	return ok
}

// OpenPlaced opens for reading the regular file whose data starts at
// dataOffset of the tar stream, if Stage has written it whole and placed
// it under its name in DIR, and returns that name (index.CleanName of
// the member's); else it returns false. A file is placed with the data
// and metadata of the member the pass read there, before Run has checked
// it against the index: the caller checks that the index describes the
// same member (name, and the data's digest). Safe for concurrent use.
func (j *Job) OpenPlaced(dataOffset int64) (f *os.File, name string, ok bool) {
	j.stage.mu.Lock()
	defer j.stage.mu.Unlock()
	p, ok := j.stage.placed[dataOffset]
	if !ok || j.life.root == nil {
		return nil, "", false
	}
	// Under mu: Run does not move it away meanwhile (unplace).
	f, err := j.life.root.OpenFile(p, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		j.log.Debug("open a placed file", "path", p, "err", err)
		return nil, "", false
	}
	return f, p, true
}

// PlacedChanged returns a channel closed once Stage places another file
// (OpenPlaced).
func (j *Job) PlacedChanged() <-chan struct{} {
	j.stage.mu.Lock()
	defer j.stage.mu.Unlock()
	if j.stage.changed == nil {
		j.stage.changed = make(chan struct{})
	}
	return j.stage.changed
}

func stageBucket(off int64) int   { return int((off >> 9) % stageBuckets) }
func stagedName(off int64) string { return fmt.Sprintf("s%x", off) }

// dir returns stage directory i (bXX in tmpFd), made on first use.
func (s *stager) dir(tmpFd, i int) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dirLocked(tmpFd, i)
}

func (s *stager) dirLocked(tmpFd, i int) (int, error) {
	if s.dirs[i] < 0 {
		fd, err := mkdirBeneath(tmpFd, fmt.Sprintf("b%02x", i))
		if err != nil {
			return -1, err
		}
		s.dirs[i] = fd
	}
	return s.dirs[i], nil
}

// unplace moves back to a stage directory the data of every file Stage
// placed where the index does not put that member: a member listed again
// whose first copy lives on under a hard link's name, say. It runs before
// anything else changes DIR, so the data is still there; the name Stage
// gave it is removed (the index's entry for that path, if any, is written
// like any other).
func (s *stager) unplace(ix *index.Index, root *os.Root, tmpFd int) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := 1; i < ix.Len(); i++ {
		id := index.EntryID(i)
		e := ix.Entry(id)
		if e.Type != index.TypeReg {
			continue
		}
		sf := s.staged[int64(e.DataOffset)]
		if sf == nil || !sf.placed || pathOf(ix, id) == sf.path {
			continue
		}
		f, err := root.OpenFile(sf.path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("reopen %s: %w", sf.path, err)
		}
		off := int64(e.DataOffset)
		dir, err := s.dirLocked(tmpFd, stageBucket(off))
		if err == nil {
			unix.Unlinkat(dir, stagedName(off), 0)
			err = linkFd(int(f.Fd()), dir, stagedName(off))
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("stage %s again: %w", sf.path, err)
		}
		if err := root.Remove(sf.path); err != nil {
			return fmt.Errorf("remove %s: %w", sf.path, err)
		}
		sf.placed, sf.staged, sf.dir, sf.tmp, sf.path = false, true, dir, stagedName(off), ""
		delete(s.placed, off)
	}
	return nil
}

// removePlaced removes what Stage placed (for Abandon), once the writers
// have stopped.
func (s *stager) removePlaced(root *os.Root, log *slog.Logger) {
	s.mu.Lock()
	clear(s.placed)
	trusted := s.trusted
	s.trusted = map[int64]string{}
	s.mu.Unlock()
	for _, p := range trusted {
		if err := root.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warn("could not remove a file of the failed pass", "path", p, "err", err)
		}
	}
	for _, wf := range s.staged {
		if wf.placed {
			if err := root.Remove(wf.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				log.Warn("could not remove a file of the failed pass", "path", wf.path, "err", err)
			}
		}
	}
	for i := len(s.earlyMade) - 1; i >= 0; i-- {
		root.Remove(s.earlyMade[i]) // only when empty: what else is there stays
	}
}

// closeDirs closes the stage directories.
func (s *stager) closeDirs() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, fd := range s.dirs {
		if fd >= 0 {
			unix.Close(fd)
		}
		s.dirs[i] = -1
	}
}

// close closes what Stage left open: unnamed staged files Run did not
// take, the directories it opened, the stage directories. Close calls it
// once the writers stopped.
func (s *stager) close() {
	for _, wf := range s.staged {
		wf.close()
	}
	s.closeEarly()
	s.closeDirs()
}

// piece is file data at a logical offset.
type piece struct {
	at   int64
	data []byte
}

// logicalPieces splits data, which starts at stored offset off of a file,
// into pieces at logical offsets (chunks map stored to logical offsets for
// a sparse file).
func logicalPieces(chunks []index.SparseChunk, sparse bool, off int64, data []byte) []piece {
	if !sparse {
		return []piece{{off, data}}
	}
	var out []piece
	var base int64 // stored offset of chunk c
	for _, c := range chunks {
		if len(data) == 0 {
			break
		}
		if off < base+c.Length {
			k := min(int64(len(data)), base+c.Length-off)
			out = append(out, piece{c.Offset + off - base, data[:k]})
			data, off = data[k:], off+k
		}
		base += c.Length
	}
	return out
}
