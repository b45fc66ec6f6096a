package materialize

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
)

// lifecycle is a job's hold on DIR: whether DIR is ours (the marker), its
// descriptors (DIR's own, the state directory and its tmp), the journal
// of complete files and what it listed at Open, the view OpenLocal reads,
// and what DIR's filesystem lacks. Open sets it up, Run's end (finish)
// removes the state and marks DIR complete, Close lets go of it.
//
// Concurrency: the fields "set once" are written by Open (stateFd and
// tmpFd also by finish, once nothing else uses them) and read freely by
// Stage, Run and the writers. view, noTmpfile and abandon are atomic; the
// journal has its own lock. OpenLocal may run at any time, from any
// goroutine, until Close.
type lifecycle struct {
	// set once, by Open
	dir       string // absolute
	key       string // the source identity, in the marker and the journal
	complete  bool   // DIR was complete at Open
	resume    []index.EntryID
	placed    map[int64]string // files an earlier job's Stage placed, by data offset (journal "@" lines)
	replace   bool             // DIR held another tree: reconciled before writing (upgrade.go)
	from      string           // the source key of the version DIR was complete with, when replace ("" unknown)
	root      *os.Root         // DIR, for OpenLocal
	rootFd    int
	rootPlain bool           // plainDir(rootFd)
	reserve   sync.WaitGroup // reserveFDs, from rootFd; close waits for it
	stateFd   int            // DIR/.tarmount-partial, -1 when complete or finished
	tmpFd     int            // its tmp/, -1 likewise
	jr        *journal       // nil when complete

	view      atomic.Pointer[view] // set by Run, read by OpenLocal
	noTmpfile atomic.Bool          // the filesystem of DIR has no O_TMPFILE
	abandon   atomic.Bool          // set by Abandon
	closeOnce sync.Once
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
	sem := semaphore.NewWeighted(opts.MemoryBytes)
	j := &Job{opts: opts, log: log, prog: prog, sem: sem, spanBufs: bufList{max: runtime.GOMAXPROCS(0)},
		meta:  metaOpts{chown: os.Geteuid() == 0, uid: os.Geteuid(), gid: os.Getegid(), umask: processUmask()},
		life:  lifecycle{dir: abs, key: key, rootFd: -1, stateFd: -1, tmpFd: -1},
		notes: notes{byKind: map[string]*note{}}}
	j.pool.init()
	j.stage.init(sem, min(stageChunkBytes, opts.MemoryBytes))

	fresh, err := j.life.openDir(opts.Overwrite)
	if err != nil {
		return nil, err
	}
	if j.life.complete {
		log.Info("directory already complete", "path", abs)
		return j, nil
	}
	j.life.rootPlain = plainDir(j.life.rootFd)
	j.stage.root = earlyDir{j.life.rootFd, j.life.rootPlain}
	j.stage.fdBudget, j.tree.limit = fdBudgets()
	if err := j.life.openState(fresh, log); err != nil {
		j.Close()
		return nil, err
	}
	j.life.reserve.Go(func() { reserveFDs(j.life.rootFd, fdTableReserve) })
	j.pool.start(opts.Writers)
	return j, nil
}

// openDir checks that DIR is empty or ours, makes it when missing and
// opens it. It reports whether the job starts afresh (no journal of this
// source to resume from).
func (l *lifecycle) openDir(overwrite bool) (fresh bool, err error) {
	empty, err := isEmptyDir(l.dir)
	if err != nil {
		return false, err
	}
	m, hasMarker := readMarker(l.dir)
	_, stateErr := os.Lstat(filepath.Join(l.dir, stateDirName))
	fresh = true
	switch {
	case empty:
	case hasMarker && m.Source == l.key && m.Complete && errors.Is(stateErr, os.ErrNotExist):
		l.complete = true
	case hasMarker && m.Source == l.key:
		fresh = false
		l.replace, l.from = m.Replace, m.From
	case hasMarker:
		// Another version of the archive, or another archive, that
		// tarmount wrote: upgraded in place (upgrade.go).
		l.replace = true
		if m.Complete {
			l.from = m.Source
		}
	case overwrite:
		l.replace = true
	default:
		return false, fmt.Errorf("%w: %s (use --overwrite to replace what it holds by the archive's tree)", ErrNotOurs, l.dir)
	}
	if err := os.MkdirAll(l.dir, 0o755); err != nil {
		return false, err
	}
	if l.root, err = os.OpenRoot(l.dir); err != nil {
		return false, err
	}
	if l.rootFd, err = unix.Open(l.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		l.root.Close()
		return false, fmt.Errorf("open %s: %w", l.dir, err)
	}
	return fresh, nil
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

// fdTableReserve is how many descriptors the process's table holds once
// a job has started (reserveFDs): the Go toolchain's tree keeps about
// 1700 open at once (its directories, and files being written).
const fdTableReserve = 4096

// reserveFDs grows the process's descriptor table, once, to hold n
// descriptors (at most RLIMIT_NOFILE): it duplicates fd to the lowest
// free descriptor at or above n-1 and closes the copy.
//
// In a process of many threads, each growth of the table waits for an
// RCU grace period (expand_fdtable calls synchronize_rcu, 5-30 ms here)
// and holds up every other thread's open meanwhile. A job that opened
// descriptors as it went grew it 64 -> 128 -> ... -> 2048, on the
// critical path: the pass opens the directories (Stage), the writers the
// files. Grown once, at the start, beside the first fetch, the table
// costs one such wait where nothing needs it.
func reserveFDs(fd, n int) {
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil && uint64(n) > lim.Cur {
		n = int(lim.Cur)
	}
	if n <= 64 {
		return // the table a process starts with
	}
	if dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, n-1); err == nil {
		unix.Close(dup)
	}
}

