package index

import (
	"fmt"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// zstdTracker follows, in the index pass, a zstd frame that is served
// from the decoded copy (too big to decode per read), so that a pass
// stopped inside it leaves a resume point at a block boundary
// (kindZstdBlock) rather than none.
//
// Walking a block's sequences costs about what decoding it does, so the
// walker (zstdwalk.go) runs on a goroutine of its own, over copies of the
// compressed bytes the decoder is handed (at most zstdTrackChunks behind:
// the pass waits for it beyond that). It lists the boundaries it passes.
// The pass keeps, on its side, the latest output (a ring of the window
// plus zstdTrackSlack) and snapshots of the frame's XXH64 every MiB of
// output. When the pass stops, point waits for the walker and picks the
// latest boundary at or before the latest member start whose window is
// still in the ring: the XXH64 and the recorder's span hash there are
// computed from the ring.
//
// Lock order: mu only (the walker's goroutine appends boundaries under
// it; the pass reads them).
type zstdTracker struct {
	// Set once.
	frameIn  int64 // the frame's first byte in the object
	outBase  int64 // the frame's first output byte in the tar stream
	window   int64
	checksum bool
	feedc    chan []byte   // to the walker's goroutine; nil without one
	free     chan []byte   // chunk buffers back from it
	done     chan struct{} // closed when it has returned

	mu     sync.Mutex
	bounds []zstdBoundary // guarded by mu: walked, oldest first
	failed bool           // guarded by mu: the walker failed

	// The pass's side.
	skip    int           // frame header bytes still to pass over
	stopped bool          // feedc is closed
	sum     xxhash.Digest // of the frame's output so far (checksum frames)
	snaps   []sumSnap     // of sum, oldest first, every zstdSnapBytes
	recent  recentOutput  // the latest output, at tar stream offsets
	dead    bool          // no resume points in this frame (recent released)
}

// sumSnap is the frame's XXH64 state at a tar stream offset.
type sumSnap struct {
	off int64
	sum xxhash.Digest
}

const (
	// zstdTrackChunks bounds the chunks queued for the walker.
	zstdTrackChunks = 8
	// zstdTrackChunk is their size: the decoder is handed at most that
	// in one read.
	zstdTrackChunk = 256 << 10
	// zstdTrackSlack is how far the output may run past a resume
	// point's boundary and still find its window: a member whose data
	// is longer leaves the previous resume point, if any.
	zstdTrackSlack = 16 << 20
	// zstdMaxBounds bounds the boundaries listed: the oldest go first
	// (hostile frames of tiny blocks only lose resume points).
	zstdMaxBounds = 1 << 14
	// zstdSnapBytes is the output between snapshots of the frame's XXH64.
	zstdSnapBytes = 1 << 20
)

// newZstdTracker starts following the frame at frameIn, whose header h
// (and window size window) the pass parsed; outBase is its first output
// byte in the tar stream and span the pass's. It returns nil when the
// frame cannot be resumed inside. Its goroutine runs until stop.
func newZstdTracker(h zstdFrame, window, frameIn, outBase, span int64) *zstdTracker {
	if window <= 0 || window > zstdMaxResumeWindow {
		return nil
	}
	t := &zstdTracker{skip: h.headerLen, frameIn: frameIn, outBase: outBase, window: window, checksum: h.checksum}
	t.sum.Reset()
	t.start(newZstdWalker(h.headerLen, window, t.bound), span)
	return t
}

// resumedZstdTracker continues following a frame (at frameIn in the
// object, its output at frameOut in the tar stream) from a resume point:
// the walker from its state, the checksum from its digest, the window
// ring from window. Without points (the pass keeps no partial index), it
// only continues the checksum, and runs no goroutine.
func resumedZstdTracker(p *zstdResumePoint, cp Checkpoint, frameIn, frameOut, span int64, window []byte, points bool) *zstdTracker {
	t := &zstdTracker{frameIn: frameIn, outBase: frameOut, window: p.window, checksum: p.checksum}
	t.sum.Reset()
	if p.checksum {
		t.sum.UnmarshalBinary(p.sum) // checked by unmarshalZstdResumePoint
	}
	if !points {
		t.dead = true
		return t
	}
	w := newZstdWalker(0, p.window, t.bound)
	w.at = zstdBoundary{in: int64(cp.In) - frameIn, out: int64(cp.Out) - frameOut, state: p.state}
	t.start(w, span)
	t.recent.write(window, int64(cp.Out)-int64(len(window)))
	t.snaps = append(t.snaps, sumSnap{int64(cp.Out), t.sum})
	return t
}

// start runs the walker w on a goroutine of its own.
func (t *zstdTracker) start(w *zstdWalker, span int64) {
	t.recent = recentOutput{size: int(t.window + max(zstdTrackSlack, 2*span))}
	t.feedc = make(chan []byte, zstdTrackChunks)
	t.free = make(chan []byte, zstdTrackChunks+1)
	t.done = make(chan struct{})
	go func() {
		defer close(t.done)
		ok := true
		for b := range t.feedc {
			if ok && w.write(b) != nil {
				ok = false
				t.mu.Lock()
				t.failed = true
				t.mu.Unlock()
			}
			select {
			case t.free <- b[:0]:
			default:
			}
		}
	}()
}

// bound is told of each boundary the walker passes, on its goroutine.
func (t *zstdTracker) bound(b zstdBoundary) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.bounds) >= zstdMaxBounds {
		t.bounds = append(t.bounds[:0], t.bounds[len(t.bounds)/2:]...)
	}
	t.bounds = append(t.bounds, b)
}

