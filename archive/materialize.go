package archive

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"sync/atomic"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/materialize"
)

// MaterializeOptions configure the materialization behind a mount and an
// extraction. Zero values mean materialize's defaults.
type MaterializeOptions struct {
	Writers   int  // files written at once
	Decoders  int  // spans fetched and decoded at once
	Overwrite bool // replace what a non-empty DIR that tarmount did not make holds by the archive's tree
	Sync      bool // make the tree durable (syncfs) before marking it complete
	// Select, for extract, takes members out or strips their names
	// (index.Selection); DIR then holds that tree, and is known as made
	// from the archive with that selection.
	Select Selection
}

// Selection is index.Selection: what extract takes out of an archive.
type Selection = index.Selection

// Materializer writes the whole tree of a mounted archive to a local
// directory in the background, and serves the files that are complete
// there (fs.Local). A job that a failure stops (the server away for
// longer than the read timeout, a TLS or credentials error) is opened
// again after a pause, which resumes it from its journal, until it
// completes or fails for good (the archive changed or is gone, or its
// data does not match the index): the pauses are fetch's retry policy
// (Resume*). Its methods are safe for concurrent use.
type Materializer struct {
	// set once
	a      *Archive
	dir    string
	key    string
	opts   materialize.Options
	gate   *materialize.Gate
	prog   *materialize.Progress
	src    *countingSource // the archive's source, counting this job's reads
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{}

	// job is the current job; run replaces one that failed.
	job atomic.Pointer[materialize.Job]
	// reader is set by the job's goroutine before it runs the job.
	reader atomic.Pointer[index.Reader]
	// seenFiles and seenBytes count the regular files, and their stored
	// bytes, that the first pass has handed to the job so far: the
	// totals until the job knows its own (Status).
	seenFiles, seenBytes atomic.Int64
	// started is set by Run; err is the job's result (or why it did not
	// start), set before done is closed.
	started bool
	err     error
}

// The pauses of a materialization that a failure stopped, before it is
// opened again: fetch's backoff, under a ceiling doubling from the first
// to the last.
const (
	ResumeFirstDelay = time.Second
	ResumeMaxDelay   = time.Minute
)

// errNoSpans stops the materialization of an archive without checkpoints.
var errNoSpans = errors.New("the archive has no checkpoints to read it in spans; run tarmount extract instead")

// Materialize opens the materialization of the archive into dir, which
// is refused here when it is not empty and tarmount did not make it
// (unless Overwrite). A dir tarmount made from another version of the
// archive is upgraded in place: what is unchanged is kept, and served
// from dir at once (materialize's upgrade.go). It must be called before Start: without an index, the first
// pass stages the files into it as it goes. Run starts it; Close stops it.
func (a *Archive) Materialize(dir string, o MaterializeOptions) (*Materializer, error) {
	m := &Materializer{a: a, gate: &materialize.Gate{}, prog: &materialize.Progress{}, done: make(chan struct{}),
		key: a.Identity().Key(), src: &countingSource{Source: a.src}}
	m.opts = materialize.Options{
		Writers: o.Writers, Decoders: o.Decoders, Overwrite: o.Overwrite, Sync: o.Sync,
		Gate: m.gate, Progress: m.prog, Logger: a.log, Previous: a.previousIndex,
	}
	job, err := materialize.Open(dir, m.key, m.opts)
	if err != nil {
		return nil, err
	}
	m.job.Store(job)
	m.dir = job.Dir()
	m.ctx, m.cancel = context.WithCancel(context.Background())
	a.bg = m
	return m, nil
}

// Dir is the directory written.
func (m *Materializer) Dir() string { return m.dir }

// Progress counts what the current run of the job has to do and has
// done; the counts start again when a stopped job resumes.
func (m *Materializer) Progress() *materialize.Progress { return m.prog }

// Done is closed when the materialization has ended: complete, failed
// for good, or stopped by Close.
func (m *Materializer) Done() <-chan struct{} { return m.done }

// Fetched is the bytes and requests the materialization read from the
// source.
func (m *Materializer) Fetched() (bytes, requests int64) {
	return m.src.n.Load(), m.src.requests.Load()
}

// SpanDecodes is the spans the materialization decoded.
func (m *Materializer) SpanDecodes() int64 {
	if r := m.reader.Load(); r != nil {
		return r.Stats().SpanDecodes
	}
	return 0
}

// OpenLocal opens the copy of id in DIR if the current job has it
// complete (fs.Local). id is a pass id when the mount was made during
// its index pass.
func (m *Materializer) OpenLocal(id index.EntryID) (*os.File, bool) {
	if m.a.live != nil {
		fid, ok := m.a.live.FinalID(id)
		if !ok {
			return nil, false
		}
		id = fid
	}
	return m.job.Load().OpenLocal(id)
}

// State reports whether the job has made DIR complete, or why it
// stopped ("" while it runs).
func (m *Materializer) State() (complete bool, stopped string) {
	select {
	case <-m.done:
		if m.err != nil {
			return false, m.err.Error()
		}
		return true, ""
	default:
		return m.job.Load().Complete(), ""
	}
}

// staged reports whether the index pass staged the archive's files into
// the job: it ran with the job, and succeeded.
func (m *Materializer) staged() bool { return m.a.live != nil && m.a.ix != nil }

// staging reports whether a pass (the first pass, or the staging pass)
// hands the archive's files to the job, which must not run before it
// ends.
func (m *Materializer) staging() bool { return m.a.live != nil || (m.a.stage != nil && m.a.stage.pass) }

// Run starts the materialization in the background, after the first
// pass when one runs. It must be called once, after Start.
func (m *Materializer) Run() {
	m.started = true
	go func() {
		defer close(m.done)
		m.err = m.run()
	}()
}

