package index

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// A zstd stream is a sequence of frames:
//
//	zstd frame       magic 28 b5 2f fd | descriptor | [window] | [dict id] | [content size] |
//	                 blocks: 3-byte header (last, type, size) + body ... | [checksum, 4 bytes]
//	skippable frame  magic 5? 2a 4d 18 | u32 LE size | size bytes
//
// Every zstd frame starts with empty history, so a frame start is a
// checkpoint that needs no window. The walker below finds frame and block
// boundaries from headers alone; klauspost/compress decodes the frames.

// zstdFrame describes a frame header.
type zstdFrame struct {
	skippable   bool
	headerLen   int   // bytes before the first block (zstd) or of the header (skippable)
	size        int64 // skippable: payload length
	contentSize int64 // decoded size, -1 when the header does not say
	checksum    bool
}

var errNeedMore = errors.New("index: need more bytes")

// parseZstdFrame parses the frame header at the start of b. It returns
// errNeedMore when b is too short to tell.
func parseZstdFrame(b []byte) (zstdFrame, error) {
	var f zstdFrame
	if len(b) < 4 {
		return f, errNeedMore
	}
	magic := binary.LittleEndian.Uint32(b)
	if isSkippable(magic) {
		if len(b) < 8 {
			return f, errNeedMore
		}
		f.skippable = true
		f.headerLen = 8
		f.size = int64(binary.LittleEndian.Uint32(b[4:]))
		return f, nil
	}
	if magic != zstdMagic {
		return f, fmt.Errorf("%w: not a zstd frame (magic %08x)", ErrCorrupt, magic)
	}
	if len(b) < 5 {
		return f, errNeedMore
	}
	fhd := b[4]
	if fhd&0x08 != 0 {
		return f, fmt.Errorf("%w: zstd frame header has its reserved bit set", ErrCorrupt)
	}
	single := fhd&0x20 != 0
	f.checksum = fhd&0x04 != 0
	n := 5
	if !single {
		n++ // window descriptor
	}
	n += [4]int{0, 1, 2, 4}[fhd&3]
	fcsLen := [4]int{0, 2, 4, 8}[fhd>>6]
	if fcsLen == 0 && single {
		fcsLen = 1
	}
	if len(b) < n+fcsLen {
		return f, errNeedMore
	}
	f.contentSize = -1
	switch fcsLen {
	case 1:
		f.contentSize = int64(b[n])
	case 2:
		f.contentSize = int64(binary.LittleEndian.Uint16(b[n:])) + 256
	case 4:
		f.contentSize = int64(binary.LittleEndian.Uint32(b[n:]))
	case 8:
		f.contentSize = int64(binary.LittleEndian.Uint64(b[n:]))
		if f.contentSize < 0 {
			return f, fmt.Errorf("%w: zstd frame content size too large", ErrCorrupt)
		}
	}
	f.headerLen = n + fcsLen
	return f, nil
}

// zstdBlockBody returns the number of bytes after a block header: the
// body of a raw or compressed block, one byte for RLE.
func zstdBlockBody(h uint32) (body int64, last bool, err error) {
	last = h&1 != 0
	size := int64(h >> 3)
	switch (h >> 1) & 3 {
	case 0, 2:
		if size > 128<<10 {
			return 0, false, fmt.Errorf("%w: zstd block of %d bytes", ErrCorrupt, size)
		}
		return size, last, nil
	case 1:
		return 1, last, nil
	}
	return 0, false, fmt.Errorf("%w: reserved zstd block type", ErrCorrupt)
}

// countingReader is a buffered reader that knows its offset in the object.
type countingReader struct {
	br  *bufio.Reader
	off int64
}

func newCountingReader(r io.Reader, off int64) *countingReader {
	return &countingReader{br: bufio.NewReaderSize(r, 256<<10), off: off}
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.br.Read(p)
	c.off += int64(n)
	return n, err
}

// peek returns the next n bytes, or fewer at the end of the stream.
func (c *countingReader) peek(n int) []byte {
	b, _ := c.br.Peek(n)
	return b
}

func (c *countingReader) discard(n int64) error {
	for n > 0 {
		k := int(min(n, 1<<30))
		d, err := c.br.Discard(k)
		c.off += int64(d)
		n -= int64(d)
		if err != nil {
			return err
		}
	}
	return nil
}

// zstdFrameReader yields exactly one zstd frame (header, blocks and
// checksum) from its countingReader, then io.EOF.
type zstdFrameReader struct {
	cr       *countingReader
	remain   int64 // bytes left in the current piece
	state    int
	checksum bool
	tee      func([]byte) // if set, sees every byte read
}

const (
	zfBlocks = iota
	zfChecksum
	zfDone
)

