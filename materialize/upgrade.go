package materialize

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/xattr"
)

// Upgrades. A job that opens a DIR holding another tree (one tarmount made
// from another version of the archive, or another archive; or, with
// Options.Overwrite, anything) brings it to exactly this archive's tree in
// place. Run first reconciles DIR with the index (reconcile), then writes
// what is left as a fresh job would:
//
//   - A name the archive lacks is removed, with all it holds (deepest
//     first, through directory descriptors: a symlink in DIR is never
//     followed). So is a directory where the archive has something else,
//     and anything where the archive has a directory (makeDirBeneath makes
//     it). The state directory is left alone.
//   - A regular file whose type, size, link count and content are the
//     archive's is kept: not written, and listed as complete at once
//     (journal and OpenLocal), so a mount serves it from DIR from the
//     start. If its mode, owner, mtime or xattrs differ, exactly those are
//     set on it in place (Progress.Retouched); otherwise nothing touches it.
//     Everything else is written as usual, to an unnamed or temporary file
//     renamed (linked) over the old one: a reader sees the old file or the
//     new one, and a mount serves the archive's until it is in place.
//   - A symlink, fifo or device that is already as the archive has it
//     (target, device numbers, owner, mode, mtime) is kept; one that
//     differs in anything is made again and renamed over the old one.
//   - Directories are kept, and their metadata applied last, as in a fresh
//     job, but only where it differs.
//
// How the content of a file is known to be the archive's, cheapest first:
//
//  1. The index of the version DIR was complete with (the marker's
//     "from", Options.Previous: the saved index in the cache) records the
//     same member digest, size and sparse map for the path, and DIR's file
//     still has that version's mtime (or this one's) and size: nothing is
//     read.
//  2. Else, when this index has member digests (compressed archives), DIR's
//     copy is read and hashed (index.DigestOf) and compared with the
//     digest: DIR is read, the archive is not.
//  3. Else (a plain tar, whose pass records no digests), DIR's copy is
//     compared with the member's bytes read from the archive: what a
//     rewrite would fetch, without the write.
//
// A sparse file is kept only through 1; otherwise it is written. Without
// the previous index, xattrs that DIR's file has and the archive's member
// lacks are not looked for. A hard-linked file is kept only if all its
// names in the archive are one inode in DIR; that inode's other names in
// DIR are removed or replaced, and no other file keeps it.
//
// The marker records "replace" (and "from") while the job runs, so that a
// job resumed after a crash reconciles again and still ends at exactly the
// archive's tree; entries the journal lists are not looked at again.

// reconciler is one reconcile pass. It runs before the writers start and
// is used by one goroutine, but for confirm's workers, which only read
// ix, prev and j's set-once fields and call keep (which locks).
type reconciler struct {
	j    *Job
	ix   *index.Index
	prev *index.Index // nil: compare by content
	v    *view
	mu   sync.Mutex // serializes keep's journal and inodes with confirm's workers
	// inodes are the files kept whose inode has names in DIR beyond the
	// archive's: the first entry that keeps such an inode has it, any
	// other is written (its name then leaves the inode). Guarded by mu.
	inodes map[[2]uint64]index.EntryID
	// cands are files of the right size whose content is checked by
	// reading DIR's copy (confirm).
	cands []candidate
	// shared are files to keep whose inode has more names in DIR than
	// in the archive (keepShared). Guarded by mu.
	shared []sharedKeep
}

// sharedKeep is a call of keep put off until every file was seen.
type sharedKeep struct {
	id        index.EntryID
	st        unix.Stat_t
	path      string
	prevAttr  []index.Xattr
	knownAttr bool
}

// candidate is a file whose content confirm checks.
type candidate struct {
	id       index.EntryID
	path     string // in DIR
	st       unix.Stat_t
	byHash   bool // against the member digest, else against the archive's bytes
	prevAttr []index.Xattr
}

