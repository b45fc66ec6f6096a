package index

import (
	"bytes"
	"context"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// BenchmarkLivePass is the gzip index pass alone, with a Live (a mount
// served during its pass) that nobody uses, and with one in use (a
// lookup every millisecond), whose pass copies its latest output for
// reads: the differences are the costs of the Live and of that copy. TARMOUNT_BENCH_GZ names
// a .tar.gz to use; by default up to 64 MiB of the Go installation that
// runs the benchmark, compressed.
func BenchmarkLivePass(b *testing.B) {
	var obj []byte
	if p := os.Getenv("TARMOUNT_BENCH_GZ"); p != "" {
		var err error
		if obj, err = os.ReadFile(p); err != nil {
			b.Fatal(err)
		}
	} else {
		raw, err := tarbuild.FilesOf(runtime.GOROOT(), 64<<20)
		if err != nil {
			b.Fatal(err)
		}
		obj = tarbuild.GzipLevel(raw, 6)
	}
	id := fetch.Identity{Size: int64(len(obj)), ETag: `"x"`}
	for _, c := range []struct {
		name        string
		live, inUse bool
	}{{"pass", false, false}, {"live-idle", true, false}, {"live-in-use", true, true}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				opts := BuildOptions{}
				stop := make(chan struct{})
				var users sync.WaitGroup
				if c.live {
					opts.Live = NewLive(newMemSource(obj), ReaderOptions{})
				}
				if c.inUse {
					users.Go(func() {
						for {
							select {
							case <-stop:
								return
							case <-time.After(time.Millisecond):
								opts.Live.Lookup(RootID, "x")
							}
						}
					})
				}
				ix, err := Build(context.Background(), bytes.NewReader(obj), id, opts)
				close(stop)
				users.Wait()
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(ix.TarSize)
				if opts.Live != nil {
					opts.Live.Close()
				}
			}
		})
	}
}
