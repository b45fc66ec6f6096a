package index

import (
	"io"
	"sync"
	"time"
)

// pipe runs a pass decoder on a goroutine of its own, so that decoding
// overlaps everything else the index pass does with its output (span
// digests, checkpoint windows, the tar scan, member digests):
//
//	decoder goroutine                       consumer (Build's goroutine)
//	dec.Read into a free slot,  --full-->   onData(the bytes before a mark),
//	with the marks dec queued               the mark's apply, onData(the rest);
//	                                        then Read and Discard hand them out
//	                            <--free--   the slot, once all is handed out
//
// The decoder reads into a few reusable slots (at most pipeSlots *
// pipeSlotBytes of output ahead of the consumer; no allocation per slot
// once each was used) and hands a slot over as soon as dec has nothing
// more decoded (a Read shorter than asked for), so that the bytes reach
// the consumer when the decoder has them, not when a slot is full. A
// chunkReader decodes into the slot itself, one chunk a slot: its bytes
// are copied nowhere on their way to the consumer's onData.
//
// What the decoder reports about its output (a checkpoint at a decoded
// offset) is queued with mark, on the decoder goroutine, and runs on the
// consumer in order with the bytes: apply runs after onData has seen
// every byte before at, and before it sees any byte after. An error of
// dec reaches the consumer after every byte decoded before it.
//
// Read and Discard are for one consumer goroutine; close may be called
// from any goroutine, more than once, before start or after (a pipe that
// restart runs again: on the consumer's, as restart is).
type pipe struct {
	// set once
	onData     func(p []byte) // sees every byte, in order, before Read hands it out
	idle       func()         // if set, called by Read every pipeIdleEvery while it waits for output
	free, full chan *pipeSlot
	quit       chan struct{}
	done       chan struct{} // closed when no goroutine runs: before start, and once the goroutine ends
	stop       sync.Once

	// the decoder goroutine's
	dec     io.Reader
	off     int64 // decoded offset of the next byte read from dec
	at      int64 // during a dec.Read: decoded offset of the first byte it returns (position)
	pending []pipeMark

	// the consumer's
	slot    *pipeSlot // the slot being handed out, or nil
	data    []byte    // its bytes
	dataOff int64     // decoded offset of data[0]
	pos     int       // data[:pos] handed out
	err     error     // after data: io.EOF, dec's error, or io.ErrClosedPipe
}

// pipeSlots is how many output buffers a pipe cycles through, and
// pipeSlotBytes the size of each. 8 MiB ahead lets the decoder run on
// while the consumer waits for a core or for the writers, and the
// consumer go on while the decoder waits: a first extraction of the Go
// toolchain over the object-storage profile on 2 cores, medians of 7-9,
// went from 0.87 s with 4 slots to 0.76-0.80 s with 8, 16 and 32 (gzip),
// and from 0.83 s to 0.73-0.78 s (lz4); zstd did not change.
const (
	pipeSlots     = 16
	pipeSlotBytes = 512 << 10
)

// pipeIdleEvery is how often a Read that waits for the decoder calls the
// pipe's idle function: a pass stalled by its source still writes the
// resume points its caller has come to hold meanwhile (recorder.idle).
const pipeIdleEvery = 100 * time.Millisecond

// pipeSlot is output of the decoder on its way to the consumer.
type pipeSlot struct {
	buf   []byte // nil until first used
	off   int64  // decoded offset of buf[start]
	start int    // buf[start:n] holds output
	n     int
	marks []pipeMark // at <= off+n, in order
	err   error      // what dec said after buf[:n]; the last slot has one
}

// pipeMark is something the decoder reported at decoded offset at, which
// apply records on the consumer.
type pipeMark struct {
	at    int64
	apply func()
}

// newPipe returns a pipe whose decoded output starts at offset off and
// goes to onData. The decoder is given by start.
func newPipe(off int64, onData func(p []byte), idle func()) *pipe {
	p := &pipe{
		onData:  onData,
		idle:    idle,
		free:    make(chan *pipeSlot, pipeSlots),
		full:    make(chan *pipeSlot, pipeSlots),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		off:     off,
		at:      off,
		dataOff: off,
	}
	close(p.done) // no goroutine yet
	for range pipeSlots {
		p.free <- &pipeSlot{}
	}
	return p
}

// chunkReader is a decoder that decodes into the pipe's slots itself,
// which saves the copy of every byte that Read makes (inflate.Reader's
// ReadInto): it returns its next output as buf[start:end]. It reads the
// buffer of its previous call during the call, never after, and may be
// handed that same buffer again. buf holds pipeSlotBytes.
type chunkReader interface {
	ReadInto(buf []byte) (start, end int, err error)
}

// start runs dec on the pipe's goroutine; close stops it. Only the
// goroutine reads dec from now on, and calls mark. A dec that is a
// chunkReader decodes into the slots with ReadInto.
func (p *pipe) start(dec io.Reader) {
	p.dec = dec
	p.at = p.off
	p.done = make(chan struct{})
	go p.run()
}

// restart runs dec on a new goroutine of the pipe, its output going on
// where the previous dec's ended (a zstd pass decodes each frame so):
// the consumer has read the previous dec's error, which ended its
// goroutine, or the pipe never started. It reuses the slots. restart
// and close are then both called on the consumer's goroutine. After
// close, it starts nothing.
func (p *pipe) restart(dec io.Reader) {
	if p.slot != nil {
		p.free <- p.slot // never blocks: free has room for every slot
		p.dataOff += int64(len(p.data))
		p.slot, p.data, p.pos = nil, nil, 0
	}
	select {
	case <-p.quit:
		p.err = io.ErrClosedPipe
	default:
		p.err = nil
		p.start(dec)
	}
}

