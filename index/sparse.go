package index

import (
	"bytes"
	"fmt"
	"io"
)

// sparseBlock is the unit writeSparse leaves as a hole when it is all
// zeros.
const sparseBlock = 4096

var zeroBlock [sparseBlock]byte

// writeSparse writes p at off to w, leaving aligned all-zero blocks
// unwritten so that the file stays sparse (the caller sets its final
// size).
func writeSparse(w io.WriterAt, p []byte, off int64) error {
	for len(p) > 0 {
		n := int(min(int64(len(p)), sparseBlock-off%sparseBlock))
		// Runs of non-zero blocks are written in one call.
		if off%sparseBlock == 0 && n == sparseBlock && bytes.Equal(p[:n], zeroBlock[:]) {
			p, off = p[n:], off+int64(n)
			continue
		}
		end := n
		for end < len(p) {
			k := min(len(p)-end, sparseBlock)
			if k == sparseBlock && bytes.Equal(p[end:end+k], zeroBlock[:]) {
				break
			}
			end += k
		}
		if _, err := w.WriteAt(p[:end], off); err != nil {
			return fmt.Errorf("write local copy at %d: %w", off, err)
		}
		p, off = p[end:], off+int64(end)
	}
	return nil
}
