package fetch

// Locking: DiskCache has two mutexes that are never held together. qmu
// guards the write queue; scanMu guards the usage estimate and serializes
// scans and evictions within the process. Neither is held while a done
// callback runs. PutAsync may be called with a caller's lock held
// (Blocks.mu): it takes qmu briefly and never blocks.
//
// Between processes there is no lock at all. Every entry is published by
// rename(2), which is atomic, and its bytes are a function of its name
// (identity key, offset, length), so two processes that write the same
// entry write the same bytes and the last rename wins harmlessly. A reader
// that has a file open keeps the inode it opened whatever another process
// renames over it or removes. Eviction by another process only turns a
// later lookup into a miss.

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cespare/xxhash/v2"
)

const (
	defaultDiskBytes      = 10 << 30
	defaultDiskQueueBytes = 32 << 20
	diskWriters           = 2
	// diskHeaderSize is the header before the data of every entry file.
	diskHeaderSize = 64
	diskMagic      = "tmcache\x01"
	diskKeyLen     = 32 // hex digits of Identity.Key
	diskTempPrefix = ".tmp-"
	diskWholeName  = "whole"
	// diskStaleTemp is the age after which a temporary file is taken for
	// the leftover of a writer that crashed, and removed by a scan.
	diskStaleTemp = 10 * time.Minute
	// diskTouchInterval is how stale an entry's modification time (its
	// last use) may get before a hit refreshes it.
	diskTouchInterval = time.Minute
)

// DiskCacheOptions configure OpenDiskCache. Zero values mean the defaults.
type DiskCacheOptions struct {
	// MaxBytes bounds the bytes of entry files (headers included) in the
	// directory; default 10 GiB. Least recently used entries are removed
	// to respect it.
	MaxBytes int64
	// QueueBytes bounds the data waiting in PutAsync's queue; default
	// 32 MiB. A write that does not fit is dropped.
	QueueBytes int64
	Logger     *slog.Logger // nil = discard
}

// DiskStats are counters since OpenDiskCache, and the usage estimate.
type DiskStats struct {
	Hits      int64 // Get calls served from a valid entry
	Misses    int64 // Get calls that found no entry
	Corrupt   int64 // entries that failed verification and were removed
	Writes    int64 // entries written (or found already written)
	Errors    int64 // writes that failed (disk full, permissions...)
	Dropped   int64 // PutAsync calls refused: queue full or closed
	Evictions int64 // entries removed to respect MaxBytes
	// UsedBytes is the bytes of entry files as of the last scan of the
	// directory plus what this process wrote since.
	UsedBytes int64
}

