package tests

import (
	"archive/zip"
	"bytes"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestCommandErrorsSayItOnce: the commands other than the mount (whose
// errors TestBadInputs checks) fail with one line, "tarmount: ...", that
// says what is wrong and each part of it once; a 4xx other than 408 and
// 429 is asked once, with no retry.
func TestCommandErrorsSayItOnce(t *testing.T) {
	work := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var zipped bytes.Buffer
	zw := zip.NewWriter(&zipped)
	if w, err := zw.Create("a.txt"); err == nil {
		w.Write([]byte("zipped"))
	}
	zw.Close()
	deb := write("a.deb", []byte("!<arch>\ndebian-binary   1700000000  0     0     100644  4         `\n2.0\n"))
	zipFile := write("a.zip", zipped.Bytes())
	good := write("a.tar.gz", tarbuild.Gzip(tarbuild.Tar(tarbuild.Member{Name: "f", Body: "in the archive"})))
	var requests atomic.Int64 // of the archives, not of an index beside them
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, ".tar.gz") {
			requests.Add(1)
		}
		switch r.URL.Path {
		case "/forbidden.tar.gz":
			http.Error(w, "no", http.StatusForbidden)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	cache := filepath.Join(work, "cache")
	notDir := write("file", []byte("x"))
	for _, tc := range []struct {
		name     string
		args     []string
		want     string
		requests int64 // -1: no server
	}{
		{"ls of a missing file", []string{"ls", filepath.Join(work, "nope.tar.gz")}, "nope.tar.gz: no such file or directory", -1},
		{"extract of a .deb", []string{"extract", deb, filepath.Join(work, "x1")}, "not a tar archive: a Debian package (ar)", -1},
		{"ls of a zip", []string{"ls", zipFile}, "not a tar archive: a zip archive", -1},
		{"cat of a 404", []string{"cat", srv.URL + "/missing.tar.gz", "f"}, "404", 1},
		{"index of a 403", []string{"index", srv.URL + "/forbidden.tar.gz"}, "403", 1},
		{"cat of a missing member", []string{"cat", good, "g"}, "g: file does not exist", -1},
		{"extract under a file", []string{"extract", good, filepath.Join(notDir, "x")}, "not a directory", -1},
		{"unmount of a directory", []string{"unmount", work}, "not mounted", -1},
		{"cache rm", []string{"cache", "rm", srv.URL + "/a.tar.gz"}, "nothing cached", -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requests.Store(0)
			args := tc.args
			if tc.args[0] != "unmount" {
				args = append(args, "--cache-dir", cache)
			}
			r := runBinary(t, nil, false, args...)
			if r.err == nil {
				t.Fatalf("got success, want an error; stderr:\n%s", r.stderr)
			}
			lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, "tarmount: ") || !strings.Contains(last, tc.want) {
				t.Errorf("got last line %q, want a tarmount: error saying %q", last, tc.want)
			}
			if p := repeatedPart(last); p != "" {
				t.Errorf("got last line %q, which says %q twice, want each part once", last, p)
			}
			if tc.requests >= 0 {
				if got := requests.Load(); got != tc.requests {
					t.Errorf("got %d requests, want %d (no retry)", got, tc.requests)
				}
				if strings.Contains(r.stderr, "retrying") {
					t.Errorf("a permanent failure was retried:\n%s", r.stderr)
				}
			}
		})
	}
}
