package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/index/tarscan"
	"github.com/tarmount/tarmount/materialize"
)

// The first pass: one streamed read of the archive that records every
// member and the decompressor checkpoints, and saves the index. It runs
// in the foreground (Build), or in the background while a mount already
// serves what it has seen (StartPass); a materialization opened before
// it (Materialize) is fed the members as they pass.

// Build makes the archive readable: it runs the first pass when Open
// found no index, saving the index, and opens the reader. It must not be
// called while a pass started by StartPass runs, nor concurrently with
// itself.
func (a *Archive) Build(ctx context.Context) error {
	if a.passDone != nil {
		return fmt.Errorf("build %s: a pass is running or ran in the background", a)
	}
	if a.reader != nil {
		return nil
	}
	// Status, meanwhile, reports the pass and reads neither a.ix nor
	// a.reader (indexed).
	a.building.Store(true)
	defer a.building.Store(false)
	if a.ix == nil {
		if err := a.build(ctx, nil, nil); err != nil {
			a.passErr = err
			return err
		}
	}
	a.openReader()
	return nil
}

// Start makes the archive ready to be served by a mount: with an index,
// at once (a stream-only archive whose decoded copy is missing starts its
// decode pass, decode.go, or its staging pass, staging.go); without one and wait false, it starts the first pass in the
// background (StartPass) and returns once the pass has read the first
// member, which gives the root its attributes (an object that is no tar
// archive is refused here); with wait, once the pass has ended (Build).
// A materialization opened before (Materialize) is fed the members by
// the pass.
func (a *Archive) Start(ctx context.Context, wait bool) error {
	if a.ix != nil || wait {
		if err := a.Build(ctx); err != nil {
			return err
		}
		// A stream-only archive known without its decoded copy: the
		// index serves while the copy is written again (decode.go), or
		// from the materialized directory, while the archive is decoded
		// into it or when it is complete (staging.go).
		if !a.startStaging() {
			a.startDecode()
		}
		return nil
	}
	a.StartPass(ctx)
	if err := a.live.WaitStarted(ctx); err != nil {
		a.stopPass()
		if a.passErr != nil {
			return a.passErr
		}
		return err
	}
	return nil
}

// StartPass starts the first pass of an archive that has no index in the
// background, and returns at once: Tree serves what the pass has seen
// (index.Live). The pass hands each member to the materialization, if
// any, then saves the index and opens the reader, through which the tree
// then serves. PassDone is closed when it ends; Close stops it.
func (a *Archive) StartPass(ctx context.Context) {
	var stage func(*tarscan.Header, io.Reader) error
	if a.bg != nil {
		stage = a.bg.job.Load().Stage
	}
	// Reads during the pass find most of what they need in the blocks
	// the pass brought in. A stream-only archive's spans are read from
	// its decoded copy as the pass writes it.
	a.passCopy = &decodedWriter{path: a.decodedPath(), limit: a.opts.CacheDecoded, log: a.log}
	a.live = index.NewLive(a.blocks, index.ReaderOptions{CacheBytes: a.opts.CacheMem / 2, Logger: a.log, Local: a.passCopy})
	ctx, a.cancelPass = context.WithCancel(ctx)
	a.passDone = make(chan struct{})
	go func() {
		defer close(a.passDone)
		if err := a.build(ctx, a.live, stage); err != nil {
			a.passErr = err
			a.live.Fail(err)
			if ctx.Err() == nil {
				a.log.Error("index pass failed: reads that need it fail", "src", a.String(), "err", err)
			}
			return
		}
		a.openReader()
		a.live.Serve(a.reader)
	}()
}

// Indexing reports whether the archive is served during its first pass
// (StartPass), whether or not the pass has ended.
func (a *Archive) Indexing() bool { return a.live != nil }

// PassDone is closed when the pass started by StartPass ends; nil
// without one.
func (a *Archive) PassDone() <-chan struct{} { return a.passDone }

// PassErr is why the first pass failed (StartPass's, or Build's); nil
// while it runs and when it succeeded.
func (a *Archive) PassErr() error {
	if !a.indexed() {
		return nil
	}
	return a.passErr
}

// stopPass cancels the pass started by StartPass, if it still runs, and
// waits for it. It is idempotent.
func (a *Archive) stopPass() {
	if a.passDone != nil {
		a.cancelPass()
		<-a.passDone
	}
}

