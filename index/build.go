package index

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"

	"github.com/cespare/xxhash/v2"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index/tarscan"
)

// DefaultSpan is the decoded distance between checkpoints.
const DefaultSpan = 4 << 20

// maxEntries bounds the entries of one archive (EntryID is 32 bits).
const maxEntries = math.MaxUint32 - 1

// BuildOptions tune Build.
type BuildOptions struct {
	// Span is the decoded distance between gzip checkpoints (DefaultSpan
	// when zero).
	Span   int64
	Logger *slog.Logger
	Limits tarscan.Limits
	// OnProgress, if set, is called now and then with the number of
	// compressed bytes consumed.
	OnProgress func(consumed int64)
	// Local, if set, receives the decoded tar stream, at its offsets,
	// wherever it cannot be decoded at random from the archive (inside a
	// zstd frame or xz block too big to decode per read, all of an xz
	// stream of one block): reads of those spans are served from this copy. All-zero
	// 4 KiB blocks are not written, so a file stays sparse; the caller
	// sets the final size (TarSize). Index.StreamOnly says whether it is
	// needed at all.
	Local io.WriterAt
	// OnMember, if set, is called for every member in archive order,
	// before it is added to the index, with a reader of its stored data
	// (for a sparse file, its chunks back to back). The reader is valid
	// only during the call; what is not read is skipped. An error ends
	// the build. It lets one pass both index and extract an archive.
	OnMember func(h *tarscan.Header, data io.Reader) error
	// Live, if set, publishes what the pass has seen as it goes, for a
	// mount served during the pass; Build tells it when the pass ends or
	// fails (the caller then calls Live.Serve with a Reader of the
	// index).
	Live *Live
}

// Build reads the whole archive from r, which yields the object as stored
// from its first byte, and returns its index. id is recorded as the
// source identity. A Discard(int64) method on r is used to skip member data
// of uncompressed archives. A build that ctx stops returns an error
// wrapping ctx.Err(), never ErrCorrupt.
func Build(ctx context.Context, r io.Reader, id fetch.Identity, opts BuildOptions) (ix *Index, err error) {
	if opts.Live != nil {
		defer func() {
			if err != nil {
				opts.Live.finished(nil, err)
			}
		}()
	}
	// Once ctx ends the reads of r fail, and the decoder or the tar scan
	// may word that as a stream cut short or corrupt: a build that fails
	// after ctx ended says it was cancelled instead.
	defer func() {
		if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("index pass stopped: %w", ctx.Err())
		}
	}()
	if opts.Span <= 0 {
		opts.Span = DefaultSpan
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	pr := &peekReader{r: r}
	codec, head, err := sniffStream(pr)
	if err != nil {
		return nil, fmt.Errorf("read archive start: %w", err)
	}
	if !codec.known() {
		return nil, fmt.Errorf("%w: %s", ErrUnsupported, describe(head))
	}
	b := newBuilder(log)
	ix = b.ix
	ix.Source = id
	ix.Span = opts.Span
	ix.Codec = codec
	rec := newRecorder(ix, opts.Span, opts.Local)
	add := b.add
	if opts.Live != nil {
		opts.Live.attach(b, ix)
		rec.live = opts.Live
		add = opts.Live.add
	}
	var tarStream io.Reader = pr
	var dec passDecoder
	if codec.compressed() {
		var stop func()
		if dec, stop, err = newPass(pr, codec, rec); err != nil {
			return nil, err
		}
		defer stop() // what the decoder runs, when the build ends early
		tarStream = dec
	}

	sc := tarscan.NewScanner(tarStream, opts.Limits)
	// A compressed archive is decoded whole anyway: its files' data is
	// hashed on the way (digest.go). A plain tar's data is hopped over.
	var sums []memberSum
	var sum *xxhash.Digest
	var sumBuf []byte
	if dec != nil {
		sum, sumBuf = xxhash.New(), make([]byte, 256<<10)
	}
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if opts.OnProgress != nil {
				opts.OnProgress(pr.consumed)
			}
		}
		h, err := sc.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			if codec.compressed() && n == 0 && errors.Is(err, tarscan.ErrNotTar) {
				return nil, fmt.Errorf("%w: %s stream does not hold a tar archive", ErrUnsupported, codec)
			}
			return nil, err
		}
		var data io.Reader = sc
		hashed := sum != nil && h.Typeflag != tarscan.TypeLink && entryType(h.Typeflag) == TypeReg
		if hashed {
			sum.Reset()
			data = io.TeeReader(sc, sum)
		}
		if opts.OnMember != nil {
			if err := opts.OnMember(h, data); err != nil {
				return nil, err
			}
		}
		if err := add(h); err != nil {
			return nil, err
		}
		if hashed {
			// What OnMember left, straight from the scanner, once the
			// member is published (a mount waits for it, not its data).
			if _, err := io.CopyBuffer(sum, sc, sumBuf); err != nil {
				return nil, err
			}
			sums = append(sums, memberSum{UncompressedOffset(h.DataOffset), memberDigest(sum)})
		}
	}
	if dec == nil {
		ix.TarSize = id.Size
		ix.End = CompressedOffset(id.Size)
	} else {
		// Decode to the end: it verifies the trailing checksums and gives
		// the size of the last span.
		tarSize, end, err := dec.finish()
		if err != nil {
			return nil, err
		}
		if rec.err != nil {
			return nil, rec.err
		}
		rec.finish()
		ix.TarSize = tarSize
		ix.End = CompressedOffset(end)
		if t, ok := dec.(trailer); ok && t.trailing() != "" {
			log.Warn(t.trailing())
		}
	}
	if opts.OnProgress != nil {
		opts.OnProgress(pr.consumed)
	}
	if err := b.finish(); err != nil {
		return nil, err
	}
	ix.setMemberDigests(sums)
	b.report()
	if opts.Live != nil {
		opts.Live.finished(b.newID, nil)
	}
	return ix, nil
}
