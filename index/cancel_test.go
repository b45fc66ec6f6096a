package index

import (
	"context"
	"errors"
	"testing"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index/inflate"
	"github.com/tarmount/tarmount/index/tarscan"
)

// cancellingReader yields data up to cut, then cancels its context and
// fails with the context's error, as a fetch stream does when the
// command is interrupted.
type cancellingReader struct {
	data   []byte
	off    int
	cut    int
	cancel context.CancelFunc
	ctx    context.Context
}

func (r *cancellingReader) Read(p []byte) (int, error) {
	if r.off >= r.cut {
		r.cancel()
		return 0, r.ctx.Err()
	}
	n := copy(p, r.data[r.off:r.cut])
	r.off += n
	return n, nil
}

// TestBuildCancelled: a pass whose context ends in the middle of the
// archive returns context.Canceled, never a corrupt or truncated archive,
// whatever the codec.
func TestBuildCancelled(t *testing.T) {
	members := sampleMembers()
	for i := range members {
		members[i].data = members[i].data[:min(len(members[i].data), scaled(len(members[i].data)))]
	}
	raw := tarBytes(t, members)
	cases := append(codecCases(), codecCase{"plain", CodecNone, true, func(_ testing.TB, raw []byte) []byte { return raw }})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := tc.make(t, raw)
			for _, frac := range []int{1, 5, 9} {
				ctx, cancel := context.WithCancel(context.Background())
				r := &cancellingReader{data: obj, cut: len(obj) * frac / 10, ctx: ctx, cancel: cancel}
				_, err := Build(ctx, r, fetch.Identity{Size: int64(len(obj))}, BuildOptions{Span: 64 << 10})
				cancel()
				if !errors.Is(err, context.Canceled) {
					t.Errorf("cut at %d/10: got %v, want context.Canceled", frac, err)
				}
				for _, bad := range []error{ErrCorrupt, inflate.ErrCorrupt, inflate.ErrTruncated, tarscan.ErrCorrupt, tarscan.ErrTruncated} {
					if errors.Is(err, bad) {
						t.Errorf("cut at %d/10: got %v, want no %v", frac, err, bad)
					}
				}
			}
		})
	}
}
