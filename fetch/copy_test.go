package fetch

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
)

// noRangeServer always answers 200 with the whole object, as servers that
// ignore Range do. etag "" sends no validator; cut > 0 ends the body after
// that many bytes.
func noRangeServer(t *testing.T, data []byte, etag string, cut int) (*httptest.Server, *atomic.Int64) {
	var requests atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if etag != "" {
			w.Header().Set("ETag", etag)
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.WriteHeader(http.StatusOK)
		if cut > 0 {
			w.Write(data[:cut])
			return // the handler returns early: the client sees a short body
		}
		w.Write(data)
	}))
	t.Cleanup(srv.Close)
	return srv, &requests
}

func TestNoRangeServerLocalCopy(t *testing.T) {
	data := randomBytes(300000, 11)
	srv, requests := noRangeServer(t, data, `"v1"`, 0)
	ctx := context.Background()

	// Without a copy directory, reads say what is wrong.
	plain, err := Open(ctx, srv.URL+"/a.tar", Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := plain.ReadAt(ctx, make([]byte, 10), 100); !errors.Is(err, ErrNoRange) {
		t.Errorf("read without a copy: got %v, want ErrNoRange", err)
	}
	plain.Close()

	dir := t.TempDir()
	requests.Store(0)
	src, err := Open(ctx, srv.URL+"/a.tar", Options{CopyDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("open with a copy made %d requests, want 1 (the probe's reply is the object)", n)
	}
	if id := src.Identity(); id.ETag != `"v1"` || id.Size != int64(len(data)) {
		t.Errorf("identity %+v, want the server's ETag and size", id)
	}
	if src.String() != srv.URL+"/a.tar" {
		t.Errorf("String() = %q, want the URL", src.String())
	}
	for _, off := range []int64{0, 1, 4095, 150000, int64(len(data)) - 7} {
		p := make([]byte, 7)
		if _, err := src.ReadAt(ctx, p, off); err != nil || !bytes.Equal(p, data[off:off+7]) {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	src.Close()

	// A second open reuses the complete copy.
	again, err := Open(ctx, srv.URL+"/a.tar", Options{CopyDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 100)
	if _, err := again.ReadAt(ctx, p, 1000); err != nil || !bytes.Equal(p, data[1000:1100]) {
		t.Fatalf("read from the reused copy: %v", err)
	}
	again.Close()
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("copy directory holds %d entries, want 1", len(entries))
	}
}

func TestNoRangeServerRefusals(t *testing.T) {
	data := randomBytes(100000, 12)
	ctx := context.Background()
	// No validator: a copy could not be told from a changed object.
	srv, _ := noRangeServer(t, data, "", 0)
	if _, err := Open(ctx, srv.URL+"/a", Options{CopyDir: t.TempDir()}); !errors.Is(err, ErrNoRange) {
		t.Errorf("no validator: got %v, want ErrNoRange", err)
	}
	// A download cut short leaves nothing under the real name.
	cut, _ := noRangeServer(t, data, `"v1"`, 5000)
	dir := t.TempDir()
	if _, err := Open(ctx, cut.URL+"/a", Options{CopyDir: dir}); err == nil {
		t.Error("a cut download opened")
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	hidden, _ := filepath.Glob(filepath.Join(dir, ".*"))
	if len(left)+len(hidden) != 0 {
		t.Errorf("a cut download left %v %v", left, hidden)
	}
}
