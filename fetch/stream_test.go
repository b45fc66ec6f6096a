package fetch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/stretchr/testify/require"
)

// discarder is what the index pass sees of a stream.
type discarder interface {
	io.ReadCloser
	Discard(n int64) (int64, error)
}

func TestStreamBytes(t *testing.T) {
	for _, bs := range []int64{64, 1000} {
		for _, size := range []int64{0, 1, 63, 64, 65, 999, 1000, 1001, 7*1000 + 5} {
			for _, workers := range []int{1, 3} {
				t.Run(fmt.Sprintf("bs=%d/size=%d/workers=%d", bs, size, workers), func(t *testing.T) {
					t.Parallel()
					data := randomBytes(int(size), uint64(size))
					b := newTestBlocks(t, newMemSource(data), BlocksOptions{BlockSize: bs, Workers: workers})
					for _, off := range []int64{0, 1, bs - 1, bs, bs + 1, size / 2, size - 1, size, size + 10} {
						if off < 0 {
							continue
						}
						want := data[min(off, size):]
						// Read, through io.ReadAll.
						s := b.Stream(t.Context(), off)
						got, err := io.ReadAll(s)
						require.NoError(t, err)
						require.True(t, bytes.Equal(want, got), "Read from %d", off)
						require.NoError(t, s.Close())
						// WriteTo, through io.Copy.
						s = b.Stream(t.Context(), off)
						var buf bytes.Buffer
						n, err := io.Copy(&buf, s)
						require.NoError(t, err)
						require.Equal(t, int64(len(want)), n)
						require.True(t, bytes.Equal(want, buf.Bytes()), "WriteTo from %d", off)
						require.NoError(t, s.Close())
						// Small reads, and the io.Reader contract.
						s = b.Stream(t.Context(), off)
						require.NoError(t, iotest.TestReader(iotest.HalfReader(s), want))
						require.NoError(t, s.Close())
					}
				})
			}
		}
	}
}

func TestStreamNegativeOffset(t *testing.T) {
	b := newTestBlocks(t, newMemSource(randomBytes(10, 1)), BlocksOptions{})
	_, err := b.Stream(t.Context(), -1).Read(make([]byte, 1))
	require.ErrorContains(t, err, "negative offset")
}

// TestStreamReadAhead: a slow consumer gets parallel fetches, never more
// than Workers at once and never more than Workers blocks ahead.
func TestStreamReadAhead(t *testing.T) {
	const bs, nblocks, workers = 1024, 40, 4
	data := randomBytes(nblocks*bs, 2)
	src := newMemSource(data)
	src.Delay = 5 * time.Millisecond
	var limit atomic.Int64 // highest block index the stream may request
	var tooFar atomic.Int64
	src.Fail = func(off int64) error {
		if off/bs > limit.Load() {
			tooFar.Store(off/bs + 1)
		}
		return nil
	}
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: workers})

	limit.Store(workers) // block 0 and workers ahead
	s := b.Stream(t.Context(), 0)
	defer s.Close()
	var got []byte
	p := make([]byte, bs)
	for k := int64(0); ; k++ {
		time.Sleep(2 * time.Millisecond) // a slow consumer
		// Reading block k ends it, which may request up to block k+1+workers.
		limit.Store(k + 1 + workers)
		n, err := s.Read(p)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		require.Equal(t, bs, n, "one block per Read")
		got = append(got, p[:n]...)
	}
	require.True(t, bytes.Equal(data, got))
	require.Zero(t, tooFar.Load(), "fetched block %d too far ahead", tooFar.Load()-1)
	_, maxActive, _ := src.Stats()
	require.LessOrEqual(t, maxActive, workers)
	require.Greater(t, maxActive, 1, "read-ahead must fetch in parallel")
	require.Len(t, src.Offsets(), nblocks)
}

// TestStreamStalledConsumer: a stream nobody reads fetches its window and
// stops; started inside a block, the rest of that block is the window's
// first piece.
func TestStreamStalledConsumer(t *testing.T) {
	const bs, workers = 1024, 4
	src := newMemSource(randomBytes(100*bs, 3))
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: workers})
	s := b.Stream(t.Context(), 10)
	defer s.Close()
	require.Eventually(t, func() bool { return len(src.Offsets()) == workers+1 }, 5*time.Second, time.Millisecond)
	time.Sleep(50 * time.Millisecond)
	offs := src.Offsets()
	slices.Sort(offs)
	require.Equal(t, []int64{10, bs, 2 * bs, 3 * bs, 4 * bs}, offs)
}

