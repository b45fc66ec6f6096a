package index

import (
	"context"
	"sync"
)

// Spans lent between two Readers of one archive: a mount's Reader, which
// serves random reads and caches what it decodes, and a whole-archive
// reader's (materialization), which decodes every span once into its
// caller's buffers with DecodeSpan and DecodeSpanInto. Each takes from the
// other what it holds or is decoding, so that a span that both need is
// fetched and decoded once:
//   - the whole-archive reader asks the mount's Reader with CachedSpan
//     before it decodes a span (materialize.Peers);
//   - the mount's Reader, once Borrow named the other one, asks it with
//     CachedSpan before it decodes a span for a read or readahead, and
//     CachedSpan waits for a DecodeSpan(Into) of that span in flight.
//
// Neither wait can close a cycle: a DecodeSpan(Into) in flight waits for
// nobody, and a whole-archive reader asks before its own decode starts.

// lendCall is a span that DecodeSpan or DecodeSpanInto is decoding into
// its caller's memory: CachedSpan copies it once the decode ends, and the
// decode returns the memory to its caller only after every such copy.
type lendCall struct {
	done    chan struct{}
	data    []byte // set before done is closed
	err     error
	copying sync.WaitGroup // CachedSpan calls that may read data; added to under Reader.mu while lent
	joined  int            // CachedSpan calls that came for it; guarded by Reader.mu
}

// lend records that span i is being decoded outside the cache, unless
// another decode of it already is: then it returns nil.
func (r *Reader) lend(i int) *lendCall {
	r.mu.Lock()
	defer r.mu.Unlock()
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
// with err, once every copy of data made by CachedSpan is done.
func (r *Reader) endLend(i int, l *lendCall, data []byte, err error) {
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
// it from peer when peer holds it or is decoding it (CachedSpan): peer is
// a whole-archive reader of the same index over the same archive. A nil
// peer ends it. It is safe to call at any time.
func (r *Reader) Borrow(peer *Reader) { r.peer.Store(peer) }

// borrowed returns span i from r's peer (Borrow) if it has it, into buf.
func (r *Reader) borrowed(i int, buf []byte) ([]byte, bool) {
	p := r.peer.Load()
	if p == nil {
		return nil, false
	}
	data, ok := p.CachedSpan(r.ctx, i, buf)
	if ok {
		r.borrows.Add(1)
	}
	return data, ok
}
