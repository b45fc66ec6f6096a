package index

import (
	"bytes"
	stdbzip2 "compress/bzip2"
	"context"
	"io"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"testing"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/internal/testutil"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// bzip2BenchInput is a .tar.bz2: the file TARMOUNT_BENCH_BZ2 names, or by
// default up to 48 MiB of the Go installation that runs the benchmark,
// archived and compressed with bzip2 -9.
var bzip2BenchInput = sync.OnceValues(func() ([]byte, error) {
	if p := os.Getenv("TARMOUNT_BENCH_BZ2"); p != "" {
		return os.ReadFile(p)
	}
	raw, err := tarbuild.FilesOf(runtime.GOROOT(), 48<<20)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("bzip2", "-9")
	cmd.Stdin = bytes.NewReader(raw)
	return cmd.Output()
})

// discardAt is an io.WriterAt that keeps nothing.
type discardAt struct{}

func (discardAt) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }

func bzip2Bench(b *testing.B) ([]byte, int64) {
	if _, err := exec.LookPath("bzip2"); err != nil && os.Getenv("TARMOUNT_BENCH_BZ2") == "" {
		testutil.Missing(b, "bzip2 is not installed")
	}
	comp, err := bzip2BenchInput()
	if err != nil {
		b.Fatal(err)
	}
	d, _, err := NewDecoder(bytes.NewReader(comp))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	size, err := io.Copy(io.Discard, d)
	if err != nil {
		b.Fatal(err)
	}
	return comp, size
}

// BenchmarkBzip2Pass compares the index pass over a .tar.bz2 (decoding
// blocks on GOMAXPROCS cores: run with -cpu 1,2) with the standard
// library's stream decoder alone. MB/s are of uncompressed tar.
func BenchmarkBzip2Pass(b *testing.B) {
	comp, size := bzip2Bench(b)
	b.Run("index-pass", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			ix, err := Build(context.Background(), bytes.NewReader(comp), fetch.Identity{Size: int64(len(comp))}, BuildOptions{Local: discardAt{}})
			if err != nil || ix.TarSize != size {
				b.Fatalf("Build: %v", err)
			}
		}
	})
	b.Run("stdlib-stream", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			if n, err := io.Copy(io.Discard, bzip2Reader(bytes.NewReader(comp))); err != nil || n != size {
				b.Fatalf("decoded %d bytes: %v", n, err)
			}
		}
	})
}

// BenchmarkBzip2Span decodes one span from its checkpoint, as a cold read
// does (fetch from memory, decode, check the digest).
func BenchmarkBzip2Span(b *testing.B) {
	comp, _ := bzip2Bench(b)
	ix, err := Build(context.Background(), bytes.NewReader(comp), fetch.Identity{Size: int64(len(comp))}, BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if ix.StreamOnly() {
		b.Fatal("the archive is stream-only: it has no span to decode")
	}
	i := len(ix.Checkpoints) / 2
	start, end := ix.SpanBounds(i)
	b.SetBytes(int64(end - start))
	b.ReportAllocs()
	r := NewReader(ix, newMemSource(comp), ReaderOptions{})
	defer r.Close()
	for b.Loop() {
		if _, err := r.DecodeSpan(context.Background(), i); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(ix.SpanStoredBytes(i)), "stored-B/span")
}

func bzip2Reader(r io.Reader) io.Reader { return stdbzip2.NewReader(r) }
