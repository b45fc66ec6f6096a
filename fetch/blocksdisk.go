package fetch

// The disk cache side of Blocks: a block missing from memory is looked up
// on disk by the worker that would fetch it, a block fetched from the
// source is queued for writing to disk, and ReadCached and RangeReader
// look on disk before they give up or fetch. Locking as in blocks.go;
// lock order: Blocks.mu, then DiskCache.qmu (toDiskLocked calls PutAsync).
// DiskCache calls done callbacks without its locks, and diskWritten takes
// Blocks.mu.

import (
	"bytes"
	"context"
	"io"
)

// diskState says whether a block's bytes are known to be on disk.
type diskState uint8

const (
	diskNone   diskState = iota // not known to be on disk: write it when we can
	diskQueued                  // a write is queued
	diskDone                    // read from disk, written, or the write failed
)

// initDisk enables the disk cache d (if not nil) for b's source, unless
// the source's identity is too weak to key persistent data on.
func (b *Blocks) initDisk(d *DiskCache) {
	if d == nil || IsLocal(b.src) {
		return
	}
	id := b.src.Identity()
	if !DiskCacheable(id) {
		b.log.Info("disk cache not used: the source has no strong ETag, version or modification time",
			"src", b.src.String())
		return
	}
	b.disk, b.diskKey = d, id.Key()
}

// readDisk fills p, the buffer of blk, from the disk cache, in the worker
// that fetches blk. It sets blk.disk, which only this worker touches until
// the block is published.
func (b *Blocks) readDisk(blk *block, p []byte) bool {
	if b.disk == nil || !b.disk.Get(b.diskKey, blk.off, p) {
		return false
	}
	b.diskHits.Add(1)
	b.diskBytes.Add(int64(len(p)))
	blk.disk = diskDone
	return true
}

// toDiskLocked queues a write of cached block blk to disk unless it is
// there already or queued. The queued write holds a reference to the
// block, so its buffer stays valid until written. A write dropped because
// the queue was full is tried again at the block's next hit.
func (b *Blocks) toDiskLocked(blk *block) {
	if b.disk == nil || blk.disk != diskNone || blk.data == nil {
		return
	}
	blk.refs.Add(1)
	if b.disk.PutAsync(b.diskKey, blk.off, blk.data, func(ok bool) { b.diskWritten(blk, ok) }) {
		blk.disk = diskQueued
		return
	}
	// The block is cached (we hold mu), so this is not the last reference.
	blk.refs.Add(-1)
	b.diskDropped.Add(1)
}

// diskWritten ends a write queued by toDiskLocked. A failed write is not
// tried again: the disk is likely full or read-only.
func (b *Blocks) diskWritten(blk *block, ok bool) {
	if ok {
		b.diskWrites.Add(1)
	}
	b.mu.Lock()
	blk.disk = diskDone
	b.mu.Unlock()
	b.unref(blk)
}

// readCachedDisk is ReadCached for ranges not wholly in memory: the range
// stored whole on disk (RangeReader stores what it fetches so), or else
// the blocks that hold it, from memory or from disk. Blocks read from disk
// are cached in memory, so the next span in the same block is a memory
// hit.
func (b *Blocks) readCachedDisk(p []byte, off int64) bool {
	if b.disk == nil {
		return false
	}
	if b.disk.Get(b.diskKey, off, p) {
		b.diskHits.Add(1)
		b.diskBytes.Add(int64(len(p)))
		return true
	}
	end := off + int64(len(p))
	first, last := off/b.blockSize, (end-1)/b.blockSize
	n := 0
	for i := first; i <= last; i++ {
		blk := b.diskBlock(i)
		if blk == nil {
			return false
		}
		n += blk.copyOut(p[n:], off, end)
		b.unref(blk)
	}
	return true
}