func (f *zstdFrameReader) reset(cr *countingReader, h zstdFrame, tee func([]byte)) {
	*f = zstdFrameReader{cr: cr, remain: int64(h.headerLen), checksum: h.checksum, tee: tee}
}

func (f *zstdFrameReader) Read(p []byte) (int, error) {
	for f.remain == 0 {
		switch f.state {
		case zfDone:
			return 0, io.EOF
		case zfChecksum:
			f.state = zfDone
			if f.checksum {
				f.remain = 4
			}
			continue
		}
		h := f.cr.peek(3)
		if len(h) < 3 {
			return 0, fmt.Errorf("%w: zstd frame cut short", ErrCorrupt)
		}
		body, last, err := zstdBlockBody(uint32(h[0]) | uint32(h[1])<<8 | uint32(h[2])<<16)
		if err != nil {
			return 0, err
		}
		f.remain = 3 + body
		if last {
			f.state = zfChecksum
		}
	}
	if int64(len(p)) > f.remain {
		p = p[:f.remain]
	}
	n, err := f.cr.Read(p)
	f.remain -= int64(n)
	if f.tee != nil && n > 0 {
		f.tee(p[:n])
	}
	if err == io.EOF {
		if f.remain > 0 {
			err = fmt.Errorf("%w: zstd frame cut short", ErrCorrupt)
		} else {
			err = nil
		}
	}
	return n, err
}

// maxFrameSpan is the largest zstd frame served by decoding it whole for
// a read (32 MiB with the default span); bigger frames are served from
// the local decoded copy.
func maxFrameSpan(span int64) int64 { return 8 * span }

// zstdPass decodes a zstd stream frame by frame in the index pass. Frame
// starts become checkpoints (one per span's worth of output at most);
// frames too big to decode per read go to the local copy instead. When
// the pass keeps a partial index (recorder.midPoints), such a frame is
// followed by a zstdTracker, so that a pass stopped inside it can resume
// at a block boundary (kindZstdBlock); a pass resumed there decodes
// the rest of the frame with a dictionary decoder of its own (rdec) and
// checks the frame's checksum itself.
//
// Each frame is decoded on a goroutine of its own (pipe), so that
// decoding overlaps what the pass does with the output; the frame
// headers, the recorder and the tracker stay on the reader's goroutine.
// The tracker is handed the frame's bytes as the decoder reads them:
// copied, and queued as pipe marks, so that it sees them where it would
// have in a Read on the reader's goroutine (zstdTracker's comment).
type zstdPass struct {
	cr     *countingReader
	rec    *recorder
	pipe   *pipe         // decodes the current frame, its output going to take
	dec    *zstd.Decoder // read by the pipe's goroutine while a frame is decoded
	rdec   *zstd.Decoder // decodes the frame resumed at a block boundary, until its end
	feeds  sync.Pool     // *[]byte: copies of frame bytes for the tracker
	fr     zstdFrameReader
	tr     *zstdTracker // follows the current frame (nil: not followed)
	due    int64        // the latest resume point written, at this tar offset (pointWritten)
	lazy   bool         // trackers keep output only before the next resume point comes due (keepLess)
	inData bool         // a data frame is being decoded
	big    int64        // frames bigger than this are local
	forced bool         // the next frame start must be a checkpoint
	end    int64        // end of the last data frame
	frames int
	err    error
}

// newZstdPassAt resumes the index pass at cp: the start of a frame, or
// a block boundary inside one (kindZstdBlock, with window the output
// before it); r yields the stream from cp.In on.
func newZstdPassAt(r io.Reader, cp Checkpoint, window []byte, rec *recorder) (*zstdPass, error) {
	if cp.Kind != kindFrame && cp.Kind != kindZstdBlock {
		return nil, fmt.Errorf("%w: a zstd pass resumes at a frame start or block boundary, not at checkpoint kind %d", ErrUnsupported, cp.Kind)
	}
	z, err := newZstdPass(r, rec)
	if err != nil {
		return nil, err
	}
	z.cr.off, z.frames = int64(cp.In), 1
	if cp.Kind == kindZstdBlock {
		if err := z.resumeInFrame(cp, window); err != nil {
			z.dec.Close()
			return nil, err
		}
	}
	return z, nil
}

// resumeInFrame continues the frame that cp lies in, at its block
// boundary: the recorder goes on with the frame's kindLocal spans.
func (z *zstdPass) resumeInFrame(cp Checkpoint, window []byte) error {
	s, err := decodeZstdBlockState(cp)
	if err != nil {
		return err
	}
	if want := min(s.point.window, int64(cp.Out)); int64(len(window)) != want {
		return fmt.Errorf("%w: zstd resume point with a window of %d bytes, want %d", ErrCorrupt, len(window), want)
	}
	rec := z.rec
	rec.toLocal, rec.localSpans, rec.localFrom, rec.localIn = true, true, s.localFrom, s.localIn
	rec.hash = s.span
	// The tracker continues the frame's checksum, and its resume
	// points when the pass keeps a partial index.
	z.tr = resumedZstdTracker(s.point, cp, s.frameIn, s.frameOut, window, rec, rec.midPoints)
	z.due = int64(cp.Out)
	if z.rdec, err = s.point.resume(z.cr, window, z.feedLater(z.tr)); err != nil {
		return fmt.Errorf("%w: resume zstd frame at %d: %w", ErrCorrupt, cp.In, err)
	}
	z.inData = true
	z.pipe.restart(z.rdec)
	return nil
}

