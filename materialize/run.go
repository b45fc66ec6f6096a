package materialize

import (
	"context"
	"fmt"
	"os"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
)

// Run writes every entry of ix that is not yet in DIR, then the metadata
// of the directories, and marks DIR complete. File data comes from what
// Stage wrote, else from spans (nil when everything was staged). Run is
// called once; it returns when DIR is complete, or with the first error
// (ctx's included), leaving the job resumable by a later Open.
func (j *Job) Run(ctx context.Context, ix *index.Index, spans Spans) error {
	v := newView(ix)
	if j.complete {
		for id := range ix.Len() {
			v.set(index.EntryID(id))
		}
		j.view.Store(v)
		return nil
	}
	stop := context.AfterFunc(ctx, j.cancel)
	defer stop()
	for _, id := range j.resume {
		if e := ix.Entry(id); e != nil && e.Type == index.TypeReg {
			v.set(id)
		}
	}
	j.view.Store(v)

	// Staged data must be complete before it is moved into place.
	j.dropSlab()
	staged := make(chan struct{})
	go func() {
		j.stageWG.Wait()
		close(staged)
	}()
	select {
	case <-staged:
	case <-j.ctx.Done():
		return j.failure()
	}
	j.closeEarly()
	if err := j.planDirs(ix); err != nil {
		return err
	}
	if err := j.unplace(ix); err != nil {
		return err
	}
	// Directories are made while the first spans are fetched and
	// decoded; a writer waits for the directory it needs (waitDir).
	j.dirsReady = make(chan struct{})
	go func() {
		defer close(j.dirsReady)
		err := j.makeDirs(ix)
		if err != nil {
			j.fail(err)
		}
		j.dirsMu.Lock()
		j.dirsStopped = true
		j.dirsMu.Unlock()
		j.dirsCond.Broadcast()
	}()
	defer func() { <-j.dirsReady }()
	if err := j.writeAll(ix, v, spans); err != nil {
		return err
	}
	<-j.dirsReady
	if err := j.failure(); err != nil {
		return err
	}
	return j.finish(ix)
}

// unplace moves back to a stage directory the data of every file Stage
// placed where the index does not put that member: a member listed again
// whose first copy lives on under a hard link's name, say. It runs before
// anything else changes DIR, so the data is still there; the name Stage
// gave it is removed (the index's entry for that path, if any, is written
// like any other).
func (j *Job) unplace(ix *index.Index) error {
	j.stageMu.Lock()
	defer j.stageMu.Unlock()
	for i := 1; i < ix.Len(); i++ {
		id := index.EntryID(i)
		e := ix.Entry(id)
		if e.Type != index.TypeReg {
			continue
		}
		sf := j.staged[int64(e.DataOffset)]
		if sf == nil || !sf.placed || j.pathOf(ix, id) == sf.path {
			continue
		}
		f, err := j.root.OpenFile(sf.path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("reopen %s: %w", sf.path, err)
		}
		off := int64(e.DataOffset)
		dir, err := j.stageDirLocked(stageBucket(off))
		if err == nil {
			unix.Unlinkat(dir, stagedName(off), 0)
			err = linkFd(int(f.Fd()), dir, stagedName(off))
		}
		f.Close()
		if err != nil {
			return fmt.Errorf("stage %s again: %w", sf.path, err)
		}
		if err := j.root.Remove(sf.path); err != nil {
			return fmt.Errorf("remove %s: %w", sf.path, err)
		}
		sf.placed, sf.staged, sf.dir, sf.tmp, sf.path = false, true, dir, stagedName(off), ""
	}
	return nil
}

