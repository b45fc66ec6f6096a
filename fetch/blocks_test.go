package fetch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func newTestBlocks(t *testing.T, src Source, opts BlocksOptions) *Blocks {
	t.Helper()
	b := NewBlocks(src, opts)
	t.Cleanup(func() { b.Close() })
	return b
}

func TestBlocksReadAt(t *testing.T) {
	for _, size := range []int{0, 1, 1000, 1023, 1024, 1025, 10*1024 + 123} {
		for _, workers := range []int{1, 3} {
			t.Run(fmt.Sprintf("size=%d/workers=%d", size, workers), func(t *testing.T) {
				t.Parallel()
				data := randomBytes(size, uint64(size))
				src := newMemSource(data)
				b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1024, Workers: workers})
				require.Equal(t, int64(size), b.Size())
				require.Same(t, Source(src), b.Source())
				ctx := t.Context()
				checkRanges(t, func(p []byte, off int64) (int, error) { return b.ReadAt(ctx, p, off) }, data, 1024, 7)

				n, err := b.ReadAt(ctx, nil, 5)
				require.NoError(t, err)
				require.Zero(t, n)
				_, err = b.ReadAt(ctx, make([]byte, 1), -1)
				require.ErrorContains(t, err, "negative offset")

				all, err := io.ReadAll(io.NewSectionReader(b.ReaderAt(ctx), 0, b.Size()))
				require.NoError(t, err)
				require.True(t, bytes.Equal(data, all))
				// Each block fetched once: the cache holds the whole object.
				nblocks := (size + 1023) / 1024
				require.Len(t, src.Offsets(), nblocks)
				require.Equal(t, int64(size), b.Stats().BytesFetched)
			})
		}
	}
}

func TestBlocksDefaults(t *testing.T) {
	b := newTestBlocks(t, newMemSource(nil), BlocksOptions{})
	require.Equal(t, int64(defaultBlockSize), b.blockSize)
	require.Equal(t, defaultWorkers, b.workers)
	require.Equal(t, int64(defaultCacheBytes), b.cacheBytes)

	b = newTestBlocks(t, newMemSource(nil), BlocksOptions{BlockSize: 1000, Workers: 5, CacheBytes: 1})
	require.Equal(t, int64(7*1000), b.cacheBytes, "cache raised to Workers+2 blocks")
}

// TestBlocksOneFetchPerBlock has 32 readers of the same range: each block
// is fetched once.
func TestBlocksOneFetchPerBlock(t *testing.T) {
	data := randomBytes(10*1024, 1)
	src := newMemSource(data)
	src.Delay = 20 * time.Millisecond
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1024, Workers: 8})

	const readers = 32
	const off, length = 1000, 2500 // blocks 0 to 3
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for range readers {
		wg.Go(func() {
			p := make([]byte, length)
			if _, err := b.ReadAt(t.Context(), p, off); err != nil {
				errs <- err
				return
			}
			if !bytes.Equal(data[off:off+length], p) {
				errs <- fmt.Errorf("wrong bytes")
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, []int64{0, 1024, 2048, 3072}, src.Offsets())
	st := b.Stats()
	require.Equal(t, int64(4), st.Requests)
	require.Equal(t, int64(readers*4), st.CacheHits+st.CacheMisses)

	_, err := b.ReadAt(t.Context(), make([]byte, length), off)
	require.NoError(t, err)
	require.Equal(t, int64(4), b.Stats().Requests, "second read must hit the cache")
}

func TestBlocksCacheBound(t *testing.T) {
	const bs = 1024
	tests := []struct {
		name       string
		cacheBytes int64
		workers    int
		wantBlocks int64 // blocks the cache holds
	}{
		{"6 blocks", 6 * bs, 2, 6},
		{"6.5 blocks", 6*bs + bs/2, 2, 6},
		{"raised to workers+2", 1, 2, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			const nblocks = 20
			src := newMemSource(randomBytes(nblocks*bs, 2))
			b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: tt.workers, CacheBytes: tt.cacheBytes})
			limit := tt.wantBlocks * bs
			for i := range int64(nblocks) {
				_, err := b.ReadAt(t.Context(), make([]byte, 10), i*bs)
				require.NoError(t, err)
				st := b.Stats()
				require.LessOrEqual(t, st.CachedBytes, limit)
				require.Equal(t, max(0, i+1-tt.wantBlocks), st.Evictions, "after block %d", i)
			}
			// The newest blocks are cached, the oldest are not.
			for i := nblocks - tt.wantBlocks; i < nblocks; i++ {
				_, err := b.ReadAt(t.Context(), make([]byte, 10), i*bs)
				require.NoError(t, err)
			}
			require.Equal(t, int64(nblocks), b.Stats().Requests)
			_, err := b.ReadAt(t.Context(), make([]byte, 10), 0)
			require.NoError(t, err)
			require.Equal(t, int64(nblocks+1), b.Stats().Requests)
		})
	}
}