// DiskCache is a persistent cache of byte ranges of objects in a
// directory, shared by every process that opens the same directory. An
// entry is the range [off, off+len) of the object whose Identity.Key is
// key; lookups are exact: Get finds what Put stored with the same key,
// offset and length. Blocks stores its blocks this way, and the ranges
// that it fetches for RangeReader.
//
// One file per entry, under a directory per object:
//
//	DIR/<identity key>/<off>-<len>    an entry
//	DIR/<identity key>/whole          the whole object as stored, no header
//	DIR/<identity key>/.tmp-*         being written (or left by a crash)
//
// A whole copy (KeepWhole) is kept for an object whose server ignores
// range requests; it counts in MaxBytes and is evicted like an entry. It
// is synced before its rename, so a copy under its final name is complete.
//
// Entry file layout (integers big-endian):
//
//	0       8     magic "tmcache\x01"
//	8       32    identity key, 32 lower-case hex digits
//	40      8     offset of the data in the object
//	48      8     length of the data
//	56      8     xxhash64 of the data
//	64      len   data
//
// A file is written under a temporary name and renamed into place, never
// synced: a crashed process leaves only a temporary file, and a machine
// that lost power may leave a file short or with wrong bytes under its
// final name, which Get rejects (size, header and checksum are verified on
// every hit) and removes. Get never returns bytes that Put was not given
// for that key, offset and length.
//
// The cache is bounded in bytes: after each write the process adds the
// entry to its estimate of the usage, and rescans the directory when the
// estimate passes MaxBytes or when it wrote more than MaxBytes/8 since its
// last scan; a scan removes the least recently used entries (by
// modification time, which a hit refreshes) until the usage is 7/8 of
// MaxBytes. One process keeps the usage under MaxBytes; with P processes
// writing at once it may pass MaxBytes by about (P-1)*MaxBytes/8, what the
// others wrote since their last scans.
//
// A DiskCache is safe for concurrent use. Close must be called to stop
// its writers.
type DiskCache struct {
	// set once
	dir        string
	maxBytes   int64
	queueBytes int64
	log        *slog.Logger
	touchAfter time.Duration // tests set it to 0
	wg         sync.WaitGroup

	hits, misses, corrupt, writes, errs, dropped, evictions atomic.Int64
	warned                                                  atomic.Bool // a write error was logged at Warn

	qmu sync.Mutex
	// guarded by qmu
	queue  []diskWrite
	queued int64 // bytes of data in queue and being written
	closed bool
	qcond  *sync.Cond // on qmu: a write was queued, or Close

	scanMu sync.Mutex
	// guarded by scanMu
	scanned   bool
	used      int64 // bytes of entries, see DiskStats.UsedBytes
	sinceScan int64 // bytes this process wrote since its last scan

	// usedNow is used, published for Stats, which must not wait behind
	// a scan of a large directory (status and metrics call it).
	usedNow atomic.Int64
}

type diskWrite struct {
	key  string
	off  int64
	data []byte
	done func(ok bool)
}

// OpenDiskCache opens (creating it if needed, mode 0700) the cache
// directory dir and starts its writers. It does not read the directory:
// the first write scans it.
func OpenDiskCache(dir string, opts DiskCacheOptions) (*DiskCache, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("disk cache: %w", err)
	}
	d := &DiskCache{
		dir:        dir,
		maxBytes:   opts.MaxBytes,
		queueBytes: opts.QueueBytes,
		log:        opts.Logger,
		touchAfter: diskTouchInterval,
	}
	if d.maxBytes <= 0 {
		d.maxBytes = defaultDiskBytes
	}
	if d.queueBytes <= 0 {
		d.queueBytes = defaultDiskQueueBytes
	}
	if d.log == nil {
		d.log = slog.New(slog.DiscardHandler)
	}
	d.qcond = sync.NewCond(&d.qmu)
	for range diskWriters {
		d.wg.Go(d.writer)
	}
	return d, nil
}

// Dir returns the cache directory.
func (d *DiskCache) Dir() string { return d.dir }

// Stats returns the counters; each is read atomically.
func (d *DiskCache) Stats() DiskStats {
	used := d.usedNow.Load()
	return DiskStats{
		Hits:      d.hits.Load(),
		Misses:    d.misses.Load(),
		Corrupt:   d.corrupt.Load(),
		Writes:    d.writes.Load(),
		Errors:    d.errs.Load(),
		Dropped:   d.dropped.Load(),
		Evictions: d.evictions.Load(),
		UsedBytes: used,
	}
}

// Close writes what is queued, stops the writers and waits for them. It is
// idempotent. Get and Put still work after Close; PutAsync drops.
func (d *DiskCache) Close() error {
	d.qmu.Lock()
	d.closed = true
	d.qcond.Broadcast()
	d.qmu.Unlock()
	d.wg.Wait()
	return nil
}

// DiskCacheable reports whether id pins a version well enough to key
// persistent data on it: it needs a strong ETag, a version id or a
// modification time. A size alone would let a changed object of the same
// size be served the old one's bytes.
func DiskCacheable(id Identity) bool {
	return id.VersionID != "" || !id.LastModified.IsZero() ||
		(id.ETag != "" && !strings.HasPrefix(id.ETag, "W/"))
}

