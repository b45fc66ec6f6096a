package index

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"testing"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index/inflate"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestGzipPassParallel builds the index of gzip archives (one member,
// several, made by gzip and pigz) with the parallel inflater and with the
// sequential one: the checkpoints, windows, pass states and span digests
// are the same, and reads through the parallel-built index give every
// member's bytes. The archives are larger than inflate.ParallelMinSize,
// under the race detector too, so that the parallel path runs.
func TestGzipPassParallel(t *testing.T) {
	var members []member
	for i := range 16 {
		members = append(members, member{name: fmt.Sprintf("d/f%02d", i), data: randomData(uint64(40+i), 1<<20+i*7919)})
		if i%4 == 0 {
			members = append(members, member{name: fmt.Sprintf("d/sub%d/", i), typ: tar.TypeDir, mode: 0o755})
		}
	}
	raw := tarBytes(t, members)
	for _, tc := range []struct {
		name string
		obj  func(t testing.TB, raw []byte) []byte
	}{
		{"go-6", func(_ testing.TB, raw []byte) []byte { return tarbuild.GzipLevel(raw, 6) }},
		{"go-1", func(_ testing.TB, raw []byte) []byte { return tarbuild.GzipLevel(raw, 1) }},
		{"go-members", func(_ testing.TB, raw []byte) []byte { return tarbuild.GzipMembers(raw, 3<<20, 6) }},
		{"gzip-9", cli("gzip", "-9", "-n")},
		{"pigz", cli("pigz", "-p", "2", "-n")},
		{"pigz-independent", cli("pigz", "-p", "2", "-i", "-n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			obj := tc.obj(t, raw)
			if len(obj) < inflate.ParallelMinSize {
				t.Fatalf("the archive has %d bytes, less than inflate.ParallelMinSize: the test proves nothing", len(obj))
			}
			id := fetch.Identity{Size: int64(len(obj)), ETag: `"x"`}
			span := int64(1 << 20)
			seq, err := Build(context.Background(), bytes.NewReader(obj), id, BuildOptions{Span: span, Workers: 1})
			if err != nil {
				t.Fatal(err)
			}
			par, err := Build(context.Background(), bytes.NewReader(obj), id, BuildOptions{Span: span, Workers: 2})
			if err != nil {
				t.Fatal(err)
			}
			sameCheckpoints(t, "parallel", par, seq)
			if par.TarSize != seq.TarSize || par.End != seq.End || par.Len() != seq.Len() {
				t.Fatalf("got tar size %d, end %d, %d entries; want %d, %d, %d", par.TarSize, par.End, par.Len(), seq.TarSize, seq.End, seq.Len())
			}
			r := NewReader(par, newMemSource(obj), ReaderOptions{CacheBytes: 4 << 20})
			defer r.Close()
			for _, m := range members {
				if m.typ != 0 {
					continue
				}
				id, ok := par.LookupPath(m.name)
				if !ok {
					t.Fatalf("%s not in the index", m.name)
				}
				if got := readAll(t, r, id); !bytes.Equal(got, m.data) {
					t.Fatalf("%s: got %d bytes, want %d (the data)", m.name, len(got), len(m.data))
				}
			}
		})
	}
}
