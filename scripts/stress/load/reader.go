package load

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// maxReadBytes bounds one read: lengths are drawn log-uniformly from 1 B
// to this.
const maxReadBytes = 2 << 20

// directAlign is the alignment of O_DIRECT offsets, lengths and buffers.
const directAlign = 4096

// op is what a reader is doing, for the watchdog's report.
type op struct {
	what     string // open, read, close
	path     string
	off, len int64
}

func (o *op) describe() string {
	switch {
	case o == nil:
		return "between calls"
	case o.what == "read":
		return fmt.Sprintf("in read of %s at %d+%d", o.path, o.off, o.len)
	default:
		return fmt.Sprintf("in %s of %s", o.what, o.path)
	}
}

// reader reads random ranges of random files through the mount and
// compares them with the reference tree.
type reader struct {
	id     int
	direct bool // O_DIRECT: reads reach the server, not the page cache
	mnt    string
	ref    string
	files  *fileSet
	rng    *rand.Rand
	clock  progressClock
	errs   *errorLog
	buf    []byte // aligned, maxReadBytes + directAlign
	want   []byte

	// Read by the monitor while the reader runs.
	progress atomic.Int64 // clock time of the last call that returned
	doing    atomic.Pointer[op]
	reads    atomic.Int64
	bytes    atomic.Int64
	opens    atomic.Int64
	hist     histogram
}

func newReader(id int, mnt, ref string, files *fileSet, seed uint64, clock progressClock, errs *errorLog) *reader {
	r := &reader{
		id: id, direct: id%2 == 0, mnt: mnt, ref: ref, files: files,
		rng:   rand.New(rand.NewPCG(seed, uint64(id))),
		clock: clock, errs: errs,
		buf:  alignedBuffer(maxReadBytes + directAlign),
		want: make([]byte, maxReadBytes+directAlign),
	}
	r.progress.Store(clock.now())
	return r
}

func (r *reader) run(ctx context.Context) {
	for ctx.Err() == nil {
		if err := r.once(); err != nil {
			r.errs.add(fmt.Errorf("reader %d: %w", r.id, err))
			if errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) {
				return // the server is gone: the monitor says so
			}
		}
	}
}

// tick records progress: a call has returned.
func (r *reader) tick() {
	r.progress.Store(r.clock.now())
	r.doing.Store(nil)
}

// once opens a random file and reads one to four random ranges of it.
func (r *reader) once() error {
	f := r.files.pick(r.rng)
	flags := os.O_RDONLY
	if r.direct {
		flags |= syscall.O_DIRECT
	}
	r.doing.Store(&op{what: "open", path: f.rel})
	fh, err := os.OpenFile(filepath.Join(r.mnt, f.rel), flags, 0)
	r.tick()
	if err != nil {
		return err
	}
	r.opens.Add(1)
	ref, err := os.Open(filepath.Join(r.ref, f.rel))
	if err != nil {
		fh.Close()
		return fmt.Errorf("reference: %w", err)
	}
	defer ref.Close()
	for range 1 + r.rng.IntN(4) {
		if err = r.readOne(fh, ref, f); err != nil {
			break
		}
	}
	r.doing.Store(&op{what: "close", path: f.rel})
	cerr := fh.Close()
	r.tick()
	if err == nil && cerr != nil {
		err = fmt.Errorf("close %s: %w", f.rel, cerr)
	}
	return err
}

// readOne reads one random range of f and compares it with the reference.
func (r *reader) readOne(fh, ref *os.File, f refFile) error {
	n := int64(1) << r.rng.IntN(21) // 1 B to 1 MiB, then within the octave
	n += r.rng.Int64N(n)
	var off int64
	if f.size > 0 {
		off = r.rng.Int64N(f.size)
	}
	if r.rng.IntN(20) == 0 {
		off = max(f.size-n/2, 0) // across the end of the file
	}
	if r.direct {
		off &^= directAlign - 1
		n = (n + directAlign - 1) &^ (directAlign - 1)
	}
	buf := r.buf[:n]
	r.doing.Store(&op{what: "read", path: f.rel, off: off, len: n})
	start := time.Now()
	got, err := fh.ReadAt(buf, off)
	r.hist.add(time.Since(start))
	r.tick()
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s at %d+%d: %w", f.rel, off, n, err)
	}
	want := min(max(f.size-off, 0), n)
	if int64(got) != want {
		return fmt.Errorf("read %s at %d+%d: got %d bytes, want %d", f.rel, off, n, got, want)
	}
	wbuf := r.want[:got]
	if _, err := ref.ReadAt(wbuf, off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reference %s at %d: %w", f.rel, off, err)
	}
	if !bytes.Equal(buf[:got], wbuf) {
		i := 0
		for buf[i] == wbuf[i] {
			i++
		}
		return fmt.Errorf("read %s at %d+%d: wrong bytes from offset %d on", f.rel, off, n, off+int64(i))
	}
	r.reads.Add(1)
	r.bytes.Add(int64(got))
	return nil
}

// alignedBuffer returns n bytes aligned to directAlign.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+directAlign)
	off := (directAlign - int(uintptr(unsafe.Pointer(&b[0]))%directAlign)) % directAlign
	return b[off : off+n]
}

// histogram counts durations in buckets 1/16 of an octave wide (4.4%),
// from 1 µs to about 18 minutes. Safe for one writer and many readers.
type histogram struct {
	counts [histBuckets]atomic.Int64
	max    atomic.Int64
}

const (
	histPerOctave = 16
	histBuckets   = 1 + 30*histPerOctave
)

func (h *histogram) add(d time.Duration) {
	i := 0
	if us := float64(d) / 1e3; us > 1 {
		i = min(1+int(math.Log2(us)*histPerOctave), histBuckets-1)
	}
	h.counts[i].Add(1)
	if int64(d) > h.max.Load() {
		h.max.Store(int64(d))
	}
}

// merge adds o's counts into h (h has no concurrent writer).
func (h *histogram) merge(o *histogram) {
	for i := range o.counts {
		h.counts[i].Add(o.counts[i].Load())
	}
	if m := o.max.Load(); m > h.max.Load() {
		h.max.Store(m)
	}
}

// quantile returns the upper bound of the bucket holding quantile q.
func (h *histogram) quantile(q float64) time.Duration {
	var total int64
	for i := range h.counts {
		total += h.counts[i].Load()
	}
	if total == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(total)))
	var seen int64
	for i := range h.counts {
		seen += h.counts[i].Load()
		if seen >= rank {
			return time.Duration(1e3 * math.Exp2(float64(i)/histPerOctave))
		}
	}
	return time.Duration(h.max.Load())
}
