package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/tarmount/tarmount/fetch"
	tfs "github.com/tarmount/tarmount/fs"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/materialize"
)

// materializeFlags are the flags of extract and of the mount's
// --materialize.
type materializeFlags struct {
	dir       string
	writers   int
	decoders  int
	overwrite bool
	quiet     bool
	sync      bool
}

func (m *materializeFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.dir, "materialize", "", "mount: also write the whole tree to this directory in the background, and serve files from it once complete")
	fs.IntVar(&m.writers, "write-workers", 0, fmt.Sprintf("files written at once by extract and --materialize (default %d here)", materialize.DefaultWriters()))
	fs.IntVar(&m.decoders, "decode-workers", 0, fmt.Sprintf("spans fetched and decoded at once by extract and --materialize (default %d here)", materialize.DefaultDecoders()))
	fs.BoolVar(&m.overwrite, "overwrite", false, "extract into a non-empty directory that tarmount did not make from this archive")
	fs.BoolVar(&m.sync, "fsync", false, "make the extracted tree durable (syncfs) before marking it complete, so that the mark holds after a power failure")
	fs.BoolVar(&m.quiet, "quiet", false, "extract: no progress bar or progress lines, only errors")
}

// countingSource counts the bytes read from a Source.
type countingSource struct {
	fetch.Source
	n, requests atomic.Int64
}

func (s *countingSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := s.Source.ReadAt(ctx, p, off)
	s.n.Add(int64(n))
	s.requests.Add(1)
	return n, err
}

// findIndex returns the index given with --index or saved in the cache
// directory for src, or nil when there is none.
func findIndex(src fetch.Source, c *config, log *slog.Logger) (*index.Index, error) {
	id := src.Identity()
	if c.indexFile != "" {
		ix, err := loadIndex(c.indexFile)
		if err != nil {
			return nil, err
		}
		if !sameIdentity(ix.Source, id) {
			return nil, fmt.Errorf("%w: %s was built for %s, the source is now %s", index.ErrIdentity, c.indexFile, ix.Source, id)
		}
		return ix, nil
	}
	cached := cachePath(c.cacheDir, src.String(), id)
	ix, err := loadIndex(cached)
	if err == nil && sameIdentity(ix.Source, id) {
		log.Debug("index loaded", "path", cached)
		return ix, nil
	}
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		log.Warn("saved index unusable, extracting in one pass", "path", cached, "err", err)
	}
	return nil, nil
}

