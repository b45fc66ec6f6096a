package index

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"

	"github.com/tarmount/tarmount/index/inflate"
)

// Source is ranged access to the archive as stored. fetch.Source and
// fetch.Blocks implement it.
type Source interface {
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
}

// DefaultSpanCacheBytes bounds the decoded spans a Reader keeps.
const DefaultSpanCacheBytes = 256 << 20

// ReaderOptions tune a Reader.
type ReaderOptions struct {
	// CacheBytes bounds the decoded spans kept in memory, those being
	// decoded included (DefaultSpanCacheBytes when zero). At least two
	// spans are kept.
	CacheBytes int64
	// Readahead is the number of spans decoded ahead of sequential reads
	// (DefaultReadahead when zero, none when negative), at most what half
	// the cache holds.
	Readahead int
	Logger    *slog.Logger
	// Local is the decoded tar stream as the index pass wrote it
	// (BuildOptions.Local), read for the spans that cannot be decoded
	// from the archive when the index is StreamOnly. Bytes read from it
	// are checked against the span digests like decoded ones. A copy
	// still being written may implement LocalWaiter.
	Local io.ReaderAt
	// LocalDamaged, when set, is called when span i read from Local is
	// short or fails its digest, before the read fails with ErrCorrupt:
	// the copy is damaged, and the caller may drop it so that it is
	// decoded again. It may be called from several goroutines at once and
	// more than once.
	LocalDamaged func(i int)
	// Admit, if set, is asked before each decode of DecodeSpan and
	// DecodeSpanInto, once the span's compressed bytes are in, and the
	// release it returns is called when the decode ends: a background
	// reader yields the cores to foreground work through it
	// (materialize.Gate.Acquire). Fetches and waits for a span that
	// another reader lends hold no admission.
	Admit func(ctx context.Context) (release func(), err error)

	// shared, if set, are the decode slots and CPU tokens of another
	// Reader, whose bounds then hold for both (Live's readers of a
	// growing index).
	shared *Reader
}

// Reader reads entries of an archive through its index: a read fetches
// only the compressed span that holds the bytes, decodes it from the
// nearest checkpoint and verifies its digest before any byte is returned.
// It is safe for concurrent use.
type Reader struct {
	// Codec and TarSize are the index's, for callers; set once, not to
	// be modified.
	Codec   Codec
	TarSize int64

	// set once
	ix     *Index
	def    *codec // ix.Codec's
	src    Source
	local  io.ReaderAt
	log    *slog.Logger
	limit  int64              // bytes of decoded spans kept
	ahead  int                // spans decoded ahead of a sequential reader
	ctx    context.Context    // ends background decodes at Close
	cancel context.CancelFunc // cancels ctx
	wg     sync.WaitGroup     // decode goroutines
	// localDamaged is ReaderOptions.LocalDamaged.
	localDamaged func(i int)
	// slots bounds the spans being fetched and decoded at once, and so
	// the memory they hold beyond the cache. A decode for a waiting reader
	// blocks for a slot; readahead only takes a free one. A freed slot
	// goes to a blocked sender first, so waiting readers come before
	// readahead.
	slots chan struct{}
	// cpu bounds the DecodeSpan calls decoding at once (GOMAXPROCS).
	cpu chan struct{}
	// admit is ReaderOptions.Admit.
	admit func(ctx context.Context) (release func(), err error)
	// blocks is src when the archive is a plain tar and src keeps blocks
	// (plain.go), else nil.
	blocks BlockSource

	hits, misses, decodes atomic.Int64           // see ReaderStats
	borrows               atomic.Int64           // see ReaderStats
	peer                  atomic.Pointer[Reader] // Borrow's
	wholeOnce             sync.Once
	whole                 []atomic.Bool // spans DecodeSpanBeside or DecodeSpanInto decoded; made by wholeOnce
	reuses                atomic.Int64  // decodes into the buffer of an evicted span

	mu sync.Mutex
	// guarded by mu
	spans  map[int]*spanCall     // cached and in-flight spans
	lent   map[int]*lendCall     // spans DecodeSpan(Into) is decoding (lend.go)
	lru    *list.List            // of int span indexes, most recent first
	used   int64                 // bytes of cached spans and of spans being decoded
	recent [recentSpans]readSeq  // the latest readers, for readahead
	plain  [recentSpans]plainSeq // the same for a plain tar (plain.go)
	next   int                   // where the next read goes in recent or plain
	free   [][]byte              // buffers of evicted spans no reader holds (at most maxFreeSpans)
	closed bool
}

