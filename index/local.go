package index

import (
	"compress/bzip2"
	"fmt"
	"io"
)

// localPass decodes a stream that cannot be entered in the middle with
// the decoders at hand (bzip2): every decoded byte goes to the local
// copy, cut into kindLocal spans.
type localPass struct {
	cr   *countingReader
	dec  io.Reader
	rec  *recorder
	name string
	err  error
}

func newLocalPass(r io.Reader, codec Codec, rec *recorder) (*localPass, error) {
	p := &localPass{cr: newCountingReader(r, 0), rec: rec, name: codec.String()}
	switch codec {
	case CodecBzip2:
		p.dec = bzip2.NewReader(p.cr)
	default:
		return nil, fmt.Errorf("%w: no stream decoder for %s", ErrUnsupported, codec)
	}
	rec.beginLocal(0)
	return p, nil
}

func (p *localPass) Read(b []byte) (int, error) {
	if p.err != nil {
		return 0, p.err
	}
	n, err := p.dec.Read(b)
	p.rec.write(b[:n])
	if err != nil && err != io.EOF {
		err = fmt.Errorf("%w: %s: %v", ErrCorrupt, p.name, err)
	}
	p.err = err
	if n > 0 {
		return n, nil
	}
	return 0, err
}

func (p *localPass) finish() (int64, int64, error) {
	if _, err := io.Copy(io.Discard, p); err != nil {
		return 0, 0, err
	}
	if p.err != io.EOF {
		return 0, 0, p.err
	}
	p.rec.endLocal()
	return p.rec.out, p.cr.off, nil
}
