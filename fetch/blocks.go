package fetch

// Locking: Blocks has a single mutex, Blocks.mu, which guards the block
// map, the fetch queues, the LRU list and every block field marked
// "guarded by Blocks.mu". A block's reference count (block.refs) is
// atomic: references are taken only under mu, but dropped without it.
// Nothing blocks while holding mu: no Source call, no channel wait.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
)

const (
	defaultBlockSize  = 4 << 20
	defaultWorkers    = 8
	defaultCacheBytes = 256 << 20
	defaultFirstPiece = 64 << 10
)

// BlocksOptions configure NewBlocks. Zero values mean the defaults.
type BlocksOptions struct {
	BlockSize int64 // bytes per block; default 4 MiB (defaultBlockSize)
	Workers   int   // parallel range requests; default 8
	// FirstPiece is the size of the first range request of the block a
	// stream starts in, when that block is fetched in pieces (ramp.go);
	// default 64 KiB (defaultFirstPiece), negative for whole blocks only.
	// Blocks no larger than it are fetched whole.
	FirstPiece int64
	// CacheBytes bounds the memory of cached blocks plus blocks being
	// fetched; default 256 MiB. It is raised silently to hold at least
	// Workers+2 blocks.
	CacheBytes int64
	Logger     *slog.Logger // nil = discard
	// Disk, if not nil, is a persistent second level below memory: a
	// block missing from memory is read from it before it is fetched, and
	// fetched blocks are written to it in the background (blocksdisk.go).
	// It is not used for a source whose identity does not pass
	// DiskCacheable. Blocks does not own it: Close does not close it.
	Disk *DiskCache
}

// Stats are counters since NewBlocks, and the current cache size.
type Stats struct {
	Requests     int64 // range reads issued to the Source (a block in pieces makes one a piece; the open's, once its bytes are used)
	BytesFetched int64 // bytes those reads returned
	InFlight     int64 // bytes asked of the Source by reads not yet returned, now
	CacheHits    int64 // block lookups served from memory
	CacheMisses  int64 // block lookups that had to wait for a fetch (started or joined)
	Evictions    int64 // blocks dropped to respect CacheBytes
	CachedBytes  int64 // bytes of cached blocks now
	DiskHits     int64 // blocks and ranges read from the disk cache instead of the Source
	DiskBytes    int64 // bytes those disk reads returned
	DiskWrites   int64 // blocks and ranges written to the disk cache
	DiskDropped  int64 // writes dropped because the disk cache's queue was full
	Prefetches   int64 // block fetches queued by Prefetch
}

// Blocks reads a Source in fixed-size, aligned blocks, keeps recently used
// blocks in memory and fetches missing ones with Workers goroutines. At
// most one fetch per block is in flight: concurrent readers of a block
// wait for the same fetch. Reads from ReadAt go before Stream read-ahead:
// a queued read-ahead fetch never starts while a ReadAt waits for a fetch
// slot, so a ReadAt waits for at most one running fetch to finish.
//
// Workers bounds the blocks fetched at once, not the range requests: the
// block a stream starts in may be fetched in pieces (ramp.go), which run
// at once in that block's one worker slot, so while it runs up to
// len(pieces)-1 more requests are in flight (6 more for a 4 MiB block
// with the default 64 KiB first piece).
//
// Memory: CacheBytes bounds cached blocks plus running fetches. A block
// dropped while a reader still copies from it, or while a stream holds it
// as read-ahead, stays alive until released, so the transient peak is
// higher by at most what readers hold (and, with a disk cache, what waits
// in its write queue: DiskCacheOptions.QueueBytes).
//
// Blocks is safe for concurrent use. It does not own the Source: Close
// does not close it. Close must be called to stop its goroutines.
type Blocks struct {
	// set once
	src        Source
	size       int64
	blockSize  int64
	nblocks    int64
	workers    int
	cacheBytes int64
	firstPiece int64 // 0: no pieces
	log        *slog.Logger
	pool       sync.Pool          // *[]byte of min(blockSize, size) bytes
	ctx        context.Context    // parent of every fetch; cancelled by Close
	cancel     context.CancelFunc // cancels ctx
	work       *sync.Cond         // on mu: a fetch was queued, or Close
	wg         sync.WaitGroup     // worker goroutines
	disk       *DiskCache         // nil = none
	prefix     []byte             // the object's first bytes, which src holds (Prefixer)
	diskKey    string             // src.Identity().Key() when disk is set

	requests, bytesFetched, inFlight, hits, misses, evictions atomic.Int64
	diskHits, diskBytes, diskWrites, diskDropped              atomic.Int64
	prefetches                                                atomic.Int64
	prefixUsed                                                atomic.Bool // fromPrefix counted the open's fetch

	mu sync.Mutex
	// guarded by mu
	blocks  map[int64]*block // queued, running and cached blocks by index
	fgQueue []*block         // queued fetches that a ReadAt waits for, FIFO
	bgQueue []*block         // queued read-ahead fetches, FIFO, after fgQueue
	lru     block            // list sentinel: lru.next is the hottest block
	cached  int64            // bytes of cached blocks (those in the list)
	running int64            // bytes of running fetches
	closed  bool
}

