package index

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/pierrec/lz4/v4"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index/tarscan"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// gatedReader yields obj up to a limit that the test raises; a read at the
// limit blocks until it rises, so a pass over it stops where the test says.
type gatedReader struct {
	obj   []byte
	fail  error // returned at the limit instead of blocking, when set
	mu    sync.Mutex
	cond  *sync.Cond
	off   int
	limit int
}

func newGatedReader(obj []byte, limit int) *gatedReader {
	g := &gatedReader{obj: obj, limit: limit}
	g.cond = sync.NewCond(&g.mu)
	return g
}

func (g *gatedReader) Read(p []byte) (int, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.off >= g.limit && g.off < len(g.obj) {
		if g.fail != nil {
			return 0, g.fail
		}
		g.cond.Wait()
	}
	if g.off >= len(g.obj) {
		return 0, io.EOF
	}
	n := copy(p, g.obj[g.off:g.limit])
	g.off += n
	return n, nil
}

func (g *gatedReader) allow(n int) {
	g.mu.Lock()
	g.limit = min(n, len(g.obj))
	g.mu.Unlock()
	g.cond.Broadcast()
}

// pass is an index pass running over a gated reader with a Live.
type pass struct {
	live  *Live
	gate  *gatedReader
	src   *memSource
	local *lockedFile // the decoded copy of a stream-only archive, or nil
	done  chan struct{}
	ix    *Index
	err   error
}

// lockedFile is a memFile that the pass writes while the Live reads it.
type lockedFile struct {
	mu sync.Mutex
	f  memFile
}

func (l *lockedFile) WriteAt(p []byte, off int64) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.WriteAt(p, off)
}

func (l *lockedFile) ReadAt(p []byte, off int64) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.ReadAt(p, off)
}

// startPass starts Build over obj, held at limit bytes, publishing to a
// Live; with local, the pass writes a decoded copy that the Live reads.
func startPass(t *testing.T, obj []byte, limit int, span int64, local bool) *pass {
	t.Helper()
	p := &pass{gate: newGatedReader(obj, limit), src: newMemSource(obj), done: make(chan struct{})}
	opts := BuildOptions{Span: span}
	var ropts ReaderOptions
	if local {
		p.local = &lockedFile{}
		opts.Local, ropts.Local = p.local, p.local
	}
	p.live = NewLive(p.src, ropts)
	opts.Live = p.live
	go func() {
		defer close(p.done)
		p.ix, p.err = Build(context.Background(), p.gate, fetch.Identity{Size: int64(len(obj)), ETag: `"x"`}, opts)
	}()
	t.Cleanup(func() {
		p.gate.allow(len(obj))
		<-p.done
		p.live.Close()
	})
	return p
}

func (p *pass) running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// finish lets the pass run to its end and serves the index it built.
func (p *pass) finish(t *testing.T) *Reader {
	t.Helper()
	p.gate.allow(len(p.gate.obj))
	<-p.done
	if p.err != nil {
		t.Fatalf("Build: %v", p.err)
	}
	var ropts ReaderOptions
	if p.local != nil {
		p.local.mu.Lock()
		p.local.f.truncate(p.ix.TarSize)
		p.local.mu.Unlock()
		ropts.Local = p.local
	}
	r := NewReader(p.ix, p.src, ropts)
	t.Cleanup(func() { r.Close() })
	p.live.Serve(r)
	return r
}

// within runs f in a goroutine and returns a channel of its error.
func within(f func() error) chan error {
	ch := make(chan error, 1)
	go func() { ch <- f() }()
	return ch
}

// blocked asserts that nothing came on ch for a while: the call waits.
func blocked(t *testing.T, ch chan error, what string) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("%s returned (%v) while the pass was held before it", what, err)
	case <-time.After(100 * time.Millisecond):
	}
}

func returned(t *testing.T, ch chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(20 * time.Second):
		t.Fatalf("%s still waits after the pass ended", what)
		return nil
	}
}

