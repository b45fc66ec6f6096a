package index

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/internal/testutil/hostile"
)

// hostileAlloc bounds what an index pass may allocate in all over a
// hostile archive of tarSize decoded bytes: sizes and names that the
// archive claims must not make it allocate out of proportion to what it
// holds.
func hostileAlloc(tarSize int64) uint64 { return 64<<20 + 16*uint64(tarSize) }

// TestBuildHostile builds the index of every hostile.ArchiveCase: a
// damaged one fails with an error that names the damage, a readable one
// reads back its files, and neither hangs nor allocates out of
// proportion.
func TestBuildHostile(t *testing.T) {
	for _, tc := range hostile.ArchiveCases() {
		t.Run(tc.Name, func(t *testing.T) {
			id := fetch.Identity{Size: int64(len(tc.Data)), ETag: "hostile"}
			type result struct {
				ix    *Index
				err   error
				alloc uint64
			}
			done := make(chan result, 1)
			go func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("Build panicked: %v", p)
						done <- result{}
					}
				}()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				ix, err := Build(context.Background(), bytes.NewReader(tc.Data), id, BuildOptions{Span: 64 << 10})
				runtime.ReadMemStats(&after)
				done <- result{ix, err, after.TotalAlloc - before.TotalAlloc}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(time.Minute):
				t.Fatal("Build did not return within a minute")
			}
			tarSize := int64(len(tc.Data))
			if r.ix != nil {
				tarSize = r.ix.TarSize
			}
			if limit := hostileAlloc(tarSize); r.alloc > limit {
				t.Errorf("Build allocated %d MiB over %d MiB of tar, want at most %d MiB", r.alloc>>20, tarSize>>20, limit>>20)
			}
			if tc.Err != "" {
				if r.err == nil {
					t.Fatalf("got an index of %d entries, want an error with %q", r.ix.Len(), tc.Err)
				}
				if !strings.Contains(strings.ToLower(r.err.Error()), tc.Err) {
					t.Errorf("got error %q, want one with %q", r.err, tc.Err)
				}
				return
			}
			if r.err != nil {
				t.Fatalf("got error %v, want the archive read", r.err)
			}
			rd := NewReader(r.ix, newMemSource(tc.Data), ReaderOptions{})
			defer rd.Close()
			for p, want := range tc.Files {
				id, ok := r.ix.LookupPath(p)
				if !ok {
					t.Errorf("%s: not in the index", p)
					continue
				}
				got := make([]byte, len(want)+1)
				n, err := rd.ReadAt(context.Background(), id, got, 0)
				if n != len(want) || string(got[:n]) != want {
					t.Errorf("%s: got %d bytes (%v), want its %d bytes", p, n, err, len(want))
				}
			}
		})
	}
}