// planDirs walks the tree of ix from the root, without touching DIR: it
// lists the directories to make, parents first, refuses names that are
// not one component, and collects the extra names (hard links) of other
// entries.
func (j *Job) planDirs(ix *index.Index) error {
	n := ix.Len()
	j.dirReach = make([]bool, n)
	j.dirReach[index.RootID] = true
	j.refused = make([]bool, n)
	j.dirs = j.dirs[:0]
	j.extra = map[index.EntryID][]name{}
	queue := []index.EntryID{index.RootID}
	for k := 0; k < len(queue); k++ {
		d := queue[k]
		for _, c := range ix.Children(d) {
			e := ix.Entry(c.ID)
			if e == nil || c.ID == index.RootID {
				return fmt.Errorf("%w: entry %d listed in directory %d", index.ErrBadIndex, c.ID, d)
			}
			if !validName(c.Name) || (d == index.RootID && c.Name == stateDirName) {
				j.noteOnce("names that are not one path component or are reserved (refused)", c.Name, nil)
				if e.Parent == d && e.Name == c.Name {
					// Its other names (hard links), if any, go too.
					j.refused[c.ID] = true
				}
				continue
			}
			if e.Parent != d || e.Name != c.Name {
				if e.Type == index.TypeDir {
					return fmt.Errorf("%w: directory %d has two names", index.ErrBadIndex, c.ID)
				}
				j.extra[c.ID] = append(j.extra[c.ID], name{d, c.Name})
				continue
			}
			if e.Type != index.TypeDir {
				continue
			}
			if j.dirReach[c.ID] {
				return fmt.Errorf("%w: directory %d listed twice", index.ErrBadIndex, c.ID)
			}
			j.dirReach[c.ID] = true
			queue = append(queue, c.ID)
		}
	}
	// Made in archive (EntryID) order where parents come first in it,
	// as they do in an index Build made, so that makeDirs keeps ahead
	// of the writers, which go in archive order; else level by level.
	j.dirs = slices.Clone(queue[1:])
	slices.Sort(j.dirs)
	if !j.placeDirs(ix) {
		j.dirs = queue[1:]
		j.placeDirs(ix)
	}
	j.dirt = newDirTable(ix, j.rootFd, j.dirLimit)
	j.dirPlain = make([]bool, n)
	j.dirPlain[index.RootID] = j.rootPlain
	j.dirsCond.L = &j.dirsMu
	return nil
}

// placeDirs sets dirPos from the order of dirs and reports whether every
// directory comes after its parent.
func (j *Job) placeDirs(ix *index.Index) bool {
	j.dirPos = make([]int32, ix.Len())
	for i := range j.dirPos {
		j.dirPos[i] = -1
	}
	for k, id := range j.dirs {
		if p := ix.Entry(id).Parent; p != index.RootID && j.dirPos[p] < 0 {
			return false
		}
		j.dirPos[id] = int32(k)
	}
	return true
}

// makeDirs makes the directories planDirs listed, parents first, and
// hands each to the directory table. Other goroutines use a directory
// (dirt.get) and its dirPlain after waitDir.
func (j *Job) makeDirs(ix *index.Index) error {
	for k, id := range j.dirs {
		if j.ctx.Err() != nil {
			return j.failure()
		}
		e := ix.Entry(id)
		pfd, err := j.dirt.get(e.Parent)
		if err != nil {
			return err
		}
		fd, made, err := makeDirBeneath(pfd, e.Name)
		j.dirt.put(e.Parent)
		if err != nil {
			return fmt.Errorf("%s: %w", ix.Path(id), err)
		}
		j.dirt.add(id, fd)
		j.dirPlain[id] = made && j.dirPlain[e.Parent]
		j.prog.Entries.Add(1)
		j.dirsMu.Lock()
		j.dirsMade.Store(int32(k + 1))
		j.dirsMu.Unlock()
		j.dirsCond.Broadcast()
	}
	return nil
}

// waitDir waits until directory id is made (at once for the root and
// for entries makeDirs does not make); it fails when makeDirs stopped
// before it.
func (j *Job) waitDir(id index.EntryID) error {
	pos := j.dirPos[id]
	if j.dirsMade.Load() > pos {
		return nil
	}
	j.dirsMu.Lock()
	for j.dirsMade.Load() <= pos && !j.dirsStopped {
		j.dirsCond.Wait()
	}
	j.dirsMu.Unlock()
	if j.dirsMade.Load() > pos {
		return nil
	}
	if err := j.failure(); err != nil {
		return err
	}
	return fmt.Errorf("materialize: directory %d was not made", id)
}

// parentFd returns the open directory that holds the first name of e,
// in use until the caller puts it back (j.dirt.put(e.Parent)).
func (j *Job) parentFd(ix *index.Index, id index.EntryID, e *index.Entry) (int, error) {
	if !validName(e.Name) {
		return -1, fmt.Errorf("%w: entry %d (%s) has no directory", index.ErrBadIndex, id, ix.Path(id))
	}
	fd, err := j.dirt.get(e.Parent)
	if err != nil {
		return -1, fmt.Errorf("entry %d (%s): %w", id, ix.Path(id), err)
	}
	return fd, nil
}

