// Package materialize writes the whole tree of an archive to a local
// directory (DIR): as `tarmount extract` does, and in the background of a
// mount (--materialize), which then serves each file from DIR once it is
// complete there.
//
// It owns the writing side: directories before their children, file data
// from spans decoded in parallel (or from one streamed pass, Stage) written
// by a pool of writers, hard links once their target is complete, symlinks,
// fifos and devices, owners, modes, xattrs and times (directories last), the
// journal and marker that make a job resumable, and the refusal of anything
// that would write outside DIR. It knows nothing of FUSE, HTTP or S3: bytes
// come from a Spans (decoded tar stream pieces) or from Stage.
//
// Data flow of one job:
//
//	Open(DIR)        check DIR is empty or ours; marker, journal, tmp dir
//	Stage(h, data)   optional, during a one-pass index build: member data
//	   |             copied to the writer pool, written to DIR/.tarmount-partial/tmp
//	Run(ix, spans)   mkdir the tree (while the first spans decode), each
//	   |             directory kept open for the writers, as many as the
//	   |             open-file limit allows (dirTable), others reopened;
//	   |             specials and links; every regular file not in the
//	   |             journal: staged -> linked into place, else its span
//	   |             pieces decoded (Decoders at once, in archive order,
//	   |             waiting at the Gate while foreground reads run) ->
//	   |             pwrite by Writers into an unnamed file (O_TMPFILE) in
//	   |             its directory -> owner, mode, xattrs, times -> linked
//	   |             under its name -> hard links -> journal
//	   v
//	directory metadata (children first), syncfs, marker "complete"
package materialize

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/index/tarscan"
)

// ErrNotOurs means DIR is not empty and was not made by a job of this
// archive: it is refused unless Options.Overwrite.
var ErrNotOurs = errors.New("materialize: directory is not empty and was not made by tarmount from this archive")

// DefaultWriters is the default size of the writer pool: 8 per core, at
// least 16, so that writers blocked in file creation, linking and metadata
// calls leave others copying data. Creating a file waits now and then for
// a block of the inode table to be read, and while every writer waits the
// cores have nothing to do: with 8 writers the one-pass extraction of 200k
// small files left 2.6 of its 17 core-seconds idle, with 16 one. A sweep
// of --write-workers on 2 cores (a local .tar.gz, a new ext4 filesystem
// without a journal for each run, page cache dropped, median of 2-5 runs,
// seconds):
//
//	writers                           8     16     32     64
//	200k small files, one pass     8.49   7.48   7.44   7.27
//	200k small files, saved index  6.69   6.77
//	Go tree, one pass              1.37   1.29
//
// More writers cost no extra system time here.
func DefaultWriters() int { return max(16, 8*runtime.GOMAXPROCS(0)) }

// DefaultDecoders is the default number of spans fetched and decoded at
// once: 4 per core, at least 8, so that the fetches' latency is hidden
// (index.Reader.DecodeSpan lets only GOMAXPROCS of them decode at once).
// Over a server 20 ms from its first byte, 2 spans at once took 2.4 s for
// the Go toolchain as .tar.lz4 and 6 took 0.9 s; from 8 to 16 made no
// difference beyond noise, while each span in flight holds up to about
// 8 MiB.
func DefaultDecoders() int { return max(8, 4*runtime.GOMAXPROCS(0)) }

// defaultMemoryBytes bounds the decoded data held between decoding and
// writing.
const defaultMemoryBytes = 256 << 20

// stageBuckets is the number of directories staged files are spread over.
const stageBuckets = 64

// stageChunkBytes is the size of the pieces that Stage hands to writers,
// and of the slabs it copies them into.
const stageChunkBytes = 1 << 20