// feed takes the frame's next bytes as the decoder is handed them.
func (t *zstdTracker) feed(p []byte) {
	if t.skip > 0 {
		k := min(t.skip, len(p))
		t.skip -= k
		p = p[k:]
	}
	for len(p) > 0 && !t.stopped && !t.dead {
		var b []byte
		select {
		case b = <-t.free:
		default:
			b = make([]byte, 0, zstdTrackChunk)
		}
		k := min(len(p), zstdTrackChunk)
		t.feedc <- append(b, p[:k]...)
		p = p[k:]
	}
}

// stop ends the walker's goroutine, once it has walked what it was fed,
// and waits for it. It is idempotent; only the pass calls it.
func (t *zstdTracker) stop() {
	if t.feedc != nil && !t.stopped {
		t.stopped = true
		close(t.feedc)
		<-t.done
	}
}

// output takes the frame's output p at tar stream offset at.
func (t *zstdTracker) output(p []byte, at int64) {
	if t.checksum {
		if !t.dead && (len(t.snaps) == 0 || at-t.snaps[len(t.snaps)-1].off >= zstdSnapBytes) {
			t.snapshot(at)
		}
		t.sum.Write(p)
	}
	if !t.dead {
		t.recent.write(p, at)
	}
}

// snapshot keeps the XXH64 state at at, dropping the ones whose bytes
// to a later point the ring no longer holds.
func (t *zstdTracker) snapshot(at int64) {
	k := 0
	for k+1 < len(t.snaps) && t.snaps[k+1].off <= t.recent.start {
		k++
	}
	t.snaps = append(t.snaps[:0], t.snaps[k:]...)
	t.snaps = append(t.snaps, sumSnap{at, t.sum})
}

