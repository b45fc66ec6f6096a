package fetch

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestHTTPRedirectKeepsRangeAndPin follows a redirect to a presigned-style
// URL on another host: the range, the If-Match pin and extra headers set
// by the user reach the object's server, and the bytes are exact.
func TestHTTPRedirectKeepsRangeAndPin(t *testing.T) {
	data := randomBytes(100000, 5)
	var ranges, pinned, tokens atomic.Int64
	object := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.URL.RawQuery, "X-Signature=") {
			http.Error(w, "unsigned", http.StatusForbidden)
			return
		}
		if r.Header.Get("Range") != "" {
			ranges.Add(1)
		}
		if r.Header.Get("If-Match") != "" {
			pinned.Add(1)
		}
		if r.Header.Get("X-Token") == "secret" {
			tokens.Add(1)
		}
		w.Header().Set("ETag", `"v1"`)
		http.ServeContent(w, r, "a.tar.gz", time.Unix(1700000000, 0), bytes.NewReader(data))
	}))
	defer object.Close()
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, object.URL+"/bucket/a.tar.gz?X-Signature=abc", http.StatusFound)
	}))
	defer front.Close()

	src, err := Open(context.Background(), front.URL+"/a.tar.gz", Options{Header: http.Header{"X-Token": {"secret"}}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if got := src.Identity(); got.Size != int64(len(data)) || got.ETag != `"v1"` {
		t.Fatalf("identity %+v, want size %d and ETag \"v1\"", got, len(data))
	}
	p := make([]byte, 5000)
	if _, err := src.ReadAt(context.Background(), p, 12345); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, data[12345:17345]) {
		t.Fatal("wrong bytes through the redirect")
	}
	if ranges.Load() < 2 || pinned.Load() < 1 || tokens.Load() < 2 {
		t.Errorf("object server saw %d ranged, %d pinned, %d token requests; want >= 2, >= 1, >= 2",
			ranges.Load(), pinned.Load(), tokens.Load())
	}
}
