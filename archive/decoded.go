package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/tarmount/tarmount/index"
)

// The decoded copy of a stream-only archive. Stream-only archives (a
// single-frame zstd, a single-block xz) cannot be decoded from the
// middle: the index pass writes the decoded tar stream to
// CACHE-DIR/decoded/KEY.tar (sparse: zero blocks are holes) and reads are
// served from there, checked against the index's span digests. The files
// are bounded by Options.CacheDecoded in all: before a pass writes more, the
// least recently used copies of other archives are removed (a mount using
// one keeps its open file). An index found without its copy serves at
// once, while a decode pass writes the copy again (decode.go).

// decodedPath names the decoded copy of an archive, next to its index's
// name in the cache.
func decodedPath(cacheDir, indexPath string) string {
	return filepath.Join(cacheDir, "decoded", strings.TrimSuffix(filepath.Base(indexPath), ".idx")+".tar")
}

// errDecodedFull says that a stream-only archive decodes to more than the
// bound.
var errDecodedFull = errors.New("decoded archive larger than --cache-decoded")

// decodedWriter writes the decoded copy during the index pass into a
// temporary file, created on the first write, and enforces the bound.
type decodedWriter struct {
	path  string // final name
	limit int64
	log   *slog.Logger

	mu      sync.Mutex
	f       *os.File
	ro      *os.File // the same file, for ReadAt; open until closeReads
	budget  int64    // bytes this copy may reach
	evicted bool     // old copies were removed for it already
	// How far the copy has grown, for wait: the pass writes the decoded
	// stream in order, so every byte before grown is written or a run
	// of zeros it skipped (a hole). commit sets it to the final size.
	grown   int64
	failed  error         // why the copy will not grow any more (fail)
	changed chan struct{} // closed when grown or failed change; nil when nobody waits
	// asItGoes: the copy is written under keptPath from its first byte
	// (keepAsItGoes), not under a temporary name.
	asItGoes bool
}

// keepAsItGoes makes the copy written from now on go under keptPath, as
// keep would leave it: a pass that writes mid points into its partial
// index as it goes (index.Partial.LocalBefore) leaves its copy where the
// next pass finds it after a crash too. The caller holds the pass lock
// (lockPass), so no other pass writes there.
func (w *decodedWriter) keepAsItGoes() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.asItGoes = true
}

// ReadAt reads the copy as written so far, for the mount while its index
// pass runs (index.ReaderOptions.Local of an index.Live): it returns
// io.EOF past what is written, and reads on after commit. The span digests
// check what it returns.
func (w *decodedWriter) ReadAt(p []byte, off int64) (int, error) {
	w.mu.Lock()
	ro := w.ro
	w.mu.Unlock()
	if ro == nil {
		return 0, io.EOF
	}
	return ro.ReadAt(p, off)
}

// closeReads closes the file ReadAt reads.
func (w *decodedWriter) closeReads() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ro != nil {
		w.ro.Close()
		w.ro = nil
	}
}

func (w *decodedWriter) WriteAt(p []byte, off int64) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	end := off + int64(len(p))
	if w.f == nil {
		if err := os.MkdirAll(filepath.Dir(w.path), 0o755); err != nil {
			return 0, err
		}
		var f *os.File
		var err error
		if w.asItGoes {
			f, err = os.OpenFile(keptPath(w.path), os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		} else {
			f, err = os.CreateTemp(filepath.Dir(w.path), ".tmp-*.tar")
		}
		if err != nil {
			return 0, err
		}
		ro, err := os.Open(f.Name())
		if err != nil {
			f.Close()
			os.Remove(f.Name())
			return 0, err
		}
		w.f, w.ro = f, ro
		w.budget = w.limit - usedBy(filepath.Dir(w.path), w.f.Name())
	}
	if end > w.budget && !w.evicted {
		w.evicted = true
		w.budget = w.limit - evictDecoded(filepath.Dir(w.path), w.f.Name(), w.limit, w.log)
	}
	if end > w.budget {
		return 0, fmt.Errorf("%w (%d bytes): raise it, or make a seekable archive with tarmount pack", errDecodedFull, w.limit)
	}
	n, err := w.f.WriteAt(p, off)
	if err == nil && end > w.grown {
		w.grown = end
		w.notifyLocked()
	}
	return n, err
}

// notifyLocked wakes the calls of wait.
func (w *decodedWriter) notifyLocked() {
	if w.changed != nil {
		close(w.changed)
		w.changed = nil
	}
}

// fail says that the copy will not grow any more, because of err: the
// calls of wait for bytes it does not hold fail with it.
func (w *decodedWriter) fail(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed == nil {
		w.failed = err
	}
	w.notifyLocked()
}

// wait returns once the copy holds every byte before end, or fail's
// error if it fails first, or ctx's once ctx is done.
func (w *decodedWriter) wait(ctx context.Context, end int64) error {
	w.mu.Lock()
	for w.grown < end {
		if w.failed != nil {
			err := w.failed
			w.mu.Unlock()
			return err
		}
		if w.changed == nil {
			w.changed = make(chan struct{})
		}
		changed := w.changed
		w.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
		w.mu.Lock()
	}
	w.mu.Unlock()
	return nil
}