// Options tune a job. The zero value is usable.
type Options struct {
	// Writers is the number of files written at once (DefaultWriters
	// when zero).
	Writers int
	// Decoders is the number of spans fetched and decoded at once
	// (DefaultDecoders when zero).
	Decoders int
	// MemoryBytes bounds the data held between decoding and writing
	// (256 MiB when zero).
	MemoryBytes int64
	// Overwrite lets a job write into a non-empty DIR that is not its
	// own, replacing what the archive has and leaving the rest.
	Overwrite bool
	// Sync makes DIR durable (syncfs) before it is marked complete, so
	// that the marker also holds after a power failure. Without it, as
	// with tar -x, the data reaches the disk when the kernel writes it
	// back; the journal and marker hold against a crash of the process.
	Sync bool
	// Gate, if set, makes span decoding wait while foreground reads run.
	Gate *Gate
	// Progress, if set, is updated as the job goes.
	Progress *Progress
	Logger   *slog.Logger
}

// Spans is the decoded tar stream in pieces that can be read in any order
// and in parallel. Implementations are safe for concurrent use.
type Spans interface {
	// Len is the number of spans.
	Len() int
	// Bounds returns the range [start, end) of the tar stream in span i;
	// spans are sorted and do not overlap.
	Bounds(i int) (start, end int64)
	// Read returns the tar stream bytes [from, to), a range within span
	// i, verified, and whole, the caller's buffer that holds them. buf,
	// when not nil, is a whole of an earlier Read that the caller no
	// longer uses: Read may decode into it instead of allocating.
	Read(ctx context.Context, i int, from, to int64, buf []byte) (piece, whole []byte, err error)
	// Stored is about how many bytes of the archive as stored span i
	// takes (for progress).
	Stored(i int) int64
}

// Job materializes one archive into one directory. Stage may be called
// from one goroutine while Run has not started; OpenLocal and Done are
// safe for concurrent use at any time.
type Job struct {
	// set once, by Open
	dir        string
	key        string
	opts       Options
	log        *slog.Logger
	prog       *Progress
	meta       metaOpts
	complete   bool // DIR was complete at Open
	resume     []index.EntryID
	root       *os.Root // DIR, for OpenLocal
	rootFd     int
	rootPlain  bool // plainDir(rootFd)
	stagePlain bool // every stage directory was made by this job (so plain when rootPlain)
	stateFd    int  // DIR/.tarmount-partial, -1 when complete
	tmpFd      int  // its tmp/
	// stageDirs are tmp/bXX, made on first use (stageDir), guarded by
	// stageMu: Stage spreads files over them, since creates and unlinks
	// in one directory serialize on its lock.
	stageDirs [stageBuckets]int
	jr        *journal
	sem       *semaphore.Weighted
	memory    int64
	ctx       context.Context
	cancel    context.CancelFunc

	// the writer pool
	tasks   chan func() error
	workers sync.WaitGroup
	pending sync.WaitGroup // submitted tasks not done
	errOnce sync.Once
	err     error // first task error; set before ctx is cancelled

	// Stage
	stageMu sync.Mutex
	staged  map[int64]*wfile // guarded by stageMu: by DataOffset
	stageWG sync.WaitGroup   // staged files not fully written
	// stageFds counts staged files made unnamed and kept open; beyond
	// stageFdBudget (set by Open from RLIMIT_NOFILE) they are named.
	stageFds      atomic.Int64
	stageFdBudget int64
	// dirLimit is how many directories Run keeps open at most (set by
	// Open from RLIMIT_NOFILE, or by tests); more are opened again as
	// needed (dirTable).
	dirLimit int
	spanBufs bufList // buffers of written spans, for the next reads
	// slab is the buffer Stage copies member data into (only the
	// goroutine calling Stage uses it; Run lets it go); slabFree holds
	// slabs whose pieces are all written, for the next ones.
	slab      *slab
	slabBytes int64
	slabFree  bufList
	// early holds the directories Stage made or opened, by path (only
	// the goroutine calling Stage uses it; Run closes them).
	early map[string]earlyDir
	// earlyMade lists the directories Stage made, parents first.
	earlyMade []string
	abandon   atomic.Bool // set by Abandon

	// set by Run, read by OpenLocal
	view atomic.Pointer[view]
	// set by Run before tasks start
	dirs     []index.EntryID // the directories to make, parents first
	dirReach []bool          // by EntryID: a directory reachable from DIR by valid names
	refused  []bool          // by EntryID: an entry whose first name planDirs refused
	dirPos   []int32         // by EntryID: a directory's place in dirs, -1 for others
	// set by makeDirs, read by others after waitDir
	dirsReady   chan struct{} // closed when makeDirs returned
	dirsMade    atomic.Int32  // how many of dirs are made; stored under dirsMu
	dirsMu      sync.Mutex
	dirsCond    sync.Cond   // on dirsMu: broadcast when dirsMade or dirsStopped change
	dirsStopped bool        // guarded by dirsMu: makeDirs returned
	dirt        *dirTable   // the directories made, open or opened again on demand
	dirPlain    []bool      // by EntryID: made by this job in a plain directory (plainDir)
	noTmpfile   atomic.Bool // the filesystem of DIR has no O_TMPFILE
	extra       map[index.EntryID][]name

	noteMu sync.Mutex
	notes  map[string]*note // guarded by noteMu: refusals and warnings by kind

	closeOnce sync.Once
}

