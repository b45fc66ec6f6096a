package index

import (
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"
)

// zstdTracker follows, in the index pass, a zstd frame that is served
// from the decoded copy (too big to decode per read), so that a pass
// stopped inside it leaves a resume point at a block boundary
// (kindZstdBlock) rather than none.
//
// Decoding a block's sequences costs about what decoding the block does,
// so the pass does not: its walker (zstdwalk.go) runs lazily, on the
// bytes the decoder is handed, and follows only the literals' and
// sequences' headers (the tables in force). The repeat offsets at a
// boundary are found when the pass stops, by decoding the sequences of
// the blocks just before it, kept for that, from unknown offsets
// (symRep) until the last block's leave none unknown: a few new offsets
// in a block settle them all.
//
// Where a boundary lies in the output needs no decoding either: with
// concurrency 1, klauspost/compress decodes a block only in a Read that
// has returned nothing yet, so when the decoder is handed the next
// block's bytes, the pass has taken all the output before the boundary
// (rec.out). The frame's XXH64 and the recorder's span hash are taken
// there; the pass keeps its latest output (the window plus
// zstdTrackSlack) for the window. It all runs on the pass's goroutine:
// the decoder runs on the pipe's, and hands the tracker the bytes it
// reads as pipe marks at the output offset of the Read that reads them
// (zstdPass.feedLater), so that feed sees them where it would have.
type zstdTracker struct {
	// Set once.
	rec       *recorder
	frameIn   int64 // the frame's first byte in the object
	outBase   int64 // the frame's first output byte in the tar stream
	window    int64
	checksum  bool
	w         *zstdWalker
	startReps [3]uint32 // the repeat offsets where it started following the frame

	skip    int           // frame header bytes still to pass over
	blocks  int64         // boundaries walked
	pending *zstdMark     // the boundary after the block just walked, until its output is taken
	lastOut int64         // where the latest boundary placed lies in the tar stream
	marks   []zstdMark    // boundaries placed, oldest first: before best, best, after it
	best    int           // index in marks of the latest at or before the latest member start (-1: none)
	sum     xxhash.Digest // of the frame's output so far (checksum frames)
	recent  recentOutput  // the latest output, at tar stream offsets (without copy)
	copy    io.ReaderAt   // the decoded copy the recorder writes, where windows are read instead, if any
	keep    int64         // the ring keeps output from this tar offset on (ringFrom; 0: all)
	dead    bool          // no resume points in this frame
	free    [][]byte      // sequence bit buffers of dropped marks, for reuse
}

// zstdMark is a block boundary of the frame, with the pass's state there
// and the sequences of the block before it.
type zstdMark struct {
	n     int64 // the boundary's number in the frame
	in    int64 // the next block's header in the object
	out   int64 // in the tar stream
	state zstdState
	seqs  zstdSeqs // of the block before (bits copied); n 0 for none
	sum   xxhash.Digest
	span  xxhash.Digest
	local bool  // the recorder cut kindLocal spans there
	raw   int64 // the block before decoded to that many bytes, raw or RLE (-1: compressed)
}

const (
	// zstdTrackSlack is how far the output may run past a resume
	// point's boundary and still find its window: inside a member whose
	// data is longer, the resume point is at one of the newest
	// boundaries instead (latest).
	zstdTrackSlack = 16 << 20
	// zstdKeepMarks is how many blocks with sequences are kept before
	// the best boundary and after it (the newest): those whose
	// sequences settle the repeat offsets.
	zstdKeepMarks = 16
	// zstdMaxMarks bounds the boundaries kept after the best one.
	zstdMaxMarks = 1 << 14
)

// newZstdTracker starts following the frame at frameIn, whose header h
// (and window size window) the pass parsed, for the recorder rec (its
// output stands at the frame's start). It returns nil when the frame
// cannot be resumed inside.
func newZstdTracker(h zstdFrame, window, frameIn int64, rec *recorder) *zstdTracker {
	if window <= 0 || window > zstdMaxResumeWindow {
		return nil
	}
	t := &zstdTracker{rec: rec, skip: h.headerLen, frameIn: frameIn, outBase: rec.out, window: window, checksum: h.checksum,
		best: -1, startReps: [3]uint32{1, 4, 8}}
	t.sum.Reset()
	t.lastOut = rec.out
	t.w = newZstdWalker(h.headerLen, window, t.bound)
	t.w.lazy = true
	t.keepOutput(rec)
	return t
}

// keepOutput sets up where the windows of resume points come from: the
// decoded copy the recorder writes, when it can be read, else a ring of
// the latest output (the window plus zstdTrackSlack), which costs a copy
// of every byte.
func (t *zstdTracker) keepOutput(rec *recorder) {
	if c, ok := rec.local.(io.ReaderAt); ok {
		t.copy = c
		return
	}
	t.recent = recentOutput{size: int(t.window + max(zstdTrackSlack, 2*rec.span))}
}