// TestBlocksLRU checks that a hit makes a block the last to go.
func TestBlocksLRU(t *testing.T) {
	const bs = 1024
	src := newMemSource(randomBytes(10*bs, 2))
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: 1, CacheBytes: 3 * bs})
	read := func(i int64) {
		_, err := b.ReadAt(t.Context(), make([]byte, 1), i*bs)
		require.NoError(t, err)
	}
	read(0)
	read(1)
	read(2)
	read(0) // hit: 1 is now the coldest
	read(3) // evicts 1
	require.Equal(t, int64(4), b.Stats().Requests)
	read(0)
	read(2)
	read(3)
	require.Equal(t, int64(4), b.Stats().Requests)
	read(1)
	require.Equal(t, int64(5), b.Stats().Requests)
}

// TestBlocksConcurrentRandom reads random ranges from many goroutines
// through a cache far smaller than the object, so that buffers are
// recycled while others read: every byte must still be right.
func TestBlocksConcurrentRandom(t *testing.T) {
	const bs = 512
	data := randomBytes(200*bs+77, 3)
	src := newMemSource(data)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: 4, CacheBytes: 6 * bs})
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 0))
			p := make([]byte, 3*bs)
			for range 300 {
				off := r.Int64N(int64(len(data)))
				n := 1 + r.IntN(len(p))
				got, err := b.ReadAt(t.Context(), p[:n], off)
				if err != nil && err != io.EOF {
					t.Error(err)
					return
				}
				if !bytes.Equal(data[off:off+int64(got)], p[:got]) {
					t.Errorf("wrong bytes at %d", off)
					return
				}
			}
		})
	}
	wg.Wait()
	require.LessOrEqual(t, b.Stats().CachedBytes, int64(6*bs))
}

// TestBlocksWaiterCancel: a reader whose ctx ends leaves; the fetch goes
// on for the reader that still waits.
func TestBlocksWaiterCancel(t *testing.T) {
	data := randomBytes(4096, 4)
	src := newMemSource(data)
	src.Gate = make(chan struct{})
	src.Started = make(chan int64, 10)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1024, Workers: 2})

	ctxA, cancelA := context.WithCancel(t.Context())
	errA := make(chan error, 1)
	go func() {
		_, err := b.ReadAt(ctxA, make([]byte, 10), 0)
		errA <- err
	}()
	<-src.Started
	resB := make(chan []byte, 1)
	go func() {
		p := make([]byte, 10)
		_, err := b.ReadAt(t.Context(), p, 0)
		if err != nil {
			t.Error(err)
		}
		resB <- p
	}()
	require.Eventually(t, func() bool { return b.Stats().CacheMisses == 2 }, 5*time.Second, time.Millisecond)

	cancelA()
	require.ErrorIs(t, <-errA, context.Canceled)
	close(src.Gate)
	require.Equal(t, data[:10], <-resB)
	_, _, cancelled := src.Stats()
	require.Zero(t, cancelled)
	require.Equal(t, []int64{0}, src.Offsets())
}