type name struct {
	dir  index.EntryID
	name string
}

type note struct {
	count   int
	example string
	err     error
}

// view is what OpenLocal needs: the index and which entries are done.
type view struct {
	ix   *index.Index
	done []atomic.Uint32 // bit per EntryID
}

func (v *view) set(id index.EntryID) { v.done[id/32].Or(1 << (id % 32)) }
func (v *view) isSet(id index.EntryID) bool {
	return int(id/32) < len(v.done) && v.done[id/32].Load()&(1<<(id%32)) != 0
}
func newView(ix *index.Index) *view {
	return &view{ix: ix, done: make([]atomic.Uint32, (ix.Len()+31)/32)}
}
func (j *Job) markDone(v *view, id index.EntryID) { v.set(id); j.jr.Add(id) }

// Open prepares dir (created if missing) for the archive whose source
// identity is key (fetch.Identity.Key). An empty dir starts a new job; a
// dir this archive's job left incomplete is resumed from its journal; a
// dir it completed is kept as it is (Complete). Anything else fails with
// ErrNotOurs unless opts.Overwrite.
func Open(dir, key string, opts Options) (*Job, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if abs == "/" {
		return nil, fmt.Errorf("materialize: refusing to write into /")
	}
	if opts.Writers <= 0 {
		opts.Writers = DefaultWriters()
	}
	if opts.Decoders <= 0 {
		opts.Decoders = DefaultDecoders()
	}
	if opts.MemoryBytes <= 0 {
		opts.MemoryBytes = defaultMemoryBytes
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	prog := opts.Progress
	if prog == nil {
		prog = &Progress{}
	}
	j := &Job{dir: abs, key: key, opts: opts, log: log, prog: prog, rootFd: -1, stateFd: -1, tmpFd: -1,
		meta: metaOpts{chown: os.Geteuid() == 0, uid: os.Geteuid(), gid: os.Getegid(), umask: processUmask()}, staged: map[int64]*wfile{}, early: map[string]earlyDir{}, notes: map[string]*note{},
		memory: opts.MemoryBytes, sem: semaphore.NewWeighted(opts.MemoryBytes), spanBufs: bufList{max: runtime.GOMAXPROCS(0)},
		slabBytes: min(stageChunkBytes, opts.MemoryBytes), slabFree: bufList{max: stageFreeSlabs}}
	j.ctx, j.cancel = context.WithCancel(context.Background())
	for i := range j.stageDirs {
		j.stageDirs[i] = -1
	}

	empty, err := isEmptyDir(abs)
	if err != nil {
		return nil, err
	}
	m, hasMarker := readMarker(abs)
	_, stateErr := os.Lstat(filepath.Join(abs, stateDirName))
	fresh := true
	switch {
	case empty:
	case hasMarker && m.Source == key && m.Complete && errors.Is(stateErr, os.ErrNotExist):
		j.complete = true
	case hasMarker && m.Source == key:
		fresh = false
	case opts.Overwrite:
	case hasMarker:
		return nil, fmt.Errorf("%w: %s holds another version of the archive (use --overwrite to extract over it)", ErrNotOurs, abs)
	default:
		return nil, fmt.Errorf("%w: %s (use --overwrite to extract into it anyway)", ErrNotOurs, abs)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, err
	}
	if j.root, err = os.OpenRoot(abs); err != nil {
		return nil, err
	}
	if j.rootFd, err = unix.Open(abs, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		j.root.Close()
		return nil, fmt.Errorf("open %s: %w", abs, err)
	}
	if j.complete {
		log.Info("directory already complete", "path", abs)
		return j, nil
	}
	j.rootPlain = plainDir(j.rootFd)
	j.stageFdBudget, j.dirLimit = fdBudgets()
	if err := j.openState(fresh, m.Source == key); err != nil {
		j.Close()
		return nil, err
	}
	return j, nil
}

// fdReserve is the descriptors a job leaves to everything but its own
// staged files and directories: the stage directories, the state files,
// connections, the caches, the runtime.
const fdReserve = stageBuckets + 64

// fdBudgets divides what the process may open (RLIMIT_NOFILE), less
// fdReserve, among a job's descriptors: half for
// the unnamed files Stage keeps open (beyond, they get names), of which
// Stage's directories may take half (beyond, files are staged), and a
// quarter for the directories Run keeps open (beyond, they are opened
// again as needed; never fewer than 8).
func fdBudgets() (stageFiles int64, dirs int) {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) != nil {
		return 0, 0 // none kept open; dirTable's default
	}
	avail := int64(min(lim.Cur, 1<<30)) - fdReserve
	return max(avail/2, 0), max(int(avail/4), 8)
}