func newZstdPass(r io.Reader, rec *recorder) (*zstdPass, error) {
	// Windows up to 128 MiB, as the zstd CLI accepts without --memory.
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(false), zstd.WithDecoderMaxWindow(128<<20))
	if err != nil {
		return nil, err
	}
	z := &zstdPass{cr: newCountingReader(r, 0), rec: rec, dec: dec, big: maxFrameSpan(rec.span)}
	z.pipe = newPipe(rec.out, z.take, rec.idle)
	return z, nil
}

// feedLater returns the tee through which tr sees the frame's bytes: on
// the pipe's goroutine, as the decoder reads them, it queues a copy for
// tr.feed on the reader's goroutine.
func (z *zstdPass) feedLater(tr *zstdTracker) func([]byte) {
	return func(p []byte) {
		b, _ := z.feeds.Get().(*[]byte)
		if b == nil {
			b = new([]byte)
		}
		*b = append((*b)[:0], p...)
		z.pipe.mark(z.pipe.position(), func() {
			tr.feed(*b)
			z.feeds.Put(b)
		})
	}
}

// close stops the goroutine decoding the current frame, if any.
func (z *zstdPass) close() {
	z.pipe.close()
	z.dec.Close()
	if z.rdec != nil {
		z.rdec.Close()
	}
}

// nextFrame moves to the next data frame, skipping skippable ones. It
// returns io.EOF at the end of the stream.
func (z *zstdPass) nextFrame() error {
	for {
		start := z.cr.off
		b := z.cr.peek(18)
		if len(b) == 0 {
			return io.EOF
		}
		h, err := parseZstdFrame(b)
		if err == errNeedMore {
			return fmt.Errorf("%w: zstd stream cut short at %d", ErrCorrupt, start)
		}
		if err != nil {
			if z.frames > 0 {
				return fmt.Errorf("%w: data after the last zstd frame at %d", ErrCorrupt, start)
			}
			return err
		}
		if h.skippable {
			if err := z.cr.discard(8 + h.size); err != nil {
				return fmt.Errorf("%w: skippable frame cut short at %d", ErrCorrupt, start)
			}
			continue
		}
		z.frames++
		rec := z.rec
		if z.forced || rec.due() {
			rec.mark(Checkpoint{Kind: kindFrame, In: CompressedOffset(start), Out: UncompressedOffset(rec.out)})
		}
		z.forced = false
		switch {
		case h.contentSize > z.big:
			rec.beginLocal(start)
		case h.contentSize < 0:
			rec.beginTentative(start)
		}
		var tee func([]byte)
		z.tr = nil
		if rec.midPoints && (h.contentSize > z.big || h.contentSize < 0) {
			if z.tr = newZstdTracker(h, zstdWindowSize(b, h), start, rec); z.tr != nil {
				tee = z.feedLater(z.tr)
				z.ringFrom()
			}
		}
		z.fr.reset(z.cr, h, tee)
		if err := z.dec.Reset(&z.fr); err != nil {
			return err
		}
		z.inData = true
		z.pipe.restart(z.dec)
		return nil
	}
}

// endFrame closes the frame just decoded.
func (z *zstdPass) endFrame() {
	rec := z.rec
	z.end = z.cr.off
	z.inData = false
	z.tr = nil
	switch {
	case rec.localSpans:
		rec.endLocal()
		z.forced = true
	case rec.tentative:
		rec.endTentative()
	}
}

func (z *zstdPass) Read(p []byte) (int, error) {
	if z.err != nil {
		return 0, z.err
	}
	for {
		if !z.inData {
			if err := z.nextFrame(); err != nil {
				z.err = err
				return 0, err
			}
		}
		// take has seen what the pipe hands out.
		n, err := z.pipe.Read(p)
		if err == io.EOF && z.rdec != nil {
			err = z.endResumed()
		}
		if err == io.EOF {
			z.endFrame()
			if n > 0 {
				return n, nil
			}
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				err = fmt.Errorf("%w: zstd: %v", ErrCorrupt, err)
			}
			z.err = err
			return n, z.err
		}
		return n, nil
	}
}