func liveRead(t *testing.T, l *Live, path string, size int) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	id := RootID
	for _, name := range bytes.Split([]byte(path), []byte("/")) {
		if err := l.WaitName(ctx, id, string(name)); err != nil {
			t.Fatalf("WaitName %s: %v", path, err)
		}
		var ok bool
		if id, ok = l.Lookup(id, string(name)); !ok {
			t.Fatalf("Lookup %s: not found", path)
		}
	}
	buf := make([]byte, size+1)
	n, err := l.ReadAt(ctx, id, buf, 0)
	if err != nil && err != io.EOF {
		t.Fatalf("ReadAt %s: %v", path, err)
	}
	return buf[:n]
}

func TestLiveServesDuringThePass(t *testing.T) {
	early := randomData(1, 100<<10)
	filler := randomData(2, 3<<20)
	late := randomData(3, 100<<10)
	raw := tarBytes(t, []member{
		{name: "early/", typ: tar.TypeDir, mode: 0o755},
		{name: "early/a.bin", data: early},
		{name: "filler.bin", data: filler},
		{name: "late.bin", data: late},
	})
	const span = 64 << 10
	for _, c := range []struct {
		name  string
		make  func(t testing.TB, raw []byte) []byte
		local bool // stream-only: read from the decoded copy as it grows
	}{
		{"tar", func(_ testing.TB, raw []byte) []byte { return raw }, false},
		{"gzip", func(_ testing.TB, raw []byte) []byte { return tarbuild.GzipLevel(raw, 6) }, false},
		{"zstd-frames", zstdFrames(256 << 10), false},
		{"zstd-one-frame", zstdStream, true},
		{"lz4", lz4Go(lz4.BlockSizeOption(lz4.Block64Kb)), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := c.make(t, raw)
			// The pass may read the first third of the object: the
			// early file and part of the filler.
			p := startPass(t, obj, len(obj)/3, span, c.local)

			if got := liveRead(t, p.live, "early/a.bin", len(early)); !bytes.Equal(got, early) {
				t.Fatalf("early/a.bin during the pass: got %d bytes, want its %d", len(got), len(early))
			}
			if !p.running() {
				t.Fatal("the pass ended before the gate opened")
			}
			if e := p.live.Entry(mustLive(t, p.live, "early")); e == nil || e.Type != TypeDir || e.Mode != 0o755 {
				t.Fatalf("early/ during the pass: got %+v, want a directory of mode 755", e)
			}

			ctx := context.Background()
			missing := within(func() error { return p.live.WaitName(ctx, RootID, "nope") })
			listing := within(func() error { return p.live.WaitListing(ctx) })
			lateName := within(func() error { return p.live.WaitName(ctx, RootID, "late.bin") })
			// early/a.bin is served once decoded, maybe before the
			// pass has read the next header.
			if err := p.live.WaitName(ctx, RootID, "filler.bin"); err != nil {
				t.Fatalf("WaitName filler.bin: %v", err)
			}
			fillerID := mustLive(t, p.live, "filler.bin")
			tail := make([]byte, 1000)
			tailRead := within(func() error {
				_, err := p.live.ReadAt(ctx, fillerID, tail, int64(len(filler)-len(tail)))
				return err
			})
			blocked(t, missing, "WaitName of a missing name")
			blocked(t, listing, "WaitListing")
			blocked(t, lateName, "WaitName of a name the pass has not reached")
			if c.name != "tar" {
				// An uncompressed archive is read where it lies:
				// its data needs no pass.
				blocked(t, tailRead, "a read of data ahead of the pass")
			}

			p.finish(t)
			for what, ch := range map[string]chan error{"missing": missing, "listing": listing, "late": lateName, "tail": tailRead} {
				if err := returned(t, ch, what); err != nil {
					t.Fatalf("%s after the pass: %v", what, err)
				}
			}
			if !bytes.Equal(tail, filler[len(filler)-len(tail):]) {
				t.Fatal("the tail of filler.bin read while the pass ran differs")
			}
			if _, ok := p.live.Lookup(RootID, "nope"); ok {
				t.Fatal("a missing name is found after the pass")
			}
			if got := liveRead(t, p.live, "late.bin", len(late)); !bytes.Equal(got, late) {
				t.Fatal("late.bin after the pass differs")
			}
			var names []string
			for _, d := range p.live.Children(RootID) {
				names = append(names, d.Name)
			}
			if got, want := names, []string{"early", "filler.bin", "late.bin"}; !equalStrings(got, want) {
				t.Fatalf("listing after the pass: got %v, want %v", got, want)
			}
		})
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func mustLive(t *testing.T, l *Live, name string) EntryID {
	t.Helper()
	id, ok := l.Lookup(RootID, name)
	if !ok {
		t.Fatalf("Lookup %s: not found", name)
	}
	return id
}

// A member replaced by a later one keeps its id and its data for whoever
// found it during the pass; the ids of the pass stay valid after Serve,
// though the finished index numbers its entries otherwise.
func TestLiveIDsAcrossServe(t *testing.T) {
	v1, v2 := []byte("first version\n"), []byte("second version, longer\n")
	raw := tarBytes(t, []member{
		{name: "a/x", data: v1},
		{name: "b", data: []byte("b\n")},
		{name: "a/x", data: v2},
		{name: "c", link: "b", typ: tar.TypeLink},
	})
	obj := tarbuild.GzipLevel(raw, 6)
	live := NewLive(newMemSource(obj), ReaderOptions{})
	defer live.Close()
	var old EntryID
	ix, err := Build(context.Background(), bytes.NewReader(obj), fetch.Identity{Size: int64(len(obj))}, BuildOptions{
		Live: live,
		OnMember: func(h *tarscan.Header, _ io.Reader) error {
			if h.Name == "b" {
				a := mustLive(t, live, "a")
				var ok bool
				if old, ok = live.Lookup(a, "x"); !ok {
					t.Error("a/x not found after its member")
				}
			}
			return nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	before := map[string]EntryID{}
	for _, d := range live.Children(RootID) {
		before[d.Name] = d.ID
	}
	r := NewReader(ix, newMemSource(obj), ReaderOptions{})
	defer r.Close()
	live.Serve(r)
	if !live.Complete() {
		t.Fatal("not Complete after Serve")
	}
	for _, d := range live.Children(RootID) {
		if before[d.Name] != d.ID {
			t.Fatalf("%s: id %d after Serve, %d before", d.Name, d.ID, before[d.Name])
		}
	}
	a := mustLive(t, live, "a")
	x, _ := live.Lookup(a, "x")
	if x == old {
		t.Fatal("a/x has the id of the replaced member")
	}
	if got := live.Path(x); got != "a/x" {
		t.Fatalf("Path: got %q, want a/x", got)
	}
	ctx := context.Background()
	for _, c := range []struct {
		id   EntryID
		want []byte
	}{{old, v1}, {x, v2}} {
		buf := make([]byte, 100)
		n, err := live.ReadAt(ctx, c.id, buf, 0)
		if err != io.EOF || !bytes.Equal(buf[:n], c.want) {
			t.Fatalf("ReadAt %d: got %q, %v; want %q, EOF", c.id, buf[:n], err, c.want)
		}
	}
	if e := live.Entry(mustLive(t, live, "b")); e == nil || e.Nlink != 2 {
		t.Fatalf("b after Serve: got %+v, want 2 links", e)
	}
	if e := live.Entry(old); e == nil || e.Size != int64(len(v1)) {
		t.Fatalf("the replaced a/x after Serve: got %+v", e)
	}
}

// A pass that fails fails every call that waits for it, with the reason.
func TestLivePassFails(t *testing.T) {
	raw := tarBytes(t, []member{{name: "a", data: randomData(1, 1<<20)}, {name: "b", data: randomData(2, 1<<20)}})
	obj := tarbuild.GzipLevel(raw, 6)
	p := startPass(t, obj, len(obj)/4, 64<<10, false)
	ctx := context.Background()
	missing := within(func() error { return p.live.WaitName(ctx, RootID, "nope") })
	blocked(t, missing, "WaitName")
	p.gate.mu.Lock()
	p.gate.fail = errors.New("connection reset")
	p.gate.mu.Unlock()
	p.gate.cond.Broadcast()
	err := returned(t, missing, "WaitName")
	if !errors.Is(err, ErrPassFailed) {
		t.Fatalf("WaitName after the pass failed: got %v, want ErrPassFailed", err)
	}
	id := mustLive(t, p.live, "a")
	if _, err := p.live.ReadAt(ctx, id, make([]byte, 10), 1<<20-10); !errors.Is(err, ErrPassFailed) {
		t.Fatalf("ReadAt after the pass failed: got %v, want ErrPassFailed", err)
	}
}

// A cancelled wait returns the context's error.
func TestLiveWaitCancelled(t *testing.T) {
	obj := tarbuild.GzipLevel(tarBytes(t, []member{{name: "a", data: randomData(1, 1<<20)}}), 6)
	p := startPass(t, obj, 100, 64<<10, false)
	ctx, cancel := context.WithCancel(context.Background())
	ch := within(func() error { return p.live.WaitListing(ctx) })
	blocked(t, ch, "WaitListing")
	cancel()
	if err := returned(t, ch, "WaitListing"); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// A call that finds no finished index, and then Serve runs before it
// takes the lock, answers from the finished index, not as if the pass
// had not started (Serve drops the pass's builder): a name the pass has
// seen is found, and its data is read.
func TestLiveAnswersAcrossServe(t *testing.T) {
	raw := tarBytes(t, []member{{name: "a", data: []byte("a\n")}, {name: "b", data: []byte("b\n"), xattrs: map[string]string{"user.k": "v"}}})
	obj := tarbuild.GzipLevel(raw, 6)
	ctx := context.Background()
	calls := []struct {
		name string
		call func(l *Live) error
	}{
		{"Lookup", func(l *Live) error {
			if _, ok := l.Lookup(RootID, "b"); !ok {
				return errors.New("b not found")
			}
			return nil
		}},
		{"Entry", func(l *Live) error {
			if e := l.Entry(2); e == nil || e.Name != "b" || e.Size != 2 {
				return fmt.Errorf("entry 2: got %+v, want b, a file of 2 bytes", e)
			}
			return nil
		}},
		{"Children", func(l *Live) error {
			if n := len(l.Children(RootID)); n != 2 {
				return fmt.Errorf("got %d names in the root, want 2", n)
			}
			return nil
		}},
		{"Len", func(l *Live) error {
			if n := l.Len(); n != 3 {
				return fmt.Errorf("got %d entries, want 3", n)
			}
			return nil
		}},
		{"ReadAt", func(l *Live) error {
			buf := make([]byte, 4)
			if n, err := l.ReadAt(ctx, 2, buf, 0); n != 2 || err != io.EOF {
				return fmt.Errorf("got %d bytes, %v; want 2, EOF", n, err)
			}
			return nil
		}},
		{"Xattrs", func(l *Live) error {
			if xs := l.Xattrs(2); len(xs) != 1 || xs[0] != (Xattr{Name: "user.k", Value: "v"}) {
				return fmt.Errorf("xattrs of b: got %v, want user.k=v", xs)
			}
			return nil
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			live := NewLive(newMemSource(obj), ReaderOptions{})
			defer live.Close()
			ix, err := Build(ctx, bytes.NewReader(obj), fetch.Identity{Size: int64(len(obj))}, BuildOptions{Live: live})
			if err != nil {
				t.Fatal(err)
			}
			r := NewReader(ix, newMemSource(obj), ReaderOptions{})
			defer r.Close()
			served := false
			testHookBeforeLock = func(l *Live) {
				if l == live && !served {
					served = true
					live.Serve(r)
				}
			}
			defer func() { testHookBeforeLock = nil }()
			if err := c.call(live); err != nil {
				t.Errorf("%s when Serve ran before it took the lock: %v", c.name, err)
			}
			if !served {
				t.Errorf("%s never looked for the builder: the test did not test the race", c.name)
			}
		})
	}
}

// TestLiveServesDecodedBytes: a member the pass has decoded is served at
// once, from the pass's latest output, while no checkpoint after it exists
// yet (the span is longer than the archive); data ahead of the pass still
// waits.
func TestLiveServesDecodedBytes(t *testing.T) {
	early := randomData(11, 100<<10)
	filler := randomData(12, 1<<20)
	raw := tarBytes(t, []member{
		{name: "early.bin", data: early},
		{name: "filler.bin", data: filler},
	})
	const span = 32 << 20
	for _, c := range []struct {
		name  string
		make  func(t testing.TB, raw []byte) []byte
		local bool
	}{
		{"gzip", func(_ testing.TB, raw []byte) []byte { return tarbuild.GzipLevel(raw, 6) }, false},
		{"zstd-one-frame", zstdStream, true},
		{"lz4", lz4Go(lz4.BlockSizeOption(lz4.Block64Kb)), false},
		{"xz", xzGo, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := c.make(t, raw)
			p := startPass(t, obj, 0, span, c.local)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// A mount in use, as the pass starts: a lookup waits.
			// filler.bin's header follows early.bin's data: once it is
			// known, the pass has decoded all of early.bin.
			named := within(func() error { return p.live.WaitName(ctx, RootID, "filler.bin") })
			blocked(t, named, "WaitName before the pass has read anything")
			p.gate.allow(len(obj) * 2 / 5)
			if err := returned(t, named, "WaitName filler.bin"); err != nil {
				t.Fatalf("WaitName filler.bin: %v", err)
			}
			id := mustLive(t, p.live, "early.bin")
			e := p.live.Entry(id)
			p.live.mu.Lock()
			covered := p.live.coveredLocked()
			p.live.mu.Unlock()
			if end := int64(e.DataOffset) + e.Size; covered >= end {
				t.Fatalf("complete spans cover %d bytes, past early.bin's end at %d: the test shows nothing", covered, end)
			}
			got := make([]byte, len(early))
			read := within(func() error {
				_, err := p.live.ReadAt(ctx, id, got, 0)
				return err
			})
			if err := returned(t, read, "a read of early.bin, decoded but in no complete span"); err != nil {
				t.Fatalf("ReadAt early.bin: %v", err)
			}
			if !bytes.Equal(got, early) {
				t.Fatal("early.bin read from the pass's output differs")
			}
			if !p.running() {
				t.Fatal("the pass ended before the gate opened")
			}

			fillerID := mustLive(t, p.live, "filler.bin")
			tail := make([]byte, 4096)
			ahead := within(func() error {
				_, err := p.live.ReadAt(context.Background(), fillerID, tail, int64(len(filler)-len(tail)))
				return err
			})
			blocked(t, ahead, "a read of data ahead of the pass")
			p.finish(t)
			if err := returned(t, ahead, "the read ahead"); err != nil {
				t.Fatalf("the read ahead of the pass: %v", err)
			}
			if !bytes.Equal(tail, filler[len(filler)-len(tail):]) {
				t.Fatal("the end of filler.bin differs")
			}
		})
	}
}

// TestLiveReadAcrossTheLastCheckpoint: a read whose start lies in the
// complete spans and whose end the pass has just decoded gets its start
// from a span and its end from the pass's output.
func TestLiveReadAcrossTheLastCheckpoint(t *testing.T) {
	// Letters of a small alphabet: Huffman blocks, which the pass
	// decodes as their bytes arrive, so that it stops inside a span.
	filler := randomData(13, 3<<20)
	for i := range filler {
		filler[i] = 'a' + filler[i]%16
	}
	raw := tarBytes(t, []member{{name: "filler.bin", data: filler}, {name: "z", data: []byte("z")}})
	obj := tarbuild.GzipLevel(raw, 6)
	p := startPass(t, obj, 0, 512<<10, false)
	l := p.live
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The tree is in use from the start: the pass keeps its output.
	named := within(func() error { return l.WaitName(ctx, RootID, "filler.bin") })
	blocked(t, named, "WaitName before the pass has read anything")
	p.gate.allow(len(obj) / 3)
	if err := returned(t, named, "WaitName filler.bin"); err != nil {
		t.Fatalf("WaitName filler.bin: %v", err)
	}
	id := mustLive(t, l, "filler.bin")
	// Wait for the pass to stop at the gate: its output stops growing.
	var covered, end int64
	for last := int64(-1); ; last = end {
		time.Sleep(50 * time.Millisecond)
		l.mu.Lock()
		covered, end = l.coveredLocked(), l.recent.end
		l.mu.Unlock()
		if end == last && end > 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the pass never stopped at the gate")
		}
	}
	data := int64(l.Entry(id).DataOffset)
	from, to := covered-5000-data, end-100-data
	if from < 0 || to <= from+5000 || covered >= end {
		t.Fatalf("covered %d, decoded %d, data at %d: no read straddles the last checkpoint", covered, end, data)
	}
	before := l.recentN
	got := make([]byte, to-from)
	if _, err := l.ReadAt(ctx, id, got, from); err != nil {
		t.Fatalf("ReadAt across the last checkpoint: %v", err)
	}
	if !bytes.Equal(got, filler[from:to]) {
		t.Fatal("a read across the last checkpoint differs")
	}
	l.mu.Lock()
	served := l.recentN - before
	l.mu.Unlock()
	if served != 1 {
		t.Fatalf("reads served from the pass's output: got %d, want 1", served)
	}
	if !p.running() {
		t.Fatal("the pass ended before the gate opened")
	}
}

// TestLiveIdleKeepsNoOutput: a pass whose tree nobody uses copies none of
// its output.
func TestLiveIdleKeepsNoOutput(t *testing.T) {
	raw := tarBytes(t, []member{{name: "a.bin", data: randomData(14, 2<<20)}})
	obj := tarbuild.GzipLevel(raw, 1)
	p := startPass(t, obj, len(obj), 256<<10, false)
	<-p.done
	if p.err != nil {
		t.Fatalf("Build: %v", p.err)
	}
	p.live.mu.Lock()
	held := p.live.recent.end - p.live.recent.start
	p.live.mu.Unlock()
	if held != 0 {
		t.Fatalf("the output an idle pass kept: got %d bytes, want 0", held)
	}
}

// TestLiveWakesOnlyItsWaiters: waiters for a name or for data that the
// pass has not reached are not woken by every member it reads. 40 of them
// wait for the last member's name or bytes while the pass reads 300
// members; each is woken about once (before, a few hundred times).
func TestLiveWakesOnlyItsWaiters(t *testing.T) {
	var ms []member
	for i := range 300 {
		ms = append(ms, member{name: fmt.Sprintf("d/f%03d", i), data: randomData(uint64(i), 2000)})
	}
	obj := tarbuild.GzipLevel(tarBytes(t, ms), 6)
	p := startPass(t, obj, 2000, 16<<10, false)
	ctx := context.Background()
	const waiters = 40
	var wg sync.WaitGroup
	errs := make(chan error, waiters)
	lookup := func(dir EntryID, name string) (EntryID, error) {
		if err := p.live.WaitName(ctx, dir, name); err != nil {
			return 0, err
		}
		id, ok := p.live.Lookup(dir, name)
		if !ok {
			return 0, fmt.Errorf("%s: not found", name)
		}
		return id, nil
	}
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := lookup(RootID, "d")
			if err == nil {
				var id EntryID
				if id, err = lookup(d, "f299"); err == nil && i%2 == 1 {
					// Half read the last member's bytes too.
					_, err = p.live.ReadAt(ctx, id, make([]byte, 2000), 0)
				}
			}
			errs <- err
		}()
	}
	time.Sleep(50 * time.Millisecond)
	for n := 2000; n < len(obj); n += 512 {
		p.gate.allow(n) // the pass reads on, a little at a time
		time.Sleep(200 * time.Microsecond)
	}
	p.finish(t)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d wakeups of %d waiters over a pass of %d members", p.live.wakeups.Load(), waiters, len(ms))
	if w := p.live.wakeups.Load(); w > 4*waiters {
		t.Errorf("%d wakeups of %d waiters over a pass of %d members, want a few per waiter", w, waiters, len(ms))
	}
}