// resumedZstdTracker continues following a frame (at frameIn in the
// object, its output at frameOut in the tar stream) from a resume point:
// the walker from its state, the checksum from its digest, the window
// ring from window. Without points (the pass keeps no partial index), it
// only continues the checksum.
func resumedZstdTracker(p *zstdResumePoint, cp Checkpoint, frameIn, frameOut int64, window []byte, rec *recorder, points bool) *zstdTracker {
	t := &zstdTracker{rec: rec, frameIn: frameIn, outBase: frameOut, window: p.window, checksum: p.checksum, best: -1,
		startReps: p.state.reps}
	t.sum.Reset()
	if p.checksum {
		t.sum.UnmarshalBinary(p.sum) // checked by unmarshalZstdResumePoint
	}
	if !points {
		t.dead = true
		return t
	}
	t.lastOut = int64(cp.Out)
	t.w = newZstdWalker(0, p.window, t.bound)
	t.w.lazy = true
	t.w.at = zstdBoundary{in: int64(cp.In) - frameIn, out: int64(cp.Out) - frameOut, state: p.state}
	t.keepOutput(rec)
	t.recent.write(window, int64(cp.Out)-int64(len(window)))
	return t
}

// feed takes the frame's next bytes as the decoder is handed them.
func (t *zstdTracker) feed(p []byte) {
	if t.dead {
		return
	}
	if t.pending != nil {
		// The decoder reads the next block: the output before it is
		// all taken.
		m := t.pending
		t.pending = nil
		m.out, m.sum, m.span, m.local = t.rec.out, t.sum, t.rec.hash, t.rec.localSpans
		// What the block decoded to must agree with what the walker
		// saw of it: else the decoder does not work as this relies on.
		if n := m.out - t.lastOut; n > zstdMaxBlock || m.raw >= 0 && n != m.raw || m.seqs.literals > int(n) {
			t.dead = true
			return
		}
		t.lastOut = m.out
		t.place(*m)
	}
	if t.skip > 0 {
		k := min(t.skip, len(p))
		t.skip -= k
		p = p[k:]
	}
	if len(p) > 0 && t.w.write(p) != nil {
		t.dead = true // the marks placed stand
	}
}

// bound is told of each boundary the walker passes (but the last).
func (t *zstdTracker) bound(b zstdBoundary) {
	t.blocks++
	seqs := t.w.seq
	seqs.bits = append(t.bitsBuf(), seqs.bits...)
	t.pending = &zstdMark{n: t.blocks, in: t.frameIn + b.in, state: b.state, seqs: seqs, raw: t.w.raw}
}

// bitsBuf returns a buffer for a mark's sequence bits: one a dropped
// mark left, else nil (a copy per block cost as much as walking it).
func (t *zstdTracker) bitsBuf() []byte {
	if n := len(t.free); n > 0 {
		b := t.free[n-1]
		t.free = t.free[:n-1]
		return b
	}
	return nil
}

// recycle keeps the bits buffer of a dropped mark for bitsBuf, a few.
func (t *zstdTracker) recycle(b []byte) {
	if b != nil && len(t.free) < 2*zstdKeepMarks {
		t.free = append(t.free, b[:0])
	}
}

// place adds a boundary. After the best one, it keeps those of the last
// zstdKeepMarks blocks with sequences (and the ones without between
// them), at most zstdMaxMarks.
func (t *zstdTracker) place(m zstdMark) {
	t.marks = append(t.marks, m)
	seqs := 0
	for _, m := range t.marks[t.best+1:] {
		if m.seqs.n > 0 {
			seqs++
		}
	}
	for seqs > zstdKeepMarks || len(t.marks)-(t.best+1) > zstdMaxMarks {
		if t.marks[t.best+1].seqs.n > 0 {
			seqs--
		}
		t.recycle(t.marks[t.best+1].seqs.bits)
		t.marks = append(t.marks[:t.best+1], t.marks[t.best+2:]...)
	}
}

// output takes the frame's output p at tar stream offset at.
func (t *zstdTracker) output(p []byte, at int64) {
	if t.checksum {
		t.sum.Write(p)
	}
	if !t.dead && t.copy == nil {
		if end := at + int64(len(p)); end > t.keep {
			k := max(t.keep-at, 0)
			t.recent.write(p[k:], at+k)
		}
	}
}

// ringFrom sets where the ring starts keeping output, given that the
// next resume point is asked for at tar offset due at the earliest (the
// partial log's rule): a window and the slack before it
// (zstdPass.keepLess). A stop outside that stretch keeps no mid point of
// its own: the pass resumes at the latest one written.
func (t *zstdTracker) ringFrom(due int64) {
	t.keep = due - int64(t.recent.size)
}