// openState writes the marker, makes the state directory with an empty
// tmp and opens the journal (kept when resuming).
func (j *Job) openState(fresh, sameSource bool) error {
	if err := writeMarker(j.dir, marker{Source: j.key}); err != nil {
		return err
	}
	var err error
	if j.stateFd, err = mkdirBeneath(j.rootFd, stateDirName); err != nil {
		return err
	}
	if err := removeTree(j.stateFd, tmpDirName); err != nil {
		return fmt.Errorf("clear %s: %w", stateDirName, err)
	}
	if j.tmpFd, err = mkdirBeneath(j.stateFd, tmpDirName); err != nil {
		return err
	}
	jpath := fmt.Sprintf("/proc/self/fd/%d/%s", j.stateFd, journalName)
	keep := !fresh && sameSource
	if keep {
		j.resume = readJournal(jpath, j.key, 1<<32-1)
		keep = j.resume != nil
		if keep {
			j.log.Info("resuming", "path", j.dir, "files_done", len(j.resume))
		}
	}
	if j.jr, err = openJournal(jpath, j.key, keep); err != nil {
		return fmt.Errorf("open journal: %w", err)
	}
	j.tasks = make(chan func() error, 4*j.opts.Writers)
	for range j.opts.Writers {
		j.workers.Go(j.worker)
	}
	return nil
}

// isEmptyDir reports whether dir is missing or empty.
func isEmptyDir(dir string) (bool, error) {
	f, err := os.Open(dir)
	if errors.Is(err, os.ErrNotExist) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return false, err
	}
	if !st.IsDir() {
		return false, fmt.Errorf("%s is not a directory", dir)
	}
	names, err := f.Readdirnames(1)
	if err == io.EOF {
		return true, nil
	}
	return len(names) == 0, err
}

// Dir returns the absolute path of DIR.
func (j *Job) Dir() string { return j.dir }

// Complete reports whether DIR was complete when the job was opened (Run
// then has nothing to write).
func (j *Job) Complete() bool { return j.complete }

func (j *Job) worker() {
	for fn := range j.tasks {
		if j.ctx.Err() == nil {
			if err := fn(); err != nil {
				j.fail(err)
			}
		}
		j.pending.Done()
	}
}