// take hands decoded bytes to the recorder, and the tracker.
func (z *zstdPass) take(p []byte) {
	rec := z.rec
	if z.tr != nil {
		z.tr.output(p, rec.out)
	}
	rec.write(p)
	if rec.tentative && rec.out-rec.localFrom > z.big {
		rec.promote()
	}
}

// endResumed ends the frame resumed at a block boundary: its checksum, if
// it has one, is checked against the XXH64 continued from there. It
// returns io.EOF when the frame is good.
func (z *zstdPass) endResumed() error {
	t := z.tr
	z.rdec.Close()
	z.rdec = nil
	if t.checksum {
		b := z.cr.peek(4)
		if len(b) < 4 {
			return fmt.Errorf("%w: zstd frame cut short before its checksum", ErrCorrupt)
		}
		if binary.LittleEndian.Uint32(b) != uint32(t.sum.Sum64()) {
			return fmt.Errorf("%w: zstd frame checksum mismatch after resuming at a block", ErrCorrupt)
		}
		z.cr.discard(4)
	}
	return io.EOF
}

// memberAt is told that a member starts at tar offset off (partialLog).
func (z *zstdPass) memberAt(off int64) {
	if z.tr != nil {
		z.tr.at(off)
	}
}

// midPoint returns a resume point inside the frame being decoded, at the
// block boundary the tracker chose, or false.
func (z *zstdPass) midPoint() (Checkpoint, bool) {
	if z.tr == nil || !z.rec.localSpans {
		return Checkpoint{}, false
	}
	return z.tr.point(z.rec.localFrom, z.rec.localIn)
}

// latestPoint returns a resume point at one of the newest block
// boundaries of the frame being decoded, or false.
func (z *zstdPass) latestPoint() (Checkpoint, bool) {
	if z.tr == nil || !z.rec.localSpans {
		return Checkpoint{}, false
	}
	return z.tr.latest(z.rec.localFrom, z.rec.localIn)
}

// pointWritten is told that the partial log wrote a resume point at tar
// offset off: the tracker keeps output for the next one from then on.
func (z *zstdPass) pointWritten(off int64) {
	z.due = off
	z.ringFrom()
}

// keepLess makes the trackers keep output only before a resume point
// comes due: a pass whose stop-time point would wait for its caller
// (BuildOptions.Holds) gains little from one, and copying every byte
// costs about a twentieth of a one-pass extraction's CPU.
func (z *zstdPass) keepLess() {
	z.lazy = true
	z.ringFrom()
}

// ringFrom tells the current tracker where to keep output from.
func (z *zstdPass) ringFrom() {
	if z.lazy && z.tr != nil {
		z.tr.ringFrom(z.dueAt())
	}
}

// dueAt is where the next mid point comes due at the earliest, after
// one at z.due: partialLog.midDue's rule.
func (z *zstdPass) dueAt() int64 {
	every := z.midEvery()
	if every == 0 {
		return math.MaxInt64
	}
	return max(z.due+every, (4*z.due+2)/3)
}

// midEvery is how far apart mid points written as the pass goes are:
// 16 spans, and 32 windows, so that compressing the window for each
// costs a few percent of the decoding.
func (z *zstdPass) midEvery() int64 {
	if z.tr == nil || z.tr.dead {
		return 0
	}
	return max(16*z.rec.span, 32*z.tr.window)
}

func (z *zstdPass) finish() (int64, int64, error) {
	if _, err := io.Copy(io.Discard, z); err != nil && err != io.EOF {
		return 0, 0, err
	}
	if z.err != nil && z.err != io.EOF {
		return 0, 0, z.err
	}
	if z.frames == 0 {
		return 0, 0, fmt.Errorf("%w: zstd stream without a data frame", ErrCorrupt)
	}
	return z.rec.out, z.end, nil
}

// zstdSpanDecoders are streaming decoders kept for reuse by span reads:
// unlike DecodeAll, they never size their output by what a (possibly
// damaged) frame header claims.
var zstdSpanDecoders sync.Pool

// decodeZstdSpan decodes the frames in comp, which start at a frame
// boundary, into exactly size bytes.
func decodeZstdSpan(comp []byte, _ Checkpoint, _ []byte, _, size int64, buf []byte) ([]byte, error) {
	dec, _ := zstdSpanDecoders.Get().(*zstd.Decoder)
	if dec == nil {
		var err error
		dec, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(128<<20))
		if err != nil {
			return nil, err
		}
	}
	defer zstdSpanDecoders.Put(dec)
	if err := dec.Reset(bytes.NewReader(comp)); err != nil {
		return nil, err
	}
	out, err := readSpan(dec, size, buf)
	if err != nil {
		return nil, err
	}
	var one [1]byte
	if n, _ := dec.Read(one[:]); n > 0 {
		return nil, fmt.Errorf("frames decode to more than %d bytes", size)
	}
	return out, nil
}
