package fetch

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// heldSource is a memSource whose reads at the offsets given to
// newHeldSource wait until release(off), or until their ctx ends.
type heldSource struct {
	*memSource
	held      map[int64]chan struct{} // set once
	waiting   atomic.Int64            // reads held now
	cancelled atomic.Int64            // held reads that ended because their ctx did
}

func newHeldSource(data []byte, offs ...int64) *heldSource {
	s := &heldSource{memSource: newMemSource(data), held: make(map[int64]chan struct{})}
	for _, off := range offs {
		s.held[off] = make(chan struct{})
	}
	return s
}

// release lets the reads at off through, now and from now on.
func (s *heldSource) release(offs ...int64) {
	for _, off := range offs {
		close(s.held[off])
	}
}

func (s *heldSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if ch := s.held[off]; ch != nil {
		s.waiting.Add(1)
		defer s.waiting.Add(-1)
		select {
		case <-ch:
		case <-ctx.Done():
			s.cancelled.Add(1)
			return 0, ctx.Err()
		}
	}
	return s.memSource.ReadAt(ctx, p, off)
}

// sortedRanges returns the offset and length of each read of src so far,
// by offset, then length.
func sortedRanges(src *memSource) [][2]int64 {
	r := src.TakeRanges()
	slices.SortFunc(r, func(a, b [2]int64) int { return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1])) })
	return r
}

// arrived returns how many pieces of block idx have arrived.
func arrived(b *Blocks, idx int64) int {
	b.mu.Lock()
	blk := b.blocks[idx]
	b.mu.Unlock()
	n := 0
	if blk != nil {
		for _, pc := range blk.pieces {
			if isClosed(pc.done) {
				n++
			}
		}
	}
	return n
}

// Block 0 of 1 KiB in pieces from 64 bytes, the layout of most tests here.
var (
	rampPieces  = [][2]int64{{0, 64}, {64, 64}, {128, 128}, {256, 256}, {512, 512}}
	rampOffsets = []int64{0, 64, 128, 256, 512}
)