// at is told that a member starts at tar stream offset off: the latest
// boundary at or before it becomes the best, and the ones kept before it
// are those of the zstdKeepMarks blocks with sequences before it (and
// the ones without between them).
func (t *zstdTracker) at(off int64) {
	k := t.best
	for k+1 < len(t.marks) && t.marks[k+1].out <= off {
		k++
	}
	if k < 0 {
		return
	}
	drop, seqs := k, 0
	for drop > 0 && seqs < zstdKeepMarks {
		if t.marks[drop].seqs.n > 0 {
			seqs++
		}
		drop--
	}
	for _, m := range t.marks[:drop] {
		t.recycle(m.seqs.bits)
	}
	t.marks = append(t.marks[:0], t.marks[drop:]...)
	t.best = k - drop
}

// point returns the resume point at the best boundary: its checkpoint
// (window and pass state included), or false when there is none, its
// window is no longer held or the blocks kept before it do not settle its
// repeat offsets.
func (t *zstdTracker) point(localFrom, localIn int64) (Checkpoint, bool) {
	if t.dead || t.best < 0 {
		return Checkpoint{}, false
	}
	if t.copy != nil && t.lastOut-t.marks[t.best].out > zstdTrackSlack {
		// As the ring would have let it go: one of the newest
		// boundaries (latest) spares decoding the member again.
		return Checkpoint{}, false
	}
	return t.pointAt(t.best, localFrom, localIn)
}

// zstdLatestTries is how many of the newest boundaries latest tries.
const zstdLatestTries = 4

// latest returns a resume point at one of the newest boundaries placed
// after the best one (inside the data of the latest member, or past it),
// or false. A pass resumed there reads the tar stream from the member's
// start to the boundary from the decoded copy (Partial.ReadsLocal).
func (t *zstdTracker) latest(localFrom, localIn int64) (Checkpoint, bool) {
	if t.dead {
		return Checkpoint{}, false
	}
	for i := len(t.marks) - 1; i > t.best && i >= len(t.marks)-zstdLatestTries; i-- {
		if cp, ok := t.pointAt(i, localFrom, localIn); ok {
			return cp, true
		}
	}
	return Checkpoint{}, false
}

// pointAt returns the resume point at marks[i], or false when its window
// is no longer held or the blocks kept before it do not settle its
// repeat offsets.
func (t *zstdTracker) pointAt(i int, localFrom, localIn int64) (Checkpoint, bool) {
	m := t.marks[i]
	n := min(t.window, m.out-t.outBase)
	if !m.local || n > 0 && t.copy == nil && !t.recent.holds(m.out-n, n) {
		return Checkpoint{}, false
	}
	reps, ok := t.reps(i)
	if !ok {
		return Checkpoint{}, false
	}
	p := &zstdResumePoint{window: t.window, checksum: t.checksum, state: m.state}
	p.state.reps = reps
	if t.checksum {
		p.sum, _ = m.sum.MarshalBinary()
	}
	win := make([]byte, n)
	if t.copy == nil {
		t.recent.readAt(win, m.out-n)
	} else if k, err := t.copy.ReadAt(win, m.out-n); k < len(win) {
		if err != io.EOF {
			return Checkpoint{}, false
		}
		// Zeros the recorder left as holes past the copy's end.
		clear(win[k:])
	}
	cw, err := compressWindow(win)
	if err != nil {
		return Checkpoint{}, false
	}
	spanState, _ := m.span.MarshalBinary()
	e := &encoder{}
	e.raw(string(p.marshal()))
	e.raw(string(spanState))
	e.uvarint(uint64(t.frameIn))
	e.uvarint(uint64(t.outBase))
	e.uvarint(uint64(localFrom))
	e.uvarint(uint64(localIn))
	return Checkpoint{Kind: kindZstdBlock, In: CompressedOffset(m.in), Out: UncompressedOffset(m.out), window: cw, pass: e.buf}, true
}

// reps finds the repeat offsets at marks[i]: the sequences of the blocks
// before it, from the earliest kept in a row, decoded from unknown
// offsets, leave none unknown; or from the frame's start, whose offsets
// are known (1, 4, 8).
func (t *zstdTracker) reps(i int) ([3]uint32, bool) {
	var r revBits
	for from := i; from >= 0 && (from == i || t.marks[from].n == t.marks[from+1].n-1); from-- {
		if t.marks[from].seqs.n == 0 && t.marks[from].n != 1 {
			continue // changes nothing: look further back
		}
		reps := [3]symRep{{0, 0}, {1, 0}, {2, 0}}
		if t.marks[from].n == 1 {
			// The first block since it started following the frame.
			reps = [3]symRep{{-1, t.startReps[0]}, {-1, t.startReps[1]}, {-1, t.startReps[2]}}
		}
		ok := true
		for j := from; j <= i; j++ {
			if _, err := t.marks[j].seqs.decode(&r, &reps); err != nil {
				ok = false
				break
			}
		}
		if !ok {
			return [3]uint32{}, false
		}
		if reps[0].base < 0 && reps[1].base < 0 && reps[2].base < 0 {
			if reps[0].v == 0 || reps[1].v == 0 || reps[2].v == 0 {
				return [3]uint32{}, false
			}
			return [3]uint32{reps[0].v, reps[1].v, reps[2].v}, true
		}
	}
	return [3]uint32{}, false
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
