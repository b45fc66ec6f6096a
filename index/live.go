package index

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/tarmount/tarmount/index/tarscan"
)

// ErrPassFailed wraps the error that ended an index pass a Live was
// serving: every call waiting for the pass then fails with it.
var ErrPassFailed = errors.New("index: the index pass failed")

// Live serves an archive while its first index pass runs (see
// BuildOptions.Live), so that a mount answers as soon as the pass starts:
//
//   - names the pass has seen are found at once; WaitName waits for a
//     name it has not seen yet until the pass reaches it or ends;
//   - ReadAt serves data the pass has passed: the bytes it decoded last
//     (the last two spans or so) from its own output, at once, and older
//     ones decoded again from the checkpoints already recorded, whose
//     compressed bytes are usually still in the block cache; it waits
//     for data ahead of the pass;
//   - once the pass has ended and the caller has made the Reader of the
//     finished index (Serve), everything is served by that Reader.
//
// Entry ids are those of the pass (in archive order, names replaced by a
// later member included) for the whole life of a Live: the ids of the
// finished index, which leaves out entries no name reaches, are
// translated. A filesystem can thus keep its inode numbers across Serve.
//
// Lock order: Live.mu, then the mutex of a Reader of the partial index.
//
// Live is safe for concurrent use. Close stops its readers; it does not
// stop the pass.
type Live struct {
	// set once
	src  Source
	opts ReaderOptions

	mu sync.Mutex
	// guarded by mu
	b       *builder  // the pass's entries and names; nil before the pass starts
	ix      *Index    // the pass's index: Checkpoints and Digests grow under mu
	known   int       // checkpoints checked for kindLocal so far
	local   int       // the first span that only a local copy serves (-1: none yet); reads stop there without opts.Local
	snap    *liveSnap // reader over the spans complete when it was made
	started bool      // the pass has read a member
	built   bool      // the pass ended: every name is known
	ids     liveIDs   // set when built
	err     error     // why the pass failed
	closed  bool
	retired ReaderStats  // counters of the readers of the partial index closed so far
	recent  recentOutput // the pass's latest decoded bytes (compressed archives), while the mount is in use
	recentN int64        // reads served from recent

	// Waiters, each woken only by what it waits for (guarded by mu): a
	// pass of a million members must not wake every waiter a million
	// times. Each is closed, and dropped, when it is woken; every one is
	// woken when the pass starts, ends or fails, or l is served or closed
	// (notifyLocked).
	changed  chan struct{}             // WaitStarted, WaitListing; nil when nobody waits
	nameWait map[dirName]chan struct{} // WaitName, by the name waited for
	dataWait []dataWaiter              // reader, by the end of the tar stream it needs
	wakeups  atomic.Int64              // waits woken, for tests

	// The pass copies its output to recent only while the tree is in
	// use: up to ahead bytes past usedAt, the decoded offset at the
	// latest call of a reader (-1: none yet). An idle mount's pass pays
	// no copy.
	usedAt, ahead, decodedEnd atomic.Int64

	// served is set by Serve, under mu; once set, every call reads it
	// without taking mu.
	served atomic.Pointer[served]
}

// liveIDs translate between the ids of the pass and those of the finished
// index.
type liveIDs struct {
	fwd  []EntryID          // pass id -> id in the finished index (noEntry: dropped); nil: same ids
	inv  []EntryID          // id in the finished index -> pass id; nil: same ids
	dead map[EntryID]bentry // entries the finished index leaves out
}

// served is the finished index's Reader, with the ids of the pass.
type served struct {
	r *Reader
	liveIDs
}

// growingCopy reads the decoded copy that the pass writes
// (BuildOptions.Local) while it grows: past its current end it reads
// zeros, the holes that a sparse write leaves until the copy gets its
// size. The digests of complete spans check every byte it returns.
type growingCopy struct{ r io.ReaderAt }

