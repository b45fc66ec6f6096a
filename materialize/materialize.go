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
	"path"
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

// ErrNotOurs means DIR is not empty and tarmount did not make it (no
// marker): it is refused unless Options.Overwrite. A DIR that tarmount
// made from another archive or version is upgraded (upgrade.go).
var ErrNotOurs = errors.New("materialize: directory is not empty and was not made by tarmount")

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
	// Overwrite lets a job write into a non-empty DIR that tarmount did
	// not make: DIR is brought to exactly the archive's tree, as in an
	// upgrade (upgrade.go), and what the archive lacks is removed.
	Overwrite bool
	// Previous, if set, returns the index of the version of an archive
	// whose source identity key (fetch.Identity.Key) is key, or nil when
	// it is not at hand. A job that upgrades a DIR made from that
	// version compares the two indexes to find what is unchanged.
	Previous func(key string) *index.Index
	// Sync makes DIR durable (syncfs) before it is marked complete, so
	// that the marker also holds after a power failure. Without it, as
	// with tar -x, the data reaches the disk when the kernel writes it
	// back; the journal and marker hold against a crash of the process.
	Sync bool
	// Gate, if set, makes the job start no span read while foreground
	// reads run (Gate.Wait). The decodes themselves are admitted by the
	// same gate where the Spans' reader asks it
	// (index.ReaderOptions.Admit = Gate.Acquire).
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

// Job materializes one archive into one directory. It is a façade over
// four parts, each with its own rules:
//
//	life   lifecycle   DIR, its marker, state and journal; OpenLocal's view
//	pool   writerPool  the writers, the job's context and first error
//	stage  stager      what a one-pass extraction (Stage) staged
//	tree   dirTree     the directories: planned, made, kept open
//
// Stage may be called from one goroutine while Run has not started; Run
// is called once; OpenLocal and Notes are safe for concurrent use at any
// time; Close and Abandon are idempotent.
//
// Lock order: a file's own lock (wfile.mu, held while it is created)
// comes first; under it, creating the file may take dirTree.mu,
// dirTable.mu or stager.mu, never two of those at once. notes.mu, the
// journal's and the bufLists' locks are leaves.
type Job struct {
	// set once, by Open
	opts     Options
	log      *slog.Logger
	prog     *Progress
	meta     metaOpts
	sem      *semaphore.Weighted // the memory budget: Stage's slabs and decoded spans
	spanBufs bufList             // buffers of written spans, for the next reads

	life  lifecycle
	pool  writerPool
	stage stager
	tree  dirTree
	notes notes
	// kept is set by reconcile, before the writers start, and read-only
	// afterwards: by EntryID, a symlink, fifo or device that DIR already
	// holds as the archive has it (upgrade.go). nil when DIR held no
	// other tree.
	kept []bool
}

// submitWhole queues the writing of wf as one piece: a file with no data
// to decode (empty, or staged whole by a one-pass extraction).
func (j *Job) submitWhole(wf *wfile) error {
	wf.pending.Store(1)
	return j.pool.submit(wf.pieceDone)
}

// notes counts what a job refused or could not apply, by kind, with the
// first example of each. Safe for concurrent use; mu is a leaf lock.
type notes struct {
	mu     sync.Mutex
	byKind map[string]*note // guarded by mu
}

type note struct {
	count   int
	example string
	err     error
}

// add records one refusal or warning of a kind.
func (n *notes) add(kind, path string, err error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := n.byKind[kind]
	if k == nil {
		k = &note{example: path, err: err}
		n.byKind[kind] = k
	}
	k.count++
}

// lines returns one line per kind ("KIND: N, e.g. PATH"), sorted.
func (n *notes) lines() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []string
	for k, v := range n.byKind {
		s := fmt.Sprintf("%s: %d, e.g. %s", k, v.count, v.example)
		if v.err != nil {
			s += fmt.Sprintf(" (%v)", v.err)
		}
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// noteOnce records one refusal or warning of a kind; report logs each
// kind once.
func (j *Job) noteOnce(kind, path string, err error) { j.notes.add(kind, path, err) }

// Notes returns what the job refused or could not apply, one line per
// kind ("KIND: N, e.g. PATH"), sorted.
func (j *Job) Notes() []string { return j.notes.lines() }

func (j *Job) report() {
	for _, s := range j.Notes() {
		j.log.Warn("materialize: " + s)
	}
}

func (j *Job) warn(kind, path string, err error) { j.noteOnce(kind, path, err) }

// Screen looks at a member as the archive stores it and notes what only
// the job refuses: names the index renames or leaves out, it notes itself
// (index.Note). Stage calls it; a caller that builds the index without
// staging may too.
func (j *Job) Screen(h *tarscan.Header) {
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

// pathOf names id in messages.
func pathOf(ix *index.Index, id index.EntryID) string {
	return path.Clean("/" + ix.Path(id))[1:]
}
