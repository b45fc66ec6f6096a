package index

import (
	"bytes"
	"context"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/ulikunitz/xz"

	"github.com/tarmount/tarmount/fetch"
)

// benchXzTar is a tar of source files of the Go toolchain (about 40 MB),
// benchXzObj that tar compressed with `xz -T2 -6` (24 MiB blocks) and
// benchXzSmall with `xz -T2 -6 --block-size=4MiB`.
var (
	benchXzOnce  sync.Once
	benchXzTar   []byte
	benchXzObj   []byte
	benchXzSmall []byte
)

func benchXz(b *testing.B) ([]byte, []byte) {
	b.Helper()
	benchXzOnce.Do(func() {
		var members []member
		total := 0
		root := filepath.Join(runtime.GOROOT(), "src")
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || total >= 40<<20 {
				return fs.SkipDir
			}
			if !d.Type().IsRegular() {
				return nil
			}
			data, err := os.ReadFile(p)
			if err != nil {
				return nil
			}
			rel, _ := filepath.Rel(root, p)
			members = append(members, member{name: rel, data: data})
			total += len(data)
			return nil
		})
		benchXzTar = tarBytes(b, members)
		benchXzObj = cli("xz", "-T2", "-6")(b, benchXzTar)
		benchXzSmall = cli("xz", "-T2", "-6", "--block-size=4MiB")(b, benchXzTar)
	})
	if benchXzObj == nil {
		b.Fatal("the archive was not made: see the failure of the benchmark that made it")
	}
	return benchXzTar, benchXzObj
}

// BenchmarkXzPass runs the index pass over a multi-block .tar.xz;
// MB/s are of the decoded tar.
func BenchmarkXzPass(b *testing.B) {
	raw, obj := benchXz(b)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		local := &memFile{}
		if _, err := Build(context.Background(), bytes.NewReader(obj), fetch.Identity{Size: int64(len(obj))},
			BuildOptions{Local: local}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkXzStreamDecode decodes the same archive with ulikunitz/xz's
// stream reader, as the pass did when xz was stream-only.
func BenchmarkXzStreamDecode(b *testing.B) {
	raw, obj := benchXz(b)
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		r, err := xz.NewReader(bytes.NewReader(obj))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, r); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkXzColdSpan reads the middle span of the archive through a
// fresh Reader: one fetch of the span's compressed bytes and a decode of
// its blocks. MB/s are of the decoded span.
func BenchmarkXzColdSpan(b *testing.B) {
	_, obj := benchXz(b)
	for _, bc := range []struct {
		name string
		obj  []byte
	}{{"blocks-24MiB", obj}, {"blocks-4MiB", benchXzSmall}} {
		b.Run(bc.name, func(b *testing.B) {
			ix := build(b, bc.obj, DefaultSpan)
			if ix.StreamOnly() {
				b.Fatal("stream-only")
			}
			i := len(ix.Checkpoints) / 2
			b.SetBytes(ix.spanEnd(i) - int64(ix.Checkpoints[i].Out))
			b.ReportAllocs()
			src := newMemSource(bc.obj)
			for b.Loop() {
				r := NewReader(ix, src, ReaderOptions{Readahead: -1})
				if _, err := r.DecodeSpan(context.Background(), i); err != nil {
					b.Fatal(err)
				}
				r.Close()
			}
			b.ReportMetric(float64(src.Bytes())/float64(b.N), "fetched-B/op")
		})
	}
}