func TestStreamDiscard(t *testing.T) {
	const bs, nblocks = 1024, 20
	data := randomBytes(nblocks*bs+100, 4)
	src := newMemSource(data)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: 2})
	s := b.Stream(t.Context(), 0).(discarder)
	defer s.Close()

	p := make([]byte, 10)
	_, err := io.ReadFull(s, p)
	require.NoError(t, err)
	n, err := s.Discard(10*bs - 10 + 5) // to 10*bs+5
	require.NoError(t, err)
	require.Equal(t, int64(10*bs-10+5), n)
	_, err = io.ReadFull(s, p)
	require.NoError(t, err)
	require.Equal(t, data[10*bs+5:10*bs+15], p)
	n, err = s.Discard(100) // inside the block
	require.NoError(t, err)
	require.Equal(t, int64(100), n)
	_, err = io.ReadFull(s, p)
	require.NoError(t, err)
	require.Equal(t, data[10*bs+115:10*bs+125], p)

	// Past the end: what was left, and io.EOF.
	left := int64(len(data)) - (10*bs + 125)
	n, err = s.Discard(left + 1)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, left, n)
	_, err = s.Read(p)
	require.ErrorIs(t, err, io.EOF)

	for _, off := range src.Offsets() {
		if i := off / bs; i >= 3 && i < 10 {
			t.Errorf("block %d was skipped but fetched", i)
		}
	}
}

// TestStreamDiscardModel compares random Read and Discard sequences with
// a bytes.Reader, with the first block whole or in pieces.
func TestStreamDiscardModel(t *testing.T) {
	const bs = 100
	data := randomBytes(3000, 5)
	for seed := range uint64(20) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewPCG(seed, 2))
			firstPiece := []int64{-1, 7, 30}[seed%3]
			b := newTestBlocks(t, newMemSource(data), BlocksOptions{BlockSize: bs, Workers: 1 + r.IntN(4), FirstPiece: firstPiece})
			start := r.Int64N(int64(len(data)))
			s := b.Stream(t.Context(), start).(discarder)
			defer s.Close()
			ref := bytes.NewReader(data[start:])
			for {
				if r.IntN(2) == 0 {
					k := r.Int64N(5 * bs)
					n, err := s.Discard(k)
					wantN := min(k, int64(ref.Len()))
					ref.Seek(wantN, io.SeekCurrent)
					require.Equal(t, wantN, n)
					if wantN < k {
						require.ErrorIs(t, err, io.EOF)
						break
					}
					require.NoError(t, err)
					continue
				}
				p := make([]byte, 1+r.IntN(3*bs))
				want := make([]byte, len(p))
				wantN, wantErr := io.ReadFull(ref, want)
				n, err := io.ReadFull(s, p)
				require.Equal(t, wantN, n)
				require.Equal(t, want[:wantN], p[:n])
				if wantErr != nil {
					require.Error(t, err)
					break
				}
				require.NoError(t, err)
			}
		})
	}
}

// TestStreamKeepsHotBlocks: a stream longer than the cache evicts its
// own blocks, not the blocks that ReadAt callers use.
func TestStreamKeepsHotBlocks(t *testing.T) {
	const bs, nblocks = 1024, 40
	data := randomBytes(nblocks*bs, 6)
	src := newMemSource(data)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: 2, CacheBytes: 6 * bs})
	hot := []int64{30 * bs, 31 * bs}
	for _, off := range hot {
		_, err := b.ReadAt(t.Context(), make([]byte, 1), off)
		require.NoError(t, err)
	}
	s := b.Stream(t.Context(), 0)
	got, err := io.ReadAll(s)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.True(t, bytes.Equal(data, got))
	require.Equal(t, int64(nblocks), b.Stats().Requests, "the stream must read hot blocks from the cache")
	for _, off := range hot {
		_, err := b.ReadAt(t.Context(), make([]byte, 1), off)
		require.NoError(t, err)
	}
	require.Equal(t, int64(nblocks), b.Stats().Requests, "hot blocks must survive the stream")
}