func (j *Job) fail(err error) {
	j.errOnce.Do(func() {
		j.err = err
		j.cancel()
	})
}

// submit queues fn for a writer. It fails once the job has failed.
func (j *Job) submit(fn func() error) error {
	j.pending.Add(1)
	select {
	case j.tasks <- fn:
		return nil
	case <-j.ctx.Done():
		j.pending.Done()
		return j.failure()
	}
}

// submitWhole queues the writing of wf as one piece: a file with no data
// to decode (empty, or staged whole by a one-pass extraction).
func (j *Job) submitWhole(wf *wfile) error {
	wf.pending.Store(1)
	return j.submit(wf.pieceDone)
}

// failure returns the job's first error, or its context's.
func (j *Job) failure() error {
	if j.err != nil {
		return j.err
	}
	return j.ctx.Err()
}

// noteOnce records one refusal or warning of a kind; Report logs each
// kind once.
func (j *Job) noteOnce(kind, path string, err error) {
	j.noteMu.Lock()
	defer j.noteMu.Unlock()
	n := j.notes[kind]
	if n == nil {
		n = &note{example: path, err: err}
		j.notes[kind] = n
	}
	n.count++
}

// Notes returns what the job refused or could not apply, one line per
// kind ("KIND: N, e.g. PATH"), sorted.
func (j *Job) Notes() []string {
	j.noteMu.Lock()
	defer j.noteMu.Unlock()
	var out []string
	for k, n := range j.notes {
		s := fmt.Sprintf("%s: %d, e.g. %s", k, n.count, n.example)
		if n.err != nil {
			s += fmt.Sprintf(" (%v)", n.err)
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

func (j *Job) report() {
	for _, s := range j.Notes() {
		j.log.Warn("materialize: " + s)
	}
}

func (j *Job) warn(kind, path string, err error) { j.noteOnce(kind, path, err) }

// Screen looks at a member as the archive stores it and notes what tar -x
// would have to neutralize or refuse (the index applies the same rules).
// Stage calls it; a caller that builds the index without staging may too.
func (j *Job) Screen(h *tarscan.Header) {
	if strings.HasPrefix(h.Name, "/") {
		j.noteOnce("absolute member names (leading / removed)", h.Name, nil)
	}
	if hasDotDot(h.Name) {
		j.noteOnce("member names with .. (refused)", h.Name, nil)
	}
	if h.Typeflag == tarscan.TypeLink {
		if hasDotDot(h.Linkname) {
			j.noteOnce("hard links with .. in their target (refused)", h.Name, nil)
		} else if strings.HasPrefix(h.Linkname, "/") {
			j.noteOnce("hard links with an absolute target (taken relative to DIR)", h.Name, nil)
		}
	}
	if first := firstComponent(h.Name); first == stateDirName {
		j.noteOnce("members named "+stateDirName+" (reserved, refused)", h.Name, nil)
	}
}

// firstComponent returns the first component of p other than "" and
// ".": the name p takes at the top of DIR.
func firstComponent(p string) string {
	for c := range strings.SplitSeq(p, "/") {
		if c != "" && c != "." {
			return c
		}
	}
	return ""
}

func hasDotDot(p string) bool {
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return true
		}
	}
	return false
}

// Stage takes the data of one member during a one-pass index build
// (index.BuildOptions.OnMember): a regular file's data is copied to the
// writer pool, which writes it to a temporary file; Run later moves it
// into place with its metadata. Other members are only screened. It
// blocks while the pool holds MemoryBytes.
func (j *Job) Stage(h *tarscan.Header, data io.Reader) error {
	j.Screen(h)
	if j.complete || h.Typeflag != tarscan.TypeReg || h.StoredSize <= 0 {
		return nil
	}
	wf := &wfile{size: h.Size, sparse: h.Sparse != nil, fd: -1}
	off := h.DataOffset
	var perm uint32
	switch dir, base, p, ok := j.earlyPlace(h.Name); {
	case ok && !j.noTmpfile.Load():
		// Written in its own directory, unnamed, and linked under its
		// name once complete: Run only has to check it.
		perm, wf.made = j.meta.createPerm(uint32(h.Mode), dir.plain)
		wf.dir, wf.anon, wf.early, wf.path = dir.fd, true, base, p
	case j.stageFds.Add(1) <= j.stageFdBudget && !j.noTmpfile.Load():
		// Unnamed, in the tmp directory, and kept open until Run
		// links it into place: no directory entry to make or remove.
		perm, wf.made = j.meta.createPerm(uint32(h.Mode), j.rootPlain)
		wf.dir, wf.anon = j.tmpFd, true
	default:
		perm, wf.made = j.meta.createPerm(uint32(h.Mode), j.rootPlain)
		dir, err := j.stageDir(stageBucket(off))
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
			j.noTmpfile.Store(true)
			w.anon, w.early, w.tmp = false, "", stagedName(off)
			if w.dir, err = j.stageDir(stageBucket(off)); err != nil {
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
		defer j.stageWG.Done()
		fd, err := wf.file()
		if err == nil {
			err = setMetaFd(fd, &meta.entry, meta.xattrs, j.meta, wf.made, j.warn, constPath(name))
		}
		if err == nil {
			wf.meta = meta
		}
		if err == nil && wf.early != "" {
			err = j.placeEarly(wf, fd, off)
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
	j.stageMu.Lock()
	j.staged[h.DataOffset] = wf
	j.stageMu.Unlock()
	j.stageWG.Add(1)
	wf.pending.Store(1)
	for stored := int64(0); stored < h.StoredSize; {
		n := min(j.slabBytes, h.StoredSize-stored)
		s, err := j.stageSlab(n)
		if err != nil {
			return err
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
			if err := j.submit(func() error {
				defer j.slabDone(s)
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

// stageSlab returns the slab that the next n bytes (at most slabBytes) of
// member data go into: the current one while they fit, else a new one
// (reused when one is free) once the memory budget has room for it.
func (j *Job) stageSlab(n int64) (*slab, error) {
	if s := j.slab; s != nil && int64(len(s.buf)-s.used) >= n {
		return s, nil
	}
	j.dropSlab()
	if err := j.sem.Acquire(j.ctx, j.slabBytes); err != nil {
		return nil, j.failure()
	}
	buf := j.slabFree.get()
	if buf == nil {
		buf = make([]byte, j.slabBytes)
	}
	s := &slab{buf: buf}
	s.refs.Store(1)
	j.slab = s
	return s, nil
}

// dropSlab lets the current slab go once its pieces are written.
func (j *Job) dropSlab() {
	if j.slab != nil {
		j.slabDone(j.slab)
		j.slab = nil
	}
}

func (j *Job) slabDone(s *slab) {
	if s.refs.Add(-1) == 0 {
		j.slabFree.put(s.buf)
		j.sem.Release(j.slabBytes)
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
func (j *Job) earlyPlace(member string) (dir earlyDir, base, p string, ok bool) {
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
	dir = j.earlyDir(parent)
	return dir, base, p, dir.fd >= 0
}

// earlyDir returns directory p of DIR, making it (mode 0700, as Run does)
// and its parents when missing. It never removes anything and never
// follows a symbolic link: whatever is in the way makes it fail (fd -1).
func (j *Job) earlyDir(p string) earlyDir {
	if p == "" {
		return earlyDir{j.rootFd, j.rootPlain}
	}
	if d, ok := j.early[p]; ok {
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
		if parent := j.earlyDir(parentPath); parent.fd >= 0 && len(j.early) < int(j.stageFdBudget/2) {
			err := unix.Mkdirat(parent.fd, base, 0o700)
			if err == nil || err == unix.EEXIST {
				if err == nil {
					j.earlyMade = append(j.earlyMade, p)
				}
				if fd, oerr := openDirBeneath(parent.fd, base); oerr == nil {
					d = earlyDir{fd: fd, plain: err == nil && parent.plain}
				}
			}
		}
	}
	j.early[p] = d
	return d
}

// closeEarly closes the directories Stage opened.
func (j *Job) closeEarly() {
	for p, d := range j.early {
		if d.fd >= 0 {
			unix.Close(d.fd)
		}
		delete(j.early, p)
	}
}

// placeEarly links the complete staged file wf, open at fd, under its
// name. When the name is taken (a member listed twice, an earlier run's
// file), the file stays staged for Run, which replaces what is there if
// the index says so.
func (j *Job) placeEarly(wf *wfile, fd int, off int64) error {
	err := linkFd(fd, wf.dir, wf.early)
	if err == nil {
		wf.placed = true
		wf.anon = false // closed now
		return nil
	}
	if err != unix.EEXIST {
		return err
	}
	wf.early, wf.path = "", ""
	if j.stageFds.Add(1) <= j.stageFdBudget {
		return nil // kept open, unnamed
	}
	dir, err := j.stageDir(stageBucket(off))
	if err != nil {
		return err
	}
	wf.anon, wf.dir, wf.tmp = false, dir, stagedName(off)
	unix.Unlinkat(dir, wf.tmp, 0)
	return linkFd(fd, dir, wf.tmp)
}

func stageBucket(off int64) int   { return int((off >> 9) % stageBuckets) }
func stagedName(off int64) string { return fmt.Sprintf("s%x", off) }

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

// wfile is a regular file being written under a temporary name.
type wfile struct {
	id      index.EntryID
	tmp     string // name in dir
	dir     int    // the directory of tmp: the file's own, a stage directory, or the tmp directory
	size    int64
	sparse  bool
	staged  bool                      // named tmp in a stage directory (by Stage or a writer): placed by a link and an unlink
	anon    bool                      // unnamed (O_TMPFILE) in dir: placed by linking its descriptor
	early   string                    // Stage links it under this name in dir once complete
	path    string                    // its path in DIR (index.CleanName) when early
	placed  bool                      // in place under its name, by Stage
	meta    *appliedMeta              // metadata already applied (by Stage), nil if none
	made    made                      // what creating it set (for setMetaFd)
	pending atomic.Int64              // pieces not yet written (+1 while more may come)
	finish  func(*wfile) error        // called once when pending reaches 0
	mu      sync.Mutex                // guards fd
	fd      int                       // opened by the first piece; -1 before and after
	opener  func(*wfile) (int, error) // how to open it (set by the job)
}

// file returns the open descriptor of w, opening it on first use. Raw
// descriptors, not *os.File: os.NewFile costs an fcntl per file, and
// writes never block.
func (w *wfile) file() (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd >= 0 {
		return w.fd, nil
	}
	fd, err := w.opener(w)
	if err != nil {
		return -1, err
	}
	w.fd = fd
	return fd, nil
}

func (w *wfile) close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.fd < 0 {
		return nil
	}
	err := unix.Close(w.fd)
	w.fd = -1
	return err
}

func (w *wfile) pieceDone() error {
	if w.pending.Add(-1) == 0 {
		return w.finish(w)
	}
	return nil
}

// appliedMeta is the metadata Stage applied to a staged file.
type appliedMeta struct {
	entry  index.Entry
	xattrs []index.Xattr
}

// matches reports whether m is what setMetaFd applies for e with xattrs.
func (m *appliedMeta) matches(e *index.Entry, xattrs []index.Xattr) bool {
	if m == nil {
		return false
	}
	a := &m.entry
	return a.Mode == e.Mode && a.UID == e.UID && a.GID == e.GID &&
		a.MTime == e.MTime && a.ATime == e.ATime && slices.Equal(m.xattrs, xattrs)
}

// createTmp creates (or truncates) name in dirfd for writing, with mode
// perm (before the umask), presized when sparse.
func createTmp(dirfd int, name string, perm uint32, size int64, sparse bool) (int, error) {
	fd, err := unix.Openat(dirfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC|unix.O_NOFOLLOW, perm)
	if err != nil {
		return -1, fmt.Errorf("create temporary %s: %w", name, err)
	}
	if err := presize(fd, size, sparse); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// presize gives a sparse file its size before its data is written, so
// that holes stay holes.
func presize(fd int, size int64, sparse bool) error {
	if !sparse || size <= 0 {
		return nil
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		return fmt.Errorf("size a sparse file: %w", err)
	}
	return nil
}

// stageDir returns stage directory i (tmp/bXX), made on first use.
func (j *Job) stageDir(i int) (int, error) {
	j.stageMu.Lock()
	defer j.stageMu.Unlock()
	return j.stageDirLocked(i)
}

func (j *Job) stageDirLocked(i int) (int, error) {
	if j.stageDirs[i] < 0 {
		fd, err := mkdirBeneath(j.tmpFd, fmt.Sprintf("b%02x", i))
		if err != nil {
			return -1, err
		}
		j.stageDirs[i] = fd
	}
	return j.stageDirs[i], nil
}

func (j *Job) writePiece(wf *wfile, at int64, data []byte) error {
	fd, err := wf.file()
	if err != nil {
		return err
	}
	for len(data) > 0 {
		k, err := unix.Pwrite(fd, data, at)
		if err == unix.EINTR {
			continue
		}
		if err == nil && k == 0 {
			err = io.ErrShortWrite
		}
		if err != nil {
			return fmt.Errorf("write %s: %w", wf.tmp, err)
		}
		data, at = data[k:], at+int64(k)
		j.prog.Bytes.Add(int64(k))
	}
	return wf.pieceDone()
}

// Abandon closes the job after a one-pass extraction failed, first
// removing the files Stage placed under their names, and the directories
// it made for them: their bytes were never checked to the end of the
// archive (a gzip CRC, say), so a failed pass leaves nothing named in DIR
// but the job's state. Like Close, it is idempotent.
func (j *Job) Abandon() error {
	j.abandon.Store(true)
	return j.Close()
}

// removePlaced removes what Stage placed (for Abandon), once the writers
// have stopped.
func (j *Job) removePlaced() {
	for _, wf := range j.staged {
		if wf.placed {
			if err := j.root.Remove(wf.path); err != nil && !errors.Is(err, os.ErrNotExist) {
				j.log.Warn("could not remove a file of the failed pass", "path", wf.path, "err", err)
			}
		}
	}
	for i := len(j.earlyMade) - 1; i >= 0; i-- {
		j.root.Remove(j.earlyMade[i]) // only when empty: what else is there stays
	}
}

// Close stops the writers, closes what the job holds open and logs what it
// refused. It is idempotent; it does not wait for Run, which the caller
// ends by cancelling its context.
func (j *Job) Close() error {
	j.closeOnce.Do(func() {
		j.cancel()
		if j.tasks != nil {
			close(j.tasks)
			j.workers.Wait()
		}
		if j.abandon.Load() && j.root != nil {
			j.removePlaced()
		}
		if j.jr != nil {
			j.jr.Close()
		}
		for _, wf := range j.staged {
			wf.close() // unnamed staged files Run did not take
		}
		j.closeEarly()
		if j.dirt != nil {
			j.dirt.closeAll()
		}
		for _, fd := range append(j.stageDirs[:], j.tmpFd, j.stateFd, j.rootFd) {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
		if j.root != nil {
			j.root.Close()
		}
	})
	return nil
}

// OpenLocal opens the file of entry id in DIR if it is complete there, for
// reading; it returns false when it is not (yet). Safe for concurrent use.
func (j *Job) OpenLocal(id index.EntryID) (*os.File, bool) {
	v := j.view.Load()
	if v == nil || !v.isSet(id) {
		return nil, false
	}
	f, err := j.root.OpenFile(v.ix.Path(id), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		j.log.Debug("open materialized file", "path", v.ix.Path(id), "err", err)
		return nil, false
	}
	return f, true
}

// pathOf names id in messages.
func (j *Job) pathOf(ix *index.Index, id index.EntryID) string {
	return path.Clean("/" + ix.Path(id))[1:]
}