// Get fills p with the entry (key, off, len(p)) and reports whether it
// did. An entry that fails verification is removed and reported as a
// miss. After a miss the contents of p are unspecified.
func (d *DiskCache) Get(key string, off int64, p []byte) bool {
	if !ValidKey(key) || off < 0 || len(p) == 0 {
		return false
	}
	path := d.entryPath(key, off, len(p))
	f, err := os.Open(path)
	if err != nil {
		d.misses.Add(1)
		if !errors.Is(err, fs.ErrNotExist) {
			d.log.Debug("disk cache open", "path", path, "err", err)
		}
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		d.misses.Add(1)
		return false
	}
	if why := readEntry(f, fi, key, off, p); why != "" {
		d.drop(path, fi, why, off, len(p))
		return false
	}
	d.hits.Add(1)
	if now := time.Now(); now.Sub(fi.ModTime()) >= d.touchAfter {
		// The modification time is the last use for eviction; a failure
		// only makes the entry look older.
		_ = os.Chtimes(path, now, now)
	}
	return true
}

// readEntry reads the entry in f into p and returns why it is invalid, or
// "" if it is good.
func readEntry(f *os.File, fi fs.FileInfo, key string, off int64, p []byte) string {
	if fi.Size() != diskHeaderSize+int64(len(p)) {
		return "size"
	}
	var hdr [diskHeaderSize]byte
	if _, err := f.ReadAt(hdr[:], 0); err != nil {
		return "read header"
	}
	if string(hdr[0:8]) != diskMagic || string(hdr[8:40]) != key ||
		binary.BigEndian.Uint64(hdr[40:48]) != uint64(off) ||
		binary.BigEndian.Uint64(hdr[48:56]) != uint64(len(p)) {
		return "header"
	}
	if _, err := f.ReadAt(p, diskHeaderSize); err != nil {
		return "read data"
	}
	if xxhash.Sum64(p) != binary.BigEndian.Uint64(hdr[56:64]) {
		return "checksum"
	}
	return ""
}

// drop removes a damaged entry, unless another process has replaced it
// meanwhile.
func (d *DiskCache) drop(path string, fi fs.FileInfo, why string, off int64, n int) {
	d.corrupt.Add(1)
	d.log.Warn("disk cache entry damaged, removed", "path", path, "off", off, "len", n, "err", why)
	if cur, err := os.Stat(path); err == nil && os.SameFile(fi, cur) {
		os.Remove(path)
	}
}

// Put stores data as the entry (key, off, len(data)), synchronously, and
// may evict older entries. It does not keep data. If the entry exists
// already (another process wrote it), it is only marked used.
func (d *DiskCache) Put(key string, off int64, data []byte) error {
	if err := d.put(key, off, data); err != nil {
		d.errs.Add(1)
		if d.warned.CompareAndSwap(false, true) {
			d.log.Warn("disk cache write failed", "off", off, "len", len(data), "err", err)
		} else {
			d.log.Debug("disk cache write failed", "off", off, "len", len(data), "err", err)
		}
		return err
	}
	d.writes.Add(1)
	return nil
}

func (d *DiskCache) put(key string, off int64, data []byte) error {
	switch {
	case !ValidKey(key):
		return fmt.Errorf("disk cache: bad key %q", key)
	case off < 0 || len(data) == 0:
		return fmt.Errorf("disk cache: bad range %d+%d", off, len(data))
	}
	size := diskHeaderSize + int64(len(data))
	if size > d.maxBytes {
		return fmt.Errorf("disk cache: entry of %d bytes is larger than the cache (%d)", size, d.maxBytes)
	}
	path := d.entryPath(key, off, len(data))
	if fi, err := os.Stat(path); err == nil && fi.Size() == size {
		if now := time.Now(); now.Sub(fi.ModTime()) >= d.touchAfter {
			_ = os.Chtimes(path, now, now)
		}
		return nil
	}
	var hdr [diskHeaderSize]byte
	copy(hdr[0:8], diskMagic)
	copy(hdr[8:40], key)
	binary.BigEndian.PutUint64(hdr[40:48], uint64(off))
	binary.BigEndian.PutUint64(hdr[48:56], uint64(len(data)))
	binary.BigEndian.PutUint64(hdr[56:64], xxhash.Sum64(data))

	objDir := filepath.Join(d.dir, key)
	f, err := os.CreateTemp(objDir, diskTempPrefix+"*")
	for try := 0; errors.Is(err, fs.ErrNotExist) && try < 3; try++ {
		// New object, or a scan just removed its empty directory: the
		// scan of another process may remove it again between the
		// two calls.
		if err = os.MkdirAll(objDir, 0o700); err == nil {
			f, err = os.CreateTemp(objDir, diskTempPrefix+"*")
		}
	}
	if err != nil {
		return fmt.Errorf("disk cache: %w", err)
	}
	tmp := f.Name()
	_, err = f.Write(hdr[:])
	if err == nil {
		_, err = f.Write(data)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("disk cache: %w", err)
	}
	d.added(size)
	return nil
}

