package materialize

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
)

// smallFilesTar returns a plain tar of n small files (0.5 to 4 KiB) spread
// over 40 directories, and the bytes of file data it holds.
func smallFilesTar(b *testing.B, n int) ([]byte, int64) {
	b.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mtime := time.Unix(1700000000, 0)
	var total int64
	for d := range 40 {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: fmt.Sprintf("d%02d/", d), Mode: 0o755, ModTime: mtime}); err != nil {
			b.Fatal(err)
		}
	}
	for i := range n {
		body := strings.Repeat(fmt.Sprintf("file %d\n", i), 64+i%448)
		h := &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("d%02d/f%05d", i%40, i), Mode: 0o644,
			Size: int64(len(body)), ModTime: mtime}
		if err := tw.WriteHeader(h); err != nil {
			b.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			b.Fatal(err)
		}
		total += int64(len(body))
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	return buf.Bytes(), total
}

// BenchmarkSmallFiles extracts an in-memory tar of a few thousand small
// files: in one pass (index build with Stage, then Run) and from an index
// built beforehand (Run over its spans).
func BenchmarkSmallFiles(b *testing.B) {
	data, total := smallFilesTar(b, 4000)
	id := fetch.Identity{Size: int64(len(data)), ETag: "bench"}
	src := fileSource{bytes.NewReader(data)}
	built, err := index.Build(context.Background(), bytes.NewReader(data), id, index.BuildOptions{Span: 256 << 10})
	if err != nil {
		b.Fatal(err)
	}
	for _, cold := range []bool{true, false} {
		b.Run(map[bool]string{true: "one-pass", false: "indexed"}[cold], func(b *testing.B) {
			b.SetBytes(total)
			b.ReportAllocs()
			work := b.TempDir()
			for i := 0; b.Loop(); i++ {
				out := filepath.Join(work, fmt.Sprint(i))
				j, err := Open(out, id.Key(), Options{})
				if err != nil {
					b.Fatal(err)
				}
				ix, spans := built, Spans(nil)
				var r *index.Reader
				if cold {
					ix, err = index.Build(context.Background(), bytes.NewReader(data), id,
						index.BuildOptions{Span: 256 << 10, OnMember: j.Stage})
					if err != nil {
						b.Fatal(err)
					}
				} else {
					r = index.NewReader(ix, src, index.ReaderOptions{})
					spans = IndexSpans(r, src, Peers{})
				}
				if err := j.Run(context.Background(), ix, spans); err != nil {
					b.Fatal(err)
				}
				j.Close()
				if r != nil {
					r.Close()
				}
				b.StopTimer()
				if err := os.RemoveAll(out); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
