package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/materialize"
)

// Extraction writes the whole tree of an archive into a directory, as
// fast as we can: with an index (given, saved or embedded), spans
// decoded in parallel from the checkpoints; without one, one streamed
// pass that extracts and builds the index, saved for the next mount.
// An interrupted extraction resumes from its journal.
type Extraction struct {
	// set once by Extract
	a      *Archive
	job    *materialize.Job
	prog   *materialize.Progress
	spans  materialize.Spans // nil: one pass
	reader *index.Reader     // with spans
	start  time.Time
	sel    index.Selection
	ix     *index.Index // what is extracted: the archive's index, or the selection of it; nil until known
}

// ExtractSummary says what an extraction did.
type ExtractSummary struct {
	Dir                   string
	OnePass               bool // the archive was read in one pass, else in parallel spans
	Files, Bytes, Entries int64
	Elapsed               time.Duration
	Fetched, Requests     int64 // from the source
	Decoded               int64 // bytes of tar decoded
	Codec                 string
	TarSize               int64
	// Skipped is the number of members left out, as tar -x leaves them
	// out (index.Note): the extraction then ends with ErrSkipped.
	Skipped int
}

// ErrSkipped says that an extraction left out members that tar -x also
// refuses (names with "..", hard links to nothing, ...), and finished
// the rest: GNU tar and bsdtar exit with a failure status then too.
var ErrSkipped = errors.New("archive members not extracted")

// Err returns ErrSkipped, with the number, when members were left out.
func (s *ExtractSummary) Err() error {
	if s.Skipped == 0 {
		return nil
	}
	return fmt.Errorf("extract into %s: %d %w (see the warnings above)", s.Dir, s.Skipped, ErrSkipped)
}

// Extract opens the archive at url and the extraction into dir, which
// is refused when it is not empty and tarmount did not make it (unless
// Overwrite). A dir tarmount made from another version of the archive is
// upgraded in place (materialize's upgrade.go). Run runs it, unless Complete says DIR is
// already complete; Close releases it.
func Extract(ctx context.Context, url, dir string, opts Options, mo MaterializeOptions) (*Extraction, error) {
	x := &Extraction{start: time.Now(), prog: &materialize.Progress{}}
	// The blocks stream a one-pass extraction, which reads each of them
	// once: the disk cache keeps only whole copies from servers that
	// ignore ranges.
	// With a selection, the index comes first and the spans are read
	// after it: the disk cache keeps the blocks for that second read.
	a, err := open(ctx, url, opts, !mo.Select.Empty())
	if err != nil {
		return nil, err
	}
	x.a, x.sel = a, mo.Select
	key := a.Identity().Key()
	if !x.sel.Empty() {
		key += " " + x.sel.String()
	}
	x.job, err = materialize.Open(dir, key, materialize.Options{
		Writers: mo.Writers, Decoders: mo.Decoders, Overwrite: mo.Overwrite, Sync: mo.Sync,
		Progress: x.prog, Logger: a.log, Previous: a.previousIndex,
	})
	if err != nil {
		a.Close()
		return nil, err
	}
	if a.ix != nil {
		ix := a.ix
		if !x.sel.Empty() {
			if ix, err = index.Select(ix, x.sel.Name, a.log); err != nil {
				x.Close()
				return nil, fmt.Errorf("extract %s: %w", a, err)
			}
		}
		x.ix = ix
		x.inSpans(ix, nil)
	}
	return x, nil
}

// inSpans makes the extraction read ix in spans, straight on the source
// (one exact range request per span), or for a stream-only archive from
// local, its decoded copy; it reports whether ix has spans to read so.
func (x *Extraction) inSpans(ix *index.Index, local io.ReaderAt) bool {
	a := x.a
	x.reader = index.NewReader(ix, a.src, index.ReaderOptions{Readahead: -1, Logger: a.log, Local: local})
	x.spans = materialize.IndexSpans(x.reader, a.src, materialize.Peers{})
	return x.spans != nil
}

