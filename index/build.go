package index

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"runtime"

	"github.com/cespare/xxhash/v2"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index/inflate"
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
	// QuietNotes leaves the index's notes (Index.Notes) unlogged: the
	// caller said them already, from the index it has, and this pass
	// reads the archive again.
	QuietNotes bool
	Limits     tarscan.Limits
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
	// OnMemberDigest, if set, is called for every regular file of a
	// compressed archive once its stored data has passed, with where that
	// data starts and its digest (what Index.MemberDigest records). It
	// runs on the pass's goroutine, after OnMember for the same member.
	OnMemberDigest func(dataOffset int64, digest uint64)
	// Live, if set, publishes what the pass has seen as it goes, for a
	// mount served during the pass; Build tells it when the pass ends or
	// fails (the caller then calls Live.Serve with a Reader of the
	// index).
	Live *Live
	// Resume, if set, is the partial index of an earlier pass over the
	// same object that stopped early (LoadPartial): r then yields the
	// object from Resume.From() on (Build reads the bytes from
	// Resume.In() to there from Resume's tail first), and the pass goes on
	// from Resume.In() with Resume's span. OnMember sees only the members
	// after it. When Resume.LocalBefore() is not 0, Local must already
	// hold the decoded bytes before it (the copy the stopped pass wrote):
	// the pass writes only those after; when Resume.ReadsLocal(), Local
	// must also be an io.ReaderAt, which the pass reads those of the
	// member it resumes in from.
	Resume *Partial
	// Partial, if not "", is where the pass keeps its partial index as it
	// goes (it continues Resume's), for a codec whose pass can resume:
	// Build removes it when the pass ends or fails for good, and leaves
	// it when ctx stops the pass (or the process dies).
	Partial string
	// Holds, if set, says whether the caller holds everything it needs
	// of the members before tar stream offset need (a one-pass
	// extraction: every file before it written whole, durably), so that
	// a pass resumed there, which hands it only the members after, loses
	// nothing: a resume point (Partial) is written only once it does, and
	// one inside a span served from the decoded copy (a mid point) only
	// at a member start. It is called on the pass's goroutine, at most
	// once per member and per MiB of the tar stream while a resume point
	// waits for it.
	Holds func(need int64) bool
	// NoMidPoints says that no pass resumed from Partial could start
	// inside a span served from a local copy (a caller that keeps no
	// decoded copy and serves reads): a codec that would follow its
	// decoder's state there (the zstd frame tracker) does not, which it
	// would otherwise pay for in every pass. See partial.go.
	NoMidPoints bool
	// Workers is how many goroutines may decode a gzip archive at once
	// (inflate.ParallelReader); 1 decodes it sequentially. 0 means
	// GOMAXPROCS when it is at least inflate.ParallelMinProcs, else 1.
	// An archive smaller than inflate.ParallelMinSize, and a pass resumed
	// from a partial index, are decoded sequentially.
	Workers int
	// Cached, if set, copies the object's bytes at off into p when they
	// are at hand without fetching (fetch.Blocks.ReadCached), and reports
	// whether it did. A pass that ctx stops keeps those from its latest
	// resume point to where it had read in its partial index (its tail),
	// so that the next pass need not fetch them again.
	Cached func(p []byte, off int64) bool
}

