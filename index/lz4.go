package index

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/pierrec/lz4/v4"
)

// An lz4 stream is a sequence of frames:
//
//	frame        magic 04 22 4d 18 | FLG | BD | [content size, 8] | [dict id, 4] | HC |
//	             blocks: u32 LE size (bit 31: stored) + data + [xxh32, 4] ... |
//	             end mark 00 00 00 00 | [content xxh32, 4]
//	legacy frame magic 02 21 4c 18 | blocks: u32 LE size + data (8 MiB decoded each) ...
//	skippable    magic 5? 2a 4d 18 | u32 LE size | size bytes
//
// FLG: version (bits 7-6, 01), independent blocks (5), block checksum (4),
// content size (3), content checksum (2), dict id (0). Independent blocks
// (the lz4 CLI default) can each be decoded alone; linked blocks need the
// previous 64 KiB of output, which a checkpoint then carries.

const (
	lz4FlagIndependent = 1 << 5
	lz4FlagBlockSum    = 1 << 4
	lz4FlagSize        = 1 << 3
	lz4FlagContentSum  = 1 << 2
	lz4FlagDictID      = 1 << 0
	lz4WindowSize      = 64 << 10
	lz4LegacyBlock     = 8 << 20
	lz4MaxBlock        = 4 << 20
)

// lz4Decoder decodes an lz4 stream block by block. In the index pass (rec
// set) it reports a checkpoint at a frame or block start once a span's
// worth of output has passed and verifies every checksum; for a span it
// starts at a checkpoint and decodes what follows.
type lz4Decoder struct {
	cr  *countingReader
	rec *recorder // nil outside the index pass
	// In the pass, the pipe the decoder runs on (lz4Pass), and the
	// output offset of the latest checkpoint it marked (hasCP).
	pipe   *pipe
	lastCP int64
	hasCP  bool

	inFrame  bool
	legacy   bool
	flg      byte
	blockMax int
	content  xxh32 // of the frame's output (pass only)
	// maxOut bounds what a block decodes to: the span's size for a span
	// (which holds whole blocks), so that its buffers are no bigger.
	maxOut int

	comp []byte // the block as stored
	buf  []byte // history (linked blocks) then the block's output
	hist int    // bytes of history at the start of buf
	out  []byte // decoded bytes not yet handed out
	end  int64  // end of the last frame
	// frames counts the frames started; skipped the skippable ones.
	frames int
	// unchecked: the pass resumed in this frame without its content
	// hash so far, so its content checksum cannot be checked.
	unchecked bool
	err       error
}

// lz4Pass decodes an lz4 stream in the index pass on a goroutine of its
// own (pipe), which also checks the block and content checksums and
// chooses the checkpoints (lz4Decoder.checkpoint): the span digests,
// the checkpoints' recording and everything else the pass does with
// the output run on the reader's goroutine.
type lz4Pass struct {
	*pipe
	d *lz4Decoder // read by the pipe's goroutine until it ends
}

func newLZ4Pass(r io.Reader, rec *recorder) *lz4Pass {
	return startLZ4Pass(&lz4Decoder{cr: newCountingReader(r, 0), rec: rec, maxOut: lz4LegacyBlock})
}

// startLZ4Pass runs d, a pass decoder whose recorder stands where d
// starts, on a pipe.
func startLZ4Pass(d *lz4Decoder) *lz4Pass {
	p := &lz4Pass{pipe: newPipe(d.rec.out, d.rec.write, d.rec.idle), d: d}
	d.pipe = p.pipe
	if l := d.rec.last(); l != nil {
		d.lastCP, d.hasCP = int64(l.Out), true
	}
	p.start(d)
	return p
}

// newLZ4Span returns a decoder of the stream in comp, which starts at cp
// and decodes to size bytes.
func newLZ4Span(comp []byte, cp Checkpoint, window []byte, size int64) (*lz4Decoder, error) {
	d := &lz4Decoder{cr: newCountingReader(bytes.NewReader(comp), int64(cp.In)), maxOut: int(min(size, lz4LegacyBlock))}
	switch cp.Kind {
	case kindFrame:
	case kindLZ4Block:
		d.inFrame, d.flg, d.blockMax = true, cp.Flags, lz4MaxBlock
		if cp.Flags&lz4FlagIndependent == 0 {
			d.buf = make([]byte, lz4WindowSize+d.outMax())
			d.hist = copy(d.buf, window)
		}
	case kindLZ4Legacy:
		d.inFrame, d.legacy, d.blockMax = true, true, lz4LegacyBlock
	default:
		return nil, fmt.Errorf("checkpoint kind %d in an lz4 stream", cp.Kind)
	}
	return d, nil
}

// newLZ4PassAt resumes the index pass at cp, window the output before
// it; r yields the stream from cp.In on. In the middle of a frame, the
// pass state recorded at cp (lz4PassState) restores the frame's block
// size and content hash, so that its content checksum is still checked.
func newLZ4PassAt(r io.Reader, cp Checkpoint, window []byte, rec *recorder) (*lz4Pass, error) {
	d, err := newLZ4Span(nil, cp, window, lz4LegacyBlock)
	if err != nil {
		return nil, err
	}
	d.cr, d.rec = newCountingReader(r, int64(cp.In)), rec
	if d.inFrame {
		d.frames = 1
	}
	if cp.Kind == kindLZ4Block {
		d.unchecked = !d.setPassState(cp.pass)
	}
	return startLZ4Pass(d), nil
}

