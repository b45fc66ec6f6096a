package fetch

import (
	"context"
	"fmt"
	"io"
	"testing"
	"time"
)

// BenchmarkStream streams a 32 MiB object in 1 MiB blocks from a loopback
// HTTP server, with 1 and 8 workers, over network profiles: unshaped, a
// first-byte delay per request, and the "object storage" profile of the
// design (20 ms to first byte, 80 MB/s per connection).
func BenchmarkStream(b *testing.B) {
	const size = 32 << 20
	data := randomBytes(size, 1)
	profiles := []struct {
		name        string
		delay       time.Duration
		bytesPerSec int64
	}{
		{"unshaped", 0, 0},
		{"delay=10ms", 10 * time.Millisecond, 0},
		{"objstore", 20 * time.Millisecond, 80e6},
	}
	for _, pr := range profiles {
		o := &object{data: data, etag: `"e"`}
		srv := newTestServer(b, o)
		src, err := Open(context.Background(), srv.URL+"/a.tar", Options{})
		if err != nil {
			b.Fatal(err)
		}
		o.set(func(o *object) { o.delay, o.bytesPerSec = pr.delay, pr.bytesPerSec })
		for _, workers := range []int{1, 8} {
			b.Run(fmt.Sprintf("%s/workers=%d", pr.name, workers), func(b *testing.B) {
				b.SetBytes(size)
				b.ReportAllocs()
				for b.Loop() {
					blocks := NewBlocks(src, BlocksOptions{BlockSize: 1 << 20, Workers: workers})
					s := blocks.Stream(context.Background(), 0)
					n, err := io.Copy(io.Discard, s)
					s.Close()
					blocks.Close()
					if err != nil || n != size {
						b.Fatalf("got %d bytes, %v; want %d", n, err, size)
					}
				}
			})
		}
	}
}
