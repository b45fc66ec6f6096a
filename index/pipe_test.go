package index

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"
)

// scriptedDecoder stands for an inflater on a pipe: it "decodes" data in
// chunks of the sizes in sizes (in turn; some bigger than a slot), marks
// the offsets in marks that fall in a chunk as it decodes the chunk,
// hands the chunk out over as many Reads as it takes, and fails with err
// after the last byte.
type scriptedDecoder struct {
	p       *pipe
	data    []byte
	sizes   []int
	marks   []int64 // in order
	err     error
	off     int64 // handed out
	decoded int64
	applied func(at int64) // on the consumer
}

func (d *scriptedDecoder) Read(b []byte) (int, error) {
	if d.off == d.decoded {
		if d.decoded == int64(len(d.data)) {
			return 0, d.err
		}
		n := int64(d.sizes[0])
		d.sizes = append(d.sizes[1:], d.sizes[0])
		d.decoded = min(d.decoded+n, int64(len(d.data)))
		for len(d.marks) > 0 && d.marks[0] <= d.decoded {
			at := d.marks[0]
			d.marks = d.marks[1:]
			d.p.mark(at, func() { d.applied(at) })
		}
	}
	n := copy(b, d.data[d.off:d.decoded])
	d.off += int64(n)
	return n, nil
}

// TestPipeOrder: whatever the sizes of the decoder's reads and of the
// consumer's, the consumer sees every byte once, in order, each mark
// after the bytes before its offset and before those after it, Read
// hands out the bytes after onData saw them, and the decoder's error
// comes after the last byte.
func TestPipeOrder(t *testing.T) {
	data := randomData(5, 3*pipeSlotBytes+12345)
	end := int64(len(data))
	boom := errors.New("source failed")
	for _, c := range []struct {
		name  string
		sizes []int
		marks []int64
		err   error
		reads int // the consumer's read size; 0: Discard
	}{
		{"chunks", []int{256 << 10}, []int64{0, 100, 256 << 10, 256 << 10, pipeSlotBytes, 1 << 20, end}, io.EOF, 4096},
		{"bigger than a slot", []int{pipeSlotBytes + 7, 1, 3}, []int64{0, pipeSlotBytes, pipeSlotBytes + 7, pipeSlotBytes + 8, 2*pipeSlotBytes + 1}, io.EOF, 512},
		{"tiny", []int{1, 2, 1000}, []int64{1, 2, 3, 5000, 5000, 5001}, boom, 100 << 10},
		{"error after a chunk", []int{300 << 10}, []int64{300 << 10, end}, boom, 0},
		{"one chunk", []int{len(data)}, nil, io.EOF, 1 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			var seen []byte
			p := newPipe(0, func(b []byte) { seen = append(seen, b...) }, nil)
			var applied []int64
			d := &scriptedDecoder{p: p, data: data, sizes: c.sizes, marks: c.marks, err: c.err}
			d.applied = func(at int64) {
				if int64(len(seen)) != at {
					t.Errorf("mark at %d applied after %d bytes", at, len(seen))
				}
				applied = append(applied, at)
			}
			p.start(d)
			defer p.close()
			var got []byte // handed out by Read, or the bytes seen that Discard skipped
			var err error
			buf := make([]byte, max(c.reads, 1))
			for err == nil {
				var n int
				if c.reads == 0 {
					var k int64
					k, err = p.Discard(1000)
					n = int(k)
					if len(got)+n > len(seen) {
						t.Fatalf("Discard skipped %d bytes, onData saw %d", len(got)+n, len(seen))
					}
					got = append(got, seen[len(got):len(got)+n]...)
				} else {
					n, err = p.Read(buf)
					got = append(got, buf[:n]...)
					if len(got) > len(seen) {
						t.Fatalf("Read handed out %d bytes, onData saw %d", len(got), len(seen))
					}
				}
				if n == 0 && err == nil {
					t.Fatal("no bytes and no error")
				}
			}
			if err != c.err {
				t.Fatalf("got error %v, want %v", err, c.err)
			}
			if !bytes.Equal(got, data) || !bytes.Equal(seen, data) {
				t.Fatalf("got %d bytes handed out, %d seen, want the %d of the stream", len(got), len(seen), len(data))
			}
			if p.offset() != end {
				t.Fatalf("offset: got %d, want %d", p.offset(), end)
			}
			if fmt.Sprint(applied) != fmt.Sprint(c.marks) {
				t.Fatalf("marks applied: got %v, want %v", applied, c.marks)
			}
		})
	}
}

// frameDecoder stands for a zstd frame's decoder on a pipe that is
// restarted for each frame: each Read returns up to step bytes, and
// marks, at the position the pipe gives, that the read starts there.
type frameDecoder struct {
	p       *pipe
	data    []byte
	step    int
	base    int64 // where the frame's output starts in the stream
	off     int   // handed out
	badPos  []string
	applied func(at int64)
}

