package archive

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/materialize"
)

// The staging pass. A mount with --materialize of a stream-only archive
// (one zstd frame) whose index is known but whose decoded copy is not
// there (a published index on a fresh machine) would decode the archive
// twice over on disk: the decode pass writes the decoded copy (decode.go),
// and the materialization reads every span back from it, checks it and
// writes the files. Instead, one pass decodes the archive and hands each
// member's data to the materialization (materialize.Job.Stage), as a
// one-pass extraction does, and writes no decoded copy: the files are the
// only copy, written once.
//
// Reads through the mount meanwhile are served from DIR (stagedTree):
// a regular file waits until the pass has placed it there whole, and is
// read from there once the pass has seen that its data hashes to the
// digest the index records for it (index.Index.MemberDigest), under the
// name the index gives it. So the bytes a reader gets are checked against
// the index, as a span read from a decoded copy is.
//
// When it fails, a read of a file not yet in DIR is served from the
// archive: its decoded copy is then written by a decode pass that the
// read starts (waitingCopy). The materialization stops with the error
// when it is the archive's (changed, gone, corrupt); else (a full disk,
// say) it opens DIR again and reads its spans from that copy, resuming
// after a pause as after any such failure (Materializer.run). When
// DIR is complete already (a later boot), there is no pass: reads wait
// for the job to open their file in DIR, and nothing is decoded unless
// the job fails.
//
// A pass that is stopped (an unmount) or killed keeps the files it
// placed, and its partial index a resume point (inside the frame, from a
// remote archive of Options.FrameResumeMin or more) before which every
// file is placed and journaled
// (index.BuildOptions.Holds): the next boot's pass resumes there over
// those files (materialize.Job.TrustPlaced), and a read of one is served
// from DIR once it hashes to the index's digest (checkTrusted).
//
// An upgrade of DIR (which writes only what changed), and an index that
// records no member digests, take the decode pass instead.

// staging is the staging pass of an archive and what its reads wait for.
// Its methods are safe for concurrent use.
type staging struct {
	// set once
	a      *Archive
	m      *Materializer
	job    *materialize.Job // the job the pass stages into
	pass   bool             // a pass runs: DIR was not complete
	cancel context.CancelFunc
	done   chan struct{} // closed when the pass has ended
	err    error         // why it failed; set before done is closed

	mu sync.Mutex
	// sums holds the digest of each regular member the pass has read, by
	// where its data starts; changed is closed when it grows, nil while
	// nobody waits. Guarded by mu.
	sums    map[int64]uint64
	changed chan struct{}
}

