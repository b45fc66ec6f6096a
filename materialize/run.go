package materialize

import (
	"context"
	"fmt"
	"path"
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
	if j.life.complete {
		for id := range ix.Len() {
			v.set(index.EntryID(id))
		}
		j.life.view.Store(v)
		return nil
	}
	stop := context.AfterFunc(ctx, j.pool.cancel)
	defer stop()
	for _, id := range j.life.resume {
		if e := ix.Entry(id); e != nil && e.Type == index.TypeReg {
			v.set(id)
		}
	}
	j.life.view.Store(v)

	// Staged data must be complete before it is moved into place.
	j.stage.dropSlab()
	if err := j.stage.wait(j.pool.ctx); err != nil {
		return j.pool.failure()
	}
	j.stage.closeEarly()
	if err := j.tree.plan(ix, j.life.rootFd, j.life.rootPlain, j.noteOnce); err != nil {
		return err
	}
	if err := j.stage.unplace(ix, j.life.root, j.life.tmpFd); err != nil {
		return err
	}
	if j.life.replace {
		// DIR held another tree: what the archive lacks goes, what
		// it has already is kept (upgrade.go).
		if err := j.reconcile(j.pool.ctx, ix, v, spans); err != nil {
			j.pool.fail(err)
			return j.pool.failure()
		}
	}
	// Directories are made while the first spans are fetched and
	// decoded; a writer waits for the directory it needs (waitDir).
	dirsReady := make(chan struct{})
	go func() {
		defer close(dirsReady)
		err := j.tree.make(ix, &j.prog.Entries, func() error {
			if j.pool.ctx.Err() != nil {
				return j.pool.failure()
			}
			return nil
		})
		if err != nil {
			j.pool.fail(err)
		}
		j.tree.halt()
	}()
	defer func() { <-dirsReady }()
	if err := j.writeAll(ix, v, spans); err != nil {
		return err
	}
	<-dirsReady
	if err := j.pool.failure(); err != nil {
		return err
	}
	return j.finish(ix)
}