// TestBlocksAbandonedFetch: once every waiter has left, a running fetch is
// cancelled and a queued one never starts.
func TestBlocksAbandonedFetch(t *testing.T) {
	data := randomBytes(4096, 5)
	src := newMemSource(data)
	src.Gate = make(chan struct{})
	src.Started = make(chan int64, 10)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1024, Workers: 1})

	// Block 0 runs, block 1 is queued behind it; both readers leave.
	read := func(ctx context.Context, off int64, errs chan<- error) {
		_, err := b.ReadAt(ctx, make([]byte, 10), off)
		errs <- err
	}
	ctx0, cancel0 := context.WithCancel(t.Context())
	ctx1, cancel1 := context.WithCancel(t.Context())
	errs0, errs1 := make(chan error, 1), make(chan error, 1)
	go read(ctx0, 0, errs0)
	require.Equal(t, int64(0), <-src.Started)
	go read(ctx1, 1024, errs1)
	require.Eventually(t, func() bool { return b.Stats().CacheMisses == 2 }, 5*time.Second, time.Millisecond)
	cancel1()
	require.ErrorIs(t, <-errs1, context.Canceled)
	cancel0()
	require.ErrorIs(t, <-errs0, context.Canceled)
	require.Eventually(t, func() bool { _, _, c := src.Stats(); return c == 1 }, 5*time.Second, time.Millisecond)

	// A new reader starts a new fetch.
	close(src.Gate)
	p := make([]byte, 10)
	_, err := b.ReadAt(t.Context(), p, 2048)
	require.NoError(t, err)
	_, err = b.ReadAt(t.Context(), p, 0)
	require.NoError(t, err)
	require.Equal(t, data[:10], p)
	require.Equal(t, []int64{0, 0, 2048}, src.Offsets(), "block 1 must never be fetched")
}

func TestBlocksErrorNotCached(t *testing.T) {
	data := randomBytes(4096, 6)
	src := newMemSource(data)
	var mu sync.Mutex
	failures := 1
	src.Fail = func(off int64) error {
		mu.Lock()
		defer mu.Unlock()
		if off == 1024 && failures > 0 {
			failures--
			return errFake
		}
		return nil
	}
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1024, Workers: 2})
	p := make([]byte, 1500) // blocks 0 and 1
	n, err := b.ReadAt(t.Context(), p, 100)
	require.ErrorIs(t, err, errFake)
	require.Equal(t, 924, n, "the bytes before the failed block")
	require.Equal(t, data[100:1024], p[:n])

	n, err = b.ReadAt(t.Context(), p, 100)
	require.NoError(t, err)
	require.Equal(t, 1500, n)
	require.Equal(t, data[100:1600], p)
	require.Equal(t, []int64{0, 1024, 1024}, src.Offsets())
}

// shortSource returns fewer bytes than asked without an error, breaking
// the Source contract.
type shortSource struct{ *memSource }

func (s *shortSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, _ := s.memSource.ReadAt(ctx, p[:len(p)/2], off)
	return n, nil
}

func TestBlocksShortSource(t *testing.T) {
	src := &shortSource{memSource: newMemSource(randomBytes(100, 1))}
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: 64})
	_, err := b.ReadAt(t.Context(), make([]byte, 10), 0)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
}

// TestBlocksForegroundFirst: a ReadAt that needs a fetch goes before
// queued stream read-ahead.
func TestBlocksForegroundFirst(t *testing.T) {
	const bs = 1024
	src := newMemSource(randomBytes(20*bs, 7))
	src.Gate = make(chan struct{})
	src.Started = make(chan int64, 100)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: 1})

	s := b.Stream(t.Context(), 0) // requests blocks 0 and 1
	defer s.Close()
	require.Equal(t, int64(0), <-src.Started)
	done := make(chan error, 1)
	go func() {
		_, err := b.ReadAt(t.Context(), make([]byte, 10), 9*bs)
		done <- err
	}()
	require.Eventually(t, func() bool { return b.Stats().CacheMisses == 3 }, 5*time.Second, time.Millisecond)
	src.Gate <- struct{}{}
	require.Equal(t, int64(9*bs), <-src.Started, "the ReadAt fetch must come next")
	src.Gate <- struct{}{}
	require.NoError(t, <-done)
	require.Equal(t, int64(bs), <-src.Started)
	close(src.Gate)
}

// TestBlocksUpgrade: a ReadAt joining queued read-ahead moves it ahead of
// the other read-ahead.
func TestBlocksUpgrade(t *testing.T) {
	const bs = 1024
	src := newMemSource(randomBytes(20*bs, 7))
	src.Gate = make(chan struct{})
	src.Started = make(chan int64, 100)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: 3})

	s := b.Stream(t.Context(), 0) // blocks 0-2 run, 3 is queued
	defer s.Close()
	s2 := b.Stream(t.Context(), 10*bs) // 10-13 queued
	defer s2.Close()
	for range 3 {
		<-src.Started
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.ReadAt(t.Context(), make([]byte, 10), 12*bs)
		done <- err
	}()
	require.Eventually(t, func() bool { return b.Stats().CacheMisses == 9 }, 5*time.Second, time.Millisecond)
	src.Gate <- struct{}{}
	require.Equal(t, int64(12*bs), <-src.Started)
	close(src.Gate)
	require.NoError(t, <-done)
}

