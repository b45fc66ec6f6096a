package archive

import (
	"context"
	"fmt"
	"io"

	"github.com/tarmount/tarmount/fetch"
)

// storedStream is an archive's bytes as stored, from its start, fetched
// as a first pass fetches them: the open brings the first bytes, then
// parallel range requests of blocks that grow (fetch.Blocks.Stream),
// retried and bounded in time as every read of the source is.
type storedStream struct {
	io.Reader
	src fetch.Source
	// close stops the stream and closes the source (and the disk cache
	// that keeps whole copies from servers that ignore ranges).
	close func()
}

// openStored opens url for one pass over it from the start; the caller
// calls close.
func (o *Options) openStored(ctx context.Context, url string) (*storedStream, error) {
	s, disk, err := o.openCached(ctx, url, true, false)
	if err != nil {
		return nil, err
	}
	blocks := fetch.NewBlocks(s, o.blocksOptions(nil))
	stream := blocks.Stream(ctx, 0)
	return &storedStream{Reader: stream, src: s, close: func() {
		stream.Close()
		blocks.Close()
		s.Close()
		if disk != nil {
			disk.Close()
		}
	}}, nil
}

// CopyStored copies the archive at url, as stored and undecoded, to w:
// fetched as a first pass fetches it, so that it tells what fetching
// alone costs a first pass or a first extraction (the benchmark suite
// compares them). It returns the bytes copied.
func CopyStored(ctx context.Context, w io.Writer, url string, opts Options) (int64, error) {
	opts = opts.withDefaults()
	st, err := opts.openStored(ctx, url)
	if err != nil {
		return 0, err
	}
	defer st.close()
	n, err := io.Copy(w, st)
	if err != nil {
		return n, fmt.Errorf("copy %s: %w", st.src, err)
	}
	if size := st.src.Identity().Size; size >= 0 && n != size {
		return n, fmt.Errorf("copy %s: %d bytes, want %d", st.src, n, size)
	}
	return n, nil
}