type blockState uint8

const (
	blockQueued  blockState = iota // in fgQueue or bgQueue
	blockRunning                   // a worker is fetching it
	blockDone                      // data or err is set and done is closed
)

// evictedBit is added to block.refs when the block leaves the cache. Its
// buffer goes back to the pool when refs reaches exactly evictedBit: no
// holder is left and none can come, since references are taken only on
// blocks in the map.
const evictedBit = 1 << 62

type block struct {
	// set once, at creation
	idx  int64
	off  int64
	n    int           // length: blockSize, or less for the last block
	done chan struct{} // closed under Blocks.mu once state is blockDone
	// set under Blocks.mu when the block is queued; read-only after
	pieces []piece // nil unless the block is fetched in pieces (ramp.go)

	// set by the fetching worker before the pieces start; read-only after
	partial []byte // the buffer the pieces fill; nil unless pieces

	// set under Blocks.mu before done is closed; read-only after
	buf  *[]byte // pooled buffer; nil if a failed fetch gave it back
	data []byte  // (*buf)[:n]; nil unless the fetch succeeded
	err  error

	// holders (ReadAt calls and streams) plus evictedBit once evicted
	refs atomic.Int64

	// guarded by Blocks.mu
	state      blockState
	fg         bool               // queued in fgQueue rather than bgQueue
	waiters    int                // holders registered before done; 0 cancels the fetch
	cancel     context.CancelFunc // cancels the running fetch
	streamOnly bool               // fetched for a stream and not read by ReadAt since
	prev, next *block             // LRU links; nil when not cached
	// set by the fetching worker before publish, then guarded by Blocks.mu
	disk diskState
}

// copyOut copies into p the bytes of blk that lie in [off, end) of the
// object, and returns how many it copied.
func (blk *block) copyOut(p []byte, off, end int64) int {
	lo := max(off, blk.off) - blk.off
	hi := min(end, blk.off+int64(blk.n)) - blk.off
	return copy(p, blk.data[lo:hi])
}

// lockOpen locks b.mu and returns true, unless b is closed: then it
// returns false with b.mu unlocked.
func (b *Blocks) lockOpen() bool {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return false
	}
	return true
}