// point returns the resume point at the latest boundary at or before off
// (a member start) whose window the ring holds: its checkpoint (window
// and pass state included), or false. spanStart returns the offset the
// recorder's span hash starts at, for a boundary at out (false: none
// that the ring can give). It stops the walker.
func (t *zstdTracker) point(off int64, spanStart func(out int64) (int64, bool), localFrom, localIn int64) (Checkpoint, bool) {
	t.stop()
	if t.dead || t.feedc == nil {
		return Checkpoint{}, false
	}
	t.mu.Lock()
	bounds, failed := t.bounds, t.failed
	t.mu.Unlock()
	_ = failed // boundaries listed before the walker failed stand
	for i := len(bounds) - 1; i >= 0; i-- {
		b := bounds[i]
		out := t.outBase + b.out
		if out > off {
			continue
		}
		n := min(t.window, b.out)
		from, ok := spanStart(out)
		if !ok || n > 0 && !t.recent.holds(out-n, n) || out > from && !t.recent.holds(from, out-from) {
			return Checkpoint{}, false // older ones are further back
		}
		cp, ok := t.checkpoint(b, out, n, from, localFrom, localIn)
		if ok {
			return cp, true
		}
	}
	return Checkpoint{}, false
}

// checkpoint makes the resume point at boundary b (at tar offset out),
// whose window is the n bytes before it and whose span began at from.
func (t *zstdTracker) checkpoint(b zstdBoundary, out, n, from, localFrom, localIn int64) (Checkpoint, bool) {
	p := &zstdResumePoint{window: t.window, checksum: t.checksum, state: b.state}
	if t.checksum {
		k := len(t.snaps) - 1
		for k >= 0 && t.snaps[k].off > out {
			k--
		}
		if k < 0 || out > t.snaps[k].off && !t.recent.holds(t.snaps[k].off, out-t.snaps[k].off) {
			return Checkpoint{}, false
		}
		sum := t.snaps[k].sum
		t.hashRing(&sum, t.snaps[k].off, out)
		p.sum, _ = sum.MarshalBinary()
	}
	var span xxhash.Digest
	span.Reset()
	t.hashRing(&span, from, out)
	win := make([]byte, n)
	t.recent.readAt(win, out-n)
	cw, err := compressWindow(win)
	if err != nil {
		return Checkpoint{}, false
	}
	spanState, _ := span.MarshalBinary()
	e := &encoder{}
	e.raw(string(p.marshal()))
	e.raw(string(spanState))
	e.uvarint(uint64(t.frameIn))
	e.uvarint(uint64(t.outBase))
	e.uvarint(uint64(localFrom))
	e.uvarint(uint64(localIn))
	return Checkpoint{Kind: kindZstdBlock, In: CompressedOffset(t.frameIn + b.in), Out: UncompressedOffset(out),
		window: cw, pass: e.buf}, true
}

// hashRing writes the ring's bytes [from, to) to d.
func (t *zstdTracker) hashRing(d *xxhash.Digest, from, to int64) {
	var buf [64 << 10]byte
	for from < to {
		n := min(int64(len(buf)), to-from)
		t.recent.readAt(buf[:n], from)
		d.Write(buf[:n])
		from += n
	}
}

// zstdBlockState is what a kindZstdBlock checkpoint's pass state holds
// (zstdTracker.checkpoint).
type zstdBlockState struct {
	point              *zstdResumePoint
	span               xxhash.Digest // the recorder's span hash at the checkpoint
	frameIn, frameOut  int64         // where the frame starts in the object, and its output in the tar stream
	localFrom, localIn int64
}

func decodeZstdBlockState(cp Checkpoint) (*zstdBlockState, error) {
	d := &decoder{buf: cp.pass}
	point, span := d.raw("zstd state"), d.raw("span hash")
	s := &zstdBlockState{frameIn: int64(d.uvarint("frame")), frameOut: int64(d.uvarint("frame output")),
		localFrom: int64(d.uvarint("local from")), localIn: int64(d.uvarint("local in"))}
	if d.err != nil || d.pos != len(d.buf) || s.span.UnmarshalBinary([]byte(span)) != nil ||
		s.frameIn > int64(cp.In) || s.frameOut > int64(cp.Out) || s.localFrom > int64(cp.Out) {
		return nil, fmt.Errorf("%w: damaged zstd resume point", ErrCorrupt)
	}
	var err error
	if s.point, err = unmarshalZstdResumePoint([]byte(point)); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	return s, nil
}