// reconcile brings DIR towards the tree of ix as the package comment
// says, before anything is written: it removes what ix lacks and marks
// what DIR already holds as ix has it (kept). spans are the archive's,
// for plain tars; nil when it cannot be read in spans.
func (j *Job) reconcile(ctx context.Context, ix *index.Index, v *view, spans Spans) error {
	var prev *index.Index
	if j.life.from != "" && j.opts.Previous != nil {
		if prev = j.opts.Previous(j.life.from); prev == nil {
			j.log.Info("upgrade: no index of the version in DIR at hand; files are compared by content", "path", j.life.dir)
		}
	}
	j.kept = make([]bool, ix.Len())
	r := &reconciler{j: j, ix: ix, prev: prev, v: v, inodes: map[[2]uint64]index.EntryID{}}
	if err := r.walk(ctx, index.RootID, j.life.rootFd, "", index.RootID, prev != nil); err != nil {
		return err
	}
	if err := r.confirm(ctx, spans); err != nil {
		return err
	}
	if err := r.keepShared(); err != nil {
		return err
	}
	j.log.Info("upgrade: DIR compared with the archive", "path", j.life.dir, "kept", j.prog.Kept.Load(),
		"retouched", j.prog.Retouched.Load(), "removed", j.prog.Removed.Load(), "previous_index", prev != nil)
	return nil
}

// readNames returns the names in the directory open at fd, sorted.
func readNames(fd int) ([]string, error) {
	dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(dfd), ".")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	sort.Strings(names)
	return names, err
}

// walk reconciles directory dir of ix, open at fd (dirPath in DIR); pdir
// is the same directory in prev when havePrev.
func (r *reconciler) walk(ctx context.Context, dir index.EntryID, fd int, dirPath string, pdir index.EntryID, havePrev bool) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	names, err := readNames(fd)
	if err != nil {
		return fmt.Errorf("list %s: %w", displayPath(dirPath), err)
	}
	j := r.j
	for _, name := range names {
		if dir == index.RootID && name == stateDirName {
			continue
		}
		p := path.Join(dirPath, name)
		id, ok := r.ix.Lookup(dir, name)
		if !ok || !validName(name) || j.tree.refused[id] {
			if err := r.remove(fd, name, p); err != nil {
				return err
			}
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		e := r.ix.Entry(id)
		isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
		var pid index.EntryID
		pok := false
		if havePrev {
			pid, pok = r.prev.Lookup(pdir, name)
		}
		switch {
		case e.Type == index.TypeDir && isDir:
			cfd, err := openDirBeneath(fd, name)
			if err != nil {
				return fmt.Errorf("open directory %s: %w", p, err)
			}
			pe := (*index.Entry)(nil)
			if pok {
				pe = r.prev.Entry(pid)
			}
			err = r.walk(ctx, id, cfd, p, pid, pe != nil && pe.Type == index.TypeDir)
			unix.Close(cfd)
			if err != nil {
				return err
			}
		case e.Type == index.TypeDir || isDir:
			// A directory becomes something else, or the other way
			// round: the old one goes now, the new one is made as
			// in a fresh job.
			if err := r.remove(fd, name, p); err != nil {
				return err
			}
		case e.Parent != dir || e.Name != name:
			// Another name of a file (a hard link): checked with
			// its first name, replaced with it when that is written.
		case r.v.isSet(id):
			// Complete already (a resumed job's journal); it has
			// its inode, whatever other names it has in DIR.
			if e.Type == index.TypeReg && uint64(st.Nlink) > uint64(e.Nlink) {
				r.inodes[[2]uint64{st.Dev, st.Ino}] = id
			}
		case e.Type == index.TypeReg:
			if err := r.file(id, e, fd, name, p, &st, pid, pok); err != nil {
				return err
			}
		default:
			r.special(id, e, fd, name, &st, pid, pok)
		}
	}
	return nil
}

func displayPath(p string) string {
	if p == "" {
		return "."
	}
	return p
}

// remove removes name in fd (p in DIR), with what it holds.
func (r *reconciler) remove(fd int, name, p string) error {
	if err := removeTree(fd, name); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	r.j.prog.Removed.Add(1)
	return nil
}

