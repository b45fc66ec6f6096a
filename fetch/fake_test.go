package fetch

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tarmount/tarmount/internal/testutil/memsrc"
)

// memSource is the in-memory Source of the tests, which counts and
// records its reads and can slow them down, hold them at a gate or fail
// them.
type memSource = memsrc.Source[Identity]

var _ Source = (*memSource)(nil)

func newMemSource(data []byte) *memSource { return memsrc.New(data, Identity{Size: int64(len(data))}) }

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