// waitDir waits until directory id is made (at once for the root and
// for entries the tree does not make); it fails when making directories
// stopped before it.
func (j *Job) waitDir(id index.EntryID) error {
	if j.tree.wait(id) {
		return nil
	}
	if err := j.pool.failure(); err != nil {
		return err
	}
	return fmt.Errorf("materialize: directory %d was not made", id)
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
		if e.Type == index.TypeDir || !j.tree.reach[e.Parent] || j.tree.refused[id] {
			continue // refused, or unreachable or refused parent: nothing to write
		}
		if e.Type != index.TypeReg {
			if j.kept == nil || !j.kept[id] {
				specials = append(specials, id)
			}
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
		j.stage.mu.Lock()
		sf := j.stage.staged[int64(e.DataOffset)]
		trusted := j.stage.trusted[int64(e.DataOffset)]
		j.stage.mu.Unlock()
		if sf == nil && trusted != "" && trusted == pathOf(ix, id) {
			// Placed by an earlier job's Stage, before where this
			// job's pass resumed (TrustPlaced): its metadata is
			// applied again from the index.
			sf = &wfile{placed: true, path: trusted}
		}
		switch {
		case sf != nil && sf.placed:
			// Already in place, by Stage (unplace saw to the path).
			wf.placed, wf.meta = true, sf.meta
			wf.opener = func(w *wfile) (int, error) {
				pfd, err := j.tree.parentFd(ix, id, e)
				if err != nil {
					return -1, err
				}
				fd, err := unix.Openat(pfd, e.Name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
				j.tree.table.put(e.Parent)
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
	j.prog.TotalsKnown.Store(true)
	if len(segs) > 0 && spans == nil {
		return fmt.Errorf("materialize: %d file pieces need the archive, but it cannot be read in spans", len(segs))
	}
	// Spans are fetched and decoded from the start; the writers take
	// the other entries between their pieces.
	var g errgroup.Group
	g.Go(func() error {
		for _, id := range specials {
			if err := j.pool.submit(func() error { return j.writeSpecial(ix, id, ix.Entry(id)) }); err != nil {
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
		j.pool.fail(err)
	}
	j.pool.wait()
	return j.pool.failure()
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
	if !j.life.noTmpfile.Load() {
		dir, err := j.tree.table.get(e.Parent)
		if err != nil {
			return -1, err
		}
		perm, mk := j.meta.createPerm(e.Mode, j.tree.plain[e.Parent])
		fd, err := unix.Openat(dir, ".", unix.O_WRONLY|unix.O_TMPFILE|unix.O_CLOEXEC, perm)
		j.tree.table.put(e.Parent)
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
			if !j.life.noTmpfile.Swap(true) {
				j.log.Debug("no unnamed files (O_TMPFILE) here: files are written in a stage directory", "err", err)
			}
		default:
			return -1, fmt.Errorf("create a file in %s: %w", pathOf(j.life.view.Load().ix, e.Parent), err)
		}
	}
	dir, err := j.stage.dir(j.life.tmpFd, int(uint32(w.id)%stageBuckets))
	if err != nil {
		return -1, err
	}
	perm, mk := j.meta.createPerm(e.Mode, j.life.rootPlain)
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
	g, ctx := errgroup.WithContext(j.pool.ctx)
	g.SetLimit(j.opts.Decoders)
	// A span read may start while foreground reads only wait for their
	// bytes: one that decodes asks the gate again before it does
	// (Acquire), and the pieces of a plain tar, which only fetch, join
	// the mount's fetches and have theirs joined (Peers.ReadAt), so that
	// neither the cores nor the source serve the same bytes twice.
	wait := j.opts.Gate.WaitDecode
	for _, w := range work {
		size := min(w.to-w.from, j.opts.MemoryBytes)
		if err := wait(ctx); err != nil {
			break
		}
		if err := j.sem.Acquire(ctx, size); err != nil {
			break
		}
		g.Go(func() error {
			if err := wait(ctx); err != nil {
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
				if err := j.pool.submit(func() error {
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
		j.pool.fail(err)
		return j.pool.failure()
	}
	return j.pool.failure()
}

// finishFile applies the metadata of a fully written file, moves it into
// place, makes its other names and journals it.
func (j *Job) finishFile(ix *index.Index, v *view, wf *wfile) error {
	id := wf.id
	e := ix.Entry(id)
	if err := j.waitDir(e.Parent); err != nil {
		return err
	}
	p := pathOf(ix, id)
	pfd, err := j.tree.parentFd(ix, id, e)
	if err != nil {
		return err
	}
	defer j.tree.table.put(e.Parent)
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
	j.life.markDone(v, id)
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
		unix.Unlinkat(j.life.tmpFd, tmp, 0)
		if err := linkFd(fd, j.life.tmpFd, tmp); err != nil {
			return err
		}
		return renameInto(j.life.tmpFd, tmp, dirfd, name)
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
	for k, n := range j.tree.extra[id] {
		if err := j.waitDir(n.dir); err != nil {
			return err
		}
		dfd, err := j.tree.table.get(n.dir)
		if err != nil {
			return err
		}
		err = linkInto(pfd, e.Name, dfd, n.name, j.life.tmpFd, fmt.Sprintf("h%d-%d", id, k))
		j.tree.table.put(n.dir)
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
	p := pathOf(ix, id)
	tmp := fmt.Sprintf("e%d", id)
	unix.Unlinkat(j.life.tmpFd, tmp, 0)
	var err error
	switch e.Type {
	case index.TypeSymlink:
		if pointsOutside(p, e.Linkname) {
			j.noteOnce("symlinks pointing outside DIR (made as they are, never followed while writing)", p, nil)
		}
		err = unix.Symlinkat(e.Linkname, j.life.tmpFd, tmp)
	case index.TypeFIFO:
		err = unix.Mknodat(j.life.tmpFd, tmp, unix.S_IFIFO|0o600, 0)
	case index.TypeChar, index.TypeBlock:
		if !j.meta.chown {
			j.noteOnce("devices skipped (need root)", p, nil)
			return nil
		}
		mode := uint32(unix.S_IFCHR)
		if e.Type == index.TypeBlock {
			mode = unix.S_IFBLK
		}
		err = unix.Mknodat(j.life.tmpFd, tmp, mode|0o600, int(unix.Mkdev(e.Devmajor, e.Devminor)))
	default:
		return nil
	}
	if err != nil {
		return fmt.Errorf("make %s: %w", p, err)
	}
	if err := setMetaAt(j.life.tmpFd, tmp, e, ix.Xattrs(id), j.meta, j.warn, p); err != nil {
		return err
	}
	pfd, err := j.tree.parentFd(ix, id, e)
	if err != nil {
		return err
	}
	defer j.tree.table.put(e.Parent)
	if err := renameInto(j.life.tmpFd, tmp, pfd, e.Name); err != nil {
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
	if err := j.life.jr.Close(); err != nil {
		return fmt.Errorf("journal: %w", err)
	}
	// Children before their parents: a directory whose mode the
	// archive takes away search or write from is done with by then.
	for k := len(j.tree.order) - 1; k >= 0; k-- {
		id := j.tree.order[k]
		fd, err := j.tree.table.get(id)
		if err != nil {
			return err
		}
		// A directory this job made is the job's, with mode 0700.
		mk := made{ok: j.tree.plain[id], mode: 0o700 &^ j.meta.umask}
		// The path only for a message: one per directory of a deep
		// tree would cost its depth squared.
		p := func() string { return pathOf(ix, id) }
		if e, xattrs := ix.Entry(id), ix.Xattrs(id); !j.keepsMeta(fd, e, xattrs) {
			err = setMetaFd(fd, e, xattrs, j.meta, mk, j.warn, p)
		}
		j.tree.table.put(id)
		if err != nil {
			return err
		}
		// Done with it: a mount serves the complete tree through
		// root, and must not hold a descriptor per directory for as
		// long as it stays mounted.
		j.tree.table.drop(id)
	}
	j.stage.closeDirs()
	if err := j.life.removeState(); err != nil {
		return err
	}
	if root := ix.Entry(index.RootID); hasRootMember(root, ix.Xattrs(index.RootID)) &&
		!j.keepsMeta(j.life.rootFd, root, ix.Xattrs(index.RootID)) {
		if err := setMetaFd(j.life.rootFd, root, ix.Xattrs(index.RootID), j.meta, made{}, j.warn, constPath(".")); err != nil {
			return err
		}
	}
	if j.opts.Sync {
		if err := unix.Syncfs(j.life.rootFd); err != nil {
			return fmt.Errorf("sync %s: %w", j.life.dir, err)
		}
	}
	if err := writeMarker(j.life.dir, marker{Source: j.life.key, Complete: true}); err != nil {
		return err
	}
	j.report()
	return nil
}

// keepsMeta reports whether the directory open at fd, in a DIR that held
// another tree, already has the metadata of e (and e has no xattrs): an
// upgrade leaves it alone. A fresh job applies it without looking.
func (j *Job) keepsMeta(fd int, e *index.Entry, xattrs []index.Xattr) bool {
	if !j.life.replace || len(xattrs) > 0 {
		return false
	}
	var st unix.Stat_t
	return unix.Fstat(fd, &st) == nil && j.metaSame(&st, e)
}

// hasRootMember tells an archive with a member for its top directory
// ("./"), whose metadata tar -x applies to DIR, from one without, for
// which the index holds defaults and DIR is left as it is.
func hasRootMember(e *index.Entry, xattrs []index.Xattr) bool {
	return !e.MTime.IsZero() || e.Mode != 0o755 || e.UID != 0 || e.GID != 0 || len(xattrs) > 0
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
