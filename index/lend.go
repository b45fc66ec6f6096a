package index

import (
	"context"
	"sync"
	"sync/atomic"
)

// Spans lent between two Readers of one archive: a mount's Reader, which
// serves random reads and caches what it decodes, and a whole-archive
// reader's (materialization), which decodes every span once into its
// caller's buffers with DecodeSpan and DecodeSpanInto. Each takes from the
// other what it holds or is decoding, so that a span that both need is
// fetched and decoded once:
//   - the whole-archive reader decodes with DecodeSpanBeside, which copies
//     a span the mount's Reader has cached or is decoding
//     (materialize.Peers);
//   - the mount's Reader, once Borrow named the other one, copies a span
//     that the other is decoding (DecodeSpan(Into)) instead of starting
//     its own decode for a read or readahead.
//
// Neither wait can close a cycle: a DecodeSpan(Into) in flight waits for
// nobody, and a whole-archive reader asks before its own decode starts.
//
// Each reader decides, for span i, whether to copy it from the other or
// decode it itself under both readers' locks: the mount's Reader's mu
// first, then the whole-archive reader's (lock order). The mount's Reader
// decides as it starts a span (startLocked), the whole-archive reader in
// DecodeSpanBeside. So whichever comes second sees the first, and a span
// that both need at the same moment is fetched and decoded once. (Deciding
// under one lock at a time let both miss each other: at boot, with reads
// through the mount beside a materialization, 1 run in 3 fetched a span
// or two twice.)

// lendCall is a span that DecodeSpan or DecodeSpanInto is decoding into
// its caller's memory: a hold (holdLocked) copies it once the decode ends, and the
// decode returns the memory to its caller only after every such copy.
type lendCall struct {
	done    chan struct{}
	data    []byte // set before done is closed
	err     error
	copying sync.WaitGroup // holds that may read data; added to under Reader.mu while lent
	joined  int            // holds taken on it; guarded by Reader.mu
}

// lend records that span i is being decoded outside the cache, unless
// another decode of it already is: then it returns nil.
func (r *Reader) lend(i int) *lendCall {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lendLocked(i)
}

// lendLocked is lend with r.mu held.
func (r *Reader) lendLocked(i int) *lendCall {
	if _, ok := r.lent[i]; ok {
		return nil
	}
	if r.lent == nil {
		r.lent = make(map[int]*lendCall)
	}
	l := &lendCall{done: make(chan struct{})}
	r.lent[i] = l
	return l
}

// endLend ends the lending of span i, which decoded to data or failed
// with err, once every copy of data made through a hold is done.
func (r *Reader) endLend(i int, l *lendCall, data []byte, err error) {
	if marks := r.wholeMarks(); err == nil && i < len(marks) {
		marks[i].Store(true)
	}
	if l == nil {
		return
	}
	r.mu.Lock()
	delete(r.lent, i)
	r.mu.Unlock()
	l.data, l.err = data, err
	close(l.done)
	l.copying.Wait()
}

// copyLent copies the lent span l into buf (or a new slice) once its
// decode ends; the caller has added itself to l.copying.
func copyLent(ctx context.Context, l *lendCall, buf []byte) ([]byte, bool) {
	defer l.copying.Done()
	select {
	case <-l.done:
	case <-ctx.Done():
		return nil, false
	}
	if l.err != nil {
		return nil, false
	}
	return append(buf[:0], l.data...), true
}

// Borrow makes r, before it decodes a span for a read or readahead, copy
// it from peer when peer holds it or is decoding it (holdLocked): peer is
// a whole-archive reader of the same index over the same archive. A nil
// peer ends it. It is safe to call at any time.
func (r *Reader) Borrow(peer *Reader) { r.peer.Store(peer) }

// decodedWhole reports whether DecodeSpanInto or DecodeSpanBeside has
// decoded span i of r.
func (r *Reader) decodedWhole(i int) bool {
	marks := r.wholeMarks()
	return i >= 0 && i < len(marks) && marks[i].Load()
}

// wholeMarks returns r.whole, made on first use.
func (r *Reader) wholeMarks() []atomic.Bool {
	r.wholeOnce.Do(func() { r.whole = make([]atomic.Bool, len(r.ix.Checkpoints)) })
	return r.whole
}

// hold is a claim on span i of a Reader: a reference to its cached or
// in-flight span (c, of owner), or a place among the copiers of the
// decode it lends (l).
type hold struct {
	owner *Reader
	c     *spanCall
	l     *lendCall
}

// holdLocked takes a hold on span i of r, if r has it cached, being
// decoded for a read, or lent; r.mu is held.
func (r *Reader) holdLocked(i int) (hold, bool) {
	if c, ok := r.spans[i]; ok {
		c.refs++
		return hold{owner: r, c: c}, true
	}
	if l, ok := r.lent[i]; ok {
		l.copying.Add(1)
		l.joined++
		return hold{l: l}, true
	}
	return hold{}, false
}

// copy copies the held span into buf (or a new slice) once it is
// decoded, and gives the hold back. It reports false when that decode
// failed or ctx ended first.
func (h hold) copy(ctx context.Context, buf []byte) ([]byte, bool) {
	if h.l != nil {
		return copyLent(ctx, h.l, buf)
	}
	c, err := h.owner.waitSpan(ctx, h.c)
	if err != nil {
		return nil, false
	}
	defer h.owner.release(c)
	return append(buf[:0], c.data...), true
}

// drop gives the hold back without copying.
func (h hold) drop() {
	if h.l != nil {
		h.l.copying.Done()
		return
	}
	h.owner.release(h.c)
}

// peerHoldLocked takes a hold on span i of r's peer (Borrow), if it has
// the span; r.mu is held (the lock order: r's, then the peer's).
func (r *Reader) peerHoldLocked(i int) (hold, bool) {
	p := r.peer.Load()
	if p == nil || p == r || !r.def.compressed() {
		return hold{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.holdLocked(i)
}

// DecodeSpanBeside is DecodeSpanInto for a whole-archive reader beside
// mount, a Reader that borrows from r (Borrow): span i is copied from
// mount when mount has it cached or is decoding it, else decoded here and
// lent to mount meanwhile. A nil mount makes it DecodeSpanInto.
func (r *Reader) DecodeSpanBeside(ctx context.Context, i int, buf []byte, mount *Reader) ([]byte, error) {
	if mount == nil {
		return r.DecodeSpanInto(ctx, i, buf)
	}
	mount.mu.Lock()
	h, held := mount.holdLocked(i)
	var l *lendCall
	if !held {
		r.mu.Lock()
		l = r.lendLocked(i)
		r.mu.Unlock()
	}
	mount.mu.Unlock()
	if held {
		if data, ok := h.copy(ctx, buf); ok {
			return data, nil
		}
		// Its decode failed (or was cancelled): try here.
		l = r.lend(i)
	}
	data, err := r.decodeSpan(ctx, i, true, buf, nil)
	r.endLend(i, l, data, err)
	return data, err
}
