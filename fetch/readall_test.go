package fetch

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadAll reads objects whole: over HTTP with one GET (no identity
// probe, no Range), after retrying a failing server, and from a file; a
// missing object is ErrNotFound and one over the limit an error.
func TestReadAll(t *testing.T) {
	data := bytes.Repeat([]byte("index "), 1000)
	var requests, failFirst atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Header.Get("Range") != "" {
			t.Errorf("got a request with Range %q, want a plain GET", r.Header.Get("Range"))
		}
		if failFirst.Add(-1) >= 0 {
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		if r.URL.Path != "/a.idx" {
			http.NotFound(w, r)
			return
		}
		w.Write(data)
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "a.idx")
	if err := os.WriteFile(file, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ropts := RetryOptions{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, Deadline: 10 * time.Second}
	for _, c := range []struct {
		name         string
		url          string
		limit        int64
		fail         int64
		wantErr      error // nil: want data
		wantRequests int64
	}{
		{"http", srv.URL + "/a.idx", 1 << 20, 0, nil, 1},
		{"http after 503s", srv.URL + "/a.idx", 1 << 20, 2, nil, 3},
		{"http missing", srv.URL + "/b.idx", 1 << 20, 0, ErrNotFound, 1},
		{"http over the limit", srv.URL + "/a.idx", 100, 0, errAny, 1},
		{"file", file, 1 << 20, 0, nil, 0},
		{"file missing", file + ".no", 1 << 20, 0, ErrNotFound, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			requests.Store(0)
			failFirst.Store(c.fail)
			got, err := ReadAll(context.Background(), c.url, c.limit, Options{}, ropts)
			switch {
			case c.wantErr == nil && (err != nil || !bytes.Equal(got, data)):
				t.Fatalf("got %d bytes (err %v), want the object's %d", len(got), err, len(data))
			case c.wantErr == errAny && err == nil:
				t.Fatalf("got %d bytes, want an error", len(got))
			case c.wantErr != nil && c.wantErr != errAny && !errors.Is(err, c.wantErr):
				t.Fatalf("got error %v, want %v", err, c.wantErr)
			}
			if n := requests.Load(); n != c.wantRequests {
				t.Errorf("got %d requests, want %d", n, c.wantRequests)
			}
		})
	}
}

// errAny stands for any error in a table.
var errAny = errors.New("any error")

// TestFirstByte: an HTTP source knows the object's first byte from its
// identity probe, a file reads it, and the retrying wrapper passes it on.
func TestFirstByte(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "a", time.Time{}, bytes.NewReader([]byte("xyz")))
	}))
	defer srv.Close()
	file := filepath.Join(t.TempDir(), "a")
	if err := os.WriteFile(file, []byte("xyz"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, url := range []string{srv.URL + "/a", file} {
		src, err := OpenWithRetry(context.Background(), url, Options{}, RetryOptions{})
		if err != nil {
			t.Fatal(err)
		}
		fb, ok := src.(FirstByter)
		if !ok {
			t.Fatalf("%s: the source is no FirstByter", url)
		}
		if b, ok := fb.FirstByte(); !ok || b != 'x' {
			t.Errorf("%s: got first byte %q (%v), want 'x'", url, b, ok)
		}
		src.Close()
	}
}