// file decides about regular file id (entry e), at name in fd (p in DIR)
// with attributes st: kept, left to confirm, or left to be written.
func (r *reconciler) file(id index.EntryID, e *index.Entry, fd int, name, p string, st *unix.Stat_t, pid index.EntryID, pok bool) error {
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != e.Size || uint64(st.Nlink) < uint64(e.Nlink) {
		return nil
	}
	if e.Nlink > 1 && !r.sameInode(id, st) {
		return nil
	}
	if pok {
		o := r.prev.Entry(pid)
		od, ok1 := r.prev.MemberDigest(pid)
		nd, ok2 := r.ix.MemberDigest(id)
		mt := statTime(st.Mtim)
		if ok1 && ok2 && o.Type == index.TypeReg && o.Size == e.Size && o.Sparse == e.Sparse &&
			slices.Equal(r.prev.SparseMap(pid), r.ix.SparseMap(id)) && (mt == o.MTime || mt == e.MTime) {
			if od != nd {
				return nil // changed: written
			}
			return r.keep(id, e, st, p, r.prev.Xattrs(pid), true, func() (int, error) {
				return unix.Openat(fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			})
		}
	}
	c := candidate{id: id, path: p, st: *st}
	_, hasDigest := r.ix.MemberDigest(id)
	switch {
	case e.Sparse:
		return nil // written: its holes are not checked
	case hasDigest:
		c.byHash = true
	case r.ix.HasMemberDigests():
		return nil
	}
	r.cands = append(r.cands, c)
	return nil
}

// sameInode reports whether every other name of file id in DIR is the
// inode st describes.
func (r *reconciler) sameInode(id index.EntryID, st *unix.Stat_t) bool {
	j := r.j
	for _, n := range j.tree.extra[id] {
		dfd := j.life.rootFd
		if n.dir != index.RootID {
			fd, err := unix.Openat2(j.life.rootFd, r.ix.Path(n.dir), &unix.OpenHow{
				Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
				Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
			})
			if err != nil {
				return false
			}
			defer unix.Close(fd)
			dfd = fd
		}
		var o unix.Stat_t
		if unix.Fstatat(dfd, n.name, &o, unix.AT_SYMLINK_NOFOLLOW) != nil || o.Ino != st.Ino || o.Dev != st.Dev {
			return false
		}
	}
	return true
}

// keepShared keeps the files whose inode has more names in DIR than in
// the archive, in the order they were found, but those whose inode an
// earlier one (or a file a resumed job's journal lists) has: those are
// written, which takes their name off the inode.
func (r *reconciler) keepShared() error {
	slices.SortFunc(r.shared, func(a, b sharedKeep) int { return int(a.id) - int(b.id) })
	for _, k := range r.shared {
		key := [2]uint64{k.st.Dev, k.st.Ino}
		if owner, ok := r.inodes[key]; ok && owner != k.id {
			continue
		}
		r.inodes[key] = k.id
		e := r.ix.Entry(k.id)
		e.Nlink = uint32(k.st.Nlink) // its other names are seen to
		err := r.keep(k.id, e, &k.st, k.path, k.prevAttr, k.knownAttr, func() (int, error) {
			f, err := r.j.life.root.OpenFile(k.path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
			if err != nil {
				return -1, err
			}
			defer f.Close()
			return unix.Dup(int(f.Fd()))
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// archivedXattrs returns the xattrs of the file open at fd in the
// namespaces that archives carry and tar -x restores (user. and
// trusted.).
func archivedXattrs(fd int) ([]index.Xattr, error) {
	sz, err := unix.Flistxattr(fd, nil)
	if err != nil || sz == 0 {
		if err == unix.ENOTSUP {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, sz)
	if sz, err = unix.Flistxattr(fd, buf); err != nil {
		return nil, err
	}
	var out []index.Xattr
	for _, name := range strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00") {
		if !strings.HasPrefix(name, "user.") && !strings.HasPrefix(name, "trusted.") || name == xattr.State {
			continue
		}
		v, err := unix.Fgetxattr(fd, name, nil)
		if err != nil {
			continue
		}
		val := make([]byte, v)
		if v, err = unix.Fgetxattr(fd, name, val); err != nil {
			continue
		}
		out = append(out, index.Xattr{Name: name, Value: string(val[:v])})
	}
	return out, nil
}

// sameXattrs reports whether a and b hold the same attributes, in any
// order.
func sameXattrs(a, b []index.Xattr) bool {
	sorted := func(x []index.Xattr) []index.Xattr {
		x = slices.Clone(x)
		slices.SortFunc(x, func(a, b index.Xattr) int { return strings.Compare(a.Name, b.Name) })
		return x
	}
	return len(a) == len(b) && slices.Equal(sorted(a), sorted(b))
}

// metaSame reports whether what st says of a file in DIR is what the job
// would apply for e (mode, owner when root, mtime; not xattrs).
func (j *Job) metaSame(st *unix.Stat_t, e *index.Entry) bool {
	if e.Type != index.TypeSymlink && st.Mode&0o7777 != j.meta.mode(e) {
		return false
	}
	if j.meta.chown && (st.Uid != e.UID || st.Gid != e.GID) {
		return false
	}
	return statTime(st.Mtim) == e.MTime
}

// keep records file id (entry e, p in DIR, attributes st), whose content
// is the archive's, as complete, first setting its metadata in place when
// it differs. prevAttr are the xattrs the previous version gave it, known
// when knownAttr (else DIR's own are not looked at). open opens it.
func (r *reconciler) keep(id index.EntryID, e *index.Entry, st *unix.Stat_t, p string, prevAttr []index.Xattr, knownAttr bool, open func() (int, error)) error {
	j := r.j
	if uint64(st.Nlink) != uint64(e.Nlink) {
		// Its other names are removed (the archive lacks them) or
		// replaced (they are other files of the archive), unless one
		// of those keeps the inode: decided once all are seen
		// (keepShared).
		r.mu.Lock()
		r.shared = append(r.shared, sharedKeep{id, *st, p, prevAttr, knownAttr})
		r.mu.Unlock()
		return nil
	}
	xattrs := r.ix.Xattrs(id)
	var stale []string // xattrs to remove
	for _, x := range prevAttr {
		if !slices.ContainsFunc(xattrs, func(y index.Xattr) bool { return y.Name == x.Name }) {
			stale = append(stale, x.Name)
		}
	}
	same := j.metaSame(st, e) && knownAttr && sameXattrs(prevAttr, xattrs)
	var fd = -1
	if !same {
		var err error
		if fd, err = open(); err != nil {
			return fmt.Errorf("open %s: %w", p, err)
		}
		defer unix.Close(fd)
	}
	if !knownAttr {
		// DIR's own xattrs, of the namespaces an archive carries.
		have, err := archivedXattrs(fd)
		if err != nil {
			return fmt.Errorf("read the xattrs of %s: %w", p, err)
		}
		same = j.metaSame(st, e) && sameXattrs(have, xattrs)
		for _, x := range have {
			if !slices.ContainsFunc(xattrs, func(y index.Xattr) bool { return y.Name == x.Name }) {
				stale = append(stale, x.Name)
			}
		}
	}
	if !same {
		if err := setMetaFd(fd, e, xattrs, j.meta, made{}, j.warn, constPath(p)); err != nil {
			return err
		}
		for _, name := range stale {
			if err := unix.Fremovexattr(fd, name); err != nil && err != unix.ENODATA {
				j.warn("xattr not removed", p, err)
			}
		}
		j.prog.Retouched.Add(1)
	}
	r.mu.Lock()
	j.life.markDone(r.v, id)
	r.mu.Unlock()
	j.prog.Kept.Add(1)
	j.prog.Entries.Add(1 + int64(len(j.tree.extra[id])))
	return nil
}

// special decides about symlink, fifo or device id (entry e) at name in
// fd with attributes st: kept when it is exactly as the archive has it.
func (r *reconciler) special(id index.EntryID, e *index.Entry, fd int, name string, st *unix.Stat_t, pid index.EntryID, pok bool) {
	j := r.j
	if e.Nlink != 1 || st.Nlink != 1 || !j.metaSame(st, e) {
		return
	}
	if xattrs := r.ix.Xattrs(id); len(xattrs) > 0 && !(pok && sameXattrs(r.prev.Xattrs(pid), xattrs)) {
		return
	}
	switch ft := st.Mode & unix.S_IFMT; e.Type {
	case index.TypeSymlink:
		if ft != unix.S_IFLNK {
			return
		}
		buf := make([]byte, len(e.Linkname)+1)
		n, err := unix.Readlinkat(fd, name, buf)
		if err != nil || n != len(e.Linkname) || string(buf[:n]) != e.Linkname {
			return
		}
	case index.TypeFIFO:
		if ft != unix.S_IFIFO {
			return
		}
	case index.TypeChar, index.TypeBlock:
		want := uint32(unix.S_IFCHR)
		if e.Type == index.TypeBlock {
			want = unix.S_IFBLK
		}
		if ft != want || st.Rdev != unix.Mkdev(e.Devmajor, e.Devminor) {
			return
		}
	default:
		return
	}
	j.kept[id] = true
	j.prog.Kept.Add(1)
	j.prog.Entries.Add(1)
}

// confirm reads the candidates' copies in DIR, in parallel, and keeps
// those whose content is the archive's.
func (r *reconciler) confirm(ctx context.Context, spans Spans) error {
	if len(r.cands) == 0 {
		return nil
	}
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(r.j.opts.Decoders)
	for i := range r.cands {
		c := &r.cands[i]
		if !c.byHash && spans == nil {
			continue
		}
		g.Go(func() error {
			f, err := r.j.life.root.OpenFile(c.path, os.O_RDONLY|unix.O_NOFOLLOW, 0)
			if err != nil {
				return nil // gone or not a file: written
			}
			defer f.Close()
			var same bool
			if c.byHash {
				d, err := index.DigestOf(f)
				if err != nil {
					return fmt.Errorf("read %s: %w", c.path, err)
				}
				want, _ := r.ix.MemberDigest(c.id)
				same = d == want
			} else if same, err = r.sameAsArchive(ctx, spans, c.id, f); err != nil {
				return err
			}
			if !same {
				return nil
			}
			return r.keep(c.id, r.ix.Entry(c.id), &c.st, c.path, nil, false, func() (int, error) {
				return unix.Dup(int(f.Fd()))
			})
		})
	}
	return g.Wait()
}

// sameAsArchive compares the data of file id (not sparse) in the archive,
// read through spans, with f.
func (r *reconciler) sameAsArchive(ctx context.Context, spans Spans, id index.EntryID, f *os.File) (bool, error) {
	e := r.ix.Entry(id)
	start := int64(e.DataOffset)
	off, end := start, start+e.Size
	var mine []byte
	for off < end {
		i := sort.Search(spans.Len(), func(i int) bool { _, b := spans.Bounds(i); return b > off })
		if i == spans.Len() {
			return false, fmt.Errorf("%w: data of %s lies outside every span", index.ErrCorrupt, r.ix.Path(id))
		}
		_, b := spans.Bounds(i)
		to := min(end, b)
		if err := r.j.opts.Gate.Wait(ctx); err != nil {
			return false, err
		}
		piece, _, err := spans.Read(ctx, i, off, to, nil)
		if err != nil {
			return false, err
		}
		r.j.prog.Input.Add(int64(len(piece)))
		if cap(mine) < len(piece) {
			mine = make([]byte, len(piece))
		}
		mine = mine[:len(piece)]
		if _, err := f.ReadAt(mine, off-start); err != nil && err != io.EOF {
			return false, fmt.Errorf("read %s: %w", r.ix.Path(id), err)
		}
		if !bytes.Equal(mine, piece) {
			return false, nil
		}
		off = to
	}
	return true, nil
}