// position returns, on the decoder goroutine during a read of dec, the
// decoded offset of the first byte that read returns: a mark made
// there runs once every byte decoded before the read has reached
// onData, and before any the read decodes.
func (p *pipe) position() int64 { return p.at }

// mark queues apply to run on the consumer once every decoded byte
// before at is passed to onData. It is called on the decoder goroutine
// (from dec.Read), with at no lower than an earlier mark's and no higher
// than what dec has decoded.
func (p *pipe) mark(at int64, apply func()) {
	p.pending = append(p.pending, pipeMark{at, apply})
}

// run decodes into free slots and hands them over, until dec fails or
// ends, or close.
func (p *pipe) run() {
	defer close(p.done)
	for {
		var s *pipeSlot
		select {
		case <-p.quit:
			return
		default:
		}
		select {
		case <-p.quit:
			return
		case s = <-p.free:
		}
		if s.buf == nil {
			s.buf = make([]byte, pipeSlotBytes)
		}
		clear(s.marks)
		s.off, s.start, s.n, s.marks, s.err = p.off, 0, 0, s.marks[:0], nil
		if cr, ok := p.dec.(chunkReader); ok {
			// The slot the consumer may still read was handed over
			// before this call: cr reads it during the call only.
			s.start, s.n, s.err = cr.ReadInto(s.buf)
		} else {
			p.fill(s)
		}
		p.off += int64(s.n - s.start)
		i := 0
		for i < len(p.pending) && (s.err != nil || p.pending[i].at <= p.off) {
			i++
		}
		s.marks = append(s.marks, p.pending[:i]...)
		n := copy(p.pending, p.pending[i:])
		clear(p.pending[n:])
		p.pending = p.pending[:n]
		// Once sent, s is the consumer's: a restart may hand it to the
		// next goroutine while this one returns.
		last := s.err != nil
		p.full <- s // never blocks: full has room for every slot
		if last {
			return
		}
	}
}

// fill reads dec into s until dec has nothing more decoded.
func (p *pipe) fill(s *pipeSlot) {
	for s.n < len(s.buf) {
		room := len(s.buf) - s.n
		p.at = p.off + int64(s.n-s.start)
		k, err := p.dec.Read(s.buf[s.n:])
		s.n += k
		if err != nil {
			s.err = err
			return
		}
		if k < room {
			return // all dec had decoded: hand it over now
		}
	}
}

// next hands the current slot back and takes the next one, passing its
// bytes and marks to onData and apply in order.
func (p *pipe) next() {
	if p.slot != nil {
		p.free <- p.slot // never blocks: free has room for every slot
		p.dataOff += int64(len(p.data))
		p.slot, p.data, p.pos = nil, nil, 0
	}
	s, ok := p.take()
	if !ok {
		p.err = io.ErrClosedPipe
		return
	}
	data, pos := s.buf[s.start:s.n], 0
	for _, m := range s.marks {
		if k := int(min(max(m.at-s.off, int64(pos)), int64(len(data)))); k > pos {
			p.onData(data[pos:k])
			pos = k
		}
		m.apply()
	}
	clear(s.marks)
	if pos < len(data) {
		p.onData(data[pos:])
	}
	p.slot, p.data, p.dataOff, p.err = s, data, s.off, s.err
}

// take waits for the next slot of output; false once the goroutine has
// ended without one. While it waits it calls idle, if set, every
// pipeIdleEvery.
func (p *pipe) take() (*pipeSlot, bool) {
	select {
	case s := <-p.full:
		return s, true
	default:
	}
	var tick <-chan time.Time
	if p.idle != nil {
		t := time.NewTicker(pipeIdleEvery)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case s := <-p.full:
			return s, true
		case <-tick:
			p.idle()
		case <-p.done:
			// The goroutine sends its last slot before it ends.
			select {
			case s := <-p.full:
				return s, true
			default:
				return nil, false
			}
		}
	}
}

// Read implements io.Reader: the decoded bytes in order, then the error
// that ended them (io.EOF at the end of the stream).
func (p *pipe) Read(b []byte) (int, error) {
	for p.pos == len(p.data) {
		if p.err != nil {
			return 0, p.err
		}
		p.next()
	}
	n := copy(b, p.data[p.pos:])
	p.pos += n
	return n, nil
}

// Discard skips n decoded bytes without copying them (onData still sees
// them).
func (p *pipe) Discard(n int64) (int64, error) {
	var done int64
	for done < n {
		if p.pos == len(p.data) {
			if p.err != nil {
				return done, p.err
			}
			p.next()
			continue
		}
		k := int(min(n-done, int64(len(p.data)-p.pos)))
		p.pos += k
		done += int64(k)
	}
	return done, nil
}

// offset returns the decoded offset of the next byte Read returns.
func (p *pipe) offset() int64 { return p.dataOff + int64(p.pos) }

// close stops the decoder goroutine and waits for it: it ends once its
// current read of dec returns. Reads after close fail with
// io.ErrClosedPipe once the slots already handed over are read.
func (p *pipe) close() {
	p.stop.Do(func() { close(p.quit) })
	<-p.done
}