// build runs the index pass (publishing to live and handing members to
// stage, when not nil), keeps the decoded copy of a stream-only archive,
// and saves the index.
func (a *Archive) build(ctx context.Context, live *index.Live, stage func(*tarscan.Header, io.Reader) error) error {
	w := a.passCopy
	if w == nil && !a.opts.IndexOnly {
		w = &decodedWriter{path: a.decodedPath(), limit: a.opts.CacheDecoded, log: a.log}
		defer w.closeReads()
	}
	var decoded io.WriterAt
	if w != nil {
		defer w.discard()
		decoded = w
	}
	ix, err := a.pass(ctx, decoded, live, stage, nil, false, nil)
	if err != nil {
		return fmt.Errorf("index %s: %w", a, err)
	}
	if ix.StreamOnly() && w != nil {
		if err := w.commit(ix.TarSize); err != nil {
			return err
		}
		if a.decoded = openDecoded(a.decodedPath(), ix.TarSize); a.decoded == nil {
			return fmt.Errorf("decoded copy %s vanished", a.decodedPath())
		}
	}
	a.ix, a.from = ix, FromBuilt
	a.saveIndex(ix, nil)
	return nil
}

// pass reads the whole archive through the blocks and returns its index
// (its errors say nothing of the archive: the caller adds what it did),
// writing the decoded stream to decoded, publishing to live and handing
// the members to stage and their digests to onDigest, each when not nil.
// It logs its start, its progress every 2 s and its end, unless quiet
// (an extraction shows its own progress, from passProg).
//
// into, when not nil, is the job of a one-pass extraction that stage
// feeds: without a decoded copy, the pass resumes inside a stream-only
// span only over the files the job already holds, and keeps resume
// points there only once the job holds the files before them
// (materialize.Job.StagedBefore, TrustPlaced).
func (a *Archive) pass(ctx context.Context, decoded io.WriterAt, live *index.Live, stage func(*tarscan.Header, io.Reader) error,
	onDigest func(dataOffset int64, digest uint64), quiet bool, into *materialize.Job) (*index.Index, error) {
	start := time.Now()
	size := a.Identity().Size
	log := a.log
	var progress func(consumed int64)
	if !quiet {
		log.Info("indexing", "src", a.String(), "size", size)
		last := start
		progress = func(consumed int64) {
			if now := time.Now(); now.Sub(last) >= 2*time.Second {
				last = now
				log.Info("indexing", "done", fmt.Sprintf("%.0f%%", 100*float64(consumed)/float64(max(size, 1))),
					"rate_mbps", fmt.Sprintf("%.0f", float64(consumed)/now.Sub(start).Seconds()/1e6))
			}
		}
	}
	// A pass that stopped early kept a partial index: this one resumes
	// at its latest checkpoint and fetches only the rest, past the bytes
	// it kept from there on (its tail).
	// Only one pass at a time keeps it, and the decoded copy beside it: a
	// second pass over the same version (another process, say) runs
	// without either.
	partial := partialPath(a.opts.CacheDir, a.base.String(), a.Identity())
	unlock, ok := lockPass(partial)
	if !ok {
		log.Info("another pass over this archive keeps its partial index: this one keeps none", "src", a.String())
		partial = ""
	}
	defer unlock()
	a.passProg.partial.Store(partial != "")
	resume, err := index.LoadPartial(partial, a.Identity())
	if err == nil && a.opts.Span > 0 && resume.Span != a.opts.Span {
		// What it resumes keeps its own span: asked for another, it
		// starts over.
		resume, err = nil, index.ErrNoPartial
	}
	switch {
	case err == nil:
		log.Info("resuming the index pass", "src", a.String(), "members", resume.Members(),
			"done", fmt.Sprintf("%.0f%%", 100*float64(resume.In())/float64(max(size, 1))), "kept", resume.From()-resume.In())
	case err != nil && !errors.Is(err, index.ErrNoPartial):
		log.Warn("could not read the partial index: the pass starts from the beginning", "path", partial, "err", err)
		fallthrough
	default:
		resume = nil
	}
	// A pass resumed inside a stream-only span writes on into the
	// decoded copy the stopped one kept, which serves the members before
	// it; without that copy, only a pass that serves no reads (an index
	// build) may resume there.
	kept, _ := decoded.(*decodedWriter)
	// An extraction resumes over the files an earlier one placed before
	// the resume point, when DIR's journal lists them all; else it reads
	// those members in spans, or starts over inside a stream-only span.
	trust := into != nil && resume != nil && holdsBefore(into, resume)
	if kept != nil && partial != "" {
		// A crash leaves the copy under the name the next pass
		// looks for, with the partial index's latest mid point.
		kept.keepAsItGoes()
	}
	switch {
	case resume == nil || resume.LocalBefore() == 0:
		if kept != nil && partial != "" {
			kept.keep() // none to keep: removes a stale one (not another pass's)
		}
	case kept != nil && kept.adopt(resume.LocalBefore()):
	case kept == nil && a.opts.IndexOnly && !resume.ReadsLocal():
	case kept == nil && trust && !resume.ReadsLocal():
	default:
		log.Info("the decoded copy the stopped pass kept is missing: the pass starts over", "src", a.String())
		resume = resume.WithoutLocal()
	}
	if trust && resume != nil {
		into.TrustPlaced(resume.Next())
	}
	var from int64
	if resume != nil {
		from = resume.From()
	}
	stream := a.blocks.Stream(ctx, from)
	defer stream.Close()
	pp := &a.passProg
	pp.begin(start)
	if resume != nil {
		pp.read.Store(from)
		pp.base.Store(from)
		pp.members.Store(int64(resume.Members()))
	}
	var seenFiles, seenBytes *atomic.Int64
	if a.bg != nil {
		seenFiles, seenBytes = &a.bg.seenFiles, &a.bg.seenBytes
	}
	onMember := func(h *tarscan.Header, data io.Reader) error {
		pp.members.Add(1)
		if h.Typeflag == tarscan.TypeReg && seenFiles != nil {
			seenFiles.Add(1)
			seenBytes.Add(max(h.StoredSize, 0))
		}
		if stage == nil {
			return nil // what is not read is skipped
		}
		return stage(h, data)
	}
	// With an index, open said its notes: a pass that reads the archive
	// again (to decode it, or to extract it in one stream) does not.
	bopts := index.BuildOptions{Span: a.opts.Span, Logger: log, QuietNotes: a.ix != nil, Live: live, OnMember: onMember,
		OnMemberDigest: onDigest, OnProgress: progress, Resume: resume, Partial: partial, Cached: a.blocks.ReadCached}
	if decoded != nil {
		bopts.Local = decoded
	}
	// Without a decoded copy to keep, a pass resumes inside a
	// stream-only span only to build an index or to extract (over the
	// files it placed; see above). An extraction follows the decoder's
	// state there only from a remote archive of FrameResumeMin or more:
	// that costs about a tenth of the pass's CPU, a local archive that
	// starts over fetches nothing again, and a small one little.
	bopts.NoMidPoints = kept == nil && !a.opts.IndexOnly &&
		(into == nil || fetch.IsLocal(a.base) || a.Identity().Size < a.opts.FrameResumeMin)
	if into != nil && kept == nil {
		bopts.Holds = into.StagedBefore
	}
	if !fetch.IsLocal(a.base) {
		// A gzip pass decodes on every core only from a local file, for
		// now: from a remote object it is paced by the fetch, and the
		// parallel inflater, which reads some 20 MiB ahead, has not been
		// measured there.
		bopts.Workers = 1
	}
	ix, err := index.Build(ctx, countingReader{stream, &pp.read}, a.Identity(), bopts)
	pp.finish(err == nil)
	if err != nil {
		if kept != nil && ctx.Err() != nil {
			if _, mid := a.keptResumePoint(); mid {
				// Stopped: a pass resumed inside a stream-only
				// span writes on into what this one wrote.
				kept.keep()
			}
		}
		return nil, err
	}
	if quiet {
		return ix, nil
	}
	st := a.blocks.Stats()
	log.Info("indexed", "entries", ix.Len(), "codec", ix.Codec.String(), "checkpoints", len(ix.Checkpoints),
		"elapsed", time.Since(start).Round(time.Millisecond), "fetched", st.BytesFetched)
	return ix, nil
}