func (g growingCopy) ReadAt(p []byte, off int64) (int, error) {
	n, err := g.r.ReadAt(p, off)
	if err == io.EOF {
		clear(p[n:])
		return len(p), nil
	}
	return n, err
}

// liveCacheSpans is how many decoded spans a reader of the partial index
// keeps.
const liveCacheSpans = 2

// noEntry marks a pass entry that the finished index leaves out.
const noEntry = ^EntryID(0)

// liveSnap is a Reader over an index of the spans complete at one time.
// It is closed once it is replaced and no read holds it.
type liveSnap struct {
	r    *Reader
	refs int // reads holding it, +1 while it is Live.snap
}

// NewLive returns a Live for a pass over the archive that src reads. opts
// are those of the readers it makes of the partial index; Readahead is
// ignored (data ahead of the pass cannot be read ahead, and decoding
// behind it would compete with the pass).
func NewLive(src Source, opts ReaderOptions) *Live {
	opts.Readahead = -1
	if opts.Local != nil {
		opts.Local = growingCopy{opts.Local}
	}
	// One set of decode slots and CPU tokens for all the readers of
	// the partial index, old ones still reading included.
	opts.shared = NewReader(&Index{}, nil, ReaderOptions{})
	l := &Live{src: src, opts: opts, local: -1}
	l.usedAt.Store(-1)
	return l
}

// inUse tells l that a reader uses the tree: the pass keeps its output
// for reads for a while (see usedAt).
func (l *Live) inUse() {
	now := l.decodedEnd.Load()
	for {
		cur := l.usedAt.Load()
		if cur >= now || l.usedAt.CompareAndSwap(cur, now) {
			return
		}
	}
}

// attach is called by Build when the pass starts.
func (l *Live) attach(b *builder, ix *Index) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b, l.ix = b, ix
	if ix.Codec.compressed() {
		l.recent = newRecentOutput(ix.Span)
		l.ahead.Store(int64(l.recent.size))
	}
	l.notifyLocked()
}

// decoded is called by the pass with its decoded bytes at offset at, in
// order, before the tar scan reads them: a read of them is served at once,
// before the checkpoint that completes their span.
func (l *Live) decoded(p []byte, at int64) {
	l.decodedEnd.Store(at + int64(len(p)))
	if u := l.usedAt.Load(); u < 0 || at >= u+l.ahead.Load() {
		return
	}
	l.mu.Lock()
	l.recent.write(p, at)
	l.notifyDataLocked(at + int64(len(p)))
	l.mu.Unlock()
}

// update runs f, which adds checkpoints and span digests, under l.mu, and
// wakes the readers whose bytes are decoded: the spans complete now may
// cover them, or the start of those that the pass's recent output holds.
func (l *Live) update(f func()) {
	l.mu.Lock()
	f()
	if l.ix != nil {
		l.notifyDataLocked(max(l.coveredLocked(), l.decodedEnd.Load()))
	}
	l.mu.Unlock()
}

// dataWaiter is a reader waiting until the tar stream is decoded or
// covered by complete spans up to need.
type dataWaiter struct {
	need int64
	ch   chan struct{}
}

// notifyLocked wakes every waiter.
func (l *Live) notifyLocked() {
	if l.changed != nil {
		close(l.changed)
		l.changed = nil
	}
	for k, ch := range l.nameWait {
		close(ch)
		delete(l.nameWait, k)
	}
	l.notifyDataLocked(math.MaxInt64)
}

// notifyNamesLocked wakes the waiters for names the pass has now seen.
func (l *Live) notifyNamesLocked() {
	for k, ch := range l.nameWait {
		if _, ok := l.b.names[k]; ok {
			close(ch)
			delete(l.nameWait, k)
		}
	}
}

// notifyDataLocked wakes the readers that need the tar stream up to upTo
// at most.
func (l *Live) notifyDataLocked(upTo int64) {
	keep := l.dataWait[:0]
	for _, w := range l.dataWait {
		if w.need <= upTo {
			close(w.ch)
		} else {
			keep = append(keep, w)
		}
	}
	clear(l.dataWait[len(keep):])
	l.dataWait = keep
}