// PutAsync queues data to be stored as the entry (key, off, len(data)) and
// reports whether it did: it refuses when the queue holds QueueBytes
// already or after Close. Once queued, data must not be modified until
// done is called (from a writer goroutine, with ok false if the write
// failed); done may be nil. When PutAsync returns false, done is not
// called and data is the caller's again. It never blocks.
func (d *DiskCache) PutAsync(key string, off int64, data []byte, done func(ok bool)) bool {
	d.qmu.Lock()
	if d.closed || d.queued+int64(len(data)) > d.queueBytes {
		d.qmu.Unlock()
		d.dropped.Add(1)
		return false
	}
	d.queue = append(d.queue, diskWrite{key: key, off: off, data: data, done: done})
	d.queued += int64(len(data))
	d.qcond.Signal()
	d.qmu.Unlock()
	return true
}

// room reports whether n bytes would fit in the queue now.
func (d *DiskCache) room(n int) bool {
	d.qmu.Lock()
	defer d.qmu.Unlock()
	return !d.closed && d.queued+int64(n) <= d.queueBytes
}

// writer stores queued entries until Close has been called and the queue
// is empty.
func (d *DiskCache) writer() {
	for {
		d.qmu.Lock()
		for len(d.queue) == 0 && !d.closed {
			d.qcond.Wait()
		}
		if len(d.queue) == 0 {
			d.qmu.Unlock()
			return
		}
		w := d.queue[0]
		d.queue[0] = diskWrite{}
		d.queue = d.queue[1:]
		d.qmu.Unlock()

		err := d.Put(w.key, w.off, w.data)

		d.qmu.Lock()
		d.queued -= int64(len(w.data))
		d.qmu.Unlock()
		if w.done != nil {
			w.done(err == nil)
		}
	}
}

// added accounts for a new entry file of size bytes and evicts if the
// estimate says so.
func (d *DiskCache) added(size int64) {
	d.scanMu.Lock()
	defer d.scanMu.Unlock()
	d.used += size
	d.usedNow.Store(d.used)
	d.sinceScan += size
	if !d.scanned || d.used > d.maxBytes || d.sinceScan > d.maxBytes/8 {
		d.scanLocked(0)
	}
}

type diskEntry struct {
	path  string
	size  int64
	mtime time.Time
}