// Complete reports whether DIR was already complete: Run has nothing to
// do.
func (x *Extraction) Complete() bool { return x.job.Complete() }

// Dir is the directory written.
func (x *Extraction) Dir() string { return x.job.Dir() }

// OnePass reports whether the archive is read in one streamed pass
// (there is no index to read it in spans).
func (x *Extraction) OnePass() bool { return x.spans == nil }

// Progress counts the files and bytes to write and written.
func (x *Extraction) Progress() *materialize.Progress { return x.prog }

// Read is how much of the archive a one-pass extraction has read, and
// the archive's size.
func (x *Extraction) Read() (consumed, size int64) {
	size = x.a.Identity().Size
	if x.a.passProg.ok.Load() {
		return size, size
	}
	return x.a.passProg.read.Load(), size
}

// Members is the number of archive members the one pass has read so far.
func (x *Extraction) Members() int64 { return x.a.passProg.members.Load() }

// Run extracts. It must be called once.
func (x *Extraction) Run(ctx context.Context) (*ExtractSummary, error) {
	a, ix := x.a, x.ix
	if x.spans == nil && (x.job.Replacing() || !x.sel.Empty()) {
		// An upgrade of DIR writes only what changed, and a selection
		// renames and leaves out members, which both need the whole
		// index first: the pass runs alone, then the files are read in
		// spans (or from the decoded copy of a stream-only archive).
		if err := a.build(ctx, nil, nil); err != nil {
			return nil, fmt.Errorf("extract %s: %w", a, err)
		}
		ix = a.ix
		if !x.sel.Empty() {
			var err error
			if ix, err = index.Select(ix, x.sel.Name, a.log); err != nil {
				return nil, fmt.Errorf("extract %s: %w", a, err)
			}
		}
		if !x.inSpans(ix, a.local()) {
			return nil, fmt.Errorf("extract %s into %s: %w", a, x.job.Dir(), errNoSpans)
		}
	}
	if x.spans == nil {
		// One streamed pass: parallel range requests ahead of the
		// decoder, the writers behind it; the index is a by-product.
		var err error
		ix, err = a.pass(ctx, nil, nil, x.job.Stage, nil, true, x.job)
		if err != nil {
			if ok, _ := a.keptResumePoint(); ctx.Err() != nil && ok {
				// The next pass resumes over the files placed
				// before its resume point: they stay.
				x.job.Close()
			} else {
				x.job.Abandon()
			}
			return nil, fmt.Errorf("extract %s: %w", a, err)
		}
		if a.passProg.base.Load() > 0 {
			// The pass resumed: the members before where it resumed
			// were not staged, and are read in spans.
			x.inSpans(ix, nil)
		}
		// Saved while the files are placed: nothing waits for it but
		// the end of Run.
		saved := make(chan struct{})
		go func() {
			defer close(saved)
			a.saveIndex(ix, nil)
		}()
		defer func() { <-saved }()
	}
	if err := x.job.Run(ctx, ix, x.spans); err != nil {
		return nil, fmt.Errorf("extract %s into %s: %w", a, x.job.Dir(), err)
	}
	s := &ExtractSummary{
		Dir: x.job.Dir(), OnePass: x.spans == nil, Elapsed: time.Since(x.start),
		Files: x.prog.Files.Load(), Bytes: x.prog.Bytes.Load(), Entries: x.prog.Entries.Load(),
		Decoded: x.prog.Decoded.Load(), Codec: ix.Codec.String(), TarSize: ix.TarSize, Skipped: ix.Skipped(),
	}
	s.Fetched, s.Requests = a.Fetched()
	if s.OnePass {
		s.Decoded = ix.TarSize // the one pass decoded all of it
	}
	return s, nil
}

// Close releases the extraction and its archive.
func (x *Extraction) Close() {
	x.job.Close()
	if x.reader != nil {
		x.reader.Close()
	}
	x.a.Close()
}