// extractCmd writes the whole tree of the archive at url into dir: with
// an index (saved, given, or seekable), spans decoded in parallel; without
// one, one streamed pass that extracts and builds the index, saved for
// the next mount.
func extractCmd(ctx context.Context, url, dir string, c *config, log *slog.Logger, stderr io.Writer) error {
	start := time.Now()
	disk := openDiskCache(c, log) // copies of objects whose server ignores ranges
	if disk != nil {
		defer disk.Close()
	}
	src0, err := openSource(ctx, url, c, disk, log)
	if err != nil {
		return err
	}
	src := &countingSource{Source: src0}
	defer func() {
		logRetries(log, src0)
		src0.Close()
	}()
	ix, err := findIndex(src, c, log)
	if err != nil {
		return err
	}
	prog := &materialize.Progress{}
	job, err := materialize.Open(dir, src.Identity().Key(), materialize.Options{
		Writers: c.mat.writers, Decoders: c.mat.decoders, Overwrite: c.mat.overwrite, Sync: c.mat.sync,
		Progress: prog, Logger: log,
	})
	if err != nil {
		return err
	}
	defer job.Close()
	if job.Complete() {
		if !c.mat.quiet {
			fmt.Fprintf(stderr, "tarmount: %s is already complete\n", job.Dir())
		}
		return nil
	}
	size := src.Identity().Size
	var consumed atomic.Int64 // archive bytes read by a one-pass extraction
	var spans materialize.Spans
	var reader *index.Reader
	if ix != nil {
		reader = index.NewReader(ix, src, index.ReaderOptions{Readahead: -1, Logger: log})
		defer reader.Close()
		spans = materialize.IndexSpans(reader, src)
	}
	mode := "parallel spans"
	if spans == nil {
		mode = "one pass"
	}
	stop := showProgress(stderr, c.mat.quiet, log, prog, &consumed, size, spans == nil)
	var blocks *fetch.Blocks
	if spans == nil {
		// One streamed pass: parallel range requests ahead of the
		// decoder, the writers behind it; the index is a by-product.
		blocks = fetch.NewBlocks(src, fetch.BlocksOptions{BlockSize: c.blockSize, Workers: c.workers, CacheBytes: c.cacheMem / 2, Logger: log})
		defer blocks.Close()
		stream := blocks.Stream(ctx, 0)
		ix, err = index.Build(ctx, stream, src.Identity(), index.BuildOptions{
			Span: c.span, Logger: log, OnMember: job.Stage,
			OnProgress: func(n int64) { consumed.Store(n) },
		})
		stream.Close()
		if err != nil {
			stop()
			job.Abandon()
			return fmt.Errorf("extract %s: %w", src, err)
		}
		consumed.Store(size)
		// Saved while the files are placed: nothing waits for it but
		// the exit.
		cached := cachePath(c.cacheDir, src.String(), src.Identity())
		saved := make(chan struct{})
		go func() {
			defer close(saved)
			if err := ix.Save(cached); err != nil {
				log.Warn("could not save index", "path", cached, "err", err)
			}
		}()
		defer func() { <-saved }()
	}
	err = job.Run(ctx, ix, spans)
	stop()
	if err != nil {
		return fmt.Errorf("extract %s into %s: %w", src, job.Dir(), err)
	}
	elapsed := time.Since(start)
	fetched := src.n.Load()
	decoded := prog.Decoded.Load() // tar bytes of the spans decoded
	if spans == nil {
		decoded = ix.TarSize // the one pass decoded all of it
	}
	if !c.mat.quiet {
		sec := elapsed.Seconds()
		rate := func(n int64) string { return mb(int64(float64(n)/sec)) + "/s" }
		fmt.Fprintf(stderr, "tarmount: extracted %d files (%s of data, %d entries) into %s in %.2fs (%s): fetched %s in %d requests (%s), decoded %s of %s (%s), wrote %s\n",
			prog.Files.Load(), mb(prog.Bytes.Load()), prog.Entries.Load(), job.Dir(), sec, mode,
			mb(fetched), src.requests.Load(), rate(fetched), mb(decoded), ix.Codec, rate(decoded), rate(prog.Bytes.Load()))
	}
	log.Debug("extracted", "elapsed", elapsed, "fetched", fetched, "tar_bytes", ix.TarSize, "codec", ix.Codec.String())
	return nil
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// showProgress reports progress until the returned function is called: a
// bar on a terminal, a plain line every 5 s otherwise, nothing when quiet.
// A one-pass extraction counts archive bytes read, else file bytes
// written.
func showProgress(w io.Writer, quiet bool, log *slog.Logger, prog *materialize.Progress, consumed *atomic.Int64, size int64, onePass bool) (stop func()) {
	if quiet {
		return func() {}
	}
	cur := func() (done, total int64) {
		if onePass && consumed.Load() < size {
			return consumed.Load(), size
		}
		return prog.Bytes.Load(), max(prog.BytesTotal.Load(), 1)
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	f, isFile := w.(*os.File)
	tty := isFile && term.IsTerminal(int(f.Fd()))
	go func() {
		defer close(finished)
		if !tty {
			t := time.NewTicker(5 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					d, total := cur()
					log.Info("extracting", "done", fmt.Sprintf("%.0f%%", 100*float64(d)/float64(total)),
						"files", prog.Files.Load(), "bytes", prog.Bytes.Load())
				}
			}
		}
		var bar *progressbar.ProgressBar
		phase := -1
		t := time.NewTicker(150 * time.Millisecond)
		defer t.Stop()
		for {
			d, total := cur()
			p := 1
			if onePass && consumed.Load() < size {
				p = 0
			}
			if p != phase {
				if bar != nil {
					bar.Finish()
					fmt.Fprintln(w)
				}
				desc := "writing"
				if p == 0 {
					desc = "reading archive"
				}
				bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionShowBytes(true),
					progressbar.OptionSetDescription(desc), progressbar.OptionSetPredictTime(true),
					progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond))
				phase = p
			}
			bar.ChangeMax64(total)
			bar.Describe(fmt.Sprintf("%s, %d/%d files", map[int]string{0: "reading archive", 1: "writing"}[p], prog.Files.Load(), prog.FilesTotal.Load()))
			bar.Set64(d)
			select {
			case <-done:
				bar.Finish()
				fmt.Fprintln(w)
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		select {
		case <-done:
		default:
			close(done)
		}
		<-finished
	}
}

// gatedReader marks every read of the archive through the mount as a
// foreground read, which background materialization yields to.
type gatedReader struct {
	*index.Reader
	gate *materialize.Gate
}

func (r gatedReader) ReadAt(ctx context.Context, id index.EntryID, p []byte, off int64) (int, error) {
	defer r.gate.Enter()()
	return r.Reader.ReadAt(ctx, id, p, off)
}

// gatedLive is gatedReader for a mount served during its index pass.
type gatedLive struct {
	*index.Live
	gate *materialize.Gate
}

func (r gatedLive) ReadAt(ctx context.Context, id index.EntryID, p []byte, off int64) (int, error) {
	defer r.gate.Enter()()
	return r.Live.ReadAt(ctx, id, p, off)
}

// background is the materialization that runs behind a mount. A job
// that a failure stops (the server away for longer than --read-timeout,
// a TLS or credentials error) is opened again after a pause, which resumes
// it from its journal, until it completes or fails for good (the archive
// changed or is gone, or its data does not match the index).
type background struct {
	// set once
	dir    string
	key    string
	opts   materialize.Options
	gate   *materialize.Gate
	reader *index.Reader
	a      *archive
	log    *slog.Logger
	prog   *materialize.Progress
	src    *countingSource
	cancel context.CancelFunc
	ctx    context.Context
	done   chan struct{}

	// job is the current job; run replaces one that failed.
	job atomic.Pointer[materialize.Job]
	// started is set by run; err is the job's result (or why it did not
	// start), set before done is closed.
	started bool
	err     error
}

var _ tfs.Local = (*background)(nil)

// Pauses before a failed materialization is opened again: doubling from
// the first to the last.
const (
	materializeRetryFirst = time.Second
	materializeRetryMax   = time.Minute
)

// openMaterialize opens the job of --materialize DIR (refusing a DIR that
// is not ours before anything is mounted); run starts it. When the mount
// has no index yet, its index pass stages the files into the job
// (Job.Stage) as it goes, and run waits for the pass.
func openMaterialize(a *archive, c *config, log *slog.Logger) (*background, error) {
	b := &background{gate: &materialize.Gate{}, a: a, log: log, prog: &materialize.Progress{}, done: make(chan struct{}),
		key: a.src.Identity().Key()}
	b.opts = materialize.Options{
		Writers: c.mat.writers, Decoders: c.mat.decoders, Overwrite: c.mat.overwrite, Sync: c.mat.sync,
		Gate: b.gate, Progress: b.prog, Logger: log,
	}
	job, err := materialize.Open(c.mat.dir, b.key, b.opts)
	if err != nil {
		return nil, err
	}
	b.job.Store(job)
	b.dir = job.Dir()
	b.src = &countingSource{Source: a.src}
	b.ctx, b.cancel = context.WithCancel(context.Background())
	return b, nil
}

// OpenLocal opens the copy of id in DIR if the current job has it
// complete (fs.Local). id is a pass id when the mount was made during
// its index pass.
func (b *background) OpenLocal(id index.EntryID) (*os.File, bool) {
	if b.a.live != nil {
		fid, ok := b.a.live.FinalID(id)
		if !ok {
			return nil, false
		}
		id = fid
	}
	return b.job.Load().OpenLocal(id)
}

// staged reports whether the mount's index pass staged the archive's
// files into the job: it ran with the job, and succeeded.
func (b *background) staged() bool { return b.a.live != nil && b.a.ix != nil }

func (b *background) run() {
	b.started = true
	go func() {
		defer close(b.done)
		if b.a.passDone != nil {
			select {
			case <-b.a.passDone:
			case <-b.ctx.Done():
				b.err = b.ctx.Err()
				return
			}
			if b.a.ix == nil {
				// What the failed pass staged was never checked
				// to the end of the archive.
				b.err = fmt.Errorf("index pass: %w", b.a.passErr)
				b.job.Load().Abandon()
				return
			}
		}
		// Its own reader straight on the source: span decodes neither
		// go through nor evict the mount's caches (memory and disk).
		ropts := index.ReaderOptions{Readahead: -1, Logger: b.log}
		if b.a.local != nil {
			ropts.Local = b.a.local // a stream-only archive's decoded copy
		}
		b.reader = index.NewReader(b.a.ix, b.src, ropts)
		spans := materialize.IndexSpans(b.reader, b.src)
		if spans == nil && !b.staged() && !b.job.Load().Complete() {
			b.log.Error("materialize: this archive has no checkpoints to read it in spans; run tarmount extract instead", "path", b.dir)
			b.err = errNoSpans
			return
		}
		start := time.Now()
		b.log.Info("materializing", "path", b.dir)
		delay := materializeRetryFirst
		for {
			err := b.job.Load().Run(b.ctx, b.a.ix, spans)
			if err == nil {
				break
			}
			if b.ctx.Err() != nil {
				b.err = err
				return
			}
			if !resumable(err) {
				b.err = err
				b.log.Error("materialize failed; files not yet written are served from the archive", "path", b.dir, "err", err)
				return
			}
			b.log.Warn("materialize interrupted; files not yet written are served from the archive until it resumes",
				"path", b.dir, "err", err, "delay", delay)
			if err := fetch.Sleep(b.ctx, delay); err != nil {
				b.err = err
				return
			}
			delay = min(2*delay, materializeRetryMax)
			// A job runs once: close it, and open DIR again, which
			// resumes from the journal. Meanwhile files are read from
			// the archive.
			b.job.Load().Close()
			job, err := materialize.Open(b.dir, b.key, b.opts)
			if err != nil {
				b.err = err
				b.log.Error("materialize failed; files not yet written are served from the archive", "path", b.dir, "err", err)
				return
			}
			b.resetProgress()
			b.job.Store(job)
		}
		b.log.Info("materialized", "path", b.dir, "files", b.prog.Files.Load(), "bytes", b.prog.Bytes.Load(),
			"fetched", b.src.n.Load(), "elapsed", time.Since(start).Round(time.Millisecond))
	}()
}

// resumable reports whether a materialization that failed with err may
// complete if opened again: not when the archive changed or is gone, its
// data does not match the index, or DIR is not ours. Anything else (the
// source unreachable or refusing for a while, a full disk) may pass.
func resumable(err error) bool {
	for _, e := range []error{fetch.ErrChanged, fetch.ErrNotFound, fetch.ErrNoRange, index.ErrCorrupt,
		index.ErrBadIndex, materialize.ErrNotOurs, errNoSpans} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

// resetProgress starts the counts of a new run of the job: it counts what
// is left to do.
func (b *background) resetProgress() {
	p := b.prog
	for _, c := range []*atomic.Int64{&p.FilesTotal, &p.BytesTotal, &p.Files, &p.Bytes, &p.Input, &p.Entries} {
		c.Store(0)
	}
}

// errNoSpans stops the materialization of an archive without checkpoints.
var errNoSpans = errors.New("the archive has no checkpoints to read it in spans; run tarmount extract instead")

// state reports whether the job has made DIR complete, or why it stopped
// ("" while it runs). It is safe to call from any goroutine.
func (b *background) state() (complete bool, stopped string) {
	select {
	case <-b.done:
		if b.err != nil {
			return false, b.err.Error()
		}
		return true, ""
	default:
		return b.job.Load().Complete(), ""
	}
}

// statusInterval is how often report tells systemd how materialization
// goes.
const statusInterval = 2 * time.Second

// report sends materialization progress to ready every statusInterval,
// and once more when the job ends, until done is closed.
func (b *background) report(ready *readiness, done <-chan struct{}) {
	t := time.NewTicker(statusInterval)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-b.done:
			ready.status(b.progressLine())
			return
		case <-t.C:
			ready.status(b.progressLine())
		}
	}
}

// progressLine says how far materialization is.
func (b *background) progressLine() string {
	p := b.prog
	files, total := p.Files.Load(), p.FilesTotal.Load()
	select {
	case <-b.done:
		if b.err == nil {
			return fmt.Sprintf("serving; materialized %d files (%s) in %s", files, mb(p.Bytes.Load()), b.dir)
		}
		return fmt.Sprintf("serving; materialization stopped at %d of %d files (see the log)", files, total)
	default:
	}
	pct := 0.0
	if bt := p.BytesTotal.Load(); bt > 0 {
		pct = 100 * float64(p.Bytes.Load()) / float64(bt)
	}
	return fmt.Sprintf("serving; materializing %s: %.0f%%, %d of %d files", b.dir, pct, files, total)
}

// stop ends the job (resumable) and waits for it. A job that an index
// pass staged into, and that did not get to run, is abandoned: what was
// staged was never checked to the end of the archive.
func (b *background) stop() {
	b.cancel()
	if b.started {
		<-b.done
	}
	if b.a.live != nil && !b.started {
		b.job.Load().Abandon()
	}
	b.job.Load().Close()
	if b.reader != nil {
		b.reader.Close()
	}
}