// TestRampRanges checks the requests of a stream: its first block in
// growing pieces that tile it, unless it is cached, fits in the first
// piece or pieces are off, the second in pieces as long as the first's
// longest, and the blocks after them whole.
func TestRampRanges(t *testing.T) {
	tests := []struct {
		name                   string
		size, bs, first, start int64
		cached                 bool // block 0 read with ReadAt before the stream
		want                   [][2]int64
	}{
		// Block 1 in pieces as long as block 0's longest.
		{"doubling", 3*1024 + 100, 1024, 64, 0, false,
			append(slices.Clone(rampPieces), [2]int64{1024, 512}, [2]int64{1536, 512}, [2]int64{2048, 1024}, [2]int64{3072, 100})},
		{"cut at the block's end", 2000, 1000, 100, 0, false,
			[][2]int64{{0, 100}, {100, 100}, {200, 200}, {400, 400}, {800, 200}, {1000, 400}, {1400, 400}, {1800, 200}}},
		// Inside a block nobody has: its rest alone, nothing before.
		{"starting in block 1", 3 * 1024, 1024, 64, 1500, false, [][2]int64{{1500, 548}, {2048, 1024}}},
		{"short object", 150, 1024, 64, 0, false, [][2]int64{{0, 64}, {64, 64}, {128, 22}}},
		{"object of one piece", 64, 1024, 64, 0, false, [][2]int64{{0, 64}}},
		{"block of one piece", 2048, 1024, 1024, 0, false, [][2]int64{{0, 1024}, {1024, 1024}}},
		{"default first piece over small blocks", 2048, 1024, 0, 0, false, [][2]int64{{0, 1024}, {1024, 1024}}},
		{"default first piece", 512 << 10, 256 << 10, 0, 0, false,
			[][2]int64{{0, 64 << 10}, {64 << 10, 64 << 10}, {128 << 10, 128 << 10}, {256 << 10, 128 << 10}, {384 << 10, 128 << 10}}},
		{"off", 2048, 1024, -1, 0, false, [][2]int64{{0, 1024}, {1024, 1024}}},
		{"first block cached", 3 * 1024, 1024, 64, 0, true, [][2]int64{{0, 1024}, {1024, 512}, {1536, 512}, {2048, 1024}}},
		// The source's open brought the first 100 bytes (prefixBytes):
		// the first piece takes no request; the second, which they do
		// not cover whole, takes one.
		{"prefix", 3*1024 + 100, 1024, 64, 0, false,
			append(slices.Clone(rampPieces[1:]), [2]int64{1024, 512}, [2]int64{1536, 512}, [2]int64{2048, 1024}, [2]int64{3072, 100})},
		{"prefix, starting in block 1", 3 * 1024, 1024, 64, 1500, false, [][2]int64{{1500, 548}, {2048, 1024}}},
	}
	for _, tt := range tests {
		for _, how := range []string{"Read", "WriteTo"} {
			t.Run(tt.name+"/"+how, func(t *testing.T) {
				data := randomBytes(int(tt.size), uint64(tt.size))
				src := newMemSource(data)
				var from Source = src
				if strings.HasPrefix(tt.name, "prefix") {
					from = prefixSource{src, data[:prefixBytes]}
				}
				b := newTestBlocks(t, from, BlocksOptions{BlockSize: tt.bs, Workers: 2, FirstPiece: tt.first})
				if tt.cached {
					_, err := b.ReadAt(t.Context(), make([]byte, 1), 0)
					require.NoError(t, err)
				}
				s := b.Stream(t.Context(), tt.start)
				defer s.Close()
				var got []byte
				var err error
				if how == "Read" {
					got, err = io.ReadAll(s)
				} else {
					var buf bytes.Buffer
					_, err = io.Copy(&buf, s)
					got = buf.Bytes()
				}
				require.NoError(t, err)
				require.True(t, bytes.Equal(data[tt.start:], got), "bytes from %d", tt.start)
				if got := sortedRanges(src); !slices.Equal(got, tt.want) {
					t.Errorf("got ranges %v, want %v", got, tt.want)
				}
			})
		}
	}
}

// prefixSource is a Source whose open brought its first bytes (Prefixer).
type prefixSource struct {
	*memSource
	prefix []byte
}

func (s prefixSource) Prefix() []byte { return s.prefix }

// prefixBytes is how much of the object a prefixSource of the tests holds.
const prefixBytes = 100

// TestRampPrefix: a stream returns the bytes of the pieces that arrived
// in order while the later ones are held, and no more.
func TestRampPrefix(t *testing.T) {
	data := randomBytes(2048, 11)
	src := newHeldSource(data, 64, 128, 256, 512, 1024)
	b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1024, Workers: 2, FirstPiece: 64})
	// A read that waited for the whole block would wait for ever: the
	// deadline turns that into a failure.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	s := b.Stream(ctx, 0)
	defer s.Close()
	steps := []struct {
		release   []int64
		arrived   int // pieces of block 0 there before the read
		wantBytes int // bytes the read returns; 0: no read
	}{
		{nil, 1, 64},                 // piece 0 only
		{[]int64{128, 256}, 3, 0},    // out of order: not ready yet
		{[]int64{64}, 4, 448},        // pieces 1-3 at once
		{[]int64{512, 1024}, 5, 512}, // the rest of block 0
		{nil, 5, 1024},               // block 1, whole
	}
	pos := 0
	for i, st := range steps {
		src.release(st.release...)
		require.Eventually(t, func() bool { return arrived(b, 0) == st.arrived }, 5*time.Second, time.Millisecond, "step %d", i)
		if st.wantBytes == 0 {
			continue
		}
		p := make([]byte, 2048)
		n, err := s.Read(p)
		require.NoError(t, err)
		if n != st.wantBytes {
			t.Fatalf("step %d: got %d bytes, want %d", i, n, st.wantBytes)
		}
		require.True(t, bytes.Equal(data[pos:pos+n], p[:n]), "step %d: bytes at %d", i, pos)
		pos += n
	}
	_, err := s.Read(make([]byte, 1))
	require.ErrorIs(t, err, io.EOF)
}