// add adds member h to the pass's entries, like builder.add.
func (l *Live) add(h *tarscan.Header) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	err := l.b.add(h)
	if !l.started {
		l.started = true
		l.notifyLocked()
	} else if len(l.nameWait) > 0 {
		l.notifyNamesLocked()
	}
	return err
}

// finished is called by Build when the pass ends: newID maps the pass's
// ids to those of the finished index (noEntry for dropped entries), or
// err says why the pass failed.
func (l *Live) finished(newID []EntryID, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	defer l.notifyLocked()
	if err != nil {
		if l.err == nil {
			l.err = fmt.Errorf("%w: %w", ErrPassFailed, err)
		}
		return
	}
	l.built = true
	same := true
	for i, id := range newID {
		if id != EntryID(i) {
			same = false
			break
		}
	}
	if same {
		return
	}
	ids := liveIDs{fwd: newID, inv: make([]EntryID, 0, len(newID)), dead: map[EntryID]bentry{}}
	for i, id := range newID {
		if id == noEntry {
			ids.dead[EntryID(i)] = l.b.entries[i]
			continue
		}
		ids.inv = append(ids.inv, EntryID(i))
	}
	l.ids = ids
}

// Serve makes r, a Reader of the index the pass built, serve every call
// from now on. l does not own r: Close does not close it.
func (l *Live) Serve(r *Reader) {
	l.mu.Lock()
	l.served.Store(&served{r: r, liveIDs: l.ids})
	l.b = nil // the finished index has it all
	l.recent.release()
	l.notifyLocked()
	old := l.dropSnapLocked()
	l.mu.Unlock()
	l.retire(old)
}

// Fail ends l with err when the pass could not be used (its index could
// not be read, say): calls that wait for the pass fail with it.
func (l *Live) Fail(err error) { l.finished(nil, err) }

// Close releases the readers of the partial index and fails the calls
// still waiting. It is idempotent.
func (l *Live) Close() error {
	l.mu.Lock()
	l.closed = true
	l.recent.release()
	l.notifyLocked()
	old := l.dropSnapLocked()
	l.mu.Unlock()
	l.retire(old)
	return l.opts.shared.Close()
}

// dropSnapLocked drops l.snap, and returns its reader when no read holds
// it any more: the caller closes it once it has let go of l.mu.
func (l *Live) dropSnapLocked() *Reader {
	s := l.snap
	if s == nil {
		return nil
	}
	l.snap = nil
	// No new read comes to it: what it cached goes now, not once the
	// reads that still hold it are done.
	s.r.dropCache()
	return l.unrefLocked(s)
}

// unrefLocked lets go of a reference to s, and returns its reader when it
// was the last one: the caller closes it once it has let go of l.mu.
func (l *Live) unrefLocked(s *liveSnap) *Reader {
	if s.refs--; s.refs == 0 {
		return s.r
	}
	return nil
}

// retire closes r, a reader of the partial index (if not nil), and
// keeps its counters.
func (l *Live) retire(r *Reader) {
	if r == nil {
		return
	}
	r.Close()
	st := r.Stats()
	l.mu.Lock()
	l.retired.SpanHits += st.SpanHits
	l.retired.SpanMisses += st.SpanMisses
	l.retired.SpanDecodes += st.SpanDecodes
	l.mu.Unlock()
}

// Stats returns the counters of the readers of the partial index, since
// NewLive; CachedBytes is what the current one holds. The finished
// index's Reader counts on its own.
func (l *Live) Stats() ReaderStats {
	l.mu.Lock()
	st, s := l.retired, l.snap
	l.mu.Unlock()
	if s != nil {
		cur := s.r.Stats()
		st.SpanHits += cur.SpanHits
		st.SpanMisses += cur.SpanMisses
		st.SpanDecodes += cur.SpanDecodes
		st.CachedBytes = cur.CachedBytes
	}
	return st
}