// segment is stored data of a file: tar stream bytes [start, end) that go
// to the file at logical offset at.
type segment struct {
	f          *wfile
	start, end int64
	at         int64
}

// writeAll writes every non-directory entry, in parallel, and returns once
// all are done.
func (j *Job) writeAll(ix *index.Index, v *view, spans Spans) error {
	var segs []segment
	var wholes []*wfile // files with no data to decode
	var specials []index.EntryID
	var files, bytes int64
	for i := 1; i < ix.Len(); i++ {
		id := index.EntryID(i)
		e := ix.Entry(id)
		if e.Type == index.TypeDir || !j.dirReach[e.Parent] || j.refused[id] {
			continue // refused, or unreachable or refused parent: nothing to write
		}
		if e.Type != index.TypeReg {
			specials = append(specials, id)
			continue
		}
		if v.isSet(id) {
			continue
		}
		stored := ix.StoredSize(id)
		files++
		bytes += stored
		wf := &wfile{id: id, size: e.Size, sparse: e.Sparse, fd: -1}
		wf.opener = func(w *wfile) (int, error) { return j.createFile(w, e) }
		wf.finish = func(wf *wfile) error { return j.finishFile(ix, v, wf) }
		j.stageMu.Lock()
		sf := j.staged[int64(e.DataOffset)]
		j.stageMu.Unlock()
		switch {
		case sf != nil && sf.placed:
			// Already in place, by Stage (unplace saw to the path).
			wf.placed, wf.meta = true, sf.meta
			wf.opener = func(w *wfile) (int, error) {
				pfd, err := j.parentFd(ix, id, e)
				if err != nil {
					return -1, err
				}
				fd, err := unix.Openat(pfd, e.Name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
				j.dirt.put(e.Parent)
				if err != nil {
					return -1, fmt.Errorf("open %s: %w", w.path, err)
				}
				return fd, nil
			}
			wholes = append(wholes, wf)
		case sf != nil && stored > 0:
			wf.tmp, wf.dir, wf.meta = sf.tmp, sf.dir, sf.meta
			wf.staged, wf.anon = !sf.anon, sf.anon
			wf.fd, sf.fd = sf.fd, -1 // an unnamed one is still open
			wf.opener = func(w *wfile) (int, error) {
				fd, err := unix.Openat(w.dir, w.tmp, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
				if err != nil {
					return -1, fmt.Errorf("open staged %s: %w", w.tmp, err)
				}
				return fd, nil
			}
			wholes = append(wholes, wf)
		case stored == 0:
			wholes = append(wholes, wf)
		case e.Sparse:
			off := int64(e.DataOffset)
			for _, c := range ix.SparseMap(id) {
				segs = append(segs, segment{wf, off, off + c.Length, c.Offset})
				off += c.Length
			}
		default:
			segs = append(segs, segment{wf, int64(e.DataOffset), int64(e.DataOffset) + stored, 0})
		}
	}
	j.prog.FilesTotal.Add(files)
	j.prog.BytesTotal.Add(bytes)
	if len(segs) > 0 && spans == nil {
		return fmt.Errorf("materialize: %d file pieces need the archive, but it cannot be read in spans", len(segs))
	}
	// Spans are fetched and decoded from the start; the writers take
	// the other entries between their pieces.
	var g errgroup.Group
	g.Go(func() error {
		for _, id := range specials {
			if err := j.submit(func() error { return j.writeSpecial(ix, id, ix.Entry(id)) }); err != nil {
				return err
			}
		}
		for _, wf := range wholes {
			if err := j.submitWhole(wf); err != nil {
				return err
			}
		}
		return nil
	})
	if len(segs) > 0 {
		g.Go(func() error { return j.writeSpans(spans, segs) })
	}
	if err := g.Wait(); err != nil {
		j.fail(err)
	}
	j.pending.Wait()
	return j.failure()
}

// createFile creates the file of w, entry e, once its directory exists:
// an unnamed file (O_TMPFILE) in that directory, with its final mode when
// the directory is plain, which place links under its name once it is
// complete, so that no half-written file ever has a name and an
// interrupted job leaves nothing to clean up. On a filesystem without
// unnamed files it is a named file in a stage directory.
//
// Creating with O_TMPFILE and linking costs less than a named temporary
// file and a rename (which looks up and edits the directory twice).
func (j *Job) createFile(w *wfile, e *index.Entry) (int, error) {
	if err := j.waitDir(e.Parent); err != nil {
		return -1, err
	}
	if !j.noTmpfile.Load() {
		dir, err := j.dirt.get(e.Parent)
		if err != nil {
			return -1, err
		}
		perm, mk := j.meta.createPerm(e.Mode, j.dirPlain[e.Parent])
		fd, err := unix.Openat(dir, ".", unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, perm)
		j.dirt.put(e.Parent)
		switch err {
		case nil:
			// Linked under its name by place, in the directory as
			// finishFile gets it then.
			w.dir, w.made, w.anon = -1, mk, true
			if err := presize(fd, w.size, w.sparse); err != nil {
				unix.Close(fd)
				return -1, err
			}
			return fd, nil
		case unix.EOPNOTSUPP, unix.EISDIR, unix.EINVAL:
			if !j.noTmpfile.Swap(true) {
				j.log.Debug("no unnamed files (O_TMPFILE) here: files are written in a stage directory", "err", err)
			}
		default:
			return -1, fmt.Errorf("create a file in %s: %w", j.pathOf(j.view.Load().ix, e.Parent), err)
		}
	}
	dir, err := j.stageDir(int(uint32(w.id) % stageBuckets))
	if err != nil {
		return -1, err
	}
	perm, mk := j.meta.createPerm(e.Mode, j.rootPlain)
	w.dir, w.tmp, w.staged, w.made = dir, "f"+strconv.Itoa(int(w.id)), true, mk
	return createTmp(w.dir, w.tmp, perm, w.size, w.sparse)
}

// writeSpans reads the spans that hold segs, opts.Decoders at once in
// archive order, and hands each piece to the writers.
func (j *Job) writeSpans(spans Spans, segs []segment) error {
	sort.Slice(segs, func(a, b int) bool { return segs[a].start < segs[b].start })
	type spanWork struct {
		i        int
		from, to int64
		segs     []segment // clipped to the span
	}
	var work []spanWork
	k := 0
	for i := range spans.Len() {
		s, e := spans.Bounds(i)
		for k < len(segs) && segs[k].end <= s {
			k++
		}
		w := spanWork{i: i, from: e, to: s}
		for m := k; m < len(segs) && segs[m].start < e; m++ {
			g := segs[m]
			from, to := max(g.start, s), min(g.end, e)
			if from >= to {
				continue
			}
			w.segs = append(w.segs, segment{g.f, from, to, g.at + from - g.start})
			g.f.pending.Add(1)
			w.from, w.to = min(w.from, from), max(w.to, to)
		}
		if len(w.segs) > 0 {
			work = append(work, w)
		}
	}
	// Every piece is counted before any is written.
	for _, g := range segs {
		if g.f.pending.Load() == 0 {
			return fmt.Errorf("%w: data of %d at %d lies outside every span", index.ErrCorrupt, g.f.id, g.start)
		}
	}
	g, ctx := errgroup.WithContext(j.ctx)
	g.SetLimit(j.opts.Decoders)
	for _, w := range work {
		size := min(w.to-w.from, j.memory)
		if err := j.opts.Gate.Wait(ctx); err != nil {
			break
		}
		if err := j.sem.Acquire(ctx, size); err != nil {
			break
		}
		g.Go(func() error {
			if err := j.opts.Gate.Wait(ctx); err != nil {
				j.sem.Release(size)
				return err
			}
			data, whole, err := spans.Read(ctx, w.i, w.from, w.to, j.spanBufs.get())
			if err != nil {
				j.sem.Release(size)
				return err
			}
			j.prog.Input.Add(spans.Stored(w.i))
			s, e := spans.Bounds(w.i)
			j.prog.Decoded.Add(e - s)
			ref := &spanRef{release: func() {
				j.spanBufs.put(whole)
				j.sem.Release(size)
			}}
			ref.left.Store(int64(len(w.segs)))
			for _, s := range w.segs {
				if err := j.submit(func() error {
					defer ref.done()
					return j.writePiece(s.f, s.at, data[s.start-w.from:s.end-w.from])
				}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := g.Wait(); err != nil {
		j.fail(err)
		return j.failure()
	}
	return j.failure()
}

// finishFile applies the metadata of a fully written file, moves it into
// place, makes its other names and journals it.
func (j *Job) finishFile(ix *index.Index, v *view, wf *wfile) error {
	id := wf.id
	e := ix.Entry(id)
	if err := j.waitDir(e.Parent); err != nil {
		return err
	}
	p := j.pathOf(ix, id)
	pfd, err := j.parentFd(ix, id, e)
	if err != nil {
		return err
	}
	defer j.dirt.put(e.Parent)
	defer wf.close()
	fd := -1
	xattrs := ix.Xattrs(id)
	needMeta := !wf.meta.matches(e, xattrs)
	if needMeta || wf.anon {
		if fd, err = wf.file(); err != nil {
			return err
		}
	}
	if needMeta {
		if err := setMetaFd(fd, e, xattrs, j.meta, wf.made, j.warn, constPath(p)); err != nil {
			return err
		}
	}
	if !wf.placed {
		if err := j.place(wf, fd, pfd, e.Name); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
	}
	if err := wf.close(); err != nil {
		return fmt.Errorf("close %s: %w", p, err)
	}
	if err := j.linkNames(ix, id, e, pfd); err != nil {
		return err
	}
	j.markDone(v, id)
	j.prog.Files.Add(1)
	j.prog.Entries.Add(1)
	return nil
}

// place gives the complete file w, open at fd, its name in dirfd,
// replacing what is there.
func (j *Job) place(w *wfile, fd, dirfd int, name string) error {
	switch {
	case w.anon:
		err := linkFd(fd, dirfd, name)
		if err != unix.EEXIST {
			return err
		}
		// Something is in the way (an earlier run's, or DIR's with
		// --overwrite): replace it by a rename.
		tmp := "a" + strconv.Itoa(int(w.id))
		unix.Unlinkat(j.tmpFd, tmp, 0)
		if err := linkFd(fd, j.tmpFd, tmp); err != nil {
			return err
		}
		return renameInto(j.tmpFd, tmp, dirfd, name)
	case w.staged:
		// A link and an unlink take no filesystem-wide lock, unlike
		// a rename across directories.
		err := unix.Linkat(w.dir, w.tmp, dirfd, name, 0)
		if err == nil {
			unix.Unlinkat(w.dir, w.tmp, 0)
			return nil
		}
		if err != unix.EEXIST {
			return fmt.Errorf("link: %w", err)
		}
	}
	return renameInto(w.dir, w.tmp, dirfd, name)
}

// linkNames makes the other names of id (hard links to its first name).
func (j *Job) linkNames(ix *index.Index, id index.EntryID, e *index.Entry, pfd int) error {
	for k, n := range j.extra[id] {
		if err := j.waitDir(n.dir); err != nil {
			return err
		}
		dfd, err := j.dirt.get(n.dir)
		if err != nil {
			return err
		}
		err = linkInto(pfd, e.Name, dfd, n.name, j.tmpFd, fmt.Sprintf("h%d-%d", id, k))
		j.dirt.put(n.dir)
		if err != nil {
			return fmt.Errorf("%s: %w", path.Join(ix.Path(n.dir), n.name), err)
		}
		j.prog.Entries.Add(1)
	}
	return nil
}

// writeSpecial makes a symlink, fifo or device in the tmp directory with
// its metadata and moves it into place.
func (j *Job) writeSpecial(ix *index.Index, id index.EntryID, e *index.Entry) error {
	if err := j.waitDir(e.Parent); err != nil {
		return err
	}
	p := j.pathOf(ix, id)
	tmp := fmt.Sprintf("e%d", id)
	unix.Unlinkat(j.tmpFd, tmp, 0)
	var err error
	switch e.Type {
	case index.TypeSymlink:
		if pointsOutside(p, e.Linkname) {
			j.noteOnce("symlinks pointing outside DIR (made as they are, never followed while writing)", p, nil)
		}
		err = unix.Symlinkat(e.Linkname, j.tmpFd, tmp)
	case index.TypeFIFO:
		err = unix.Mknodat(j.tmpFd, tmp, unix.S_IFIFO|0o600, 0)
	case index.TypeChar, index.TypeBlock:
		if !j.meta.chown {
			j.noteOnce("devices skipped (need root)", p, nil)
			return nil
		}
		mode := uint32(unix.S_IFCHR)
		if e.Type == index.TypeBlock {
			mode = unix.S_IFBLK
		}
		err = unix.Mknodat(j.tmpFd, tmp, mode|0o600, int(unix.Mkdev(e.Devmajor, e.Devminor)))
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("make %s: %w", p, err)
	}
	if err := setMetaAt(j.tmpFd, tmp, e, ix.Xattrs(id), j.meta, j.warn, p); err != nil {
		return err
	}
	pfd, err := j.parentFd(ix, id, e)
	if err != nil {
		return err
	}
	defer j.dirt.put(e.Parent)
	if err := renameInto(j.tmpFd, tmp, pfd, e.Name); err != nil {
		return fmt.Errorf("%s: %w", p, err)
	}
	j.prog.Entries.Add(1)
	return j.linkNames(ix, id, e, pfd)
}

// pointsOutside reports whether symlink p (relative to DIR) with target
// leads outside DIR when followed.
func pointsOutside(p, target string) bool {
	if strings.HasPrefix(target, "/") {
		return true
	}
	c := path.Clean(path.Join(path.Dir(p), target))
	return c == ".." || strings.HasPrefix(c, "../")
}

// finish applies the directories' metadata (DIR's own last, once the state
// directory is gone), makes everything durable when asked (Options.Sync)
// and marks DIR complete.
func (j *Job) finish(ix *index.Index) error {
	if err := j.jr.Close(); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	// Children before their parents: a directory whose mode the
	// archive takes away search or write from is done with by then.
	for k := len(j.dirs) - 1; k >= 0; k-- {
		id := j.dirs[k]
		fd, err := j.dirt.get(id)
		if err != nil {
			return err
		}
		// A directory this job made is the job's, with mode 0700.
		mk := made{ok: j.dirPlain[id], mode: 0o700 &^ j.meta.umask}
		// The path only for a message: one per directory of a deep
		// tree would cost its depth squared.
		p := func() string { return j.pathOf(ix, id) }
		err = setMetaFd(fd, ix.Entry(id), ix.Xattrs(id), j.meta, mk, j.warn, p)
		j.dirt.put(id)
		if err != nil {
			return err
		}
		// Done with it: a mount serves the complete tree through
		// root, and must not hold a descriptor per directory for as
		// long as it stays mounted.
		j.dirt.drop(id)
	}
	for i, fd := range append(j.stageDirs[:], j.tmpFd, j.stateFd) {
		unix.Close(fd)
		if i < stageBuckets {
			j.stageDirs[i] = -1
		}
	}
	j.tmpFd, j.stateFd = -1, -1
	if err := removeTree(j.rootFd, stateDirName); err != nil {
		return fmt.Errorf("remove %s: %w", stateDirName, err)
	}
	if root := ix.Entry(index.RootID); hasRootMember(root, ix.Xattrs(index.RootID)) {
		if err := setMetaFd(j.rootFd, root, ix.Xattrs(index.RootID), j.meta, made{}, j.warn, constPath(".")); err != nil {
			return err
		}
	}
	if j.opts.Sync {
		if err := unix.Syncfs(j.rootFd); err != nil {
			return fmt.Errorf("sync %s: %w", j.dir, err)
		}
	}
	if err := writeMarker(j.dir, marker{Source: j.key, Complete: true}); err != nil {
		return err
	}
	j.report()
	return nil
}

// hasRootMember tells an archive with a member for its top directory
// ("./"), whose metadata tar -x applies to DIR, from one without, for
// which the index holds defaults and DIR is left as it is.
func hasRootMember(e *index.Entry, xattrs []index.Xattr) bool {
	return e.MTime != 0 || e.Mode != 0o755 || e.UID != 0 || e.GID != 0 || len(xattrs) > 0
}

// spanRef releases a span's memory once its last piece is written.
type spanRef struct {
	left    atomic.Int64
	release func()
}

func (r *spanRef) done() {
	if r.left.Add(-1) == 0 {
		r.release()
	}
}

// bufList keeps a few buffers whose pieces are all written (spans, Stage's
// slabs), for the next ones: decoding or copying into memory that is
// already mapped saves the allocation and the page faults of a fresh
// buffer. It holds at most max buffers (outside the job's memory bound);
// others are dropped.
type bufList struct {
	mu   sync.Mutex
	max  int
	free [][]byte
}

func (l *bufList) get() []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.free)
	if n == 0 {
		return nil
	}
	b := l.free[n-1]
	l.free[n-1] = nil
	l.free = l.free[:n-1]
	return b
}

func (l *bufList) put(b []byte) {
	if b == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.free) < l.max {
		l.free = append(l.free, b)
	}
}