func TestBlocksClose(t *testing.T) {
	const bs = 1024
	data := randomBytes(10*bs, 8)
	src := newMemSource(data)
	src.Gate = make(chan struct{})
	src.Started = make(chan int64, 100)
	before := runtime.NumGoroutine()
	b := NewBlocks(src, BlocksOptions{BlockSize: bs, Workers: 2})

	// One ReadAt waits for a running fetch, one for a queued fetch.
	errs := make(chan error, 3)
	for _, off := range []int64{0, bs, 2 * bs} {
		go func() {
			_, err := b.ReadAt(t.Context(), make([]byte, 10), off)
			errs <- err
		}()
	}
	<-src.Started
	<-src.Started
	require.Eventually(t, func() bool { return b.Stats().CacheMisses == 3 }, 5*time.Second, time.Millisecond)
	s := b.Stream(t.Context(), 5*bs)

	require.NoError(t, b.Close())
	require.NoError(t, b.Close())
	for range 3 {
		require.ErrorIs(t, <-errs, ErrClosed)
	}
	active, _, _ := src.Stats()
	require.Zero(t, active, "Close must wait for running fetches")
	_, err := b.ReadAt(t.Context(), make([]byte, 1), 0)
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.Read(make([]byte, 1))
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, s.Close())
	_, err = b.Stream(t.Context(), 0).Read(make([]byte, 1))
	require.ErrorIs(t, err, ErrClosed)
	require.Zero(t, b.Stats().CachedBytes)
	waitGoroutines(t, before)
}

// TestBlocksNoLeak runs a mix of reads, streams and cancellations and
// checks that Close leaves no goroutine behind.
func TestBlocksNoLeak(t *testing.T) {
	const bs = 1024
	before := runtime.NumGoroutine()
	data := randomBytes(50*bs, 9)
	src := newMemSource(data)
	src.Delay = time.Millisecond
	b := NewBlocks(src, BlocksOptions{BlockSize: bs, Workers: 4, CacheBytes: 8 * bs})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Duration(g)*5*time.Millisecond)
			defer cancel()
			s := b.Stream(ctx, int64(g)*5*bs)
			defer s.Close()
			io.Copy(io.Discard, s)
			b.ReadAt(ctx, make([]byte, 5*bs), int64(g)*bs)
		})
	}
	wg.Wait()
	require.NoError(t, b.Close())
	active, _, _ := src.Stats()
	require.Zero(t, active)
	waitGoroutines(t, before)
}