// TestRampShared: a ReadAt or a second stream of a block fetched in
// pieces joins that fetch, and a stream joining a whole fetch does not
// split it: no byte is fetched twice.
func TestRampShared(t *testing.T) {
	const size = 3 * 1024
	data := randomBytes(size, 12)
	readAt := func(off, n int64) func(*Blocks) ([]byte, []byte, error) {
		return func(b *Blocks) ([]byte, []byte, error) {
			p := make([]byte, n)
			_, err := b.ReadAt(t.Context(), p, off)
			return p, data[off : off+n], err
		}
	}
	stream := func(b *Blocks) ([]byte, []byte, error) {
		s := b.Stream(t.Context(), 0)
		defer s.Close()
		got, err := io.ReadAll(s)
		return got, data, err
	}
	ramped := append(slices.Clone(rampPieces), [2]int64{1024, 512}, [2]int64{1536, 512}, [2]int64{2048, 1024})
	whole := [][2]int64{{0, 1024}, {1024, 512}, {1536, 512}, {2048, 1024}}
	tests := []struct {
		name    string
		read    func(*Blocks) ([]byte, []byte, error)
		first   bool  // read starts before the stream, and holds block 0
		lookups int64 // blocks read looks up before it waits
		want    [][2]int64
	}{
		{"ReadAt in the first piece", readAt(10, 20), false, 1, ramped},
		{"ReadAt in the last piece", readAt(700, 100), false, 1, ramped},
		{"ReadAt across blocks", readAt(1000, 100), false, 2, ramped},
		{"ReadAt of everything", readAt(0, size), false, 3, ramped},
		{"second stream", stream, false, 3, ramped},
		{"ReadAt first", readAt(10, 20), true, 1, whole},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := newHeldSource(data, rampOffsets...)
			b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1024, Workers: 2, FirstPiece: 64})
			lookups := func() int64 { st := b.Stats(); return st.CacheHits + st.CacheMisses }
			type result struct {
				got, want []byte
				err       error
			}
			done := make(chan result, 1)
			read := func() {
				got, want, err := tt.read(b)
				done <- result{got, want, err}
			}
			var s io.ReadCloser
			if tt.first {
				go read()
				require.Eventually(t, func() bool { return src.waiting.Load() == 1 }, 5*time.Second, time.Millisecond)
				s = b.Stream(t.Context(), 0)
			} else {
				s = b.Stream(t.Context(), 0)
				require.Eventually(t, func() bool { return src.waiting.Load() == int64(len(rampPieces)) }, 5*time.Second, time.Millisecond)
				before := lookups()
				go read()
				require.Eventually(t, func() bool { return lookups() == before+tt.lookups }, 5*time.Second, time.Millisecond)
			}
			defer s.Close()
			src.release(rampOffsets...)
			got, err := io.ReadAll(s)
			require.NoError(t, err)
			require.True(t, bytes.Equal(data, got), "stream bytes")
			r := <-done
			require.NoError(t, r.err)
			require.True(t, bytes.Equal(r.want, r.got), "bytes of the other reader")
			if got := sortedRanges(src.memSource); !slices.Equal(got, tt.want) {
				t.Errorf("got ranges %v, want %v", got, tt.want)
			}
			if got := b.Stats().BytesFetched; got != size {
				t.Errorf("got %d bytes fetched, want %d", got, size)
			}
		})
	}
}