// ReaderStats are counters since NewReader, and the current cache size.
type ReaderStats struct {
	SpanHits    int64 // span lookups of reads served from the cache of decoded spans
	SpanMisses  int64 // span lookups that waited for a decode (started or joined)
	SpanDecodes int64 // spans decoded (or read from the local copy) and verified, readahead and SpanReader included
	SpanBorrows int64 // spans copied from the Reader named by Borrow instead of decoded
	CachedBytes int64 // bytes of decoded spans cached now, and of spans being decoded
}

// The entries of the index, as Index has them: Reader serves a tree as
// well as the bytes of its files.

// Len returns the number of entries, as Index.Len.
func (r *Reader) Len() int { return r.ix.Len() }

// Entry returns the entry with the given id, as Index.Entry.
func (r *Reader) Entry(id EntryID) *Entry { return r.ix.Entry(id) }

// Children returns the names in directory dir, as Index.Children.
func (r *Reader) Children(dir EntryID) []Dirent { return r.ix.Children(dir) }

// Lookup finds name in directory dir, as Index.Lookup.
func (r *Reader) Lookup(dir EntryID, name string) (EntryID, bool) { return r.ix.Lookup(dir, name) }

// Xattrs returns the extended attributes of id, as Index.Xattrs.
func (r *Reader) Xattrs(id EntryID) []Xattr { return r.ix.Xattrs(id) }

// Stats returns the counters; each is read atomically. It is cheap enough
// to call at every scrape of a metrics endpoint.
func (r *Reader) Stats() ReaderStats {
	r.mu.Lock()
	used := r.used
	r.mu.Unlock()
	return ReaderStats{
		SpanHits:    r.hits.Load(),
		SpanMisses:  r.misses.Load(),
		SpanDecodes: r.decodes.Load(),
		SpanBorrows: r.borrows.Load(),
		CachedBytes: used,
	}
}

// readSeq is a reader that recently read span, with its readahead window
// in spans.
type readSeq struct {
	span, window int
	// file is where the data of the file last read starts; across is
	// set once the reader went on from one file to the next.
	file   int64
	across bool
}

// decodeSlots is the number of spans fetched and decoded at once: a few
// per core keeps every core busy while fetches wait on the network, and
// one more, which readahead leaves to the reads being waited for.
func decodeSlots() int { return max(4, 2*runtime.GOMAXPROCS(0)) + 1 }

// recentSpans is how many recent reads are remembered to tell sequential
// readers (a read in the span after, or in the same span as, a recent
// one) from random ones, with several files read at once.
const recentSpans = 16

// DefaultReadahead is the most spans fetched and decoded ahead of a
// sequential reader: fetches overlap with decoding, and decoding runs on
// every core. A reader's window grows to it while it stays sequential.
const DefaultReadahead = 8

type spanCall struct {
	done chan struct{}
	// fetched is closed once the span's compressed bytes are in (at the
	// latest when done is): waiting before that is waiting for the source.
	fetched chan struct{}
	data    []byte
	err     error
	elem    *list.Element // in lru once done without error
	// guarded by Reader.mu: readers holding data, and whether the span
	// left the cache. Its buffer is reused once both say no one can read
	// it any more.
	refs    int
	evicted bool
}

// maxFreeSpans bounds the buffers of evicted spans kept for the next
// decodes: a cache at its limit then decodes into old buffers instead of
// making garbage at the decode rate, and holds at most one span more.
const maxFreeSpans = 1

