package fetch

// Blocks fetched in pieces. The block a stream starts in, when it is
// neither cached nor being fetched, is fetched as several range requests
// sent at once that tile it exactly, each as long as all those before it
// (the first is FirstPiece bytes, the last is cut at the block's end):
//
//	0    fp   2fp      4fp              8fp                         n
//	|-p0-|-p1-|---p2---|------p3--------|------------p4 ...----------|
//
// With the defaults, a 4 MiB block takes 7 requests: 64 KiB, 64 KiB,
// 128 KiB, 256 KiB, 512 KiB, 1 MiB and 2 MiB. The stream can then return
// the block's first bytes after about one round trip plus their own
// bytes, rather than after the whole block; no byte is fetched twice.
// The block after it comes in pieces as long as its longest (2 MiB),
// which arrive with that piece: fetched whole, it would arrive one
// whole block's transfer after the first block's end, and the stream
// would wait for it there.
// Pieces that the source holds from its open (Prefixer: the first piece
// of an HTTP object) take no request at all, so that a first pass has
// its first bytes with the identity, one round trip after it starts.
//
// The pieces run in their block's one worker slot: the worker starts them
// all, waits for all of them and publishes the block as for a whole
// fetch, so a block in pieces briefly has len(pieces) requests in flight
// where a whole block has one. The first piece that fails cancels the
// others and fails the block.
//
// Each piece closes its done channel once its bytes are in the block's
// buffer. The ready prefix of a block is its pieces, from the first, that
// are all done: a stream waits only for the prefix that covers its
// position (waitFrom). ReadAt waits for the whole block, like for any
// other. A failed block keeps its buffer until its holders are gone, so a
// stream can still read its ready prefix; it gets the error at the first
// byte past it.

import (
	"context"

	"golang.org/x/sync/errgroup"
)

// piece is one of the range requests of a block fetched in pieces. It
// starts where the piece before it ends, or at 0.
type piece struct {
	end  int           // offset in the block of the byte after the piece
	done chan struct{} // closed once the piece's bytes are in the buffer
}

// newPieces splits a block of n bytes into pieces: first bytes, then each
// as long as those before it, the last cut at n.
func newPieces(n, first int) []piece {
	var ps []piece
	for end := 0; end < n; {
		end = min(end+max(first, end), n)
		ps = append(ps, piece{end: end, done: make(chan struct{})})
	}
	return ps
}

// rampLocked queues block idx to be fetched in pieces, with no waiter, if
// it is neither cached nor being fetched and is longer than first, the
// size of its first piece. The caller takes it with getLocked next, which
// registers it as a waiter.
func (b *Blocks) rampLocked(idx, first int64) {
	if first == 0 || b.blocks[idx] != nil {
		return
	}
	n := min(b.blockSize, b.size-idx*b.blockSize)
	if n <= first {
		return
	}
	blk := b.queueLocked(idx, false, 0)
	blk.streamOnly = true
	blk.pieces = newPieces(int(n), int(first))
}

// secondPiece is the size of the pieces of the block after the one a
// stream starts in: as long as the longest piece of that first block, so
// that they arrive with it, when the stream gets to them, rather than one
// whole block's transfer later.
func (b *Blocks) secondPiece() int64 {
	if b.firstPiece == 0 {
		return 0
	}
	longest, start := 0, 0
	for _, pc := range newPieces(int(b.blockSize), int(b.firstPiece)) {
		longest, start = max(longest, pc.end-start), pc.end
	}
	return int64(longest)
}

// fetchPieces fills p, the buffer of blk, with blk's pieces, all at once
// (they are few: log2(n/first)+1), closing each piece's done channel as
// its bytes arrive. It returns once every piece has ended; the first
// failure cancels the others and is returned.
func (b *Blocks) fetchPieces(ctx context.Context, blk *block, p []byte) error {
	blk.partial = p
	g, ctx := errgroup.WithContext(ctx)
	start := 0
	for i := range blk.pieces {
		pc := &blk.pieces[i]
		q, off := p[start:pc.end], blk.off+int64(start)
		start = pc.end
		if b.fromPrefix(q, off) {
			close(pc.done)
			continue
		}
		g.Go(func() error {
			if err := b.readFull(ctx, q, off); err != nil {
				return err
			}
			close(pc.done)
			return nil
		})
	}
	return g.Wait()
}

// waitFrom waits until byte i of blk is there, and returns blk's bytes
// from i on: to the end of the block once it is done, or to the end of
// its ready prefix while it is fetched in pieces. The bytes of the ready
// prefix of a failed block are returned too; past them waitFrom returns
// the block's error. If ctx ends first it returns ctx.Err(). The caller
// holds a reference to blk, which keeps the bytes valid until released.
func (b *Blocks) waitFrom(ctx context.Context, blk *block, i int) ([]byte, error) {
	if blk.pieces == nil || isClosed(blk.done) && blk.err == nil {
		if err := b.wait(ctx, blk); err != nil {
			return nil, err
		}
		return blk.data[i:], nil
	}
	end := 0
	for k := range blk.pieces {
		pc := &blk.pieces[k]
		if !isClosed(pc.done) {
			if end > i {
				break
			}
			select {
			case <-pc.done:
			case <-blk.done:
				// Every piece has ended before its block is done.
				if !isClosed(pc.done) {
					if blk.err != nil {
						return nil, blk.err
					}
					return blk.data[i:], nil // read from the disk cache
				}
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		end = pc.end
	}
	return blk.partial[i:end], nil
}

// isClosed reports whether ch is closed, without waiting.
func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
