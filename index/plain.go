package index

// Reads of a plain (uncompressed) tar through a BlockSource. A plain tar
// has no spans to decode: a read could fetch exactly its bytes. But FUSE
// reads are small (the kernel reads a file in requests of 128 KiB), each
// request to the archive costs a first-byte latency (about 20 ms on object
// storage) and each connection is capped (about 80 MB/s), so each read
// picks one of three ways:
//
//   - a random read (a new reader, or one that reads on in the same file
//     without having crossed a block yet) fetches one piece of its file
//     with one exact request: the whole file when it is small
//     (smallFileBytes), else the aligned pieceBytes of the file that hold
//     the read. Pieces are kept in the Reader's cache (r.spans, keyed by
//     the stream offset where they start), so the kernel's next requests
//     for the same piece do not fetch again;
//   - a sequential reader (one that has read on past a multiple of
//     plainGrowBytes, or walks on from one file into the next) reads the
//     source's blocks, and has its next blocks prefetched over parallel
//     connections, a window that doubles as it reads on, up to r.ahead;
//   - the first read of a large file does both: it fetches its own piece,
//     for the first byte soon, and prefetches the file's first blocks.
//
// Bytes already in cached blocks are read from them, whichever the way.

import (
	"context"
	"fmt"
	"io"
)

// BlockSource is a Source that keeps the archive in aligned blocks of
// BlockSize bytes, fetched by parallel workers and cached, like
// fetch.Blocks. A Reader of a plain tar over one chooses for each read
// between whole blocks and exact ranges. Its methods are safe for
// concurrent use.
type BlockSource interface {
	Source
	// BlockSize returns the size of a block.
	BlockSize() int64
	// ReadCached copies len(p) bytes at off from cached data only, and
	// reports whether it could.
	ReadCached(p []byte, off int64) bool
	// ReadRange reads len(p) bytes at off from cached data, or else with
	// one request for exactly those bytes, which does not fill blocks.
	ReadRange(ctx context.Context, p []byte, off int64) (int, error)
	// Prefetch starts fetching the blocks that hold [off, off+n) in the
	// background, behind the reads that wait, and returns at once.
	Prefetch(off, n int64)
}

// exactSource reads a BlockSource with exact ranges (ReadRange).
type exactSource struct{ bs BlockSource }

func (s exactSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return s.bs.ReadRange(ctx, p, off)
}

// Sizes of plain reads, for an object store with about 20 ms to the first
// byte and 80 MB/s per connection: one round trip costs as much time as
// 1.6 MB of transfer, and a 4 MiB block 72 ms.
const (
	// smallFileBytes is the largest file fetched whole, with one exact
	// request, at its first read: 1 MiB takes 13 ms of transfer on top of
	// the round trip (33 ms in all, 23 ms for 256 KiB), which is less than
	// one more round trip, and the kernel asks for it in up to 8 reads of
	// 128 KiB.
	smallFileBytes = 1 << 20
	// pieceBytes is what a random read in a larger file fetches: the
	// aligned piece of the file that holds it. 512 KiB is the kernel's
	// read (128 KiB) and the next three it makes if the reader reads on,
	// for 6.5 ms of transfer, a third of a round trip.
	pieceBytes = 512 << 10
	// seqGapBytes is how far from where a recent reader stopped a read may
	// start and still be that reader's next one: the kernel sends the
	// requests of one reader in parallel, out of order, and a reader that
	// walks the archive in order (grep -r, a build that reads a tree)
	// skips headers and members it does not read. Fetching a gap of 1 MiB
	// costs less time than a round trip.
	seqGapBytes = 1 << 20
	// plainFetchSlots bounds the pieces fetched at once, and so the
	// memory they hold beyond the cache (at most smallFileBytes each):
	// enough for the FUSE requests of many readers to wait in parallel
	// on round trips.
	plainFetchSlots = 16
	// plainFirstWindow is the window in blocks of a reader that starts a
	// large file.
	plainFirstWindow = 2
	// plainGrowBytes: a reader's window doubles each time it reads on past
	// a multiple of this in the stream, two of the kernel's reads, which
	// a sequential reader sends within milliseconds. Its window so reaches
	// r.ahead while its first blocks are still being fetched, rather than
	// after one block time (72 ms) per doubling when it doubled per block:
	// 25.8 MB read at 133 MB/s so, and at more than 200 MB/s this way.
	plainGrowBytes = 256 << 10
)

// plainSeq is a recent reader of a plain tar: where its latest read ended
// (-1 for an unused slot), the start of the file it read, its window of
// blocks fetched ahead (0 while it looks random), and whether it went on
// from one file into another.
type plainSeq struct {
	end, file int64
	window    int
	walker    bool
}

