package fetch

import (
	"context"
	"fmt"
	"io"
)

// Stream returns an in-order reader of the object from off to its end.
// It keeps up to Workers block fetches running ahead of the consumer, so
// that parallel range requests hide per-connection bandwidth caps and
// first-byte latency; read-ahead memory is bounded by Workers+1 blocks
// (the one being read and Workers ahead).
//
// A stream that starts inside a block that is neither cached nor being
// fetched, with no disk cache to look in, fetches only the block's bytes
// from its start on, with one range request of its own, uncached (firstPiece):
// a pass resumed at a checkpoint in the middle of a block fetches nothing
// before it. Otherwise the block the stream starts in, if it is neither
// cached nor being fetched, is fetched in pieces of growing size, all sent at once
// (BlocksOptions.FirstPiece, ramp.go), and the stream returns the bytes
// of each piece once it and the pieces before it have arrived: the first
// bytes come after about one round trip plus their own bytes instead of
// after the whole block. The block after it comes in pieces too, as long
// as the first block's last; later blocks are fetched whole. If a piece fails,
// the block fails: the stream returns the bytes of the pieces before it,
// then the error.
//
// Stream blocks go through the same cache and in-flight map as ReadAt: a
// concurrent ReadAt of a streamed block does not fetch it twice, and a
// stream reads cached blocks without fetching them. Read-ahead fetches
// wait while a ReadAt waits for a fetch slot. A block fetched for a
// stream stays cached, but once the stream has read past it, it moves to
// the cold end of the LRU, so a stream evicts its own blocks first rather
// than the blocks that ReadAt callers use; a ReadAt hit on it makes it an
// ordinary block again.
//
// The reader also implements io.WriterTo and
//
//	Discard(n int64) (int64, error)
//
// which skips n bytes without fetching the blocks that are skipped
// entirely (read-ahead restarts at the new position; skipped fetches that
// nobody else waits for are cancelled). Like bufio.Reader.Discard it
// returns io.EOF when fewer than n bytes were left.
//
// ctx bounds every wait of Read and WriteTo; once it ends the
// reader returns its error. The reader is not safe for concurrent use.
// Close releases its read-ahead and must be called. After Close reads fail
// with ErrClosed; after b.Close they do once the read-ahead already
// fetched is used up.
func (b *Blocks) Stream(ctx context.Context, off int64) io.ReadCloser {
	s := &stream{b: b, ctx: ctx, ahead: make([]*block, 0, b.workers+1), ramp: rampFirst}
	if off < 0 {
		s.err = fmt.Errorf("stream %s at %d: negative offset", b.src, off)
		return s
	}
	s.pos = min(off, b.size)
	s.next = s.pos / b.blockSize
	if s.pos%b.blockSize != 0 && b.absent(s.next) {
		s.startFirst()
	}
	s.fill()
	return s
}

// firstPiece is the start of a stream, from its first byte to the end of that
// byte's block, fetched alone (see Blocks.Stream).
type firstPiece struct {
	off  int64
	data []byte
	err  error         // set before done is closed
	done chan struct{} // closed once the fetch has ended
	stop context.CancelFunc
}

// startFirst fetches the rest of the block the stream starts in, in a
// goroutine that close waits for, and moves the block read-ahead past it.
func (s *stream) startFirst() {
	b := s.b
	end := min((s.next+1)*b.blockSize, b.size)
	ctx, cancel := context.WithCancel(s.ctx)
	h := &firstPiece{off: s.pos, data: make([]byte, end-s.pos), done: make(chan struct{}), stop: cancel}
	go func() {
		defer close(h.done)
		h.err = b.readFull(ctx, h.data, h.off)
	}()
	s.first = h
	s.next++
	s.ramp = rampDone
}

// dropFirst ends the first piece's fetch, if any, and lets its bytes go.
func (s *stream) dropFirst() {
	if s.first == nil {
		return
	}
	s.first.stop()
	<-s.first.done
	s.first = nil
}

// absent reports whether block idx is neither cached nor being fetched,
// and there is no disk cache that might hold it.
func (b *Blocks) absent(idx int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.disk == nil && !b.closed && idx < b.nblocks && b.blocks[idx] == nil
}

// stream is the reader that Blocks.Stream returns.
//
//	        pos                       next
//	         v                         v
//	|  ahead[0] | ahead[1] | ... | ahead[k-1] |  not requested yet ...
//
// ahead holds the requested blocks ahead[0].idx .. next-1 in order, with a
// reference each; ahead[0] contains pos. len(ahead) <= workers+1.
type stream struct {
	b     *Blocks
	ctx   context.Context
	pos   int64       // next byte to return
	next  int64       // index of the next block to request
	ahead []*block    // requested blocks, in order
	err   error       // sticky: a failed fetch, a done ctx, Close
	ramp  rampStep    // how the next block requested is fetched
	first *firstPiece // the stream's first bytes, fetched alone, while pos is in them; else nil
}

