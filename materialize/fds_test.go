package materialize

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

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

// fdTableSize is the size of this process's descriptor table (FDSize in
// /proc/self/status).
func fdTableSize(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		testutil.Missing(t, "no /proc/self/status")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "FDSize:"); ok {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				t.Fatalf("FDSize %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("no FDSize in /proc/self/status")
	return 0
}

// TestReserveFDs: the table grows to hold the descriptors asked for,
// within RLIMIT_NOFILE, and no descriptor is left open.
func TestReserveFDs(t *testing.T) {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	size := fdTableSize(t)
	want := 2 * size
	if uint64(want) > lim.Cur {
		testutil.Missing(t, "RLIMIT_NOFILE %d leaves no room above the table's %d", lim.Cur, size)
	}
	f, err := os.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	before := openFDs(t)
	reserveFDs(int(f.Fd()), want)
	if got := fdTableSize(t); got < want {
		t.Errorf("table holds %d descriptors, want %d or more", got, want)
	}
	if got := openFDs(t); got != before {
		t.Errorf("%d descriptors open, want %d as before", got, before)
	}
	// Past the limit it grows to the limit at most, and a bad descriptor
	// is no harm.
	reserveFDs(-1, int(lim.Cur)+1)
	if got := openFDs(t); got != before {
		t.Errorf("%d descriptors open, want %d as before", got, before)
	}
}
