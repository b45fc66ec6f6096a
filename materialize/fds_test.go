package materialize

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// openFDs counts the descriptors this process holds.
func openFDs(t *testing.T) int {
	t.Helper()
	des, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		testutil.Missing(t, "no /proc/self/fd")
	}
	return len(des)
}

// TestRunReleasesDirectories checks that a job that completed holds no
// descriptor per directory while it stays open (a --materialize mount
// keeps its job until unmounted), in both modes.
func TestRunReleasesDirectories(t *testing.T) {
	const dirs = 200
	var members []tarbuild.Entry
	for i := range dirs {
		d := fmt.Sprintf("d%03d/", i)
		members = append(members, tarbuild.Entry{Name: d, Type: '5'}, tarbuild.Entry{Name: d + "f", Body: []byte("file in " + d)})
	}
	archive := filepath.Join(t.TempDir(), "a.tar.gz")
	writeTar(t, archive, members, true)
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	for _, cold := range []bool{false, true} {
		t.Run(fmt.Sprintf("cold=%v", cold), func(t *testing.T) {
			id := fetch.Identity{Size: int64(len(data)), ETag: "test"}
			src := fileSource{bytes.NewReader(data)}
			before := openFDs(t)
			j, err := Open(t.TempDir(), id.Key(), Options{Writers: 2, Decoders: 2})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			bopts := index.BuildOptions{Span: 64 << 10}
			if cold {
				bopts.OnMember = j.Stage
			}
			ix, err := index.Build(context.Background(), bytes.NewReader(data), id, bopts)
			if err != nil {
				t.Fatal(err)
			}
			r := index.NewReader(ix, src, index.ReaderOptions{})
			defer r.Close()
			var spans Spans
			if !cold {
				spans = IndexSpans(r, src, Peers{})
			}
			if err := j.Run(context.Background(), ix, spans); err != nil {
				t.Fatal(err)
			}
			// DIR itself stays open (twice: os.Root and its descriptor).
			if got, want := openFDs(t)-before, 2; got > want {
				t.Errorf("after Run: %d more descriptors open than before Open, want at most %d (%d directories)", got, want, dirs)
			}
		})
	}
}