// NewReader returns a Reader over ix whose archive bytes come from src.
func NewReader(ix *Index, src Source, opts ReaderOptions) *Reader {
	limit := opts.CacheBytes
	if limit <= 0 {
		limit = DefaultSpanCacheBytes
	}
	if min := 2 * ix.Span; limit < min {
		limit = min
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ahead := opts.Readahead
	if ahead == 0 {
		ahead = DefaultReadahead
	}
	if ix.Span > 0 {
		ahead = min(ahead, int(limit/2/ix.Span))
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Reader{
		cpu:     make(chan struct{}, runtime.GOMAXPROCS(0)),
		ix:      ix,
		def:     ix.Codec.def(),
		Codec:   ix.Codec,
		TarSize: ix.TarSize,
		src:     src,
		local:   opts.Local,
		log:     log,
		ctx:     ctx,
		cancel:  cancel,
		spans:   make(map[int]*spanCall),
		lru:     list.New(),
		limit:   limit,
		ahead:   max(ahead, 0),
		slots:   make(chan struct{}, decodeSlots()),
	}
	r.localDamaged, r.admit = opts.LocalDamaged, opts.Admit
	if opts.shared != nil {
		r.slots, r.cpu = opts.shared.slots, opts.shared.cpu
	}
	for i := range r.recent {
		r.recent[i].span = -2
	}
	if bs, ok := src.(BlockSource); ok && ix.Codec.compressed() {
		// A compressed span is fetched with one exact range request:
		// whole blocks would fetch more than it holds.
		r.src = exactSource{bs}
	} else if ok {
		r.blocks = bs
		if opts.shared == nil {
			r.slots = make(chan struct{}, plainFetchSlots)
		}
		for i := range r.plain {
			r.plain[i].end = -1
		}
	}
	return r
}

// Close stops background decoding and waits for it. It is idempotent.
func (r *Reader) Close() error {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
	return nil
}

// ReadAt reads the content of entry id at off, like io.ReaderAt: holes of
// sparse files read as zeros without fetching anything.
func (r *Reader) ReadAt(ctx context.Context, id EntryID, p []byte, off int64) (int, error) {
	e := r.ix.Entry(id)
	if e == nil {
		return 0, ErrNotFound
	}
	var chunks []SparseChunk
	if e.Sparse {
		chunks = r.ix.SparseMap(id)
	}
	n, err := r.readEntry(ctx, e, chunks, p, off)
	if err != nil && err != io.EOF && !errors.Is(err, ErrNotRegular) {
		err = fmt.Errorf("read %s at %d: %w", r.ix.Path(id), off, err)
	}
	return n, err
}

// readEntry reads the content of entry e, whose sparse map is chunks, at
// off, like ReadAt. Errors are not wrapped with the entry's path.
func (r *Reader) readEntry(ctx context.Context, e *Entry, chunks []SparseChunk, p []byte, off int64) (int, error) {
	if e.Type != TypeReg {
		return 0, ErrNotRegular
	}
	if off < 0 {
		return 0, errors.New("negative offset")
	}
	if off >= e.Size {
		return 0, io.EOF
	}
	want := len(p)
	if rest := e.Size - off; int64(want) > rest {
		p = p[:rest]
	}
	// A read from the start of a file is most likely the first of a
	// sequential reader: read ahead at once, up to the file's end.
	file := fileData{start: int64(e.DataOffset), end: int64(e.DataOffset) + storedSize(e, chunks), first: off == 0}
	var err error
	if e.Sparse {
		file.first = false
		err = r.readSparse(ctx, e, chunks, p, off, file)
	} else {
		err = r.readStream(ctx, p, file.start+off, file)
	}
	if err != nil {
		return 0, err
	}
	if len(p) < want {
		return len(p), io.EOF
	}
	return len(p), nil
}

// fileData is where the stored data of the file being read lies in the
// tar stream, and whether the read starts at its first byte.
type fileData struct {
	start, end int64
	first      bool
}

// readSparse fills p with the logical bytes at off of a sparse file whose
// stored data is file.
func (r *Reader) readSparse(ctx context.Context, e *Entry, chunks []SparseChunk, p []byte, off int64, file fileData) error {
	// stored[i] is where chunk i's data starts within the stored data.
	i := sort.Search(len(chunks), func(i int) bool { return chunks[i].Offset+chunks[i].Length > off })
	var stored int64
	for _, c := range chunks[:i] {
		stored += c.Length
	}
	for len(p) > 0 {
		if i == len(chunks) || off < chunks[i].Offset {
			// A hole up to the next chunk (or the end).
			n := int64(len(p))
			if i < len(chunks) {
				n = min(n, chunks[i].Offset-off)
			}
			clear(p[:n])
			p, off = p[n:], off+n
			continue
		}
		c := chunks[i]
		n := min(int64(len(p)), c.Offset+c.Length-off)
		if err := r.readStream(ctx, p[:n], int64(e.DataOffset)+stored+off-c.Offset, file); err != nil {
			return err
		}
		p, off = p[n:], off+n
		stored += c.Length
		i++
	}
	return nil
}

// readStream fills p from the decoded tar stream at off, within the data
// of file. A read that starts a file (file.first) is probably the first of
// a sequential reader.
func (r *Reader) readStream(ctx context.Context, p []byte, off int64, file fileData) error {
	if off < 0 || off+int64(len(p)) > r.ix.TarSize {
		return fmt.Errorf("%w: range %d+%d beyond the tar stream (%d)", ErrCorrupt, off, len(p), r.ix.TarSize)
	}
	if !r.def.compressed() {
		if r.blocks != nil {
			return r.readPlain(ctx, p, off, file)
		}
		return readFull(ctx, r.src.ReadAt, p, off)
	}
	for len(p) > 0 {
		i := r.ix.span(off)
		if i < 0 {
			return fmt.Errorf("%w: no checkpoint before %d", ErrCorrupt, off)
		}
		// The span waited for is started first, then the readahead:
		// its fetch and decode go ahead of theirs.
		c, err := r.spanData(ctx, r.spanRegion(i), true, func() { r.readahead(i, file) })
		if err != nil {
			return err
		}
		n := copy(p, c.data[off-int64(r.ix.Checkpoints[i].Out):])
		r.release(c)
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// readahead starts decoding spans after span i in the background for a
// sequential reader, so that it finds them decoded and their fetches
// overlap with decoding. Each recent reader (an entry of r.recent) has a
// window of spans: a read in the span after its last one doubles the
// window, up to r.ahead; a read in the same span keeps it; any other read
// is a seek and starts a new reader with no readahead. A read that starts
// a file ending beyond span i starts with the whole window: a cold
// sequential read of a 26 MB file through a mount over object storage
// went from 169 to 192 MB/s (window of two). A reader's readahead stops
// at the end of the file it reads: spans past it would take the cores
// from the spans it waits for (a 26 MB file read from a local .tar.gz
// decoded 8 spans past its end, and took 1.5x as long). Only a reader
// that went on from one file to the next, in archive order, reads ahead
// past the file.
func (r *Reader) readahead(i int, file fileData) {
	if r.ahead == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	window, limit, across := 0, len(r.ix.Checkpoints)-1, false
	k := -1
	for j, e := range r.recent {
		if e.span == i || e.span == i-1 {
			k = j
			break
		}
	}
	switch {
	case k >= 0:
		e := &r.recent[k]
		if e.span == i-1 {
			e.window = min(max(2*e.window, 1), r.ahead)
			e.span = i
		}
		if e.file != file.start {
			e.file, e.across = file.start, true
		}
		window, across = e.window, e.across
	default:
		if file.first && file.end > r.ix.spanEnd(i) {
			window = r.ahead
		}
		r.recent[r.next] = readSeq{span: i, window: window, file: file.start}
		r.next = (r.next + 1) % recentSpans
	}
	if !across && file.end > 0 {
		limit = r.ix.span(file.end - 1)
	}
	if r.closed {
		return
	}
	peer := r.peer.Load()
	for j := i + 1; j <= min(i+window, limit); j++ {
		if _, ok := r.spans[j]; ok {
			continue
		}
		if peer != nil && peer.decodedWhole(j) {
			// The materialization beside has decoded it: its files are
			// on their way to disk, where reads will find them.
			continue
		}
		// The last free slot is left to the reads being waited for
		// (the one that called, whose span was just started, and the
		// next): readahead never makes a foreground read queue.
		if len(r.slots) >= cap(r.slots)-1 {
			return
		}
		select {
		case r.slots <- struct{}{}:
			r.startLocked(r.spanRegion(j), true)
		default:
			return // every slot busy: readahead waits for no one
		}
	}
}

// region is a piece of the decoded tar stream that the cache holds, in
// r.spans under key: span key of a compressed archive, or for a plain tar
// the bytes [start, end) of the archive, keyed by start (plain.go).
type region struct {
	key        int
	start, end int64
}

// spanRegion returns the region of span i.
func (r *Reader) spanRegion(i int) region {
	return region{key: i, start: int64(r.ix.Checkpoints[i].Out), end: r.ix.spanEnd(i)}
}

// spanData returns region g (span g.key, decoded), with a reference that
// the caller gives back with release once it no longer reads c.data.
// touch marks the region as recently used. then, if not nil, is called
// once g is started (or found), before waiting for it.
func (r *Reader) spanData(ctx context.Context, g region, touch bool, then func()) (*spanCall, error) {
	r.mu.Lock()
	c, ok := r.spans[g.key]
	if ok && c.elem != nil && touch {
		r.lru.MoveToFront(c.elem)
	}
	if ok && c.elem != nil {
		r.hits.Add(1)
	} else {
		r.misses.Add(1)
	}
	if !ok {
		if r.closed {
			r.mu.Unlock()
			return nil, errors.New("index: reader closed")
		}
		c = r.startLocked(g, false)
	}
	c.refs++
	r.mu.Unlock()
	if then != nil {
		then()
	}
	return r.waitSpan(ctx, c)
}

// waitSpan waits for c, on which the caller holds a reference: it
// returns c once decoded, or gives the reference back and returns the
// decode's error or ctx's.
func (r *Reader) waitSpan(ctx context.Context, c *spanCall) (*spanCall, error) {
	if t := readTraceFrom(ctx); t != nil && t.FetchWait != nil {
		select {
		case <-c.fetched:
		default:
			resume := t.FetchWait()
			select {
			case <-c.fetched:
			case <-ctx.Done():
			}
			resume()
		}
	}
	select {
	case <-c.done:
		if c.err != nil {
			r.release(c)
			return nil, c.err
		}
		return c, nil
	case <-ctx.Done():
		r.release(c)
		return nil, ctx.Err()
	}
}

// release gives back a reference that spanData returned.
func (r *Reader) release(c *spanCall) {
	r.mu.Lock()
	c.refs--
	r.recycleLocked(c)
	r.mu.Unlock()
}

// recycleLocked keeps the buffer of span c for a later decode once it has
// left the cache and no reader holds it.
func (r *Reader) recycleLocked(c *spanCall) {
	if c.refs > 0 || !c.evicted || c.data == nil {
		return
	}
	// Pieces of a plain tar are as long as the files they hold: their
	// buffers are not worth keeping.
	if len(r.free) < maxFreeSpans && r.def.compressed() {
		r.free = append(r.free, c.data[:0])
	}
	c.data = nil
}

// reserve counts size bytes of a region in the cache before it is
// decoded, evicting what no longer fits, so that spans being decoded come
// out of the cache's bound rather than on top of it, and returns a kept
// buffer to decode into (or nil) with the bytes reserved.
func (r *Reader) reserve(size int64) ([]byte, int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.used += size
	r.evictLocked()
	n := len(r.free)
	if n == 0 {
		return nil, size
	}
	buf := r.free[n-1]
	r.free = r.free[:n-1]
	r.reuses.Add(1)
	return buf, size
}

// startLocked starts decoding region g (or fetching it, for a plain tar)
// in a goroutine owned by r, which takes a decode slot first unless the
// caller holds one (haveSlot). The decode runs under r's context, not a
// caller's: other readers may be waiting for the same span.
func (r *Reader) startLocked(g region, haveSlot bool) *spanCall {
	c := &spanCall{done: make(chan struct{}), fetched: make(chan struct{})}
	i := g.key
	r.spans[i] = c
	// What the peer has of the span is copied, not decoded again; the
	// choice is made here, under r.mu (lend.go).
	peer, borrow := r.peerHoldLocked(i)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		var once sync.Once
		fetched := func() { once.Do(func() { close(c.fetched) }) }
		var data []byte
		var err error
		if !haveSlot {
			select {
			case r.slots <- struct{}{}:
			case <-r.ctx.Done():
				err = r.ctx.Err()
			}
		}
		var reserved int64
		switch {
		case err != nil:
			if borrow {
				peer.drop()
			}
		default:
			var buf []byte
			buf, reserved = r.reserve(g.end - g.start)
			copied := false
			if borrow {
				if data, copied = peer.copy(r.ctx, buf); copied {
					r.borrows.Add(1)
				}
			}
			switch {
			case copied:
			case !r.def.compressed():
				data, err = r.fetchPiece(r.ctx, g)
			default:
				data, err = r.decodeSpan(r.ctx, i, false, buf, fetched)
			}
			<-r.slots
		}
		r.mu.Lock()
		r.used -= reserved
		c.data, c.err = data, err
		if err != nil {
			delete(r.spans, i) // a later read tries again
		} else {
			c.elem = r.lru.PushFront(i)
			r.used += int64(cap(data))
			r.evictLocked()
		}
		r.mu.Unlock()
		fetched()
		close(c.done)
	}()
	return c
}

// evictLocked drops least recently used spans until the cache fits.
func (r *Reader) evictLocked() { r.evictToLocked(r.limit, 1) }

// evictToLocked drops the least recently used spans until the cache holds
// at most limit bytes or keep spans.
func (r *Reader) evictToLocked(limit int64, keep int) {
	for r.used > limit && r.lru.Len() > keep {
		back := r.lru.Back()
		i := back.Value.(int)
		r.lru.Remove(back)
		c := r.spans[i]
		r.used -= int64(cap(c.data))
		delete(r.spans, i)
		c.evicted = true
		r.recycleLocked(c)
	}
}

// dropCache drops every cached span (spans that reads hold live on until
// they let go): for a Reader that serves no new reads.
func (r *Reader) dropCache() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evictToLocked(0, 0)
	r.free = nil
}

// decodeSpan returns the decoded bytes of span i: it fetches the span's
// compressed bytes and decodes them from its checkpoint with the codec's
// span decoder (or reads them from the local copy), then checks them
// against the span's digest. It is the one way every codec's spans are read.
// A background decode (DecodeSpan) holds a CPU token and an admission
// while it decodes. fetched, if not nil, is called once the compressed
// bytes are in.
func (r *Reader) decodeSpan(ctx context.Context, i int, background bool, buf []byte, fetched func()) ([]byte, error) {
	cp := r.ix.Checkpoints[i]
	size := r.ix.spanEnd(i) - int64(cp.Out)
	var data []byte
	var err error
	local := cp.Kind == kindLocal
	if local {
		data, err = r.readLocal(ctx, i, size, buf)
	} else {
		data, err = r.decodeFromArchive(ctx, i, size, background, buf, fetched)
	}
	if err == nil && xxhash.Sum64(data) != r.ix.Digests[i] {
		r.log.Error("span digest mismatch", "span", i, "off", cp.Out, "local", local)
		err = fmt.Errorf("%w: span %d at %d: digest mismatch", ErrCorrupt, i, cp.Out)
	}
	if err != nil {
		if local && errors.Is(err, ErrCorrupt) && r.localDamaged != nil {
			r.localDamaged(i)
		}
		return nil, err
	}
	r.decodes.Add(1)
	return data, nil
}

// ErrNoLocalCopy is returned for a span of a stream-only archive when no
// local decoded copy was given.
var ErrNoLocalCopy = errors.New("index: stream-only archive read without its local decoded copy")

// LocalWaiter is a ReaderOptions.Local that is still being written (a
// pass decoding the archive again while its index serves): WaitLocal
// returns once the copy holds every byte before end, or with an error when
// it never will (the pass failed: the read fails with that error, not
// ErrCorrupt) or ctx is done. Its ReadAt must itself never return bytes the
// copy does not hold yet; WaitLocal lets a read's ctx end the wait.
type LocalWaiter interface {
	WaitLocal(ctx context.Context, end int64) error
}

// readLocal reads span i from the local decoded copy.
func (r *Reader) readLocal(ctx context.Context, i int, size int64, buf []byte) ([]byte, error) {
	if r.local == nil {
		return nil, ErrNoLocalCopy
	}
	off := int64(r.ix.Checkpoints[i].Out)
	if w, ok := r.local.(LocalWaiter); ok {
		if err := w.WaitLocal(ctx, off+size); err != nil {
			return nil, fmt.Errorf("span %d from the local copy: %w", i, err)
		}
	}
	data, err := readSpan(io.NewSectionReader(r.local, off, size), size, buf)
	if err != nil {
		return nil, fmt.Errorf("%w: span %d from the local copy: %v", ErrCorrupt, i, err)
	}
	return data, nil
}

// maxSpanPrealloc is the largest span buffer allocated whole before the
// span is decoded. Spans are about DefaultSpan long (zstd frames and xz
// blocks of up to 8 spans are decoded whole); a longer one grows as its
// bytes arrive, so that a size that a damaged or hostile index claims
// costs memory only for the bytes that its data really decodes to.
const maxSpanPrealloc = 8 * DefaultSpan

// readSpan reads exactly size bytes of a span from r.
func readSpan(r io.Reader, size int64, buf []byte) ([]byte, error) {
	if first := min(size, maxSpanPrealloc); int64(cap(buf)) >= first {
		buf = buf[:first]
	} else {
		buf = make([]byte, first)
	}
	n := 0
	for {
		m, err := io.ReadFull(r, buf[n:])
		n += m
		if err != nil {
			return nil, err
		}
		if int64(n) == size {
			return buf, nil
		}
		grown := make([]byte, min(size, 2*int64(len(buf))))
		copy(grown, buf)
		buf = grown
	}
}

// decodeFromArchive fetches the compressed bytes of span i and decodes
// them from its checkpoint into size bytes, calling fetched (when not nil)
// between. A background decode holds a token of r.cpu and r.admit's
// admission while it decodes.
func (r *Reader) decodeFromArchive(ctx context.Context, i int, size int64, background bool, buf []byte, fetched func()) ([]byte, error) {
	cp := r.ix.Checkpoints[i]
	compEnd := int64(r.ix.End)
	endBit := int64(-1) // where the span ends in comp, in bits
	if i+1 < len(r.ix.Checkpoints) {
		// The next checkpoint's first bit lies in byte In; a frame or
		// member checkpoint starts at In itself.
		next := r.ix.Checkpoints[i+1]
		compEnd = min(compEnd, int64(next.In))
		if next.Kind == inflate.KindBlock || next.Kind == kindBzip2Block {
			compEnd++
			endBit = (int64(next.In)-int64(cp.In))*8 + int64(next.Bit)
		}
	}
	if compEnd <= int64(cp.In) {
		return nil, fmt.Errorf("%w: span %d has no compressed bytes", ErrCorrupt, i)
	}
	comp := make([]byte, compEnd-int64(cp.In))
	n, err := r.src.ReadAt(ctx, comp, int64(cp.In))
	if err != nil && !(err == io.EOF && n == len(comp)) {
		return nil, fmt.Errorf("fetch span %d: %w", i, err)
	}
	if fetched != nil {
		fetched()
	}
	if background {
		select {
		case r.cpu <- struct{}{}:
			defer func() { <-r.cpu }()
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if r.admit != nil {
			release, err := r.admit(ctx)
			if err != nil {
				return nil, err
			}
			defer release()
		}
	}
	window, err := decompressWindow(cp.window)
	if err != nil {
		return nil, err
	}
	data, err := r.def.decodeSpan(comp, cp, window, endBit, size, buf)
	if err != nil {
		return nil, fmt.Errorf("%w: decode span %d: %v", ErrCorrupt, i, err)
	}
	return data, nil
}

func decodeLZ4Span(comp []byte, cp Checkpoint, window []byte, _, size int64, buf []byte) ([]byte, error) {
	d, err := newLZ4Span(comp, cp, window, size)
	if err != nil {
		return nil, err
	}
	return readSpan(d, size, buf)
}
