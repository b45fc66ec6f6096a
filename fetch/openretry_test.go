package fetch

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestOpenWithRetry checks that the identity probe is retried through
// transient failures, not retried for a missing object, and bounded by
// the deadline when the server stays down.
func TestOpenWithRetry(t *testing.T) {
	data := randomBytes(10000, 9)
	fast := RetryOptions{BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond, Deadline: 2 * time.Second}
	for _, tc := range []struct {
		name      string
		failFirst int64 // requests answered with failStatus before serving
		status    int
		wantErr   error // nil: open succeeds
		wantTries int64
	}{
		{"two 503s", 2, http.StatusServiceUnavailable, nil, 3},
		{"429", 1, http.StatusTooManyRequests, nil, 2},
		{"404 is final", 100, http.StatusNotFound, ErrNotFound, 1},
		{"always 503", 1 << 30, http.StatusServiceUnavailable, nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var n atomic.Int64
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if n.Add(1) <= tc.failFirst {
					http.Error(w, "no", tc.status)
					return
				}
				w.Header().Set("ETag", `"e"`)
				http.ServeContent(w, r, "a", time.Unix(1, 0), bytes.NewReader(data))
			}))
			defer srv.Close()
			src, err := OpenWithRetry(context.Background(), srv.URL+"/a", Options{}, fast)
			switch {
			case tc.name == "always 503":
				if err == nil {
					t.Fatal("open of a server that stays down succeeded")
				}
				if n.Load() < 2 {
					t.Errorf("got %d attempts, want several", n.Load())
				}
				return
			case tc.wantErr != nil:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("got %v, want %v", err, tc.wantErr)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				defer src.Close()
				p := make([]byte, 100)
				if _, err := src.ReadAt(context.Background(), p, 500); err != nil || !bytes.Equal(p, data[500:600]) {
					t.Fatalf("read after a retried open: %v", err)
				}
				if _, ok := src.(interface{ RetryStats() RetryStats }); !ok {
					t.Error("the opened source does not retry its reads")
				}
			}
			if tc.wantTries > 0 && n.Load() < tc.wantTries {
				t.Errorf("got %d requests, want at least %d", n.Load(), tc.wantTries)
			}
			if tc.wantErr != nil && n.Load() != tc.wantTries {
				t.Errorf("got %d requests, want exactly %d", n.Load(), tc.wantTries)
			}
		})
	}
}