// readPlain fills p from a plain tar at off, within the data of file.
func (r *Reader) readPlain(ctx context.Context, p []byte, off int64, file fileData) error {
	large := file.end-file.start > smallFileBytes
	window, walker := r.trackPlain(off, int64(len(p)), file, file.first && large)
	for len(p) > 0 {
		g := r.piece(off, file)
		r.mu.Lock()
		_, ok := r.spans[g.key]
		r.mu.Unlock()
		if !ok {
			break
		}
		n, err := r.readPiece(ctx, g, p, off)
		if err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	if len(p) == 0 {
		return nil
	}
	if window > 0 {
		// Prefetch the window's blocks after the one that holds off, up
		// to the end of the file, or of the stream for a reader that walks
		// from small file to small file (one that walks on from a large
		// file into the next is seen again there).
		bs := r.blocks.BlockSize()
		limit := file.end
		if walker && !large {
			limit = r.ix.TarSize
		}
		from := off + int64(len(p))
		r.blocks.Prefetch(from, min(limit, (off/bs+1+int64(window))*bs)-from)
		if !file.first || !large {
			return readFull(ctx, r.blocks.ReadAt, p, off)
		}
	}
	if r.blocks.ReadCached(p, off) {
		return nil
	}
	for len(p) > 0 {
		n, err := r.readPiece(ctx, r.piece(off, file), p, off)
		if err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// readPiece copies into p the bytes at off of piece g, fetching it unless
// it is cached or being fetched, and returns how many it copied.
func (r *Reader) readPiece(ctx context.Context, g region, p []byte, off int64) (int, error) {
	c, err := r.spanData(ctx, g, true, nil)
	if err != nil {
		return 0, err
	}
	n := copy(p, c.data[off-g.start:])
	r.release(c)
	return n, nil
}

// piece returns the piece of file that holds the byte at off: the whole
// file when it is small, else the aligned pieceBytes of it.
func (r *Reader) piece(off int64, file fileData) region {
	if file.end-file.start <= smallFileBytes {
		return region{key: int(file.start), start: file.start, end: file.end}
	}
	start := file.start + (off-file.start)/pieceBytes*pieceBytes
	return region{key: int(start), start: start, end: min(start+pieceBytes, file.end)}
}

// fetchPiece fetches piece g of a plain tar.
func (r *Reader) fetchPiece(ctx context.Context, g region) ([]byte, error) {
	p := make([]byte, g.end-g.start)
	if err := readFull(ctx, r.blocks.ReadRange, p, g.start); err != nil {
		return nil, fmt.Errorf("fetch %d+%d: %w", g.start, len(p), err)
	}
	return p, nil
}

// trackPlain records a read of n bytes at off in file and returns the
// window of blocks to fetch ahead of its reader, 0 for a random read, and
// whether the reader walks from file to file. A
// read that starts within seqGapBytes of where a recent reader stopped
// continues it: its window doubles (from 1) when the read goes past a
// multiple of plainGrowBytes, and is at least 1 when it comes from another
// file. Any other read
// starts a new reader, with a window of plainFirstWindow when starts (the
// first read of a large file), else 0.
func (r *Reader) trackPlain(off, n int64, file fileData, starts bool) (window int, walker bool) {
	end := off + n
	r.mu.Lock()
	defer r.mu.Unlock()
	for j := range r.plain {
		e := &r.plain[j]
		if e.end < 0 || off < e.end-seqGapBytes || off > e.end+seqGapBytes {
			continue
		}
		if (end-1)/plainGrowBytes > (e.end-1)/plainGrowBytes {
			e.window = min(max(2*e.window, 1), r.ahead)
		}
		if e.file != file.start {
			e.window = max(e.window, min(1, r.ahead))
			e.file, e.walker = file.start, true
		}
		e.end = max(e.end, end)
		return e.window, e.walker
	}
	if starts {
		window = min(plainFirstWindow, r.ahead)
	}
	r.plain[r.next] = plainSeq{end: end, file: file.start, window: window}
	r.next = (r.next + 1) % recentSpans
	return window, false
}

// readAtFunc is the ReadAt method of a Source.
type readAtFunc func(ctx context.Context, p []byte, off int64) (int, error)

// readFull reads exactly len(p) bytes at off with read: a short read is
// io.ErrUnexpectedEOF.
func readFull(ctx context.Context, read readAtFunc, p []byte, off int64) error {
	n, err := read(ctx, p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return err
}