func (d *frameDecoder) Read(b []byte) (int, error) {
	if d.off == len(d.data) {
		return 0, io.EOF
	}
	at := d.p.position()
	if want := d.base + int64(d.off); at != want {
		d.badPos = append(d.badPos, fmt.Sprintf("position %d, want %d", at, want))
	}
	d.p.mark(at, func() { d.applied(at) })
	n := copy(b[:min(len(b), d.step)], d.data[d.off:])
	d.off += n
	return n, nil
}

// TestPipeRestart: a pipe restarted with a new decoder after each one's
// io.EOF (a zstd pass's frames) hands out every frame's bytes in order,
// on the same slots, at continuing offsets; a mark made at position()
// during a read runs once the bytes before that read have reached
// onData; after close, restart starts nothing and reads fail.
func TestPipeRestart(t *testing.T) {
	// A pipe that never started (a zstd stream with no data frame)
	// closes at once, and reads from it fail.
	idle := newPipe(0, func([]byte) {}, nil)
	closed := make(chan struct{})
	go func() {
		idle.close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("close of a pipe that never started did not return")
	}
	if n, err := idle.Read(make([]byte, 10)); n != 0 || err != io.ErrClosedPipe {
		t.Fatalf("read of a pipe that never started: got %d, %v, want 0, %v", n, err, io.ErrClosedPipe)
	}
	var seen []byte
	p := newPipe(1000, func(b []byte) { seen = append(seen, b...) }, nil)
	var want []byte
	var marks []int64
	apply := func(at int64) {
		if got := 1000 + int64(len(seen)); got != at {
			t.Errorf("mark at %d applied after the stream reached %d", at, got)
		}
		marks = append(marks, at)
	}
	buf := make([]byte, 3000)
	for i, size := range []int{0, 5, 1, 2, 3, 4, 6, 7, pipeSlotBytes + 17, 3 * pipeSlotBytes, 1} {
		d := &frameDecoder{p: p, data: randomData(uint64(i), size), step: 1 + i*40000, base: p.offset(), applied: apply}
		want = append(want, d.data...)
		p.restart(d)
		for {
			n, err := p.Read(buf)
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("frame %d: %v", i, err)
			}
			if n == 0 {
				t.Fatalf("frame %d: no bytes and no error", i)
			}
		}
		if len(d.badPos) > 0 {
			t.Fatalf("frame %d: %v", i, d.badPos)
		}
		if got := p.offset(); got != 1000+int64(len(want)) {
			t.Fatalf("after frame %d: offset %d, want %d", i, got, 1000+len(want))
		}
	}
	if !bytes.Equal(seen, want) {
		t.Fatalf("onData saw %d bytes, want the %d of the frames in order", len(seen), len(want))
	}
	if len(marks) == 0 {
		t.Fatal("no mark applied")
	}
	p.close()
	p.restart(&frameDecoder{p: p, data: []byte("after close"), step: 1, applied: apply})
	if n, err := p.Read(buf); n != 0 || err != io.ErrClosedPipe {
		t.Fatalf("read after close and restart: got %d, %v, want 0, %v", n, err, io.ErrClosedPipe)
	}
	p.close()
}

// TestPipeIdle: a Read that waits for a stalled decoder calls idle, on
// the reading goroutine, about every pipeIdleEvery; a Read that finds
// output at once does not.
func TestPipeIdle(t *testing.T) {
	const gate = 2 * pipeSlotBytes
	g := newGatedReader(randomData(7, 3*pipeSlotBytes), gate)
	var idles atomic.Int32
	reader := make(chan int64, 1)
	var p *pipe
	p = newPipe(0, func([]byte) {}, func() {
		idles.Add(1)
		select {
		case reader <- p.offset(): // only the reading goroutine may ask
		default:
		}
	})
	p.start(g)
	defer p.close()
	buf := make([]byte, 64<<10)
	got := 0
	for got < gate {
		n, err := p.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		got += n
	}
	// The decoder has handed out all it may: it waits at the gate.
	if n := idles.Load(); n != 0 {
		t.Errorf("idle called %d times while output was ready, want 0", n)
	}
	go func() {
		time.Sleep(3*pipeIdleEvery + pipeIdleEvery/2)
		g.allow(len(g.obj))
	}()
	start := time.Now()
	n, err := p.Read(buf) // waits for the gate to open
	if err != nil || n == 0 {
		t.Fatalf("read after the stall: %d, %v", n, err)
	}
	stalled := time.Since(start)
	if n, most := idles.Load(), int32(stalled/pipeIdleEvery); n < 2 || n > most {
		t.Errorf("idle called %d times in a stall of %v, want 2 to %d (every %v)", n, stalled, most, pipeIdleEvery)
	}
	if off := <-reader; off != gate {
		t.Errorf("idle saw the pipe at %d, want %d (where Read waited)", off, gate)
	}
	for err == nil {
		_, err = p.Read(buf)
	}
	if err != io.EOF {
		t.Fatalf("got %v at the end, want io.EOF", err)
	}
}