// Build reads the whole archive from r, which yields the object as stored
// from its first byte, and returns its index. id is recorded as the
// source identity. A Discard(int64) method on r is used to skip member data
// of uncompressed archives. The decoder of a compressed archive may read r
// on a goroutine of its own, never concurrently with another read: Build
// returns once its read in progress has returned. A build that ctx stops
// returns an error wrapping ctx.Err(), never ErrCorrupt.
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
	p := opts.Resume
	var codec Codec
	if p != nil {
		if !p.Source.Equal(id) {
			return nil, fmt.Errorf("%w: the partial index was built for %s", ErrIdentity, p.Source)
		}
		codec, opts.Span = p.Codec, p.Span
		pr.r = &tailReader{tail: p.tail, r: r}
		pr.consumed.Store(p.In())
	} else {
		var head []byte
		if codec, head, err = sniffStream(pr); err != nil {
			return nil, fmt.Errorf("read archive start: %w", err)
		}
		if !codec.known() {
			return nil, fmt.Errorf("%w: %s", ErrUnsupported, describe(head))
		}
	}
	b := newBuilder(log)
	ix = b.ix
	ix.Source = id
	ix.Span = opts.Span
	ix.Codec = codec
	rec := newRecorder(ix, opts.Span, opts.Local)
	rec.ctx, rec.workers = ctx, opts.Workers
	if rec.workers <= 0 {
		rec.workers = runtime.GOMAXPROCS(0)
		if rec.workers < inflate.ParallelMinProcs {
			rec.workers = 1
		}
	}
	if id.Size > 0 && id.Size < inflate.ParallelMinSize {
		rec.workers = 1
	}
	add := b.add
	if opts.Live != nil {
		opts.Live.attach(b, ix)
		rec.live = opts.Live
		add = opts.Live.add
	}
	plog, err := openPartialLog(opts.Partial, id, codec, opts.Span, p)
	if err != nil {
		log.Warn("could not keep a partial index: an interrupted pass starts again", "path", opts.Partial, "err", err)
	}
	if plog != nil {
		// After the decoder has stopped (deferred below): pr.consumed
		// is then where the pass had read to.
		built := ix // ix is nil once Build fails
		defer func() { plog.end(ctx, built, err, log, pr.consumed.Load(), opts.Cached) }()
		rec.midPoints = !opts.NoMidPoints
		plog.floor = opts.Holds
		if plog.floor != nil {
			rec.idle = func() { plog.writeHeld(ix) }
		}
	}
	var tarStream io.Reader = pr
	var dec passDecoder
	if codec.compressed() {
		var stop func()
		var local io.ReaderAt
		if p != nil && p.ReadsLocal() {
			if local, _ = opts.Local.(io.ReaderAt); local == nil {
				return nil, fmt.Errorf("%w: the partial index resumes inside a member, which needs the decoded copy", ErrUnsupported)
			}
		}
		if p != nil {
			dec, stop, err = resumePass(pr, p, rec, add)
		} else {
			dec, stop, err = newPass(pr, codec, rec)
		}
		if err != nil {
			return nil, err
		}
		defer stop() // what the decoder runs, when the build ends early
		tarStream = dec
		if local != nil {
			// From the member's start to where decoding resumes.
			tarStream = io.MultiReader(io.NewSectionReader(local, p.scan.Offset, int64(p.mid.Out)-p.scan.Offset), dec)
		}
		if m, ok := dec.(midResumer); ok && plog != nil {
			plog.mid = m
			if plog.floor != nil {
				m.keepLess()
			}
		}
	} else if p != nil {
		if err := replay(p, add); err != nil {
			return nil, err
		}
	}
	if plog != nil && (plog.mid != nil || plog.floor != nil) {
		// Mid points come due inside long members' data too, and
		// resume points held back for the caller are written there.
		t := &tickReader{r: tarStream, every: 1 << 20, tick: func(pos int64) { plog.tick(ix, pos) }}
		if p != nil {
			t.pos = p.scan.Offset
		}
		t.next = t.pos + t.every
		tarStream = t
	}
	var sc *tarscan.Scanner
	if p != nil {
		if sc, err = tarscan.NewScannerAt(tarStream, opts.Limits, p.scan); err != nil {
			return nil, err
		}
	} else {
		sc = tarscan.NewScanner(tarStream, opts.Limits)
	}
	// A compressed archive is decoded whole anyway: its files' data is
	// hashed on the way (digest.go). A plain tar's data is hopped over.
	var sums []memberSum
	var sum *xxhash.Digest
	var sumBuf []byte
	if dec != nil {
		sum, sumBuf = xxhash.New(), make([]byte, 256<<10)
	}
	if p != nil {
		sums = append(sums, p.sums...)
	}
	resyncs := 0 // of sc's, noted
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			if opts.OnProgress != nil {
				opts.OnProgress(pr.consumed.Load())
			}
		}
		h, err := sc.Next()
		for ; resyncs < sc.Resyncs(); resyncs++ {
			// As GNU tar says it, once per run of damaged blocks.
			b.skip("skipping to next header", "")
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			if codec.compressed() && n == 0 && p == nil && errors.Is(err, tarscan.ErrNotTar) {
				return nil, fmt.Errorf("%w: %s stream does not hold a tar archive", ErrUnsupported, codec)
			}
			return nil, err
		}
		if plog != nil {
			plog.point(ix, sc.State())
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
			if opts.OnMemberDigest != nil {
				opts.OnMemberDigest(h.DataOffset, sums[len(sums)-1].sum)
			}
		}
		if plog != nil {
			var digest uint64
			if hashed {
				digest = sums[len(sums)-1].sum
			}
			plog.header(h, digest)
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
		rec.dropPassState()
		ix.TarSize = tarSize
		ix.End = CompressedOffset(end)
		if t, ok := dec.(trailer); ok && t.trailing() != "" {
			log.Warn(t.trailing())
		}
	}
	if opts.OnProgress != nil {
		opts.OnProgress(pr.consumed.Load())
	}
	if err := b.finish(); err != nil {
		return nil, err
	}
	ix.setMemberDigests(sums)
	b.report(!opts.QuietNotes)
	if opts.Live != nil {
		opts.Live.finished(b.newID, nil)
	}
	return ix, nil
}