// startStaging starts the staging pass when it applies (see above), and
// reports whether the mount is served from DIR: with the pass, or
// without one into a DIR that is complete already.
func (a *Archive) startStaging() bool {
	m := a.bg
	if a.copyW == nil || m == nil {
		return false
	}
	job := m.job.Load()
	s := &staging{a: a, m: m, job: job, cancel: func() {}, done: make(chan struct{}), sums: map[int64]uint64{}}
	switch {
	case job.Complete():
		// Every file is there: a read waits for the job to open it
		// (Run, at once), and nothing is decoded.
		close(s.done)
		a.stage = s
		return true
	case job.Replacing() || !a.ix.HasMemberDigests():
		return false
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancel, s.pass = cancel, true
	a.stage = s
	a.log.Info("decoding the archive into the materialized directory while the index serves",
		"src", a.String(), "path", m.dir, "index", a.from)
	go func() {
		defer close(s.done)
		s.err = s.run(ctx)
		if s.err != nil && ctx.Err() == nil {
			a.log.Error("decoding the archive into the materialized directory failed: files not yet there are read from the archive",
				"src", a.String(), "path", m.dir, "err", s.err)
		}
	}()
	return true
}

// run is the staging pass: it checks that the archive decoded to the
// stream the index describes.
func (s *staging) run(ctx context.Context) error {
	a := s.a
	start := time.Now()
	ix, err := a.pass(ctx, nil, nil, s.job.Stage, s.seen, true, s.job)
	if err != nil {
		return fmt.Errorf("decode %s into %s: %w", a, s.m.dir, err)
	}
	if err := a.checkStream(ix); err != nil {
		return err
	}
	a.log.Info("decoded into the materialized directory", "path", s.m.dir, "len", ix.TarSize,
		"elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// seen records the digest of a member's data, which the pass has read
// (index.BuildOptions.OnMemberDigest).
func (s *staging) seen(dataOffset int64, digest uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sums[dataOffset] = digest
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

// sum returns the digest the pass saw for the data at dataOffset, and a
// channel closed when it sees another.
func (s *staging) sum(dataOffset int64) (digest uint64, ok bool, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	digest, ok = s.sums[dataOffset]
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return digest, ok, s.changed
}

// stop stops the pass and waits for it. It is idempotent.
func (s *staging) stop() {
	s.cancel()
	<-s.done
}

// failed returns the pass's error once it has ended; nil while it runs
// and when it succeeded.
func (s *staging) failed() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// open opens the file id in DIR for a read through the mount, once it
// is there and checked: materialized, or placed whole by the pass, with
// the index's name and the data the index records. It returns nil when
// the file is to be read from the archive: not a regular file with data,
// or the pass or the materialization failed first.
func (s *staging) open(ctx context.Context, id index.EntryID) (*os.File, error) {
	ix := s.a.ix
	e := ix.Entry(id)
	if e == nil || e.Type != index.TypeReg || e.Size == 0 {
		return nil, nil
	}
	// A sparse file waits to be materialized: its digest covers its
	// data, not where the sparse map puts it.
	want, hasSum := ix.MemberDigest(id)
	hasSum = hasSum && !e.Sparse
	off, name := int64(e.DataOffset), ix.Path(id)
	var tick *time.Ticker
	for {
		if f, ok := s.m.OpenLocal(id); ok {
			return f, nil
		}
		// The channels before the checks: nothing is missed between.
		placed := s.job.PlacedChanged()
		got, seen, summed := s.sum(off)
		if hasSum && !seen && s.job.IsTrusted(off) {
			// Placed by the stopped pass this one resumed after:
			// checked here, once.
			if f, ok := s.checkTrusted(off, name, want); ok {
				return f, nil
			}
		}
		if hasSum && seen && got == want {
			if f, p, ok := s.job.OpenPlaced(off); ok {
				if p == name {
					return f, nil
				}
				f.Close() // another member's name: Run decides
			}
		}
		if tick == nil {
			select {
			case <-placed:
			case <-summed:
			case <-s.done:
				if s.err != nil {
					return nil, nil
				}
				// Run places what the pass did not: poll until
				// it has, or the materialization ends.
				tick = time.NewTicker(5 * time.Millisecond)
				defer tick.Stop()
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			continue
		}
		select {
		case <-tick.C:
		case <-s.m.done:
			if f, ok := s.m.OpenLocal(id); ok {
				return f, nil
			}
			return nil, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// checkTrusted opens the file an earlier staging pass placed for the
// member whose data starts at off (materialize.Job.IsTrusted), and
// returns it if it is under the index's name and its data hashes to
// want; the digest is then recorded as the pass records the ones it sees.
func (s *staging) checkTrusted(off int64, name string, want uint64) (*os.File, bool) {
	f, p, ok := s.job.OpenPlaced(off)
	if !ok {
		return nil, false
	}
	if p == name {
		d, err := index.DigestOf(f)
		if err == nil && d == want {
			if _, err := f.Seek(0, io.SeekStart); err == nil {
				s.seen(off, d)
				return f, true
			}
		}
		if err == nil {
			// Recorded, so that it is not read again: the read waits
			// for the materialization.
			s.seen(off, d)
			s.a.log.Warn("a file the stopped pass placed differs from the archive", "path", name)
		}
	}
	f.Close()
	return nil, false
}

// stagedTree serves a mount while the staging pass runs, and after it:
// regular files from DIR (staging.open), the rest from the archive.
type stagedTree struct {
	Tree
	s *staging
}

func (t stagedTree) ReadAt(ctx context.Context, id index.EntryID, p []byte, off int64) (int, error) {
	f, err := t.s.open(ctx, id)
	if err != nil {
		return 0, err
	}
	if f == nil {
		return t.Tree.ReadAt(ctx, id, p, off)
	}
	defer f.Close()
	return f.ReadAt(p, off)
}
