package inflate

import (
	"bytes"
	stdgzip "compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"sync"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// benchInput is a gzip-compressed tar. TARMOUNT_BENCH_GZ names a .tar.gz to
// use; by default up to 128 MiB of the Go installation that runs the
// benchmark is archived and compressed with gzip -6 equivalents.
var benchInput = sync.OnceValues(func() ([]byte, error) {
	if p := os.Getenv("TARMOUNT_BENCH_GZ"); p != "" {
		return os.ReadFile(p)
	}
	raw, err := tarbuild.FilesOf(runtime.GOROOT(), 128<<20)
	if err != nil {
		return nil, err
	}
	var comp bytes.Buffer
	w, _ := kgzip.NewWriterLevel(&comp, 6)
	w.Write(raw)
	w.Close()
	return comp.Bytes(), nil
})

// benchSetup returns the benchmark's input and its decoded size, which
// it sets as the bytes of one iteration.
func benchSetup(b *testing.B) ([]byte, int64) {
	comp, err := benchInput()
	if err != nil {
		b.Fatal(err)
	}
	size, err := io.Copy(io.Discard, mustStd(comp))
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(size)
	return comp, size
}

func benchDecode(b *testing.B, open func(io.Reader) (io.Reader, error)) {
	comp, size := benchSetup(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		r, err := open(bytes.NewReader(comp))
		if err != nil {
			b.Fatal(err)
		}
		if n, err := io.Copy(io.Discard, r); err != nil || n != size {
			b.Fatalf("decoded %d bytes, err %v", n, err)
		}
	}
}

// BenchmarkDecode compares the index pass (our inflater recording a
// checkpoint every 4 MiB) with klauspost/compress and the standard library
// decoding the same stream. MB/s are of uncompressed tar.
func BenchmarkDecode(b *testing.B) {
	b.Run("tarmount-checkpoints", func(b *testing.B) {
		benchDecode(b, func(r io.Reader) (io.Reader, error) {
			return NewReader(r, Options{Span: 4 << 20, OnCheckpoint: func(Checkpoint) {}}), nil
		})
	})
	b.Run("tarmount", func(b *testing.B) {
		benchDecode(b, func(r io.Reader) (io.Reader, error) { return NewReader(r, Options{}), nil })
	})
	b.Run("klauspost", func(b *testing.B) {
		benchDecode(b, func(r io.Reader) (io.Reader, error) { return kgzip.NewReader(r) })
	})
	b.Run("stdlib", func(b *testing.B) {
		benchDecode(b, func(r io.Reader) (io.Reader, error) { return stdgzip.NewReader(r) })
	})
}

// BenchmarkDecodeInto decodes the whole stream in place, as a span read
// does from a member start, with no Reader buffers or copies.
func BenchmarkDecodeInto(b *testing.B) {
	comp, size := benchSetup(b)
	dst := make([]byte, size, size+Margin)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := DecodeInto(dst, comp, Checkpoint{Kind: KindMember}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeSpans decodes the stream span by span from checkpoints
// 4 MiB apart, each with DecodeInto and the checkpoint's window, as a
// read through the mount or a span of an extraction does.
func BenchmarkDecodeSpans(b *testing.B) {
	comp, size := benchSetup(b)
	var cps []Checkpoint
	z := NewReader(bytes.NewReader(comp), Options{Span: 4 << 20, OnCheckpoint: func(cp Checkpoint) { cps = appendCheckpoint(cps, cp) }})
	if _, err := io.Copy(io.Discard, z); err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, 0, 8<<20)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for i, cp := range cps {
			end := size
			if i+1 < len(cps) {
				end = cps[i+1].Out
			}
			n := int(end - cp.Out)
			if cap(dst) < n+Margin {
				dst = make([]byte, 0, n+Margin)
			}
			if err := DecodeInto(dst[:n], comp[cp.In:], cp); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkDecodeSmallBlocks decodes text flushed every 1 KiB, so that
// building each block's tables costs as much as decoding its symbols.
func BenchmarkDecodeSmallBlocks(b *testing.B) {
	data := sample("text", 4<<20)
	var comp bytes.Buffer
	w, _ := stdgzip.NewWriterLevel(&comp, 6)
	for i := 0; i < len(data); i += 1 << 10 {
		w.Write(data[i:min(i+1<<10, len(data))])
		w.Flush()
	}
	w.Close()
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		z := NewReader(bytes.NewReader(comp.Bytes()), Options{})
		if n, err := io.Copy(io.Discard, z); err != nil || n != int64(len(data)) {
			b.Fatalf("decoded %d bytes, err %v", n, err)
		}
	}
}

// BenchmarkDecodeParallel decodes the stream as the index pass does
// (checkpoints every 4 MiB, read in 512 KiB pieces) with the
// ParallelReader, with as many workers as GOMAXPROCS and with one, beside
// the sequential Reader.
func BenchmarkDecodeParallel(b *testing.B) {
	comp, size := benchSetup(b)
	opts := Options{Span: 4 << 20, OnCheckpoint: func(Checkpoint) {}}
	run := func(b *testing.B, open func(io.Reader) io.Reader) {
		buf := make([]byte, 512<<10)
		b.SetBytes(size)
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			r := open(bytes.NewReader(comp))
			n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{r}, buf)
			if err != nil || n != size {
				b.Fatalf("decoded %d bytes, err %v", n, err)
			}
			if c, ok := r.(io.Closer); ok {
				c.Close()
			}
		}
	}
	b.Run("sequential", func(b *testing.B) {
		run(b, func(r io.Reader) io.Reader { return NewReader(r, opts) })
	})
	for _, w := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers-%d", w), func(b *testing.B) {
			run(b, func(r io.Reader) io.Reader { return NewParallelReader(context.Background(), r, opts, w) })
		})
	}
}