// waitGoroutines waits until at most want goroutines run.
func waitGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("got %d goroutines, want at most %d:\n%s", runtime.NumGoroutine(), want, buf)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func BenchmarkReadAtHit(b *testing.B) {
	src := newMemSource(randomBytes(8<<20, 1))
	blocks := NewBlocks(src, BlocksOptions{})
	defer blocks.Close()
	ctx := context.Background()
	p := make([]byte, 128<<10)
	if _, err := blocks.ReadAt(ctx, p, 0); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := blocks.ReadAt(ctx, p, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// TestBlocksReadCached checks that ReadCached serves what a stream brought
// in, refuses ranges with a block missing, and never fetches.
func TestBlocksReadCached(t *testing.T) {
	data := randomBytes(10<<10+100, 7)
	src := newMemSource(data)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1 << 10, Workers: 2, CacheBytes: 64 << 10})
	buf := make([]byte, 3000)
	if b.ReadCached(buf, 500) {
		t.Fatal("ReadCached hit on an empty cache")
	}
	if got := len(src.Offsets()); got != 0 {
		t.Fatalf("ReadCached fetched %d blocks, want 0", got)
	}
	// Bring in blocks 0-4 only.
	if _, err := b.ReadAt(context.Background(), make([]byte, 5<<10), 0); err != nil {
		t.Fatal(err)
	}
	fetched := len(src.Offsets())
	for _, tc := range []struct {
		off, n int64
		hit    bool
	}{
		{0, 1, true},
		{500, 3000, true},
		{0, 5 << 10, true},
		{4<<10 + 900, 100, true},
		{4<<10 + 900, 100 + 1<<10, false}, // reaches block 5
		{9 << 10, 100, false},
		{int64(len(data)) - 10, 20, false}, // past the end
	} {
		p := make([]byte, tc.n)
		hit := b.ReadCached(p, tc.off)
		if hit != tc.hit {
			t.Errorf("ReadCached(%d+%d): got %v, want %v", tc.off, tc.n, hit, tc.hit)
		}
		if hit && !bytes.Equal(p, data[tc.off:tc.off+tc.n]) {
			t.Errorf("ReadCached(%d+%d): wrong bytes", tc.off, tc.n)
		}
	}
	if got := len(src.Offsets()); got != fetched {
		t.Errorf("ReadCached fetched: %d reads, want %d", got, fetched)
	}
	// After a stream over everything, every range hits.
	s := b.Stream(context.Background(), 0)
	if _, err := io.Copy(io.Discard, s); err != nil {
		t.Fatal(err)
	}
	s.Close()
	p := make([]byte, len(data))
	if !b.ReadCached(p, 0) || !bytes.Equal(p, data) {
		t.Error("ReadCached after a full stream: miss or wrong bytes")
	}
	// Exact ranges (gzip spans) read through Ranges come from the blocks
	// the stream brought in, with no request to the source.
	before := len(src.Offsets())
	span := make([]byte, 2500)
	if n, err := b.Ranges().ReadAt(context.Background(), span, 3333); err != nil || n != len(span) || !bytes.Equal(span, data[3333:3333+2500]) {
		t.Errorf("Ranges().ReadAt of a cached range: n %d, err %v, equal %v", n, err, bytes.Equal(span, data[3333:3333+2500]))
	}
	if got := len(src.Offsets()); got != before {
		t.Errorf("Ranges().ReadAt of a cached range made %d source reads, want 0", got-before)
	}
}

// TestBlocksInFlight checks that Stats.InFlight counts the bytes of
// source reads that have started and not returned, for blocks and for
// exact ranges, and falls to zero when they return.
func TestBlocksInFlight(t *testing.T) {
	data := randomBytes(8192, 5)
	src := newMemSource(data)
	src.Gate = make(chan struct{})
	src.Started = make(chan int64, 10)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1024, Workers: 2})
	done := make(chan error, 2)
	go func() {
		_, err := b.ReadAt(t.Context(), make([]byte, 10), 0)
		done <- err
	}()
	go func() {
		_, err := b.Ranges().ReadAt(t.Context(), make([]byte, 3000), 4000)
		done <- err
	}()
	<-src.Started
	<-src.Started
	require.Equal(t, int64(1024+3000), b.Stats().InFlight)
	close(src.Gate)
	require.NoError(t, <-done)
	require.NoError(t, <-done)
	st := b.Stats()
	require.Zero(t, st.InFlight)
	require.Equal(t, int64(1024+3000), st.BytesFetched)
}

// TestBlocksPrefetch: Prefetch queues the missing blocks of a range
// behind waiting reads, without waiting; a ReadAt of a prefetched block
// then makes no request, and neither does a second Prefetch of it.
func TestBlocksPrefetch(t *testing.T) {
	const bs = 1024
	data := randomBytes(20*bs, 9)
	src := newMemSource(data)
	src.Gate = make(chan struct{})
	src.Started = make(chan int64, 100)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: 1})

	b.Prefetch(2*bs+10, 2*bs) // blocks 2, 3 and 4
	require.Equal(t, int64(2*bs), <-src.Started)
	done := make(chan error, 1)
	go func() {
		_, err := b.ReadAt(t.Context(), make([]byte, 10), 9*bs)
		done <- err
	}()
	require.Eventually(t, func() bool { return b.Stats().CacheMisses == 1 }, 5*time.Second, time.Millisecond)
	src.Gate <- struct{}{}
	require.Equal(t, int64(9*bs), <-src.Started, "a waiting ReadAt goes before prefetch")
	src.Gate <- struct{}{}
	require.NoError(t, <-done)
	close(src.Gate)
	require.Eventually(t, func() bool { return b.Stats().CachedBytes == 4*bs }, 5*time.Second, time.Millisecond)
	require.Equal(t, int64(3), b.Stats().Prefetches)

	b.Prefetch(2*bs, 3*bs)
	p := make([]byte, 3*bs)
	n, err := b.ReadAt(t.Context(), p, 2*bs)
	require.NoError(t, err)
	require.Equal(t, data[2*bs:5*bs], p[:n])
	require.Equal(t, []int64{2 * bs, 3 * bs, 4 * bs, 9 * bs}, src.Offsets(), "prefetched blocks are fetched once")
	require.Equal(t, int64(3), b.Stats().Prefetches)

	b.Prefetch(-1, bs)
	b.Prefetch(20*bs, bs)
	b.Prefetch(0, 0)
	require.Equal(t, int64(3), b.Stats().Prefetches, "ranges outside the object prefetch nothing")
}