// Complete reports whether the finished index serves every call: its
// answers no longer change.
func (l *Live) Complete() bool { return l.served.Load() != nil }

// waitLocked blocks until the pass starts, ends or fails, l is served or
// closed, or ctx ends; it is called with l.mu held and returns with it
// held.
func (l *Live) waitLocked(ctx context.Context) error {
	if err := l.endedLocked(); err != nil {
		return err
	}
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.sleepLocked(ctx, l.changed)
}

// waitNameLocked is waitLocked that also returns once the pass has seen
// name k.
func (l *Live) waitNameLocked(ctx context.Context, k dirName) error {
	if err := l.endedLocked(); err != nil {
		return err
	}
	ch := l.nameWait[k]
	if ch == nil {
		if l.nameWait == nil {
			l.nameWait = map[dirName]chan struct{}{}
		}
		ch = make(chan struct{})
		l.nameWait[k] = ch
	}
	return l.sleepLocked(ctx, ch)
}

// waitDataLocked is waitLocked that also returns once the pass has
// decoded, or recorded complete spans up to, need bytes of the tar stream.
func (l *Live) waitDataLocked(ctx context.Context, need int64) error {
	if err := l.endedLocked(); err != nil {
		return err
	}
	ch := make(chan struct{})
	l.dataWait = append(l.dataWait, dataWaiter{need, ch})
	return l.sleepLocked(ctx, ch)
}

// endedLocked returns why waiting would be vain: the pass failed or l is
// closed.
func (l *Live) endedLocked() error {
	if l.err != nil {
		return l.err
	}
	if l.closed {
		return fmt.Errorf("%w: closed", ErrPassFailed)
	}
	return nil
}

