package index

import (
	"context"
	"io"

	"github.com/cespare/xxhash/v2"
)

// recorder collects checkpoints and span digests during the index pass,
// and writes what only the local copy can serve to opts.Local.
type recorder struct {
	ix   *Index
	span int64
	hash xxhash.Digest // the decoded bytes since the last checkpoint
	out  int64         // decoded bytes so far
	// local receives decoded bytes at their offsets while toLocal is
	// set (nil: nowhere).
	local   io.WriterAt
	toLocal bool
	err     error // the first write error of local

	// localSpans: decoded bytes are cut into kindLocal spans every span
	// bytes from localFrom; localIn is their compressed offset.
	localSpans bool
	localFrom  int64
	localIn    int64
	// tentative: a zstd frame of unknown size is being decoded; if it
	// grows too big, its sub-spans become kindLocal spans. sub hashes the
	// bytes since the latest sub-span boundary; pending holds the
	// boundaries passed (end offset and digest of the sub-span ending
	// there); pre is the span hash at the frame start.
	tentative bool
	sub       xxhash.Digest
	pending   []subSpan
	pre       xxhash.Digest
	preOut    int64
	// live, if set, is told of every checkpoint and digest: they are
	// added under its lock.
	live *Live
	// ctx and workers are for a codec whose pass decodes on several
	// goroutines (gzip): how many it may use (1: decode sequentially),
	// and when they stop.
	ctx     context.Context
	workers int
	// midPoints: the pass keeps a partial index, so a codec that can
	// resume inside a span served from the local copy follows what it
	// needs to (zstdTracker).
	midPoints bool
	// idle, if set, is called on the pass's goroutine while it waits for
	// decoded bytes (pipe.idle): Build writes a resume point held back for
	// its caller (BuildOptions.Holds) once the caller holds what comes
	// before it, even while the source stalls.
	idle func()
}

type subSpan struct {
	end    int64
	digest uint64
}

func newRecorder(ix *Index, span int64, local io.WriterAt) *recorder {
	r := &recorder{ix: ix, span: span, local: local}
	r.hash.Reset()
	return r
}

// write takes decoded bytes in order.
func (r *recorder) write(p []byte) {
	if r.live != nil {
		r.live.decoded(p, r.out)
	}
	if r.toLocal && r.local != nil && r.err == nil {
		r.err = writeSparse(r.local, p, r.out)
	}
	if !r.localSpans && !r.tentative {
		r.hash.Write(p)
		r.out += int64(len(p))
		return
	}
	for len(p) > 0 {
		next := r.out + r.span - (r.out-r.localFrom)%r.span
		n := int(min(int64(len(p)), next-r.out))
		r.hash.Write(p[:n])
		r.sub.Write(p[:n])
		r.out += int64(n)
		p = p[n:]
		if r.out == next {
			if r.localSpans {
				r.mark(Checkpoint{Kind: kindLocal, In: CompressedOffset(r.localIn), Out: UncompressedOffset(r.out)})
			} else {
				r.pending = append(r.pending, subSpan{r.out, r.sub.Sum64()})
			}
			r.sub.Reset()
		}
	}
}

// last returns the latest checkpoint, or nil.
func (r *recorder) last() *Checkpoint {
	if n := len(r.ix.Checkpoints); n > 0 {
		return &r.ix.Checkpoints[n-1]
	}
	return nil
}

// due reports whether a span's worth of bytes passed since the last
// checkpoint.
func (r *recorder) due() bool {
	l := r.last()
	return l == nil || r.out-int64(l.Out) >= r.span
}

// mark records a checkpoint at the current offset (c.Out must equal it).
// One at the same offset as the last replaces it.
func (r *recorder) mark(c Checkpoint) {
	r.publish(func() {
		ix := r.ix
		if l := r.last(); l != nil && l.Out == c.Out {
			*l = c
			return
		}
		if len(ix.Checkpoints) > 0 {
			ix.Digests = append(ix.Digests, r.hash.Sum64())
		}
		r.hash.Reset()
		ix.Checkpoints = append(ix.Checkpoints, c)
	})
}

// publish runs f, which adds checkpoints or digests, under the lock of
// r.live (if any), and tells it.
func (r *recorder) publish(f func()) {
	if r.live == nil {
		f()
		return
	}
	r.live.update(f)
}

// beginLocal makes every later byte, up to endLocal, go to the local copy
// in kindLocal spans; in is the compressed offset reported for them.
func (r *recorder) beginLocal(in int64) {
	r.toLocal = true
	r.localSpans = true
	r.localFrom = r.out
	r.localIn = in
	r.sub.Reset()
	r.mark(Checkpoint{Kind: kindLocal, In: CompressedOffset(in), Out: UncompressedOffset(r.out)})
}

// endLocal ends the local spans.
func (r *recorder) endLocal() {
	r.toLocal = false
	r.localSpans = false
}

// beginTentative starts a frame whose size is not known: its bytes go to
// the local copy in case it turns out too big to decode per read.
func (r *recorder) beginTentative(in int64) {
	r.toLocal = true
	r.tentative = true
	r.localFrom = r.out
	r.localIn = in
	r.sub.Reset()
	r.pending = r.pending[:0]
	r.pre = r.hash
	r.preOut = r.out
}

// promote turns the tentative frame into local spans: a kindLocal
// checkpoint at its start and at every sub-span boundary passed.
func (r *recorder) promote() {
	r.publish(func() {
		ix := r.ix
		if l := r.last(); l != nil && int64(l.Out) == r.preOut {
			*l = Checkpoint{Kind: kindLocal, In: CompressedOffset(r.localIn), Out: l.Out}
		} else {
			ix.Digests = append(ix.Digests, r.pre.Sum64())
			ix.Checkpoints = append(ix.Checkpoints, Checkpoint{Kind: kindLocal, In: CompressedOffset(r.localIn), Out: UncompressedOffset(r.preOut)})
		}
		for _, s := range r.pending {
			ix.Digests = append(ix.Digests, s.digest)
			ix.Checkpoints = append(ix.Checkpoints, Checkpoint{Kind: kindLocal, In: CompressedOffset(r.localIn), Out: UncompressedOffset(s.end)})
		}
	})
	r.pending = r.pending[:0]
	r.hash = r.sub
	r.tentative = false
	r.localSpans = true
}

// endTentative ends a tentative frame that stayed small enough.
func (r *recorder) endTentative() {
	r.tentative = false
	r.toLocal = false
	r.pending = r.pending[:0]
}

// dropPassState forgets the pass state at the checkpoints, which only a
// partial index keeps: an index is the same however it was made.
func (r *recorder) dropPassState() {
	r.publish(func() {
		for i := range r.ix.Checkpoints {
			r.ix.Checkpoints[i].pass = nil
		}
	})
}

// finish closes the last span.
func (r *recorder) finish() {
	r.publish(func() {
		if len(r.ix.Checkpoints) > 0 {
			r.ix.Digests = append(r.ix.Digests, r.hash.Sum64())
		}
	})
}