// TestBlocksReadRange: ReadRange fetches exactly the range asked with one
// request, without filling blocks, and reads cached blocks without one.
func TestBlocksReadRange(t *testing.T) {
	const bs = 1024
	data := randomBytes(20*bs, 10)
	src := newMemSource(data)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: 2})
	p := make([]byte, 1500)
	n, err := b.ReadRange(t.Context(), p, 3*bs+100)
	require.NoError(t, err)
	require.Equal(t, data[3*bs+100:3*bs+1600], p[:n])
	st := b.Stats()
	require.Equal(t, int64(1), st.Requests)
	require.Equal(t, int64(1500), st.BytesFetched)
	require.Equal(t, int64(0), st.CachedBytes, "an exact range does not fill blocks")

	_, err = b.ReadAt(t.Context(), make([]byte, 10), 7*bs)
	require.NoError(t, err)
	n, err = b.ReadRange(t.Context(), p[:500], 7*bs+200)
	require.NoError(t, err)
	require.Equal(t, data[7*bs+200:7*bs+700], p[:n])
	require.Equal(t, int64(2), b.Stats().Requests, "a range in a cached block is read from it")
}

// newGatedBlocks returns Blocks of 1 KiB with one worker over a source of
// data whose reads each wait for a token from src.Gate and announce
// their offset on src.Started first.
func newGatedBlocks(t *testing.T, data []byte) (*memSource, *Blocks) {
	src := newMemSource(data)
	src.Gate = make(chan struct{})
	src.Started = make(chan int64, 16)
	return src, newTestBlocks(t, src, BlocksOptions{BlockSize: 1 << 10, Workers: 1, CacheBytes: 64 << 10})
}