// TestStreamSharesFetches: a ReadAt of blocks a stream is fetching joins
// those fetches, and the other way round.
func TestStreamSharesFetches(t *testing.T) {
	const bs, nblocks = 1024, 30
	data := randomBytes(nblocks*bs, 7)
	src := newMemSource(data)
	src.Delay = 10 * time.Millisecond
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: 8})
	done := make(chan error, 1)
	go func() {
		p := make([]byte, len(data))
		_, err := b.ReadAt(t.Context(), p, 0)
		if err == nil && !bytes.Equal(data, p) {
			err = fmt.Errorf("wrong bytes")
		}
		done <- err
	}()
	s := b.Stream(t.Context(), 0)
	defer s.Close()
	got, err := io.ReadAll(s)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
	require.NoError(t, <-done)
	require.Equal(t, int64(nblocks), b.Stats().Requests)
}

// TestStreamClose: closing a stream cancels read-ahead that nobody else
// waits for.
func TestStreamClose(t *testing.T) {
	const bs, workers = 1024, 3
	src := newMemSource(randomBytes(20*bs, 8))
	src.Gate = make(chan struct{})
	src.Started = make(chan int64, 100)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: workers})
	s := b.Stream(t.Context(), 0) // 0-2 run, 3 is queued
	for range workers {
		<-src.Started
	}
	require.NoError(t, s.Close())
	require.NoError(t, s.Close())
	require.Eventually(t, func() bool { _, _, c := src.Stats(); return c == workers }, 5*time.Second, time.Millisecond)
	_, err := s.Read(make([]byte, 1))
	require.ErrorIs(t, err, ErrClosed)
	close(src.Gate)
	require.Len(t, src.Offsets(), workers, "queued read-ahead must not start")
}

func TestStreamContext(t *testing.T) {
	src := newMemSource(randomBytes(4096, 9))
	src.Gate = make(chan struct{})
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1024, Workers: 2})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	s := b.Stream(ctx, 0)
	defer s.Close()
	_, err := s.Read(make([]byte, 10))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	close(src.Gate)
	_, err = s.Read(make([]byte, 10))
	require.ErrorIs(t, err, context.DeadlineExceeded, "a stream error is sticky")
}

// TestStreamContextFetched: a stream whose ctx is done stops at once,
// even where the blocks ahead are already fetched: a stopped pass must
// not read on to the end of what it has.
func TestStreamContextFetched(t *testing.T) {
	src := newMemSource(randomBytes(8*1024, 10))
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1024, Workers: 4})
	ctx, cancel := context.WithCancel(t.Context())
	s := b.Stream(ctx, 0)
	defer s.Close()
	_, err := io.ReadFull(s, make([]byte, 100))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return src.Requests() >= 4 }, 5*time.Second, time.Millisecond)
	cancel()
	_, err = s.Read(make([]byte, 10))
	require.ErrorIs(t, err, context.Canceled)
}

// TestStreamFetchesNothingBeforeItsStart: a stream that starts inside a
// block nobody has fetches the block from its start on, not the bytes
// before it (a pass resumed in the middle of a block), and reads a block
// that is cached from the cache.
func TestStreamFetchesNothingBeforeItsStart(t *testing.T) {
	const bs, nblocks = 1024, 20
	data := randomBytes(nblocks*bs+100, 6)
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) {
			src := newMemSource(data)
			b := newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: 3})
			const off = 5*bs + 300
			if cached {
				_, err := b.ReadAt(t.Context(), make([]byte, 10), 5*bs)
				require.NoError(t, err)
				src.TakeRanges()
			}
			s := b.Stream(t.Context(), off)
			got, err := io.ReadAll(s)
			require.NoError(t, err)
			require.NoError(t, s.Close())
			require.True(t, bytes.Equal(data[off:], got))
			var fetched int64
			for _, r := range src.TakeRanges() {
				require.GreaterOrEqual(t, r[0], int64(off), "fetched %d+%d, before the stream's start", r[0], r[1])
				fetched += r[1]
			}
			want := int64(len(data) - off)
			if cached {
				want = int64(len(data) - 6*bs)
			}
			require.Equal(t, want, fetched)
		})
	}
}
