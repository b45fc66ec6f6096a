package index

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"

	"github.com/tarmount/tarmount/index/inflate"
)

// windowWriter compresses checkpoint windows. A flate writer holds
// hundreds of KiB of state, and a pass compresses a window at every
// checkpoint: they are reused, not made per window.
type windowWriter struct {
	buf bytes.Buffer
	fw  *flate.Writer
}

var windowWriters = sync.Pool{New: func() any {
	ww := new(windowWriter)
	ww.fw, _ = flate.NewWriter(&ww.buf, flate.BestSpeed) // fails only for a bad level
	return ww
}}

// compressWindow returns w compressed with flate, in a slice of its own.
// It is safe for concurrent use.
func compressWindow(w []byte) ([]byte, error) {
	ww := windowWriters.Get().(*windowWriter)
	defer windowWriters.Put(ww)
	ww.buf.Reset()
	ww.fw.Reset(&ww.buf)
	if _, err := ww.fw.Write(w); err != nil {
		return nil, err
	}
	if err := ww.fw.Close(); err != nil {
		return nil, err
	}
	return bytes.Clone(ww.buf.Bytes()), nil
}

func decompressWindow(c []byte) ([]byte, error) {
	return decompressWindowUpTo(c, max(inflate.WindowSize, lz4WindowSize))
}

// decompressWindowUpTo is decompressWindow for windows of at most
// maxWindow bytes (a zstd frame's, at a kindZstdBlock resume point).
func decompressWindowUpTo(c []byte, maxWindow int) ([]byte, error) {
	if len(c) == 0 {
		return nil, nil
	}
	w, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(c)), int64(maxWindow)+1))
	if err != nil || len(w) > maxWindow {
		return nil, fmt.Errorf("%w: bad checkpoint window", ErrBadIndex)
	}
	return w, nil
}
