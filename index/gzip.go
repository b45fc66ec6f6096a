package index

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"

	"github.com/tarmount/tarmount/index/inflate"
)

// gzipPass decodes gzip with our inflater, which reports its checkpoints,
// on a goroutine of its own (pipe): the span digests, checkpoint windows
// and everything else the pass does with the output run on the reader's
// goroutine, while the inflater decodes what follows.
type gzipPass struct {
	*pipe
	z         gzipDecoder             // read by the pipe's goroutine until it ends
	par       *inflate.ParallelReader // z, when it decodes on several goroutines
	rec       *recorder
	windowErr error // the first error compressing a checkpoint's window
}

// gzipDecoder is the inflater of a pass: inflate.Reader, or
// inflate.ParallelReader when rec.workers > 1.
type gzipDecoder interface {
	io.Reader
	Trailing() bool
}

// A pipe slot holds an inflater's output buffer: the inflater decodes
// into the slots (inflate.Reader.ReadInto), with no copy out.
const _ uint = pipeSlotBytes - inflate.BufSize

func newGzipPass(r io.Reader, rec *recorder) *gzipPass {
	g := &gzipPass{pipe: newPipe(0, rec.write, rec.idle), rec: rec}
	if rec.workers > 1 {
		ctx := rec.ctx
		if ctx == nil {
			ctx = context.Background()
		}
		g.par = inflate.NewParallelReader(ctx, r, g.options(), rec.workers)
		g.z = g.par
	} else {
		g.z = inflate.NewReader(r, g.options())
	}
	g.start(g.z)
	return g
}

// close stops the decoder goroutines and waits for them: the parallel
// inflater's first, so that a read of the pipe's goroutine waiting for
// a chunk returns.
func (g *gzipPass) close() {
	if g.par != nil {
		g.par.Stop()
	}
	g.pipe.close()
	if g.par != nil {
		g.par.Close()
	}
}

// newGzipPassAt resumes the pass at cp, window the output before it; r
// yields the stream from cp.In on. The member it enters has its trailer
// checked with the sums the first pass recorded at cp.
func newGzipPassAt(r io.Reader, cp Checkpoint, window []byte, rec *recorder) (*gzipPass, error) {
	g := &gzipPass{pipe: newPipe(int64(cp.Out), rec.write, rec.idle), rec: rec}
	icp := inflate.Checkpoint{Kind: cp.Kind, In: int64(cp.In), Bit: cp.Bit, Out: int64(cp.Out), Window: window}
	if len(cp.pass) == 8 {
		icp.Sums, icp.CRC, icp.Size = true, binary.LittleEndian.Uint32(cp.pass), binary.LittleEndian.Uint32(cp.pass[4:])
	}
	var err error
	if g.z, err = inflate.NewReaderAt(r, icp, g.options()); err != nil {
		return nil, fmt.Errorf("%w: resume at checkpoint %d: %v", ErrCorrupt, cp.In, err)
	}
	g.start(g.z)
	return g, nil
}

// options makes the inflater report its checkpoints to the pipe, which
// records them in order with the output (checkpoint).
func (g *gzipPass) options() inflate.Options {
	return inflate.Options{
		Span:         g.rec.span,
		OnCheckpoint: func(cp inflate.Checkpoint) { g.mark(cp.Out, func() { g.checkpoint(cp) }) },
	}
}

// checkpoint records cp, once every byte before it is recorded.
func (g *gzipPass) checkpoint(cp inflate.Checkpoint) {
	c := Checkpoint{Kind: cp.Kind, In: CompressedOffset(cp.In), Bit: cp.Bit, Out: UncompressedOffset(cp.Out)}
	if cp.Sums {
		c.pass = binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, cp.CRC), cp.Size)
	}
	if len(cp.Window) > 0 {
		var err error
		if c.window, err = compressWindow(cp.Window); err != nil && g.windowErr == nil {
			g.windowErr = err
		}
	}
	g.rec.mark(c)
}

func (g *gzipPass) finish() (int64, int64, error) {
	defer g.close()
	if _, err := g.Discard(math.MaxInt64); err != nil && err != io.EOF {
		return 0, 0, err
	}
	if g.windowErr != nil {
		return 0, 0, g.windowErr
	}
	return g.offset(), g.rec.ix.Source.Size, nil
}

func decodeGzipSpan(comp []byte, cp Checkpoint, window []byte, _, size int64, buf []byte) ([]byte, error) {
	icp := inflate.Checkpoint{Kind: cp.Kind, In: int64(cp.In), Bit: cp.Bit, Out: int64(cp.Out), Window: window}
	if size <= maxSpanPrealloc {
		// In place: no copy out of the inflater's buffers.
		if int64(cap(buf)) < size+inflate.Margin {
			buf = make([]byte, size, size+inflate.Margin)
		}
		buf = buf[:size]
		if err := inflate.DecodeInto(buf, comp, icp); err != nil {
			return nil, err
		}
		return buf, nil
	}
	z, err := inflate.NewReaderAt(bytes.NewReader(comp), icp, inflate.Options{Limit: size})
	if err != nil {
		return nil, err
	}
	return readSpan(z, size, buf)
}

// trailing is called after finish: the inflater is done.
func (g *gzipPass) trailing() string {
	if g.z.Trailing() {
		return "data after the last gzip member ignored, as gzip -d does"
	}
	return ""
}