// sleepLocked lets go of l.mu until ch is closed or ctx ends.
func (l *Live) sleepLocked(ctx context.Context, ch chan struct{}) error {
	l.mu.Unlock()
	defer l.mu.Lock()
	select {
	case <-ch:
		l.wakeups.Add(1)
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// WaitName blocks until name in directory dir is known, or the pass has
// ended (the name is then known to be missing), or ctx ends.
func (l *Live) WaitName(ctx context.Context, dir EntryID, name string) error {
	l.inUse()
	l.mu.Lock()
	defer l.mu.Unlock()
	for {
		if l.built || l.served.Load() != nil {
			return nil
		}
		if l.b != nil {
			if _, ok := l.b.names[dirName{dir, name}]; ok {
				return nil
			}
		}
		if err := l.waitNameLocked(ctx, dirName{dir, name}); err != nil {
			return err
		}
	}
}

// WaitStarted blocks until the pass has read its first member (the
// root's attributes may come from it), or has ended, or ctx ends; it
// returns the pass's error if it failed first.
func (l *Live) WaitStarted(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for !l.started && !l.built && l.err == nil {
		if err := l.waitLocked(ctx); err != nil {
			return err
		}
	}
	return l.err
}

// WaitListing blocks until the listing of every directory is complete (the
// pass has ended and Serve was called), or ctx ends.
func (l *Live) WaitListing(ctx context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for l.served.Load() == nil {
		if err := l.waitLocked(ctx); err != nil {
			return err
		}
	}
	return nil
}

// testHookBeforeLock, when set by a test, runs in lockBuilding between
// the check without the lock and taking it.
var testHookBeforeLock func(*Live)

// lockBuilding returns the finished index's Reader once Serve has run;
// before, it returns nil with l.mu held, and the caller answers from the
// pass's builder and unlocks. served is checked again under the lock:
// Serve sets it and drops the builder in one critical section, so a call
// that saw it unset before Serve ran must not take the dropped builder
// for a pass that has not started.
func (l *Live) lockBuilding() *served {
	if s := l.served.Load(); s != nil {
		return s
	}
	if testHookBeforeLock != nil {
		testHookBeforeLock(l)
	}
	l.mu.Lock()
	if s := l.served.Load(); s != nil {
		l.mu.Unlock()
		return s
	}
	return nil
}

// Len returns the number of entry ids: those of the pass so far.
func (l *Live) Len() int {
	if s := l.lockBuilding(); s != nil {
		if s.fwd != nil {
			return len(s.fwd)
		}
		return s.r.ix.Len()
	}
	defer l.mu.Unlock()
	if l.b == nil {
		return 1 // the root
	}
	return len(l.b.entries)
}

// finalID returns the id in the finished index of pass id id, or false
// for an entry it leaves out.
func (ids *liveIDs) finalID(id EntryID) (EntryID, bool) {
	if ids.fwd == nil {
		return id, true
	}
	if int(id) >= len(ids.fwd) || ids.fwd[id] == noEntry {
		return 0, false
	}
	return ids.fwd[id], true
}

// passID returns the pass id of id in the finished index.
func (ids *liveIDs) passID(id EntryID) EntryID {
	if ids.inv == nil || int(id) >= len(ids.inv) {
		return id
	}
	return ids.inv[id]
}

// FinalID returns the id in the finished index of id, once Complete; false
// before, or for an entry the finished index leaves out (a member a later
// one replaced).
func (l *Live) FinalID(id EntryID) (EntryID, bool) {
	s := l.served.Load()
	if s == nil {
		return 0, false
	}
	return s.finalID(id)
}

// Entry returns the entry of id, or nil. Until the pass ends, link counts
// are 1 (2 for directories) and may rise.
func (l *Live) Entry(id EntryID) *Entry {
	if s := l.lockBuilding(); s != nil {
		fid, ok := s.finalID(id)
		if !ok {
			if d, ok := s.dead[id]; ok {
				e := d.Entry
				return &e
			}
			return nil
		}
		e := s.r.ix.Entry(fid)
		if e != nil {
			e.Parent = s.passID(e.Parent)
		}
		return e
	}
	defer l.mu.Unlock()
	if l.b == nil {
		if id != RootID {
			return nil
		}
		// Before the pass has read its first header: the root as
		// newBuilder makes it.
		return &Entry{Type: TypeDir, Mode: 0o755, Nlink: 2}
	}
	if int(id) >= len(l.b.entries) {
		return nil
	}
	e := l.b.entries[id].Entry
	e.Nlink = 1
	if e.Type == TypeDir {
		e.Nlink = 2
	}
	return &e
}

// Lookup finds name in directory dir among the names known now.
func (l *Live) Lookup(dir EntryID, name string) (EntryID, bool) {
	if s := l.lockBuilding(); s != nil {
		fdir, ok := s.finalID(dir)
		if !ok {
			return 0, false
		}
		id, ok := s.r.ix.Lookup(fdir, name)
		return s.passID(id), ok
	}
	defer l.mu.Unlock()
	l.inUse()
	if l.b == nil || int(dir) >= len(l.b.entries) || l.b.entries[dir].Type != TypeDir {
		return 0, false
	}
	id, ok := l.b.names[dirName{dir, name}]
	return id, ok
}

// Children returns the names in directory dir, sorted, in a slice the
// caller owns: the complete listing once Complete, else the names known
// now (found by going over all of them).
func (l *Live) Children(dir EntryID) []Dirent {
	if s := l.lockBuilding(); s != nil {
		fdir, ok := s.finalID(dir)
		if !ok {
			return nil
		}
		out := s.r.ix.Children(fdir)
		for i := range out {
			out[i].ID = s.passID(out[i].ID)
		}
		return out
	}
	defer l.mu.Unlock()
	l.inUse()
	if l.b == nil {
		return nil
	}
	var out []Dirent
	for k, id := range l.b.names {
		if k.dir == dir {
			out = append(out, Dirent{Name: k.name, ID: id})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Path returns the first name of id as a path from the root.
func (l *Live) Path(id EntryID) string {
	var parts []string
	for id != RootID && len(parts) < maxPathParts {
		e := l.Entry(id)
		if e == nil {
			break
		}
		parts = append(parts, e.Name)
		id = e.Parent
	}
	slices.Reverse(parts)
	return strings.Join(parts, "/")
}

// maxPathParts bounds the parent walk of Path.
const maxPathParts = 4096

// Xattrs returns the extended attributes of id, in a slice the caller
// owns.
func (l *Live) Xattrs(id EntryID) []Xattr {
	if s := l.lockBuilding(); s != nil {
		if fid, ok := s.finalID(id); ok {
			return s.r.ix.Xattrs(fid)
		}
		return slices.Clone(s.dead[id].xattrs)
	}
	defer l.mu.Unlock()
	if l.b == nil || int(id) >= len(l.b.entries) {
		return nil
	}
	return slices.Clone(l.b.entries[id].xattrs)
}

// ReadAt reads the content of file id at off, like Reader.ReadAt: at
// once when the pass has passed the data, else once it has. It fails if
// the pass fails before.
func (l *Live) ReadAt(ctx context.Context, id EntryID, p []byte, off int64) (int, error) {
	if s := l.lockBuilding(); s != nil {
		if fid, ok := s.finalID(id); ok {
			return s.r.ReadAt(ctx, fid, p, off)
		}
		if d, ok := s.dead[id]; ok {
			// A member that a later one replaced: its data is
			// still in the archive.
			return s.r.readEntry(ctx, &d.Entry, d.sparse, p, off)
		}
		return 0, ErrNotFound
	}
	if l.b == nil || int(id) >= len(l.b.entries) {
		l.mu.Unlock()
		return 0, ErrNotFound
	}
	l.inUse()
	be := l.b.entries[id]
	l.mu.Unlock()
	e := &be.Entry
	switch {
	case e.Type != TypeReg:
		return 0, ErrNotRegular
	case off < 0:
		return 0, errors.New("negative offset")
	case off >= e.Size:
		return 0, io.EOF
	case len(p) == 0:
		return 0, nil
	}
	if !e.Sparse {
		// Its stored bytes are its data: the pass's latest decoded
		// bytes may serve the read, or its end.
		q := p[:min(int64(len(p)), e.Size-off)]
		s, final, prefix, err := l.reader(ctx, int64(e.DataOffset)+off, q)
		if err != nil {
			return 0, err
		}
		if final {
			return l.ReadAt(ctx, id, p, off)
		}
		if s != nil {
			defer l.release(s)
			if _, err := s.r.readEntry(ctx, e, nil, q[:prefix], off); err != nil && err != io.EOF {
				return 0, err
			}
		}
		if len(q) < len(p) {
			return len(q), io.EOF
		}
		return len(q), nil
	}
	// The data of the whole read lies before the end of the file's
	// stored data in the tar stream.
	s, final, _, err := l.reader(ctx, int64(e.DataOffset)+storedSize(e, be.sparse), nil)
	if err != nil {
		return 0, err
	}
	if final {
		return l.ReadAt(ctx, id, p, off)
	}
	defer l.release(s)
	return s.r.readEntry(ctx, e, be.sparse, p, off)
}

// reader waits until the pass has decoded the tar stream up to need
// (without q) or the bytes of q at off (with q), and returns a reader of
// the partial index that covers them; or final when the finished index
// serves reads now.
//
// With q, s serves q[:prefix]: the pass's latest decoded bytes, if it
// still holds those of q[prefix:], are copied there at once (all of q when
// s is nil).
func (l *Live) reader(ctx context.Context, off int64, q []byte) (s *liveSnap, final bool, prefix int, err error) {
	var old *Reader
	l.mu.Lock()
	defer func() {
		l.mu.Unlock()
		l.retire(old)
	}()
	need := off
	if q != nil {
		need = off + int64(len(q))
	}
	for {
		if l.served.Load() != nil {
			return nil, true, 0, nil
		}
		if l.closed {
			return nil, false, 0, fmt.Errorf("%w: closed", ErrPassFailed)
		}
		if l.snapCoversLocked(need) {
			return l.snapLocked(need, &old), false, len(q), nil
		}
		if q != nil {
			m := max(off, l.recent.start)
			if l.recent.holds(m, need-m) && (m == off || l.snapCoversLocked(m)) {
				l.recent.readAt(q[m-off:], m)
				l.recentN++
				if m == off {
					return nil, false, 0, nil
				}
				return l.snapLocked(m, &old), false, int(m - off), nil
			}
		}
		if err := l.waitDataLocked(ctx, need); err != nil {
			return nil, false, 0, err
		}
	}
}

// snapCoversLocked reports whether a reader of the partial index can
// serve the tar stream up to need now.
func (l *Live) snapCoversLocked(need int64) bool {
	return (l.snap != nil && l.snap.r.ix.TarSize >= need) || (l.ix != nil && l.coveredLocked() >= need)
}

// snapLocked returns a reference to a reader of the partial index that
// covers the tar stream up to need (snapCoversLocked must have said so):
// the current one, or one made anew over the spans complete now; a
// replaced reader that nobody holds goes to *old, for the caller to
// retire.
func (l *Live) snapLocked(need int64, old **Reader) *liveSnap {
	if l.snap == nil || l.snap.r.ix.TarSize < need {
		*old = l.dropSnapLocked()
		p := l.partialLocked()
		opts := l.opts
		// A few spans: reads during the pass mostly follow it,
		// and every new snapshot starts with an empty cache.
		opts.CacheBytes = min(cmp.Or(opts.CacheBytes, DefaultSpanCacheBytes), liveCacheSpans*p.Span)
		l.snap = &liveSnap{r: NewReader(p, l.src, opts), refs: 1}
	}
	l.snap.refs++
	return l.snap
}

func (l *Live) release(s *liveSnap) {
	l.mu.Lock()
	old := l.unrefLocked(s)
	l.mu.Unlock()
	l.retire(old)
}

// coveredLocked returns how much of the tar stream the pass's complete
// spans cover: the decoded offset of the latest checkpoint that ends a
// span with a digest, short of the first span only a local copy serves.
// An uncompressed archive is covered from the start: its data is read
// where it lies.
func (l *Live) coveredLocked() int64 {
	ix := l.ix
	if !ix.Codec.compressed() {
		return ix.Source.Size
	}
	done := len(ix.Digests) // spans 0..done-1 are complete
	for ; l.known < done && l.local < 0; l.known++ {
		if ix.Checkpoints[l.known].Kind == kindLocal {
			l.local = l.known
		}
	}
	if l.local >= 0 && l.opts.Local == nil {
		done = min(done, l.local)
	}
	if done == len(ix.Checkpoints) {
		// The last span closed: its end is TarSize, which is set
		// after the pass.
		done--
	}
	if done <= 0 {
		return 0
	}
	return int64(ix.Checkpoints[done].Out)
}

// partialLocked returns an index of the spans the pass has completed: its
// checkpoints up to the one that ends the last of them, whose decoded
// offset is its TarSize.
func (l *Live) partialLocked() *Index {
	ix := l.ix
	p := &Index{Source: ix.Source, Codec: ix.Codec, Span: ix.Span, TarSize: ix.Source.Size}
	if !ix.Codec.compressed() {
		return p
	}
	end := l.coveredLocked()
	k := sort.Search(len(ix.Checkpoints), func(i int) bool { return int64(ix.Checkpoints[i].Out) >= end })
	p.Checkpoints = slices.Clone(ix.Checkpoints[:k+1])
	p.Digests = slices.Clone(ix.Digests[:k])
	p.TarSize = end
	p.End = ix.Checkpoints[k].In + 1
	return p
}

var _ io.Closer = (*Live)(nil)