// scanLocked measures the directory, removes stale temporary files and
// empty object directories, and evicts the least recently used entries
// down to 7/8 of maxBytes if the directory holds more than maxBytes, or if
// need more bytes would not fit.
func (d *DiskCache) scanLocked(need int64) {
	d.scanned = true
	d.sinceScan = 0
	objs, err := os.ReadDir(d.dir)
	if err != nil {
		d.log.Warn("disk cache scan", "path", d.dir, "err", err)
		return
	}
	var entries []diskEntry
	var total int64
	now := time.Now()
	for _, obj := range objs {
		if !obj.IsDir() || !ValidKey(obj.Name()) {
			continue
		}
		objDir := filepath.Join(d.dir, obj.Name())
		files, err := os.ReadDir(objDir)
		if err != nil {
			continue
		}
		if len(files) == 0 {
			os.Remove(objDir) // fails harmlessly if a writer got in first
			continue
		}
		for _, f := range files {
			fi, err := f.Info()
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			path := filepath.Join(objDir, f.Name())
			if strings.HasPrefix(f.Name(), diskTempPrefix) {
				if now.Sub(fi.ModTime()) > diskStaleTemp {
					os.Remove(path)
				} else {
					total += fi.Size()
				}
				continue
			}
			if _, _, ok := parseEntryName(f.Name()); !ok && f.Name() != diskWholeName {
				continue
			}
			entries = append(entries, diskEntry{path: path, size: fi.Size(), mtime: fi.ModTime()})
			total += fi.Size()
		}
	}
	if total+need > d.maxBytes {
		slices.SortFunc(entries, func(a, b diskEntry) int { return a.mtime.Compare(b.mtime) })
		low := d.maxBytes - d.maxBytes/8 - need
		for _, e := range entries {
			if total <= low {
				break
			}
			if err := os.Remove(e.path); err == nil || errors.Is(err, fs.ErrNotExist) {
				total -= e.size
				d.evictions.Add(1)
			}
		}
	}
	d.used = total
	d.usedNow.Store(total)
}

// Whole returns the path of the complete whole copy of the object key of
// size bytes, if there is one, and marks it used.
func (d *DiskCache) Whole(key string, size int64) (string, bool) {
	if !ValidKey(key) {
		return "", false
	}
	path := filepath.Join(d.dir, key, diskWholeName)
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() || st.Size() != size {
		return "", false
	}
	now := time.Now()
	if now.Sub(st.ModTime()) > d.touchAfter {
		os.Chtimes(path, now, now)
	}
	return path, true
}

// KeepWhole writes the size bytes that r yields as the whole copy of the
// object key, after evicting least recently used entries to make room,
// and returns its path. An object larger than MaxBytes is refused with
// ErrTooLarge. r must yield exactly size bytes.
func (d *DiskCache) KeepWhole(key string, size int64, r io.Reader) (string, error) {
	if !ValidKey(key) {
		return "", fmt.Errorf("disk cache: bad key %q", key)
	}
	if size > d.maxBytes {
		return "", fmt.Errorf("%w: %d bytes, the disk cache holds %d", ErrTooLarge, size, d.maxBytes)
	}
	d.scanMu.Lock()
	d.scanLocked(size)
	d.scanMu.Unlock()
	dir := filepath.Join(d.dir, key)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("disk cache: %w", err)
	}
	f, err := os.CreateTemp(dir, diskTempPrefix+"*")
	if err != nil {
		return "", fmt.Errorf("disk cache: %w", err)
	}
	defer os.Remove(f.Name())
	n, err := io.Copy(f, r)
	if err == nil && n != size {
		err = fmt.Errorf("got %d bytes, want %d: %w", n, size, io.ErrUnexpectedEOF)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, diskWholeName)
	if err := os.Rename(f.Name(), path); err != nil {
		return "", fmt.Errorf("disk cache: %w", err)
	}
	d.writes.Add(1)
	d.added(size)
	return path, nil
}

func (d *DiskCache) entryPath(key string, off int64, n int) string {
	return filepath.Join(d.dir, key, strconv.FormatInt(off, 10)+"-"+strconv.Itoa(n))
}

// parseEntryName parses "<off>-<len>".
func parseEntryName(name string) (off, n int64, ok bool) {
	a, b, found := strings.Cut(name, "-")
	if !found {
		return 0, 0, false
	}
	off, err1 := strconv.ParseInt(a, 10, 64)
	n, err2 := strconv.ParseInt(b, 10, 64)
	return off, n, err1 == nil && err2 == nil && off >= 0 && n > 0
}

// ValidKey reports whether key is what Identity.Key returns: 32
// lower-case hex digits, safe as a file name.
func ValidKey(key string) bool {
	if len(key) != diskKeyLen {
		return false
	}
	for i := range len(key) {
		if c := key[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