// passState is what a pass resumed at a block of the current frame
// needs: the frame's block size and the content hash so far.
func (d *lz4Decoder) passState() []byte {
	c := &d.content
	b := binary.LittleEndian.AppendUint32(nil, uint32(d.blockMax))
	for _, v := range c.v {
		b = binary.LittleEndian.AppendUint32(b, v)
	}
	b = binary.LittleEndian.AppendUint64(b, c.total)
	b = append(b, byte(c.n))
	return append(b, c.buf[:c.n]...)
}

// setPassState restores what passState recorded; false when st is not
// such a record.
func (d *lz4Decoder) setPassState(st []byte) bool {
	if len(st) < 29 || int(st[28]) > 15 || len(st) != 29+int(st[28]) {
		return false
	}
	bm := int(binary.LittleEndian.Uint32(st))
	if bm < 1<<16 || bm > lz4MaxBlock {
		return false
	}
	d.blockMax = bm
	c := &d.content
	for i := range c.v {
		c.v[i] = binary.LittleEndian.Uint32(st[4+4*i:])
	}
	c.total = binary.LittleEndian.Uint64(st[20:])
	c.n = copy(c.buf[:], st[29:])
	return true
}

// outMax returns the most bytes the next block may decode to.
func (d *lz4Decoder) outMax() int { return min(d.blockMax, d.maxOut) }

func (d *lz4Decoder) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: lz4 at %d: %s", ErrCorrupt, d.cr.off, fmt.Sprintf(format, args...))
}

func (d *lz4Decoder) readFull(p []byte) error {
	if _, err := io.ReadFull(d.cr, p); err != nil {
		return d.corrupt("stream cut short")
	}
	return nil
}

func (d *lz4Decoder) u32() (uint32, error) {
	var b [4]byte
	if err := d.readFull(b[:]); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[:]), nil
}

// checkpoint records a checkpoint at the current block when one is due:
// once the output before it has reached the recorder (a pipe mark).
func (d *lz4Decoder) checkpoint(kind byte, start int64) {
	rec := d.rec
	if rec == nil {
		return
	}
	// Every byte decoded before is handed out: the next one Read
	// returns is the block's first.
	at := d.pipe.position()
	if d.hasCP && at-d.lastCP < rec.span {
		return
	}
	d.lastCP, d.hasCP = at, true
	c := Checkpoint{Kind: kindFrame, In: CompressedOffset(start), Out: UncompressedOffset(at)}
	switch kind {
	case 'b':
		c.Kind, c.Flags, c.pass = kindLZ4Block, d.flg, d.passState()
		if d.flg&lz4FlagIndependent == 0 && d.hist > 0 {
			w, err := compressWindow(d.buf[max(0, d.hist-lz4WindowSize):d.hist])
			if err != nil {
				d.err = err
			}
			c.window = w
		}
	case 'l':
		c.Kind = kindLZ4Legacy
	}
	d.pipe.mark(at, func() { rec.mark(c) })
}

// frameHeader reads a frame descriptor after its magic.
func (d *lz4Decoder) frameHeader() error {
	var fb [2]byte
	if err := d.readFull(fb[:]); err != nil {
		return err
	}
	flg, bd := fb[0], fb[1]
	if flg>>6 != 1 || flg&0x02 != 0 || bd&0x8f != 0 {
		return d.corrupt("bad frame descriptor %02x %02x", flg, bd)
	}
	if flg&lz4FlagDictID != 0 {
		return d.corrupt("frames with a dictionary are not supported")
	}
	desc := []byte{flg, bd}
	if flg&lz4FlagSize != 0 {
		var sz [8]byte
		if err := d.readFull(sz[:]); err != nil {
			return err
		}
		desc = append(desc, sz[:]...)
	}
	var hc [1]byte
	if err := d.readFull(hc[:]); err != nil {
		return err
	}
	if want := byte(xxh32Sum(desc) >> 8); hc[0] != want {
		return d.corrupt("frame descriptor checksum mismatch")
	}
	bs := int(bd>>4) & 7
	if bs < 4 {
		return d.corrupt("bad block size code %d", bs)
	}
	d.flg, d.blockMax, d.inFrame, d.legacy = flg, 1<<(2*bs+8), true, false
	d.hist = 0
	if flg&lz4FlagIndependent == 0 && len(d.buf) < lz4WindowSize+d.outMax() {
		d.buf = make([]byte, lz4WindowSize+d.outMax())
	}
	d.content.reset()
	d.unchecked = false
	return nil
}