// openState writes the marker, makes the state directory with an empty
// tmp and opens the journal (kept when resuming one of this source).
func (l *lifecycle) openState(fresh bool, log *slog.Logger) error {
	if err := writeMarker(l.dir, marker{Source: l.key, Replace: l.replace, From: l.from}); err != nil {
		return err
	}
	var err error
	if l.stateFd, err = mkdirBeneath(l.rootFd, stateDirName); err != nil {
		return err
	}
	if err := removeTree(l.stateFd, tmpDirName); err != nil {
		return fmt.Errorf("clear %s: %w", stateDirName, err)
	}
	if l.tmpFd, err = mkdirBeneath(l.stateFd, tmpDirName); err != nil {
		return err
	}
	jpath := fmt.Sprintf("/proc/self/fd/%d/%s", l.stateFd, journalName)
	keep := !fresh
	if keep {
		l.resume, l.placed = readJournal(jpath, l.key, 1<<32-1)
		keep = l.resume != nil
		if keep {
			log.Info("resuming", "path", l.dir, "files_done", len(l.resume))
		}
	}
	if l.jr, err = openJournal(jpath, l.key, keep); err != nil {
		return fmt.Errorf("open journal: %w", err)
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

// markDone records that entry id is complete under all its names: for
// OpenLocal at once, in the journal for a later job.
func (l *lifecycle) markDone(v *view, id index.EntryID) { v.set(id); l.jr.Add(id) }

// removeState closes the state directory and removes it with what it
// holds, once nothing is written there any more (finish).
func (l *lifecycle) removeState() error {
	for _, fd := range []int{l.tmpFd, l.stateFd} {
		unix.Close(fd)
	}
	l.tmpFd, l.stateFd = -1, -1
	if err := removeTree(l.rootFd, stateDirName); err != nil {
		return fmt.Errorf("remove %s: %w", stateDirName, err)
	}
	return nil
}

// close closes the journal and the descriptors still open. Close calls it
// once, after the writers stopped.
func (l *lifecycle) close() {
	l.reserve.Wait()
	for _, fd := range []int{l.tmpFd, l.stateFd, l.rootFd} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	if l.root != nil {
		l.root.Close()
	}
}

// Dir returns the absolute path of DIR.
func (j *Job) Dir() string { return j.life.dir }

// Complete reports whether DIR was complete when the job was opened (Run
// then has nothing to write).
func (j *Job) Complete() bool { return j.life.complete }

// Replacing reports whether DIR held another tree when the job was
// opened (an upgrade, or Options.Overwrite over a non-empty DIR): Run then
// keeps what is unchanged and removes what the archive lacks, and Stage
// stages nothing, so that Run needs spans to read the archive.
func (j *Job) Replacing() bool { return j.life.replace }

// Abandon closes the job after a one-pass extraction failed, first
// removing the files Stage placed under their names, and the directories
// it made for them: their bytes were never checked to the end of the
// archive (a gzip CRC, say), so a failed pass leaves nothing named in DIR
// but the job's state. Like Close, it is idempotent.
func (j *Job) Abandon() error {
	j.life.abandon.Store(true)
	return j.Close()
}

// Close stops the writers, closes what the job holds open and logs what it
// refused. It is idempotent; it does not wait for Run, which the caller
// ends by cancelling its context.
func (j *Job) Close() error {
	j.life.closeOnce.Do(func() {
		j.pool.stop()
		if j.life.abandon.Load() && j.life.root != nil {
			j.stage.removePlaced(j.life.root, j.log)
		}
		if j.life.jr != nil {
			j.life.jr.Close()
		}
		j.stage.close()
		j.tree.close()
		j.life.close()
	})
	return nil
}

// OpenLocal opens the file of entry id in DIR if it is complete there, for
// reading; it returns false when it is not (yet). Safe for concurrent use.
func (j *Job) OpenLocal(id index.EntryID) (*os.File, bool) {
	v := j.life.view.Load()
	if v == nil || !v.isSet(id) {
		return nil, false
	}
	f, err := j.life.root.OpenFile(v.ix.Path(id), os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		j.log.Debug("open materialized file", "path", v.ix.Path(id), "err", err)
		return nil, false
	}
	return f, true
}