// diskBlock returns block idx with a reference for the caller (to drop
// with unref) if it is in memory or on disk, else nil. It never fetches.
func (b *Blocks) diskBlock(idx int64) *block {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	if blk := b.blocks[idx]; blk != nil && blk.state == blockDone {
		blk.refs.Add(1)
		b.hits.Add(1)
		blk.streamOnly = false
		b.lruRemoveLocked(blk)
		b.lruInsertLocked(blk, &b.lru)
		b.mu.Unlock()
		return blk
	}
	b.mu.Unlock()

	off := idx * b.blockSize
	n := int(min(b.blockSize, b.size-off))
	buf := b.pool.Get().(*[]byte)
	if !b.disk.Get(b.diskKey, off, (*buf)[:n]) {
		b.pool.Put(buf)
		return nil
	}
	b.diskHits.Add(1)
	b.diskBytes.Add(int64(n))
	blk := &block{idx: idx, off: off, n: n, done: make(chan struct{}), buf: buf, data: (*buf)[:n],
		state: blockDone, disk: diskDone}
	close(blk.done)
	blk.refs.Store(1)

	b.mu.Lock()
	if b.blocks[idx] == nil && !b.closed {
		b.blocks[idx] = blk
		b.lruInsertLocked(blk, &b.lru)
		b.cached += int64(n)
		b.shrinkLocked()
	} else {
		// Fetched or being fetched meanwhile, or closed: use it, then
		// let the buffer go back to the pool.
		blk.refs.Add(evictedBit)
	}
	b.mu.Unlock()
	return blk
}

// RangeReader reads exact ranges of a Blocks' object: for readers that
// read whole ranges that rarely share blocks, like the compressed spans of
// a gzip archive, for which fetching whole blocks would multiply the bytes
// fetched. Get one with Blocks.Ranges. It is safe for concurrent use.
type RangeReader struct{ b *Blocks }

// Ranges returns a RangeReader of b.
func (b *Blocks) Ranges() RangeReader { return RangeReader{b: b} }

// ReadAt is r's Blocks' ReadRange.
func (r RangeReader) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return r.b.ReadRange(ctx, p, off)
}

// ReadRange reads len(p) bytes at off like Source.ReadAt: from memory or
// disk if ReadCached can, or from the fetches under way of the blocks it
// lies in when each is cached or being fetched (a stream's, ReadBeside's:
// the same bytes are not asked for twice), else with one request for
// exactly those bytes, which it then queues for writing to the disk cache
// as one entry (so that a later mount finds the range there). The request
// counts in b's Stats; it is not a block fetch, and does not fill the
// block cache. p is not retained. It is safe for concurrent use.
func (b *Blocks) ReadRange(ctx context.Context, p []byte, off int64) (int, error) {
	if off >= 0 && b.ReadCached(p, off) {
		return len(p), nil
	}
	if b.joinFetching(ctx, p, off) {
		return len(p), nil
	}
	n, err := b.readSource(ctx, p, off)
	if b.disk != nil && n > 0 && n == len(p) && (err == nil || err == io.EOF) {
		if b.disk.room(n) && b.disk.PutAsync(b.diskKey, off, bytes.Clone(p), func(ok bool) {
			if ok {
				b.diskWrites.Add(1)
			}
		}) {
			return n, err
		}
		b.diskDropped.Add(1)
	}
	return n, err
}

// joinFetching copies len(p) bytes at off into p from the blocks they lie
// in, waiting for their fetches, when each of them is cached or being
// fetched (not merely queued), and reports whether it did.
func (b *Blocks) joinFetching(ctx context.Context, p []byte, off int64) bool {
	end := off + int64(len(p))
	if off < 0 || len(p) == 0 || end > b.size {
		return false
	}
	var stack [4]*block
	held := stack[:0]
	if !b.lockOpen() {
		return false
	}
	for i := off / b.blockSize; i <= (end-1)/b.blockSize; i++ {
		if blk := b.blocks[i]; blk == nil || blk.state == blockQueued {
			b.mu.Unlock()
			b.releaseMany(held, false)
			return false
		}
		held = append(held, b.getLocked(i, true))
	}
	b.mu.Unlock()
	n := 0
	for i, blk := range held {
		if err := b.wait(ctx, blk); err != nil {
			b.releaseMany(held[i:], false)
			return false
		}
		n += blk.copyOut(p[n:], off, end)
		b.release(blk)
	}
	return true
}
