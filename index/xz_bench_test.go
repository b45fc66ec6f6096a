package index

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"testing"

	"github.com/tarmount/tarmount/fetch"
)

// benchXzTar is a tar of source files of the Go toolchain (about 40 MB),
// and benchXzObj that tar compressed with `xz -T2 -6` (24 MiB blocks).
var (
	benchXzOnce sync.Once
	benchXzTar  []byte
	benchXzObj  []byte
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
	})
	if benchXzObj == nil {
		b.Skip("no archive")
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