// waitingCopy reads the decoded copy that a decode pass writes while the
// index serves (decode.go), for an index.Reader (ReaderOptions.Local): a
// read waits until the copy holds the bytes it asks for, and fails with
// the pass's error if it fails first. It never returns bytes the copy
// does not hold yet; the span digests check what it returns.
type waitingCopy struct {
	w     *decodedWriter
	start func() // starts the decode pass, if it has not started
}

var _ index.LocalWaiter = waitingCopy{}

// WaitLocal waits until the copy holds every byte before end, or ctx is
// done (index.LocalWaiter).
func (c waitingCopy) WaitLocal(ctx context.Context, end int64) error {
	c.start()
	return c.w.wait(ctx, end)
}

func (c waitingCopy) ReadAt(p []byte, off int64) (int, error) {
	if err := c.WaitLocal(context.Background(), off+int64(len(p))); err != nil {
		return 0, err
	}
	return c.w.ReadAt(p, off)
}

// commit gives the copy its final size and name; without a copy (the
// archive has checkpoints) it does nothing.
func (w *decodedWriter) commit(size int64) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		return errors.New("stream-only archive without a decoded copy")
	}
	if err := w.f.Truncate(size); err != nil {
		return err
	}
	if err := w.f.Close(); err != nil {
		return err
	}
	err := os.Rename(w.f.Name(), w.path)
	w.f = nil
	if err == nil {
		// The holes after the last write are zeros now.
		w.grown = size
		w.notifyLocked()
	}
	return err
}

// keptPath names the decoded copy that a stopped pass keeps beside its
// partial index: the next pass, resumed inside a stream-only span,
// writes on into it (index.Partial.LocalBefore). It ends in .tar, so the
// bound on decoded copies counts it and may remove it.
func keptPath(path string) string { return strings.TrimSuffix(path, ".tar") + ".kept.tar" }

// keep renames the copy written so far to keptPath, for the next pass to
// go on with; without a copy it removes any kept one.
func (w *decodedWriter) keep() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f == nil {
		os.Remove(keptPath(w.path))
		return
	}
	w.f.Close()
	if name := w.f.Name(); name != keptPath(w.path) {
		if err := os.Rename(name, keptPath(w.path)); err != nil {
			os.Remove(name)
		}
	}
	w.f = nil
}

// adopt makes the copy that a stopped pass kept (keep) the one this
// writer goes on with, holding the bytes before before; it reports false
// (and removes it) when there is none. It is called before the first
// write. The span digests check every byte read from it later.
func (w *decodedWriter) adopt(before int64) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	kept := keptPath(w.path)
	if w.f != nil {
		return false
	}
	f, err := os.OpenFile(kept, os.O_RDWR, 0)
	if err != nil {
		os.Remove(kept)
		return false
	}
	// Zeros at the end of what it wrote are holes past its size.
	st, err := f.Stat()
	if err == nil && st.Size() < before {
		err = f.Truncate(before)
	}
	var ro *os.File
	if err == nil {
		ro, err = os.Open(kept)
	}
	if err != nil {
		f.Close()
		os.Remove(kept)
		return false
	}
	w.f, w.ro = f, ro
	w.budget = w.limit - usedBy(filepath.Dir(w.path), kept)
	w.grown = before
	w.notifyLocked()
	return true
}

// discard removes the temporary file, if any.
func (w *decodedWriter) discard() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.f != nil {
		w.f.Close()
		os.Remove(w.f.Name())
		w.f = nil
	}
}

// usedBy returns the bytes the other files in dir take on disk.
func usedBy(dir, except string) int64 {
	var n int64
	for _, e := range decodedCopies(dir, except) {
		n += e.size
	}
	return n
}

type decodedFile struct {
	path  string
	size  int64
	mtime time.Time
}

func decodedCopies(dir, except string) []decodedFile {
	ents, _ := os.ReadDir(dir)
	var out []decodedFile
	for _, e := range ents {
		p := filepath.Join(dir, e.Name())
		if p == except || !strings.HasSuffix(e.Name(), ".tar") {
			continue
		}
		if info, err := e.Info(); err == nil {
			out = append(out, decodedFile{p, diskUsage(info), info.ModTime()})
		}
	}
	return out
}

// evictDecoded removes the least recently used decoded copies in dir, until
// they take at most half of limit, and returns what the rest take.
func evictDecoded(dir, except string, limit int64, log *slog.Logger) int64 {
	files := decodedCopies(dir, except)
	sort.Slice(files, func(i, j int) bool { return files[i].mtime.Before(files[j].mtime) })
	var used int64
	for _, f := range files {
		used += f.size
	}
	for _, f := range files {
		if used <= limit/2 {
			break
		}
		if err := os.Remove(f.path); err == nil {
			used -= f.size
			log.Info("removed the decoded copy of another archive to make room", "path", f.path, "len", f.size)
		}
	}
	return used
}

// openDecoded opens the decoded copy of a stream-only archive, or
// returns nil when there is none of the right size.
func openDecoded(path string, size int64) *os.File {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	if st, err := f.Stat(); err != nil || st.Size() != size {
		f.Close()
		return nil
	}
	now := time.Now()
	os.Chtimes(path, now, now) // most recently used
	return f
}

// diskUsage returns the bytes a file takes on disk (less than its size
// when sparse).
func diskUsage(info os.FileInfo) int64 {
	if st, ok := info.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return info.Size()
}