// TestBlocksReadBeside checks that ReadBeside fetches beside the workers
// (with every worker busy), that ReadAt joins its fetch and it
// joins ReadAt's, that it takes a queued prefetch over, and that leaving
// abandons a fetch only when nobody else waits for it.
func TestBlocksReadBeside(t *testing.T) {
	data := randomBytes(8<<10, 9)
	src, b := newGatedBlocks(t, data)
	ctx := t.Context()
	read := func(f func(context.Context, []byte, int64) (int, error), ctx context.Context, off, n int64) <-chan error {
		done := make(chan error, 1)
		go func() {
			p := make([]byte, n)
			_, err := f(ctx, p, off)
			if err == nil && !bytes.Equal(p, data[off:off+n]) {
				err = fmt.Errorf("wrong bytes at %d+%d", off, n)
			}
			done <- err
		}()
		return done
	}
	started := func(want int64) {
		t.Helper()
		select {
		case got := <-src.Started:
			if got != want {
				t.Fatalf("fetch started at %d, want %d", got, want)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no fetch started, want one at %d", want)
		}
	}
	noStart := func() {
		t.Helper()
		select {
		case got := <-src.Started:
			t.Fatalf("fetch started at %d, want none", got)
		case <-time.After(50 * time.Millisecond):
		}
	}

	// The one worker is busy with block 0; ReadBeside fetches block 1
	// itself, and a ReadAt of block 1 joins it.
	fg0 := read(b.ReadAt, ctx, 0, 100)
	started(0)
	bg1 := read(b.ReadBeside, ctx, 1<<10, 100)
	started(1 << 10)
	fg1 := read(b.ReadAt, ctx, 1<<10+500, 100)
	noStart()
	src.Gate <- struct{}{} // one of the two fetches
	src.Gate <- struct{}{}
	for _, c := range []<-chan error{fg0, bg1, fg1} {
		require.NoError(t, <-c)
	}
	require.Len(t, src.Offsets(), 2)

	// ReadBeside joins a ReadAt's fetch, and reads cached blocks.
	fg2 := read(b.ReadAt, ctx, 2<<10, 10)
	started(2 << 10)
	bg2 := read(b.ReadBeside, ctx, 1<<10, 2<<10) // blocks 1 (cached) and 2 (running)
	noStart()
	src.Gate <- struct{}{}
	require.NoError(t, <-fg2)
	require.NoError(t, <-bg2)
	require.Len(t, src.Offsets(), 3)

	// A prefetch waiting in the queue behind a busy worker is taken
	// over; the worker does not fetch it again.
	fg3 := read(b.ReadAt, ctx, 3<<10, 10)
	started(3 << 10)
	b.Prefetch(4<<10, 1)
	bg4 := read(b.ReadBeside, ctx, 4<<10, 10)
	started(4 << 10)
	src.Gate <- struct{}{}
	src.Gate <- struct{}{}
	require.NoError(t, <-fg3)
	require.NoError(t, <-bg4)
	noStart()
	require.Len(t, src.Offsets(), 5)

	// Leaving alone abandons the fetch; a later ReadAt fetches anew.
	lctx, cancel := context.WithCancel(ctx)
	bg5 := read(b.ReadBeside, lctx, 5<<10, 10)
	started(5 << 10)
	cancel()
	require.ErrorIs(t, <-bg5, context.Canceled)
	fg5 := read(b.ReadAt, ctx, 5<<10, 10)
	started(5 << 10)
	src.Gate <- struct{}{}
	require.NoError(t, <-fg5)

	// Leaving a fetch that a ReadAt joined returns at once and lets the
	// fetch finish for the ReadAt.
	lctx, cancel = context.WithCancel(ctx)
	bg6 := read(b.ReadBeside, lctx, 6<<10, 10)
	started(6 << 10)
	fg6 := read(b.ReadAt, ctx, 6<<10, 10)
	noStart()
	cancel()
	require.ErrorIs(t, <-bg6, context.Canceled)
	src.Gate <- struct{}{}
	require.NoError(t, <-fg6)
	// A block that a ReadAt read too stays cached; one that only
	// ReadBeside read does not.
	p := make([]byte, 10)
	require.True(t, b.ReadCached(p, 1<<10), "block 1, read by ReadAt too")
	bg7 := read(b.ReadBeside, ctx, 7<<10, 10)
	started(7 << 10)
	src.Gate <- struct{}{}
	require.NoError(t, <-bg7)
	require.False(t, b.ReadCached(p, 7<<10), "block 7, read by ReadBeside alone")
	// Block 5 twice (the abandoned fetch), every other block once.
	require.Equal(t, []int64{0, 1 << 10, 2 << 10, 3 << 10, 4 << 10, 5 << 10, 5 << 10, 6 << 10, 7 << 10}, src.Offsets())
}

// TestBlocksReadRangeJoins checks that ReadRange joins the fetches under
// way of the blocks a range lies in, and asks for exact bytes when one of
// them is only queued or absent.
func TestBlocksReadRangeJoins(t *testing.T) {
	data := randomBytes(4<<10, 5)
	src, b := newGatedBlocks(t, data)
	ctx := t.Context()
	bg := make(chan error, 1)
	go func() {
		_, err := b.ReadBeside(ctx, make([]byte, 1<<10), 1<<10)
		bg <- err
	}()
	require.Equal(t, int64(1<<10), <-src.Started)
	joined := make(chan error, 1)
	p := make([]byte, 300)
	go func() {
		_, err := b.ReadRange(ctx, p, 1<<10+200)
		joined <- err
	}()
	select {
	case off := <-src.Started:
		t.Fatalf("ReadRange of a block being fetched started a fetch at %d, want none", off)
	case <-time.After(50 * time.Millisecond):
	}
	src.Gate <- struct{}{}
	require.NoError(t, <-bg)
	require.NoError(t, <-joined)
	require.True(t, bytes.Equal(data[1<<10+200:1<<10+500], p), "joined bytes")

	// Across block 1 (kept: ReadRange read it too) and block 2 (absent):
	// an exact request.
	q := make([]byte, 600)
	exact := make(chan error, 1)
	go func() {
		_, err := b.ReadRange(ctx, q, 1<<10+800)
		exact <- err
	}()
	require.Equal(t, int64(1<<10+800), <-src.Started)
	src.Gate <- struct{}{}
	require.NoError(t, <-exact)
	require.True(t, bytes.Equal(data[1<<10+800:1<<10+1400], q), "exact bytes")
	require.Len(t, src.Offsets(), 2)
}