func (m *Materializer) run() error {
	a, log := m.a, m.a.log
	if a.passDone != nil {
		select {
		case <-a.passDone:
		case <-m.ctx.Done():
			return m.ctx.Err()
		}
		if a.ix == nil {
			// What the failed pass staged was never checked to the
			// end of the archive.
			m.job.Load().Abandon()
			return fmt.Errorf("index pass: %w", a.passErr)
		}
	}
	if s := a.stage; s != nil {
		select {
		case <-s.done:
		case <-m.ctx.Done():
			return m.ctx.Err()
		}
		if s.err != nil {
			if ok, _ := a.keptResumePoint(); ok && errors.Is(s.err, context.Canceled) {
				// Stopped: the next pass resumes over the files
				// this one placed, which stay.
				m.job.Load().Close()
				return fmt.Errorf("%w: %w", index.ErrPassFailed, s.err)
			}
			// What it staged was never checked to the end.
			m.job.Load().Abandon()
			if errors.Is(s.err, context.Canceled) || !resumable(s.err) {
				return fmt.Errorf("%w: %w", index.ErrPassFailed, s.err)
			}
			// Not for the archive (a full disk, say): the job opens
			// DIR again and reads the spans from the decoded copy,
			// which a decode pass writes (decode.go), and resumes
			// after a pause if it fails again.
			m.job.Load().Close()
			job, err := materialize.Open(m.dir, m.key, m.opts)
			if err != nil {
				return err
			}
			m.resetProgress()
			m.job.Store(job)
		}
	}
	// Its own reader straight on the source: span decodes neither go
	// through nor evict the mount's caches (memory and disk). Each
	// decode is admitted by the gate, once its bytes are in, so that it
	// yields the cores to reads through the mount.
	// A stream-only archive's spans come from its decoded copy, which
	// may be growing (decode.go).
	ropts := index.ReaderOptions{Readahead: -1, Logger: log, Local: a.local(), Admit: m.gate.Acquire}
	reader := index.NewReader(a.ix, m.src, ropts)
	m.reader.Store(reader)
	// What reads through the mount fetched and decoded (files opened at
	// boot) is taken from its caches, not fetched again, and the other
	// way round: a read joins the span being decoded here.
	spans := materialize.IndexSpans(reader, m.src, materialize.Peers{Spans: a.reader, ReadAt: a.blocks.ReadBeside})
	if a.reader != nil {
		a.reader.Borrow(reader)
		defer a.reader.Borrow(nil)
	}
	if spans == nil && !m.staged() && !m.job.Load().Complete() {
		log.Error("materialize: this archive has no checkpoints to read it in spans; run tarmount extract instead", "path", m.dir)
		return errNoSpans
	}
	start := time.Now()
	log.Info("materializing", "path", m.dir)
	policy := fetch.RetryOptions{MaxAttempts: math.MaxInt, BaseDelay: ResumeFirstDelay, MaxDelay: ResumeMaxDelay,
		Deadline: math.MaxInt64, Logger: log}
	first := true
	err := fetch.Retry(m.ctx, policy, "materialize interrupted; files not yet written are served from the archive until it resumes",
		m.dir, resumable, func(ctx context.Context) error {
			if !first {
				// A job runs once: close it, and open DIR again,
				// which resumes from the journal. Meanwhile files
				// are read from the archive.
				m.job.Load().Close()
				job, err := materialize.Open(m.dir, m.key, m.opts)
				if err != nil {
					return final{err}
				}
				m.resetProgress()
				m.job.Store(job)
			}
			first = false
			return m.job.Load().Run(ctx, a.ix, spans)
		})
	if err != nil {
		if m.ctx.Err() == nil {
			log.Error("materialize failed; files not yet written are served from the archive", "path", m.dir, "err", err)
		}
		return err
	}
	log.Info("materialized", "path", m.dir, "files", m.prog.Files.Load(), "bytes", m.prog.Bytes.Load(),
		"fetched", m.src.n.Load(), "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// final marks an error after which a materialization is not resumed.
type final struct{ error }

func (f final) Unwrap() error { return f.error }

// resumable reports whether a materialization that failed with err may
// complete if opened again: not when the archive changed or is gone, its
// data does not match the index, or DIR is not ours. Anything else (the
// source unreachable or refusing for a while, a full disk) may pass.
func resumable(err error) bool {
	if _, ok := errors.AsType[final](err); ok {
		return false
	}
	for _, e := range []error{fetch.ErrChanged, fetch.ErrNotFound, fetch.ErrNoRange, index.ErrCorrupt,
		index.ErrBadIndex, index.ErrPassFailed, materialize.ErrNotOurs, errNoSpans} {
		if errors.Is(err, e) {
			return false
		}
	}
	return true
}

// resetProgress starts the counts of a new run of the job: it counts
// what is left to do.
func (m *Materializer) resetProgress() {
	p := m.prog
	for _, c := range []*atomic.Int64{&p.FilesTotal, &p.BytesTotal, &p.Files, &p.Bytes, &p.Input, &p.Entries} {
		c.Store(0)
	}
	p.TotalsKnown.Store(false)
}

// stop ends the job (resumable) and waits for it. A job that a pass (the
// first, or the staging pass) staged into, and that did not get to run,
// is abandoned: what was staged was never checked to the end of the
// archive.
func (m *Materializer) stop() {
	m.cancel()
	if m.started {
		<-m.done
	}
	if m.staging() && !m.started {
		m.job.Load().Abandon()
	}
	m.job.Load().Close()
	if r := m.reader.Load(); r != nil {
		r.Close()
	}
}