// rampStep says how a stream's next block is fetched (ramp.go).
type rampStep uint8

const (
	rampFirst  rampStep = iota // the first block: in pieces from FirstPiece
	rampSecond                 // the second: in pieces as long as the first's last
	rampDone                   // whole
)

// fill requests blocks until the read-ahead window is full: Workers+1
// blocks, the first piece counted as one.
func (s *stream) fill() {
	b := s.b
	most := b.workers
	if s.first != nil {
		most--
	}
	if s.err != nil || s.next >= b.nblocks || len(s.ahead) > most {
		return
	}
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		s.fail(fmt.Errorf("stream %s at %d: %w", b.src, s.pos, ErrClosed))
		return
	}
	for s.next < b.nblocks && len(s.ahead) <= most {
		switch s.ramp {
		case rampFirst:
			b.rampLocked(s.next, b.firstPiece)
			s.ramp = rampSecond
		case rampSecond:
			b.rampLocked(s.next, b.secondPiece())
			s.ramp = rampDone
		}
		s.ahead = append(s.ahead, b.getLocked(s.next, false))
		s.next++
	}
	b.mu.Unlock()
}

// head waits for the byte at pos (pos < size) and returns the bytes of
// its block from pos on that are there: to the end of the block, or of
// its ready prefix while it is fetched in pieces.
func (s *stream) head() ([]byte, error) {
	// A done ctx ends the stream even where its blocks are already here:
	// a stopped pass must stop, not read to the end of what was fetched.
	if err := s.ctx.Err(); err != nil && s.err == nil {
		s.fail(err)
	}
	s.fill()
	if s.err != nil {
		return nil, s.err
	}
	if h := s.first; h != nil {
		select {
		case <-h.done:
		case <-s.ctx.Done():
			s.fail(s.ctx.Err())
			return nil, s.err
		}
		if h.err != nil {
			s.fail(h.err)
			return nil, s.err
		}
		return h.data[s.pos-h.off:], nil
	}
	blk := s.ahead[0]
	p, err := s.b.waitFrom(s.ctx, blk, int(s.pos-blk.off))
	if err != nil {
		s.fail(err)
		return nil, err
	}
	return p, nil
}

// advance moves pos by n bytes within the first piece or ahead[0], releasing
// either at its end.
func (s *stream) advance(n int) {
	s.pos += int64(n)
	if h := s.first; h != nil {
		if s.pos >= h.off+int64(len(h.data)) {
			s.dropFirst()
		}
		return
	}
	if blk := s.ahead[0]; s.pos >= blk.off+int64(blk.n) {
		s.drop(1)
		s.fill()
	}
}

// drop releases the first k blocks of ahead.
func (s *stream) drop(k int) {
	if k == 0 {
		return
	}
	s.b.releaseMany(s.ahead[:k], true)
	m := copy(s.ahead, s.ahead[k:])
	clear(s.ahead[m:])
	s.ahead = s.ahead[:m]
}

// fail makes err sticky and releases the first piece and the read-ahead.
func (s *stream) fail(err error) {
	s.err = err
	s.dropFirst()
	s.drop(len(s.ahead))
}

func (s *stream) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.pos >= s.b.size {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	q, err := s.head()
	if err != nil {
		return 0, err
	}
	n := copy(p, q)
	s.advance(n)
	return n, nil
}

// WriteTo writes the rest of the object to w straight from the block
// buffers.
func (s *stream) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if s.err != nil {
			return total, s.err
		}
		if s.pos >= s.b.size {
			return total, nil
		}
		p, err := s.head()
		if err != nil {
			return total, err
		}
		n, err := w.Write(p)
		if n < 0 || n > len(p) {
			n = 0
			if err == nil {
				err = fmt.Errorf("stream %s: writer returned a bad count", s.b.src)
			}
		}
		total += int64(n)
		s.advance(n)
		if err != nil {
			return total, err
		}
		if n < len(p) {
			return total, io.ErrShortWrite
		}
	}
}

// Discard skips n bytes. See Blocks.Stream.
func (s *stream) Discard(n int64) (int64, error) {
	if s.err != nil {
		return 0, s.err
	}
	if n <= 0 {
		return 0, nil
	}
	skipped := min(n, s.b.size-s.pos)
	s.pos += skipped
	if h := s.first; h != nil && s.pos >= h.off+int64(len(h.data)) {
		s.dropFirst()
	}
	idx := s.pos / s.b.blockSize
	k := 0
	for k < len(s.ahead) && s.ahead[k].idx < idx {
		k++
	}
	s.drop(k)
	s.next = max(s.next, idx)
	s.fill()
	if skipped < n {
		return skipped, io.EOF
	}
	return skipped, nil
}

// Close releases the read-ahead. It is idempotent.
func (s *stream) Close() error {
	if s.err != ErrClosed {
		s.fail(ErrClosed)
	}
	return nil
}
