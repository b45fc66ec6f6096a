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
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
	copies := openCopies(t, dir, 1<<20)
	requests.Store(0)
	src, err := Open(ctx, srv.URL+"/a.tar", Options{Copies: copies})
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
	again, err := Open(ctx, srv.URL+"/a.tar", Options{Copies: copies})
	if err != nil {
		t.Fatal(err)
	}
	p := make([]byte, 100)
	if _, err := again.ReadAt(ctx, p, 1000); err != nil || !bytes.Equal(p, data[1000:1100]) {
		t.Fatalf("read from the reused copy: %v", err)
	}
	if !IsLocal(again) {
		t.Error("a local copy is not reported local")
	}
	again.Close()
	entries, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	if len(entries) != 1 || filepath.Base(entries[0]) != "whole" {
		t.Errorf("cache directory holds %v, want one whole copy", entries)
	}
}

func openCopies(t *testing.T, dir string, max int64) *DiskCache {
	t.Helper()
	d, err := OpenDiskCache(dir, DiskCacheOptions{MaxBytes: max})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// TestNoRangeCopiesBounded checks that whole copies count in the disk
// cache bound: a copy evicts the least recently used entries to fit, and
// an object larger than the bound is refused with a clear error.
func TestNoRangeCopiesBounded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	copies := openCopies(t, dir, 500000)
	// A block entry, then two copies of 300000 bytes: the second evicts
	// the oldest entries to fit.
	if err := copies.Put(Identity{ETag: `"b"`, Size: 1}.Key(), 0, randomBytes(100000, 1)); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour)
	blocks, _ := filepath.Glob(filepath.Join(dir, "*", "0-*"))
	for _, p := range blocks {
		os.Chtimes(p, old, old)
	}
	var paths []string
	for i, etag := range []string{`"v1"`, `"v2"`} {
		data := randomBytes(300000, uint64(20+i))
		srv, _ := noRangeServer(t, data, etag, 0)
		src, err := Open(ctx, srv.URL+"/a", Options{Copies: copies})
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 10)
		if _, err := src.ReadAt(ctx, p, 1234); err != nil || !bytes.Equal(p, data[1234:1244]) {
			t.Fatalf("copy %d: read: %v", i, err)
		}
		src.Close()
		path, _ := copies.Whole(src.Identity().Key(), 300000)
		paths = append(paths, path)
		if i == 0 {
			os.Chtimes(path, old.Add(time.Minute), old.Add(time.Minute))
		}
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	if len(left) != 1 || left[0] != paths[1] {
		t.Errorf("cache holds %v, want only the newest copy %s", left, paths[1])
	}
	if st := copies.Stats(); st.UsedBytes > 500000 {
		t.Errorf("used %d bytes, want at most 500000", st.UsedBytes)
	}

	big, _ := noRangeServer(t, randomBytes(600000, 30), `"big"`, 0)
	_, err := Open(ctx, big.URL+"/a", Options{Copies: copies})
	if !errors.Is(err, ErrNoRange) || !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "--cache-disk") {
		t.Errorf("an object over the bound: got %v, want ErrNoRange and ErrTooLarge naming --cache-disk", err)
	}
}

func TestNoRangeServerRefusals(t *testing.T) {
	data := randomBytes(100000, 12)
	ctx := context.Background()
	// No validator: a copy could not be told from a changed object.
	srv, _ := noRangeServer(t, data, "", 0)
	if _, err := Open(ctx, srv.URL+"/a", Options{Copies: openCopies(t, t.TempDir(), 1<<20)}); !errors.Is(err, ErrNoRange) {
		t.Errorf("no validator: got %v, want ErrNoRange", err)
	}
	// A download cut short leaves nothing under the real name.
	cut, _ := noRangeServer(t, data, `"v1"`, 5000)
	dir := t.TempDir()
	if _, err := Open(ctx, cut.URL+"/a", Options{Copies: openCopies(t, dir, 1<<20)}); err == nil {
		t.Error("a cut download opened")
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	hidden, _ := filepath.Glob(filepath.Join(dir, "*", ".*"))
	if len(left)+len(hidden) != 0 {
		t.Errorf("a cut download left %v %v", left, hidden)
	}
}

// TestNoRangeServerStalls: a server that ignores Range and then stops
// sending the whole object it started does not hang the open. The stall
// watchdog cancels the download and the open retries it, within the
// deadline: here the second attempt gets the whole object; a server that
// always stalls fails the open once the attempts or the deadline run out.
func TestNoRangeServerStalls(t *testing.T) {
	data := randomBytes(300000, 12)
	for _, tc := range []struct {
		name   string
		stalls int64 // attempts that stall
	}{
		{"stalls once", 1},
		{"always stalls", 1 << 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var requests atomic.Int64
			release := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				n := requests.Add(1)
				w.Header().Set("ETag", `"v1"`)
				w.Header().Set("Content-Length", strconv.Itoa(len(data)))
				w.WriteHeader(http.StatusOK)
				if n <= tc.stalls {
					w.Write(data[:1000])
					w.(http.Flusher).Flush()
					select { // then nothing, until the client goes
					case <-r.Context().Done():
					case <-release:
					}
					return
				}
				w.Write(data)
			}))
			t.Cleanup(srv.Close)
			t.Cleanup(func() { close(release) })
			ropts := RetryOptions{MinSpeed: 1 << 10, StallGrace: 100 * time.Millisecond, StallWindow: 100 * time.Millisecond,
				BaseDelay: 10 * time.Millisecond, MaxDelay: 50 * time.Millisecond, Deadline: 2 * time.Second}
			copies := openCopies(t, t.TempDir(), 1<<20)
			done := make(chan struct{})
			var src Source
			var err error
			go func() {
				defer close(done)
				src, err = OpenWithRetry(context.Background(), srv.URL+"/a", Options{Copies: copies}, ropts)
			}()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatal("the open still waits for the stalled body after 20 s")
			}
			if tc.stalls > 1 {
				// Out of attempts or of time, whichever comes first.
				if !errors.Is(err, errStalled) && !errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "stalled") {
					t.Fatalf("open of an object whose body always stalls: got %v, want an error naming the stall", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("open after one stalled attempt: %v", err)
			}
			defer src.Close()
			got := make([]byte, len(data))
			if _, err := src.ReadAt(context.Background(), got, 0); err != nil || !bytes.Equal(got, data) {
				t.Fatalf("read of the copy: %v (equal %v)", err, bytes.Equal(got, data))
			}
			if n := requests.Load(); n != 2 {
				t.Errorf("server saw %d requests, want 2 (the stalled one and its retry)", n)
			}
		})
	}
}
