package index

import (
	"fmt"
	"io"
)

// NewDecoder returns the decoded tar stream of an archive in any codec
// this package reads, sniffed from its first bytes, with every checksum
// the codec has verified as it goes. It keeps no checkpoints and writes
// no local copy. A codec may decode ahead of the reads on a goroutine of
// its own, reading r there: Close stops it, and waits for its current
// read of r to return. Read and Close are not safe for concurrent use.
func NewDecoder(r io.Reader) (io.ReadCloser, Codec, error) {
	pr := &peekReader{r: r}
	codec, head, err := sniffStream(pr)
	if err != nil {
		return nil, 0, err
	}
	// A recorder with a span this long keeps one checkpoint: nothing accumulates.
	rec := newRecorder(&Index{}, 1<<50, nil)
	if !codec.known() {
		return nil, 0, fmt.Errorf("%w: %s", ErrUnsupported, describe(head))
	}
	if !codec.compressed() {
		return io.NopCloser(pr), codec, nil
	}
	dec, stop, err := newPass(pr, codec, rec)
	if err != nil {
		return nil, 0, err
	}
	return &finishingReader{dec: dec, stop: stop}, codec, nil
}

// finishingReader reads a pass decoder and, at its end, lets it check the
// trailing checksums.
type finishingReader struct {
	dec  passDecoder
	stop func() // what the decoder runs in the background
	done bool
}

// Close stops what the decoder runs in the background.
func (f *finishingReader) Close() error {
	f.stop()
	return nil
}

func (f *finishingReader) Read(p []byte) (int, error) {
	if f.done {
		return 0, io.EOF
	}
	n, err := f.dec.Read(p)
	if err == io.EOF {
		f.done = true
		if _, _, ferr := f.dec.finish(); ferr != nil {
			return n, ferr
		}
	}
	return n, err
}