// keptResumePoint reports whether the latest pass kept a partial index to
// resume from, and whether that resumes inside a stream-only span
// (index.Partial.LocalBefore): the next pass then needs what the stopped
// one wrote before it (its decoded copy, or the files it placed).
func (a *Archive) keptResumePoint() (ok, mid bool) {
	if !a.passProg.partial.Load() {
		return false, false // another pass keeps it
	}
	p, err := index.LoadPartial(partialPath(a.opts.CacheDir, a.base.String(), a.Identity()), a.Identity())
	return err == nil, err == nil && p.LocalBefore() > 0
}

// holdsBefore reports whether job holds every regular file with data
// before where p resumes, as an earlier job's Stage placed it.
func holdsBefore(job *materialize.Job, p *index.Partial) bool {
	for _, h := range p.Headers() {
		if h.Typeflag == tarscan.TypeReg && h.StoredSize > 0 && !job.Placed(h.DataOffset, h.Name) {
			return false
		}
	}
	return true
}

// lockPass takes the lock of the pass that keeps the partial index at
// partial (KEY.lock beside it, locked with flock, so a crash releases
// it; it stays, empty, until the version leaves the cache);
// it reports false when another pass holds it. unlock releases it.
func lockPass(partial string) (unlock func(), ok bool) {
	if partial == "" {
		return func() {}, false
	}
	if err := os.MkdirAll(filepath.Dir(partial), 0o755); err != nil {
		return func() {}, true // the partial index will not be written either
	}
	f, err := os.OpenFile(strings.TrimSuffix(partial, ".partial")+".lock", os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return func() {}, true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return func() {}, !errors.Is(err, syscall.EWOULDBLOCK)
	}
	return func() { f.Close() }, true
}

