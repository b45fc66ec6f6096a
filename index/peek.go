package index

import (
	"io"
	"sync/atomic"
)

// peekReader reads ahead a little for sniffing and passes Discard on to
// the underlying reader when it has one. consumed may be read while
// another goroutine reads (a pass decoder's).
type peekReader struct {
	r        io.Reader
	buf      []byte
	consumed atomic.Int64 // bytes read or discarded
}

func (p *peekReader) peek(n int) ([]byte, error) {
	for len(p.buf) < n {
		chunk := make([]byte, n-len(p.buf))
		m, err := p.r.Read(chunk)
		p.buf = append(p.buf, chunk[:m]...)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	return p.buf, nil
}

func (p *peekReader) Read(b []byte) (int, error) {
	if len(p.buf) > 0 {
		n := copy(b, p.buf)
		p.buf = p.buf[n:]
		p.consumed.Add(int64(n))
		return n, nil
	}
	n, err := p.r.Read(b)
	p.consumed.Add(int64(n))
	return n, err
}

// Discard skips n bytes, without reading them when the underlying reader
// can skip.
func (p *peekReader) Discard(n int64) (int64, error) {
	var done int64
	if len(p.buf) > 0 {
		k := min(int64(len(p.buf)), n)
		p.buf = p.buf[k:]
		done = k
	}
	if done == n {
		p.consumed.Add(done)
		return done, nil
	}
	k, err := discard(p.r, n-done)
	p.consumed.Add(done + k)
	return done + k, err
}

// discard skips n bytes of r, without reading them when r can skip.
func discard(r io.Reader, n int64) (int64, error) {
	if d, ok := r.(interface{ Discard(int64) (int64, error) }); ok {
		return d.Discard(n)
	}
	return io.CopyN(io.Discard, r, n)
}

// tailReader yields the tail of a partial index (the object's bytes from
// its resume point on that the stopped pass kept), then r, which yields
// the object from there on.
type tailReader struct {
	tail []byte
	r    io.Reader
}

func (t *tailReader) Read(p []byte) (int, error) {
	if len(t.tail) > 0 {
		n := copy(p, t.tail)
		t.tail = t.tail[n:]
		return n, nil
	}
	return t.r.Read(p)
}

// Discard skips n bytes, the tail's first, without reading r's when it
// can skip.
func (t *tailReader) Discard(n int64) (int64, error) {
	k := min(n, int64(len(t.tail)))
	t.tail = t.tail[k:]
	if k == n {
		return k, nil
	}
	m, err := discard(t.r, n-k)
	return k + m, err
}