// resumePass replays the members of p and its checkpoints into the index
// being built (through add and rec), and returns the pass decoder resumed
// at p's latest checkpoint, with the tar stream up to the next member
// already read: pr yields the object from that checkpoint on.
func resumePass(pr *peekReader, p *Partial, rec *recorder, add func(*tarscan.Header) error) (passDecoder, func(), error) {
	if !p.Codec.resumable() || len(p.checkpoints) == 0 {
		return nil, nop, fmt.Errorf("%w: %s passes cannot resume", ErrUnsupported, p.Codec)
	}
	if err := replay(p, add); err != nil {
		return nil, nop, err
	}
	cp := p.checkpoints[len(p.checkpoints)-1]
	rec.publish(func() {
		rec.ix.Checkpoints = append(rec.ix.Checkpoints, p.checkpoints...)
		rec.ix.Digests = append(rec.ix.Digests, p.digests...)
	})
	maxWindow := max(inflate.WindowSize, lz4WindowSize)
	if p.mid != nil {
		// Inside the span of the latest checkpoint, which the pass
		// goes on with from there.
		cp, maxWindow = *p.mid, zstdMaxResumeWindow
	}
	rec.out = int64(cp.Out)
	window, err := decompressWindowUpTo(cp.window, maxWindow)
	if err != nil {
		return nil, nop, err
	}
	dec, stop, err := p.Codec.def().resume(pr, cp, window, rec)
	if err != nil {
		return nil, nop, err
	}
	if skip := p.scan.Offset - int64(cp.Out); skip > 0 {
		if _, err := io.CopyN(io.Discard, dec, skip); err != nil {
			stop()
			return nil, nop, fmt.Errorf("%w: resume at %d: %v", ErrCorrupt, cp.Out, err)
		}
	}
	return dec, stop, nil
}

// replay adds the members of p to the index being built.
func replay(p *Partial, add func(*tarscan.Header) error) error {
	for _, h := range p.headers {
		if err := add(h); err != nil {
			return err
		}
	}
	return nil
}

// openPartialLog opens the partial index at path for a pass over id in
// codec (continuing p's, if not nil); nil without a path, or when the
// codec's pass cannot resume.
func openPartialLog(path string, id fetch.Identity, codec Codec, span int64, p *Partial) (*partialLog, error) {
	if path == "" || !codec.resumable() {
		return nil, nil
	}
	if p != nil {
		return appendPartialLog(path, p)
	}
	return createPartialLog(path, id, codec, span)
}

// tickReader calls tick with the offset read to, about every every bytes
// read from r.
type tickReader struct {
	r         io.Reader
	pos, next int64
	every     int64
	tick      func(pos int64)
}

func (t *tickReader) Read(p []byte) (int, error) {
	n, err := t.r.Read(p)
	if t.pos += int64(n); t.pos >= t.next {
		t.next = t.pos + t.every
		t.tick(t.pos)
	}
	return n, err
}