// passProgress counts the first pass's progress, for Status. The pass
// writes it, any goroutine reads it: every field is atomic.
type passProgress struct {
	start, end atomic.Int64 // Unix nanoseconds; 0 before the pass started, and while it runs
	read       atomic.Int64 // bytes of the archive as stored read by the pass (from the start, when resumed)
	members    atomic.Int64 // archive members (tar headers) read by the pass (and the one it resumed)
	ok         atomic.Bool  // the pass ended and succeeded
	base       atomic.Int64 // where the pass resumed fetching, from an earlier one's partial index (0: from the start)
	// partial says that the latest pass kept the partial index (it held
	// the pass lock): keptResumePoint reads what it wrote, not another
	// process's.
	partial atomic.Bool
}

func (p *passProgress) begin(t time.Time) {
	p.read.Store(0)
	p.members.Store(0)
	p.end.Store(0)
	p.ok.Store(false)
	p.base.Store(0)
	p.start.Store(t.UnixNano())
}

func (p *passProgress) finish(ok bool) {
	p.ok.Store(ok)
	p.end.Store(time.Now().UnixNano())
}

// status is the pass's progress through an archive of size bytes; nil
// when no pass ran in this Archive.
func (p *passProgress) status(size int64) *PassStatus {
	start := p.start.Load()
	if start == 0 {
		return nil
	}
	// end before the counts: a pass seen ended has its final counts.
	end, ok := p.end.Load(), p.ok.Load()
	ps := &PassStatus{BytesRead: p.read.Load(), BytesTotal: size, Entries: p.members.Load(), Running: end == 0,
		ResumedFrom: p.base.Load()}
	now := time.Now().UnixNano()
	if end != 0 {
		now = end
	}
	elapsed := time.Duration(now - start).Seconds()
	ps.ElapsedSeconds = elapsed
	if size > 0 {
		ps.Percent = min(100, 100*float64(ps.BytesRead)/float64(size))
	}
	if elapsed > 0 {
		ps.RateBytesPerSecond = float64(ps.BytesRead-p.base.Load()) / elapsed
	}
	switch {
	case ok:
		ps.Percent = 100
	case ps.Running && ps.RateBytesPerSecond > 0:
		ps.ETASeconds = float64(max(size-ps.BytesRead, 0)) / ps.RateBytesPerSecond
	}
	return ps
}

// countingReader counts the bytes read, and skipped, through it into n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// Discard skips n bytes, without reading them when the reader can skip
// (a plain tar pass hops over member data).
func (c countingReader) Discard(n int64) (int64, error) {
	var k int64
	var err error
	if d, ok := c.r.(interface{ Discard(int64) (int64, error) }); ok {
		k, err = d.Discard(n)
	} else {
		k, err = io.CopyN(io.Discard, c.r, n)
	}
	c.n.Add(k)
	return k, err
}
