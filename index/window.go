package index

import (
	"bytes"
	"fmt"
	"io"

	"github.com/klauspost/compress/flate"

	"github.com/tarmount/tarmount/index/inflate"
)

func compressWindow(w []byte) ([]byte, error) {
	var buf bytes.Buffer
	fw, err := flate.NewWriter(&buf, flate.BestSpeed)
	if err != nil {
		return nil, err
	}
	fw.Write(w)
	if err := fw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func decompressWindow(c []byte) ([]byte, error) {
	if len(c) == 0 {
		return nil, nil
	}
	const maxWindow = max(inflate.WindowSize, lz4WindowSize)
	w, err := io.ReadAll(io.LimitReader(flate.NewReader(bytes.NewReader(c)), maxWindow+1))
	if err != nil || len(w) > maxWindow {
		return nil, fmt.Errorf("%w: bad checkpoint window", ErrBadIndex)
	}
	return w, nil
}
