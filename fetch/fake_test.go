package fetch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// memSource is an in-memory Source that counts and records its reads and
// can slow them down, hold them at a gate or fail them.
type memSource struct {
	// set once
	data  []byte
	delay time.Duration         // per read
	gate  chan struct{}         // if non-nil, each read takes a token first
	fail  func(off int64) error // if non-nil and non-nil result, the read fails
	// started receives the offset of each read as it starts, if non-nil
	started chan int64

	mu sync.Mutex
	// guarded by mu
	offs      []int64 // offsets read, in start order
	active    int     // reads running now
	maxActive int
	cancelled int // reads that ended because their ctx did
	closed    bool
}

var _ Source = (*memSource)(nil)

func newMemSource(data []byte) *memSource { return &memSource{data: data} }

func (s *memSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	s.mu.Lock()
	s.offs = append(s.offs, off)
	s.active++
	s.maxActive = max(s.maxActive, s.active)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active--
		s.mu.Unlock()
	}()
	if s.started != nil {
		s.started <- off
	}
	if s.gate != nil {
		select {
		case <-s.gate:
		case <-ctx.Done():
			return 0, s.cancel(ctx)
		}
	}
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return 0, s.cancel(ctx)
		}
	}
	if s.fail != nil {
		if err := s.fail(off); err != nil {
			return 0, err
		}
	}
	if off >= int64(len(s.data)) {
		return 0, io.EOF
	}
	n := copy(p, s.data[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (s *memSource) cancel(ctx context.Context) error {
	s.mu.Lock()
	s.cancelled++
	s.mu.Unlock()
	return ctx.Err()
}

func (s *memSource) Identity() Identity { return Identity{Size: int64(len(s.data))} }
func (s *memSource) String() string     { return "mem" }
func (s *memSource) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// reads returns the offsets read so far, sorted.
func (s *memSource) reads() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	offs := slices.Clone(s.offs)
	slices.Sort(offs)
	return offs
}

func (s *memSource) stats() (active, maxActive, cancelled int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active, s.maxActive, s.cancelled
}

// randomBytes returns n reproducible pseudo-random bytes.
func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// readAtFunc is the ReadAt of a Source or Blocks with ctx bound.
type readAtFunc func(p []byte, off int64) (int, error)

// checkRanges compares random and edge ranges read with readAt against
// bytes.Reader: same bytes, same n, io.EOF at the same places.
func checkRanges(t *testing.T, readAt readAtFunc, data []byte, blockSize int64, seed uint64) {
	t.Helper()
	size := int64(len(data))
	type rng struct{ off, n int64 }
	var ranges []rng
	for _, off := range []int64{0, 1, size / 2, size - 1, size, size + 1, size + 1000} {
		for _, n := range []int64{1, 2, 100, blockSize, blockSize + 1, 3*blockSize + 7, size, size + 10} {
			if off >= 0 && n > 0 {
				ranges = append(ranges, rng{off, n})
			}
		}
	}
	for b := blockSize; b <= size+blockSize; b += blockSize {
		for _, d := range []int64{-3, -1, 0, 1} {
			if off := b + d; off >= 0 {
				ranges = append(ranges, rng{off, 5}, rng{off, blockSize + 2})
			}
		}
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for range 200 {
		off := r.Int64N(size + 2)
		n := 1 + r.Int64N(min(size, 4*blockSize)+2)
		ranges = append(ranges, rng{off, n})
	}
	ref := bytes.NewReader(data)
	for _, rg := range ranges {
		want := make([]byte, rg.n)
		wantN, wantErr := ref.ReadAt(want, rg.off)
		got := make([]byte, rg.n)
		n, err := readAt(got, rg.off)
		require.Equal(t, wantN, n, "n at off %d len %d", rg.off, rg.n)
		if wantErr == io.EOF {
			require.ErrorIs(t, err, io.EOF, "err at off %d len %d", rg.off, rg.n)
		} else {
			require.NoError(t, err, "off %d len %d", rg.off, rg.n)
		}
		if !bytes.Equal(want[:wantN], got[:n]) {
			t.Fatalf("bytes at off %d len %d differ from the object", rg.off, rg.n)
		}
	}
}

// errFake is a permanent failure injected by tests.
var errFake = errors.New("injected failure")