// NewBlocks returns a block cache over src, whose size is taken from
// src.Identity(). Its workers run until Close.
func NewBlocks(src Source, opts BlocksOptions) *Blocks {
	bs := opts.BlockSize
	if bs <= 0 {
		bs = defaultBlockSize
	}
	workers := opts.Workers
	if workers <= 0 {
		workers = defaultWorkers
	}
	cacheBytes := opts.CacheBytes
	if cacheBytes <= 0 {
		cacheBytes = defaultCacheBytes
	}
	cacheBytes = max(cacheBytes, int64(workers+2)*bs)
	firstPiece := opts.FirstPiece
	switch {
	case firstPiece == 0:
		firstPiece = defaultFirstPiece
	case firstPiece < 0:
		firstPiece = 0
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	size := src.Identity().Size
	b := &Blocks{
		src:        src,
		size:       size,
		blockSize:  bs,
		nblocks:    (size + bs - 1) / bs,
		workers:    workers,
		cacheBytes: cacheBytes,
		firstPiece: firstPiece,
		log:        log,
		blocks:     make(map[int64]*block),
	}
	if pf, ok := src.(Prefixer); ok {
		b.prefix = pf.Prefix()
	}
	bufLen := min(bs, size)
	b.pool.New = func() any {
		buf := make([]byte, bufLen)
		return &buf
	}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	b.work = sync.NewCond(&b.mu)
	b.lru.next, b.lru.prev = &b.lru, &b.lru
	b.initDisk(opts.Disk)
	for range min(int64(workers), b.nblocks) {
		b.wg.Go(b.worker)
	}
	return b
}

// Size returns the object size.
func (b *Blocks) Size() int64 { return b.size }

// Source returns the source that b reads.
func (b *Blocks) Source() Source { return b.src }

// Stats returns the counters; each is read atomically.
func (b *Blocks) Stats() Stats {
	b.mu.Lock()
	cached := b.cached
	b.mu.Unlock()
	return Stats{
		Requests:     b.requests.Load(),
		BytesFetched: b.bytesFetched.Load(),
		InFlight:     b.inFlight.Load(),
		CacheHits:    b.hits.Load(),
		CacheMisses:  b.misses.Load(),
		Evictions:    b.evictions.Load(),
		CachedBytes:  cached,
		DiskHits:     b.diskHits.Load(),
		DiskBytes:    b.diskBytes.Load(),
		DiskWrites:   b.diskWrites.Load(),
		DiskDropped:  b.diskDropped.Load(),
		Prefetches:   b.prefetches.Load(),
	}
}

// ReadAt reads len(p) bytes at off like io.ReaderAt, from cached blocks
// or by fetching the missing ones, in parallel when p spans several. If
// ctx ends first it returns ctx.Err(); fetches that other readers wait
// for go on, fetches nobody waits for any more are cancelled. A read
// spanning more blocks than the cache holds keeps the blocks it fetched
// alive until it has copied them. p is not retained.
func (b *Blocks) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	end, err := b.readEnd(p, off)
	if end <= off {
		return 0, err
	}
	first, last := off/b.blockSize, (end-1)/b.blockSize

	var stack [4]*block
	held := stack[:0]
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return 0, fmt.Errorf("read %s at %d: %w", b.src, off, ErrClosed)
	}
	for i := first; i <= last; i++ {
		held = append(held, b.getLocked(i, true))
	}
	b.mu.Unlock()

	n := 0
	for i, blk := range held {
		if err = b.wait(ctx, blk); err != nil {
			b.releaseMany(held[i:], false)
			break
		}
		n += blk.copyOut(p[n:], off, end)
		b.release(blk)
	}
	if err != nil {
		return n, err
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// readEnd returns where a read of p at off ends within the object; when
// that is not past off, the read returns at once with err: nil for an
// empty p, io.EOF at or past the end, an error for a negative off.
func (b *Blocks) readEnd(p []byte, off int64) (end int64, err error) {
	switch {
	case off < 0:
		return off, fmt.Errorf("read %s at %d: negative offset", b.src, off)
	case len(p) == 0:
		return off, nil
	case off >= b.size:
		return off, io.EOF
	}
	return min(off+int64(len(p)), b.size), nil
}

// ReadBeside reads len(p) bytes at off like ReadAt, for a reader that
// brings its own concurrency (a background job with many fetches at
// once): a block that is neither cached nor being fetched is fetched by
// the calling goroutine, beside the workers, so that it takes no worker
// from ReadAt; a block queued for read-ahead is taken from the queue and
// fetched so too. While it is fetched, a ReadAt or stream that needs the
// block joins the fetch instead of starting another, as the caller joins
// theirs: each block comes from the source once. A block it fetched is
// dropped once read unless a ReadAt read it too. The blocks are read one
// after the other.
func (b *Blocks) ReadBeside(ctx context.Context, p []byte, off int64) (int, error) {
	end, err := b.readEnd(p, off)
	if end <= off {
		return 0, err
	}
	n := 0
	for i := off / b.blockSize; i <= (end-1)/b.blockSize; i++ {
		blk, mine, err := b.holdBeside(i)
		if err != nil {
			return n, err
		}
		if err := b.wait(ctx, blk); err != nil {
			b.release(blk)
			return n, err
		}
		n += blk.copyOut(p[n:], off, end)
		b.mu.Lock()
		if mine && blk.streamOnly && blk.prev != nil {
			// Nobody else read it: its buffer serves the next fetch.
			b.evictLocked(blk)
		}
		b.mu.Unlock()
		b.unref(blk)
	}
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// holdBeside returns block idx with a reference and a waiter registered
// for the caller, fetched or being fetched (ReadBeside), and whether the
// fetch is the caller's.
func (b *Blocks) holdBeside(idx int64) (blk *block, mine bool, err error) {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil, false, fmt.Errorf("read %s at %d: %w", b.src, idx*b.blockSize, ErrClosed)
	}
	blk = b.blocks[idx]
	switch {
	case blk == nil:
		blk = b.newBlockLocked(idx, 1)
		blk.streamOnly = true
		mine = true
		b.misses.Add(1)
	case blk.state == blockQueued && !blk.fg:
		b.bgQueue = removeBlock(b.bgQueue, blk)
		blk.waiters++
		b.misses.Add(1)
	default:
		blk = b.getLocked(idx, false)
		b.mu.Unlock()
		return blk, false, nil
	}
	blk.refs.Add(1)
	// blk is fetched for the caller, as a worker would, by a goroutine of
	// its own, so that the caller may leave while others wait for it.
	blk.state = blockRunning
	fctx, cancel := context.WithCancel(b.ctx)
	blk.cancel = cancel
	b.running += int64(blk.n)
	b.shrinkLocked()
	b.wg.Add(1)
	b.mu.Unlock()
	go func() {
		defer b.wg.Done()
		buf, err := b.fetch(fctx, blk)
		b.mu.Lock()
		cancel()
		b.running -= int64(blk.n)
		b.publishLocked(blk, buf, err)
		b.mu.Unlock()
	}()
	return blk, mine, nil
}

// ReadCached copies len(p) bytes at off into p if every block they lie in
// is cached, and reports whether it did; it never fetches. Readers that
// fetch exact ranges themselves (decoded spans) use it to reuse blocks the
// index pass or a stream brought in. A hit counts like a ReadAt hit. A
// range past the end of the object is never cached. With a disk cache it
// also reads the range, or the blocks that hold it, from disk; after a
// miss the contents of p are then unspecified.
func (b *Blocks) ReadCached(p []byte, off int64) bool {
	if off < 0 || off+int64(len(p)) > b.size {
		return false
	}
	if len(p) == 0 {
		return true
	}
	end := off + int64(len(p))
	first, last := off/b.blockSize, (end-1)/b.blockSize
	var stack [4]*block
	held := stack[:0]
	if !b.lockOpen() {
		return false
	}
	for i := first; i <= last; i++ {
		blk := b.blocks[i]
		if blk == nil || blk.state != blockDone || blk.err != nil {
			b.mu.Unlock()
			for _, h := range held {
				b.unref(h)
			}
			return b.readCachedDisk(p, off)
		}
		blk.refs.Add(1)
		held = append(held, blk)
	}
	for _, blk := range held {
		b.hits.Add(1)
		blk.streamOnly = false
		b.lruRemoveLocked(blk)
		b.lruInsertLocked(blk, &b.lru)
		b.toDiskLocked(blk)
	}
	b.mu.Unlock()
	n := 0
	for _, blk := range held {
		n += blk.copyOut(p[n:], off, end)
		b.unref(blk)
	}
	return true
}

// ReaderAt returns an io.ReaderAt that calls b.ReadAt with ctx.
func (b *Blocks) ReaderAt(ctx context.Context) io.ReaderAt {
	return readerAt{b: b, ctx: ctx}
}

type readerAt struct {
	b   *Blocks
	ctx context.Context
}

func (r readerAt) ReadAt(p []byte, off int64) (int, error) { return r.b.ReadAt(r.ctx, p, off) }

// Close stops the workers and waits for them, fails queued and running
// fetches with ErrClosed and drops the cache. It is idempotent. It does
// not close the Source.
func (b *Blocks) Close() error {
	b.mu.Lock()
	if !b.closed {
		b.closed = true
		b.cancel()
		for _, q := range [][]*block{b.fgQueue, b.bgQueue} {
			for _, blk := range q {
				b.forgetLocked(blk)
				b.finishLocked(blk, fmt.Errorf("read %s at %d: %w", b.src, blk.off, ErrClosed))
			}
		}
		b.fgQueue, b.bgQueue = nil, nil
		b.work.Broadcast()
	}
	b.mu.Unlock()
	b.wg.Wait()

	b.mu.Lock()
	for b.lru.prev != &b.lru {
		b.evictLocked(b.lru.prev)
	}
	b.mu.Unlock()
	return nil
}

// getLocked returns block idx with a reference for the caller, who must
// call wait (unless the block is done) and then release. A missing block is
// queued for fetching; fg marks a ReadAt (served first) rather than a
// stream.
func (b *Blocks) getLocked(idx int64, fg bool) *block {
	blk := b.blocks[idx]
	switch {
	case blk == nil:
		b.misses.Add(1)
		blk = b.queueLocked(idx, fg, 1)
		blk.streamOnly = !fg
	case blk.state == blockDone:
		b.hits.Add(1)
		b.toDiskLocked(blk)
		if fg {
			blk.streamOnly = false
			b.lruRemoveLocked(blk)
			b.lruInsertLocked(blk, &b.lru)
		}
	default:
		b.misses.Add(1)
		blk.waiters++
		if fg {
			blk.streamOnly = false
			if blk.state == blockQueued && !blk.fg {
				b.bgQueue = removeBlock(b.bgQueue, blk)
				b.fgQueue = append(b.fgQueue, blk)
				blk.fg = true
			}
		}
	}
	blk.refs.Add(1)
	return blk
}

// queueLocked queues a fetch of block idx, which is not in the map, with
// waiters registered holders: in fgQueue for a ReadAt (fg), else in
// bgQueue.
func (b *Blocks) queueLocked(idx int64, fg bool, waiters int) *block {
	blk := b.newBlockLocked(idx, waiters)
	blk.fg = fg
	if fg {
		b.fgQueue = append(b.fgQueue, blk)
	} else {
		b.bgQueue = append(b.bgQueue, blk)
	}
	b.work.Signal()
	return blk
}

// newBlockLocked puts a new block idx, with waiters registered holders,
// in the map, where it must not be.
func (b *Blocks) newBlockLocked(idx int64, waiters int) *block {
	off := idx * b.blockSize
	blk := &block{
		idx:     idx,
		off:     off,
		n:       int(min(b.blockSize, b.size-off)),
		done:    make(chan struct{}),
		waiters: waiters,
	}
	b.blocks[idx] = blk
	return blk
}

// Prefetch queues fetches of the blocks that hold [off, off+n) and are
// neither cached nor being fetched, and returns at once. Like Stream
// read-ahead, they start only when no ReadAt waits for a fetch slot; a
// ReadAt that needs one of them joins its fetch, and goes first. A
// prefetched block is cached like one that ReadAt fetched, and evicted
// like it if nobody reads it. It is safe to call often: blocks already
// there cost a map lookup each.
func (b *Blocks) Prefetch(off, n int64) {
	if off < 0 || n <= 0 || off >= b.size {
		return
	}
	end := min(off+n, b.size)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	for i := off / b.blockSize; i <= (end-1)/b.blockSize; i++ {
		if b.blocks[i] == nil {
			// No waiter: nobody's leaving cancels it.
			b.queueLocked(i, false, 0)
			b.prefetches.Add(1)
		}
	}
}

// BlockSize returns the size of the blocks that b fetches and caches.
func (b *Blocks) BlockSize() int64 { return b.blockSize }

// wait waits until blk is done or ctx ends, and returns the fetch error
// or ctx.Err(). The caller still holds its reference either way.
func (b *Blocks) wait(ctx context.Context, blk *block) error {
	select {
	case <-blk.done:
	default:
		select {
		case <-blk.done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return blk.err
}

// release drops a reference from getLocked. If the holder leaves before
// the block is done and it was the last one waiting, the fetch is
// cancelled.
func (b *Blocks) release(blk *block) {
	select {
	case <-blk.done:
	default:
		b.mu.Lock()
		b.leaveLocked(blk)
		b.mu.Unlock()
	}
	b.unref(blk)
}

// releaseMany drops references from getLocked under one lock, so that no
// worker starts a fetch that is about to be abandoned. consumed marks
// blocks that a stream has read or skipped: a block fetched only for
// streams becomes the first to evict.
func (b *Blocks) releaseMany(blks []*block, consumed bool) {
	b.mu.Lock()
	for _, blk := range blks {
		switch {
		case blk.state != blockDone:
			b.leaveLocked(blk)
		case consumed && blk.streamOnly && blk.prev != nil:
			b.lruRemoveLocked(blk)
			b.lruInsertLocked(blk, b.lru.prev)
		}
	}
	b.mu.Unlock()
	for _, blk := range blks {
		b.unref(blk)
	}
}

// leaveLocked unregisters a waiter of a block that may not be done; when
// none is left the fetch is dropped or cancelled.
func (b *Blocks) leaveLocked(blk *block) {
	if blk.state == blockDone {
		return
	}
	blk.waiters--
	if blk.waiters > 0 {
		return
	}
	b.forgetLocked(blk)
	switch blk.state {
	case blockQueued:
		if blk.fg {
			b.fgQueue = removeBlock(b.fgQueue, blk)
		} else {
			b.bgQueue = removeBlock(b.bgQueue, blk)
		}
		b.finishLocked(blk, context.Canceled)
	case blockRunning:
		blk.cancel()
	}
}

func (b *Blocks) unref(blk *block) {
	if blk.refs.Add(-1) == evictedBit && blk.buf != nil {
		b.pool.Put(blk.buf)
	}
}

// forgetLocked removes blk from the map, so that new readers start a new
// fetch instead of joining it.
func (b *Blocks) forgetLocked(blk *block) {
	if b.blocks[blk.idx] == blk {
		delete(b.blocks, blk.idx)
	}
}

// finishLocked marks blk done with err (nil when data is set).
func (b *Blocks) finishLocked(blk *block, err error) {
	blk.err = err
	blk.state = blockDone
	close(blk.done)
}

// worker runs queued fetches until Close, read-ahead only when no ReadAt
// is waiting.
func (b *Blocks) worker() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for {
		var blk *block
		switch {
		case len(b.fgQueue) > 0:
			blk, b.fgQueue = b.fgQueue[0], b.fgQueue[1:]
		case len(b.bgQueue) > 0:
			blk, b.bgQueue = b.bgQueue[0], b.bgQueue[1:]
		case b.closed:
			return
		default:
			b.work.Wait()
			continue
		}
		blk.state = blockRunning
		ctx, cancel := context.WithCancel(b.ctx)
		blk.cancel = cancel
		b.running += int64(blk.n)
		b.shrinkLocked()

		b.mu.Unlock()
		buf, err := b.fetch(ctx, blk)
		b.mu.Lock()

		cancel()
		b.running -= int64(blk.n)
		b.publishLocked(blk, buf, err)
	}
}

// readSource reads p at off from the source, counting the request, its
// bytes and, while it runs, the bytes in flight.
func (b *Blocks) readSource(ctx context.Context, p []byte, off int64) (int, error) {
	b.requests.Add(1)
	b.inFlight.Add(int64(len(p)))
	n, err := b.src.ReadAt(ctx, p, off)
	b.inFlight.Add(-int64(len(p)))
	b.bytesFetched.Add(int64(n))
	return n, err
}

// fetch reads blk from the disk cache or else the source into a pooled
// buffer.
func (b *Blocks) fetch(ctx context.Context, blk *block) (*[]byte, error) {
	buf := b.pool.Get().(*[]byte)
	p := (*buf)[:blk.n]
	if b.readDisk(blk, p) {
		return buf, nil
	}
	var err error
	switch {
	case blk.pieces != nil:
		err = b.fetchPieces(ctx, blk, p)
	case b.fromPrefix(p, blk.off):
		// A block no longer than the first piece is not cut in pieces.
	default:
		err = b.readFull(ctx, p, blk.off)
	}
	if b.log.Enabled(ctx, slog.LevelDebug) {
		attrs := []slog.Attr{slog.String("src", b.src.String()), slog.Int64("off", blk.off), slog.Int("len", blk.n)}
		if err != nil {
			attrs = append(attrs, slog.Any("err", err))
		}
		b.log.LogAttrs(ctx, slog.LevelDebug, "fetch block", attrs...)
	}
	if err != nil && blk.pieces == nil {
		b.pool.Put(buf)
		return nil, err
	}
	// A block fetched in pieces keeps its buffer even when it failed:
	// streams may be reading the pieces that arrived (publishLocked).
	return buf, err
}

// fromPrefix copies p at off from the bytes the source's open fetched
// (Prefixer), if they hold it all, and reports whether it did. The first
// use counts the open's request and its bytes as a fetch, since a fetch
// is what it spares; later ones count as nothing, as a cache hit.
func (b *Blocks) fromPrefix(p []byte, off int64) bool {
	if off < 0 || off+int64(len(p)) > int64(len(b.prefix)) {
		return false
	}
	copy(p, b.prefix[off:])
	if b.prefixUsed.CompareAndSwap(false, true) {
		b.requests.Add(1)
		b.bytesFetched.Add(int64(len(b.prefix)))
	}
	return true
}

// readFull reads all of p at off from the source; fewer bytes than
// len(p) is io.ErrUnexpectedEOF.
func (b *Blocks) readFull(ctx context.Context, p []byte, off int64) error {
	n, err := b.readSource(ctx, p, off)
	switch {
	case n == len(p) && (err == nil || err == io.EOF):
		return nil
	case err == nil || err == io.EOF:
		return fmt.Errorf("read %s at %d: got %d of %d bytes: %w", b.src, off, n, len(p), io.ErrUnexpectedEOF)
	}
	return err
}

// publishLocked records the outcome of a fetch and wakes its waiters. A
// good block is cached unless a newer fetch of the same index replaced it
// meanwhile; errors are never cached. The buffer of a failed fetch goes
// back to the pool once the block's holders are gone, since a stream may
// be reading the pieces that arrived.
func (b *Blocks) publishLocked(blk *block, buf *[]byte, err error) {
	if err != nil || b.closed {
		if b.closed {
			err = fmt.Errorf("read %s at %d: %w", b.src, blk.off, ErrClosed)
		}
		b.forgetLocked(blk)
		if buf != nil {
			blk.buf = buf
			if blk.refs.Add(evictedBit) == evictedBit {
				b.pool.Put(buf)
			}
		}
		b.finishLocked(blk, err)
		return
	}
	blk.buf, blk.data = buf, (*buf)[:blk.n]
	if cur := b.blocks[blk.idx]; cur == nil || cur == blk {
		// cur is nil when every waiter left but the fetch won the race
		// with its cancellation: the bytes are good, keep them.
		b.blocks[blk.idx] = blk
		b.lruInsertLocked(blk, &b.lru)
		b.cached += int64(blk.n)
		b.toDiskLocked(blk)
		b.shrinkLocked()
	} else if blk.refs.Add(evictedBit) == evictedBit {
		b.pool.Put(buf)
	}
	b.finishLocked(blk, nil)
}

// shrinkLocked evicts the coldest blocks until cached and running blocks
// fit in cacheBytes.
func (b *Blocks) shrinkLocked() {
	for b.cached+b.running > b.cacheBytes && b.lru.prev != &b.lru {
		b.evictLocked(b.lru.prev)
		b.evictions.Add(1)
	}
}

// evictLocked drops a cached block. Its buffer returns to the pool now, or
// when its last holder releases it.
func (b *Blocks) evictLocked(blk *block) {
	b.lruRemoveLocked(blk)
	b.forgetLocked(blk)
	b.cached -= int64(blk.n)
	if blk.refs.Add(evictedBit) == evictedBit {
		b.pool.Put(blk.buf)
	}
}

// lruInsertLocked links blk after at (&b.lru for the hot end, b.lru.prev
// for the cold end).
func (b *Blocks) lruInsertLocked(blk, at *block) {
	blk.prev, blk.next = at, at.next
	at.next.prev = blk
	at.next = blk
}

func (b *Blocks) lruRemoveLocked(blk *block) {
	blk.prev.next = blk.next
	blk.next.prev = blk.prev
	blk.prev, blk.next = nil, nil
}

// removeBlock deletes blk from a fetch queue.
func removeBlock(q []*block, blk *block) []*block {
	if i := slices.Index(q, blk); i >= 0 {
		return slices.Delete(q, i, i+1)
	}
	return q
}