// TestRampPieceFails: a failed piece fails the block; the stream returns
// the bytes before the piece, then the error, and a later ReadAt fetches
// the block again, whole.
func TestRampPieceFails(t *testing.T) {
	data := randomBytes(1024, 13)
	for _, pc := range rampPieces {
		failAt, length := pc[0], pc[1]
		t.Run(fmt.Sprintf("piece at %d", failAt), func(t *testing.T) {
			src := newHeldSource(data, failAt)
			var failed atomic.Bool
			src.Fail = func(off int64) error {
				if off == failAt && failed.CompareAndSwap(false, true) {
					return errFake
				}
				return nil
			}
			b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1024, Workers: 2, FirstPiece: 64})
			s := b.Stream(t.Context(), 0)
			defer s.Close()
			// Every other piece arrives before the held one fails.
			require.Eventually(t, func() bool { return src.Bytes() == 1024-length }, 5*time.Second, time.Millisecond)
			src.release(failAt)
			got, err := io.ReadAll(s)
			require.ErrorIs(t, err, errFake)
			if int64(len(got)) != failAt {
				t.Fatalf("got %d bytes before the error, want %d", len(got), failAt)
			}
			require.True(t, bytes.Equal(data[:failAt], got))
			_, err = s.Read(make([]byte, 1))
			require.ErrorIs(t, err, errFake, "the error is sticky")

			p := make([]byte, 1024)
			n, err := b.ReadAt(t.Context(), p, 0)
			require.NoError(t, err)
			require.Equal(t, 1024, n)
			require.True(t, bytes.Equal(data, p))
			want := append([][2]int64{{0, 64}, {0, 1024}}, rampPieces[1:]...)
			if got := sortedRanges(src.memSource); !slices.Equal(got, want) {
				t.Errorf("got ranges %v, want %v", got, want)
			}
		})
	}
}

// TestRampCancel: a done ctx, a closed stream or a closed Blocks ends
// the wait for pieces, cancels the pieces nobody waits for any more and
// leaves no goroutine behind.
func TestRampCancel(t *testing.T) {
	data := randomBytes(1024, 14)
	npieces := int64(len(rampPieces))
	tests := []struct {
		name string
		// stop ends the stream's wait for its pieces and returns the
		// error that the stream's Read gets.
		stop          func(t *testing.T, src *heldSource, b *Blocks, s io.ReadCloser, cancel context.CancelFunc) error
		wantErr       error
		wantCancelled int64 // pieces cancelled
	}{
		{"ctx done", func(t *testing.T, src *heldSource, b *Blocks, s io.ReadCloser, cancel context.CancelFunc) error {
			err := blockedRead(s, cancel)
			s.Close()
			return err
		}, context.Canceled, npieces},
		{"Blocks closed", func(t *testing.T, src *heldSource, b *Blocks, s io.ReadCloser, cancel context.CancelFunc) error {
			return blockedRead(s, func() { b.Close() })
		}, ErrClosed, npieces},
		{"stream closed after a prefix", func(t *testing.T, src *heldSource, b *Blocks, s io.ReadCloser, cancel context.CancelFunc) error {
			src.release(0)
			n, err := s.Read(make([]byte, 1024))
			require.NoError(t, err)
			require.Equal(t, 64, n)
			require.NoError(t, s.Close())
			_, err = s.Read(make([]byte, 1))
			return err
		}, ErrClosed, npieces - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := runtime.NumGoroutine()
			src := newHeldSource(data, rampOffsets...)
			b := NewBlocks(src, BlocksOptions{BlockSize: 1024, Workers: 2, FirstPiece: 64})
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute) // against a hang
			defer cancel()
			s := b.Stream(ctx, 0)
			require.Eventually(t, func() bool { return src.waiting.Load() == npieces }, 5*time.Second, time.Millisecond)
			err := tt.stop(t, src, b, s, cancel)
			require.ErrorIs(t, err, tt.wantErr)
			require.Eventually(t, func() bool { return src.cancelled.Load() == tt.wantCancelled }, 5*time.Second, time.Millisecond)
			require.NoError(t, s.Close())
			require.NoError(t, b.Close())
			if got := src.waiting.Load(); got != 0 {
				t.Errorf("got %d reads still held after Close, want 0", got)
			}
			waitGoroutines(t, before)
		})
	}
}

// blockedRead reads from s, which waits for held pieces, calls stop while
// it waits, and returns the error the read got.
func blockedRead(s io.Reader, stop func()) error {
	errc := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 1))
		errc <- err
	}()
	// Nothing tells when the read starts to wait; this pause makes it
	// likely that stop ends a wait, and the outcome is the same if not.
	time.Sleep(10 * time.Millisecond)
	stop()
	return <-errc
}