// next decodes the next block into d.out; io.EOF at the end.
func (d *lz4Decoder) next() error {
	for {
		start := d.cr.off
		if !d.inFrame {
			b := d.cr.peek(4)
			if len(b) == 0 {
				return io.EOF
			}
			if len(b) < 4 {
				return d.corrupt("stream cut short")
			}
			magic := binary.LittleEndian.Uint32(b)
			switch {
			case isSkippable(magic):
				d.cr.discard(4)
				n, err := d.u32()
				if err != nil {
					return err
				}
				if err := d.cr.discard(int64(n)); err != nil {
					return d.corrupt("skippable frame cut short")
				}
				continue
			case magic == lz4Magic:
				d.cr.discard(4)
				d.checkpoint('f', start)
				if err := d.frameHeader(); err != nil {
					return err
				}
				d.frames++
				continue
			case magic == lz4LegacyMagic:
				d.cr.discard(4)
				d.checkpoint('f', start)
				d.inFrame, d.legacy, d.blockMax = true, true, lz4LegacyBlock
				d.frames++
				continue
			}
			if d.frames > 0 {
				return d.corrupt("data after the last frame")
			}
			return d.corrupt("not an lz4 frame (magic %08x)", magic)
		}
		if d.legacy {
			b := d.cr.peek(4)
			if len(b) == 0 {
				d.inFrame, d.end = false, start
				return io.EOF
			}
			if len(b) == 4 {
				if m := binary.LittleEndian.Uint32(b); m == lz4Magic || m == lz4LegacyMagic || isSkippable(m) {
					d.inFrame, d.end = false, start
					continue
				}
			}
			d.checkpoint('l', start)
			size, err := d.u32()
			if err != nil {
				return err
			}
			if size > uint32(lz4.CompressBlockBound(lz4LegacyBlock)) || size == 0 {
				return d.corrupt("legacy block of %d bytes", size)
			}
			return d.block(int(size), false)
		}
		v, err := d.u32()
		if err != nil {
			return err
		}
		if v != 0 {
			d.checkpoint('b', start)
		} else {
			if d.flg&lz4FlagContentSum != 0 {
				sum, err := d.u32()
				if err != nil {
					return err
				}
				if d.rec != nil && !d.unchecked && sum != d.content.sum() {
					return d.corrupt("content checksum mismatch")
				}
			}
			d.inFrame, d.end = false, d.cr.off
			continue
		}
		size, stored := int(v&0x7fffffff), v>>31 != 0
		if size > d.blockMax {
			return d.corrupt("block of %d bytes, more than the frame's %d", size, d.blockMax)
		}
		return d.block(size, stored)
	}
}

// block reads a block of size bytes (and its checksum) and decodes it.
func (d *lz4Decoder) block(size int, stored bool) error {
	if cap(d.comp) < size {
		d.comp = make([]byte, size)
	}
	comp := d.comp[:size]
	if err := d.readFull(comp); err != nil {
		return err
	}
	if !d.legacy && d.flg&lz4FlagBlockSum != 0 {
		sum, err := d.u32()
		if err != nil {
			return err
		}
		if sum != xxh32Sum(comp) {
			return d.corrupt("block checksum mismatch")
		}
	}
	if stored && size > d.outMax() {
		return d.corrupt("stored block of %d bytes, more than %d", size, d.outMax())
	}
	linked := !d.legacy && d.flg&lz4FlagIndependent == 0
	if !linked {
		if stored {
			d.out = comp
		} else {
			if len(d.buf) < d.outMax() {
				d.buf = make([]byte, d.outMax())
			}
			n, err := lz4.UncompressBlock(comp, d.buf[:d.outMax()])
			if err != nil {
				return d.corrupt("block: %v", err)
			}
			d.out = d.buf[:n]
		}
	} else {
		// Keep the last 64 KiB of output in front of the new block.
		if d.hist > lz4WindowSize {
			copy(d.buf, d.buf[d.hist-lz4WindowSize:d.hist])
			d.hist = lz4WindowSize
		}
		dst := d.buf[d.hist : d.hist+d.outMax()]
		var n int
		if stored {
			n = copy(dst, comp)
		} else {
			var err error
			n, err = lz4.UncompressBlockWithDict(comp, dst, d.buf[:d.hist])
			if err != nil {
				return d.corrupt("block: %v", err)
			}
		}
		d.out = dst[:n]
		d.hist += n
	}
	if d.rec != nil {
		d.content.write(d.out) // the pipe hands d.out to the recorder
	}
	return nil
}

func (d *lz4Decoder) Read(p []byte) (int, error) {
	for len(d.out) == 0 {
		if d.err != nil {
			return 0, d.err
		}
		if err := d.next(); err != nil {
			d.err = err
			return 0, err
		}
	}
	n := copy(p, d.out)
	d.out = d.out[n:]
	return n, nil
}

func (p *lz4Pass) finish() (int64, int64, error) {
	if _, err := p.Discard(math.MaxInt64); err != nil && err != io.EOF {
		return 0, 0, err
	}
	// The pipe's goroutine has ended: d is the reader's now.
	d := p.d
	if d.inFrame && !d.legacy {
		return 0, 0, d.corrupt("stream cut short")
	}
	if d.frames == 0 {
		return 0, 0, d.corrupt("no lz4 frame")
	}
	return d.rec.out, d.end, nil
}
