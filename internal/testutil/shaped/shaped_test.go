package shaped

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

const blobSize = 1<<20 + 17

func newServer(t *testing.T, opts Options) (*httptest.Server, *Handler, []byte, string) {
	t.Helper()
	dir := t.TempDir()
	data := make([]byte, blobSize)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	if err := os.WriteFile(filepath.Join(dir, "blob.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/hostname", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	h := NewHandler(dir, opts)
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	return srv, h, data, dir
}

func get(t *testing.T, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	return do(t, http.MethodGet, url, hdr)
}

func do(t *testing.T, method, url string, hdr map[string]string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

func TestRanges(t *testing.T) {
	srv, _, data, _ := newServer(t, Options{})
	n := int64(len(data))
	tests := []struct {
		rng        string
		wantStatus int
		from, to   int64 // inclusive
	}{
		{"", 200, 0, n - 1},
		{"bytes=0-0", 206, 0, 0},
		{"bytes=100-199", 206, 100, 199},
		{"bytes=1048000-", 206, 1048000, n - 1},
		{"bytes=-10", 206, n - 10, n - 1},
		{fmt.Sprintf("bytes=%d-%d", n-5, n+1000), 206, n - 5, n - 1},
		{fmt.Sprintf("bytes=%d-", n), 416, 0, -1},
	}
	for _, tt := range tests {
		t.Run(tt.rng, func(t *testing.T) {
			hdr := map[string]string{}
			if tt.rng != "" {
				hdr["Range"] = tt.rng
			}
			resp, body := get(t, srv.URL+"/blob.bin", hdr)
			if resp.StatusCode != tt.wantStatus {
				t.Fatalf("status got %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if tt.wantStatus == 416 {
				return
			}
			if want := data[tt.from : tt.to+1]; !bytes.Equal(body, want) {
				t.Errorf("body got %d bytes, want %d bytes %d-%d (content differs: %v)", len(body), len(want), tt.from, tt.to, len(body) == len(want))
			}
			if tt.wantStatus == 206 {
				want := fmt.Sprintf("bytes %d-%d/%d", tt.from, tt.to, n)
				if got := resp.Header.Get("Content-Range"); got != want {
					t.Errorf("Content-Range got %q, want %q", got, want)
				}
			}
		})
	}
}

func TestHeadAndHeaders(t *testing.T) {
	srv, _, data, dir := newServer(t, Options{})
	resp, body := do(t, http.MethodHead, srv.URL+"/blob.bin", nil)
	if resp.StatusCode != 200 || len(body) != 0 {
		t.Fatalf("HEAD: status %d, body %d bytes, want 200 and none", resp.StatusCode, len(body))
	}
	if got, want := resp.Header.Get("Content-Length"), fmt.Sprint(len(data)); got != want {
		t.Errorf("Content-Length got %s, want %s", got, want)
	}
	if got := resp.Header.Get("Accept-Ranges"); got != "bytes" {
		t.Errorf("Accept-Ranges got %q, want bytes", got)
	}
	st, _ := os.Stat(filepath.Join(dir, "blob.bin"))
	if got, want := resp.Header.Get("Last-Modified"), st.ModTime().UTC().Format(http.TimeFormat); got != want {
		t.Errorf("Last-Modified got %q, want %q", got, want)
	}
}

func TestETag(t *testing.T) {
	srv, _, _, dir := newServer(t, Options{})
	r1, _ := do(t, http.MethodHead, srv.URL+"/blob.bin", nil)
	r2, _ := do(t, http.MethodHead, srv.URL+"/blob.bin", nil)
	e1, e2 := r1.Header.Get("ETag"), r2.Header.Get("ETag")
	if e1 == "" || e1 != e2 {
		t.Fatalf("ETag got %q then %q, want the same non-empty tag", e1, e2)
	}
	if strings.HasPrefix(e1, "W/") || !strings.HasPrefix(e1, `"`) || !strings.HasSuffix(e1, `"`) {
		t.Errorf("ETag got %s, want a strong quoted tag", e1)
	}
	st, _ := os.Stat(filepath.Join(dir, "blob.bin"))
	if want := ETag("blob.bin", st.Size(), st.ModTime()); e1 != want {
		t.Errorf("ETag got %s, want ETag() = %s", e1, want)
	}
	// A new mtime is a new version.
	os.Chtimes(filepath.Join(dir, "blob.bin"), time.Now(), st.ModTime().Add(time.Second))
	r3, _ := do(t, http.MethodHead, srv.URL+"/blob.bin", nil)
	if e3 := r3.Header.Get("ETag"); e3 == e1 {
		t.Errorf("ETag after touch got %s, want a different tag", e3)
	}
}

func TestConditionals(t *testing.T) {
	srv, _, data, _ := newServer(t, Options{})
	r, _ := do(t, http.MethodHead, srv.URL+"/blob.bin", nil)
	etag := r.Header.Get("ETag")
	tests := []struct {
		name       string
		hdr        map[string]string
		wantStatus int
		wantLen    int
	}{
		{"If-Match mismatch", map[string]string{"If-Match": `"nope"`}, 412, -1},
		{"If-Match mismatch with Range", map[string]string{"If-Match": `"nope"`, "Range": "bytes=0-9"}, 412, -1},
		{"If-Match match with Range", map[string]string{"If-Match": etag, "Range": "bytes=0-9"}, 206, 10},
		{"If-None-Match match", map[string]string{"If-None-Match": etag}, 304, 0},
		{"If-None-Match mismatch", map[string]string{"If-None-Match": `"nope"`}, 200, len(data)},
		{"If-Range match", map[string]string{"If-Range": etag, "Range": "bytes=5-9"}, 206, 5},
		{"If-Range mismatch gives all", map[string]string{"If-Range": `"nope"`, "Range": "bytes=5-9"}, 200, len(data)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, body := get(t, srv.URL+"/blob.bin", tt.hdr)
			if resp.StatusCode != tt.wantStatus {
				t.Errorf("status got %d, want %d", resp.StatusCode, tt.wantStatus)
			}
			if tt.wantLen >= 0 && len(body) != tt.wantLen {
				t.Errorf("body got %d bytes, want %d", len(body), tt.wantLen)
			}
		})
	}
}

func TestRefusals(t *testing.T) {
	srv, _, _, _ := newServer(t, Options{})
	tests := []struct {
		method, path string
		want         int
	}{
		{"GET", "/missing", 404},
		{"GET", "/sub", 404},
		{"GET", "/", 404},
		{"GET", "/../../etc/hostname", 404},
		{"GET", "/escape", 403},
		{"POST", "/blob.bin", 405},
		{"PUT", "/blob.bin", 405},
	}
	for _, tt := range tests {
		resp, _ := do(t, tt.method, srv.URL+tt.path, nil)
		if resp.StatusCode != tt.want {
			t.Errorf("%s %s: status got %d, want %d", tt.method, tt.path, resp.StatusCode, tt.want)
		}
	}
}

func TestLatency(t *testing.T) {
	const lat = 250 * time.Millisecond
	slow, _, _, _ := newServer(t, Options{Latency: lat})
	start := time.Now()
	resp, _ := get(t, slow.URL+"/blob.bin", map[string]string{"Range": "bytes=0-0"})
	if d := time.Since(start); d < lat || resp.StatusCode != 206 {
		t.Errorf("shaped request: took %v with status %d, want at least %v and 206", d, resp.StatusCode, lat)
	}
	// Every response waits, and parallel requests wait in parallel: a
	// request to an unshaped server started together with a shaped one
	// finishes first.
	fast, _, _, _ := newServer(t, Options{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var order []string
	for _, s := range []struct{ name, url string }{{"slow", slow.URL}, {"fast", fast.URL}} {
		wg.Go(func() {
			resp, _ := get(t, s.url+"/missing", nil)
			if resp.StatusCode != 404 {
				t.Errorf("%s: status got %d, want 404", s.name, resp.StatusCode)
			}
			mu.Lock()
			order = append(order, s.name)
			mu.Unlock()
		})
	}
	wg.Wait()
	if len(order) != 2 || order[0] != "fast" {
		t.Errorf("finish order got %v, want fast first", order)
	}
}

func TestRate(t *testing.T) {
	const rate = 2 << 20 // bytes per second
	srv, _, data, _ := newServer(t, Options{Rate: rate})
	start := time.Now()
	resp, body := get(t, srv.URL+"/blob.bin", nil)
	d := time.Since(start)
	if resp.StatusCode != 200 || !bytes.Equal(body, data) {
		t.Fatalf("status %d, %d bytes, want 200 and the whole file", resp.StatusCode, len(body))
	}
	// 1 MiB at 2 MiB/s with a 64 KiB burst: about 0.47 s. Check loosely.
	if min := 300 * time.Millisecond; d < min {
		t.Errorf("1 MiB at 2 MiB/s took %v, want at least %v", d, min)
	}
	if max := 10 * time.Second; d > max {
		t.Errorf("1 MiB at 2 MiB/s took %v, want well under %v", d, max)
	}
}

func TestStats(t *testing.T) {
	srv, h, data, _ := newServer(t, Options{})
	get(t, srv.URL+"/blob.bin", nil)                                      // 200, all
	get(t, srv.URL+"/blob.bin", map[string]string{"Range": "bytes=0-99"}) // 206, 100
	get(t, srv.URL+"/blob.bin", map[string]string{"If-Match": `"x"`})     // 412
	get(t, srv.URL+"/missing", nil)                                       // 404
	s := h.Stats()
	if s.Requests != 4 || s.RangeRequests != 1 {
		t.Errorf("requests got %d (ranges %d), want 4 (1)", s.Requests, s.RangeRequests)
	}
	if s.Status["200"] != 1 || s.Status["206"] != 1 || s.Status["412"] != 1 || s.Status["404"] != 1 {
		t.Errorf("status counts got %v, want one each of 200 206 412 404", s.Status)
	}
	// Error responses have short text bodies; the file bytes are exact.
	if min, max := int64(len(data)+100), int64(len(data)+100+200); s.Bytes < min || s.Bytes > max {
		t.Errorf("bytes got %d, want %d plus small error bodies", s.Bytes, min)
	}

	resp, body := get(t, srv.URL+StatsPath, nil)
	var js Stats
	if err := json.Unmarshal(body, &js); err != nil || resp.StatusCode != 200 {
		t.Fatalf("%s: status %d, %v: %s", StatsPath, resp.StatusCode, err, body)
	}
	if js.Requests != s.Requests || js.Bytes != s.Bytes || js.Status["206"] != 1 {
		t.Errorf("%s got %+v, want %+v", StatsPath, js, s)
	}
	h.ResetStats()
	if s := h.Stats(); s.Requests != 0 || s.Bytes != 0 || len(s.Status) != 0 {
		t.Errorf("after ResetStats got %+v, want zeros", s)
	}
}

func TestParseRate(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		err  bool
	}{
		{"", 0, false},
		{"0", 0, false},
		{"none", 0, false},
		{"1000", 1000, false},
		{"80MB", 80e6, false},
		{"80M", 80e6, false},
		{"80mb", 80e6, false},
		{"80MB/s", 80e6, false},
		{"10MiB", 10 << 20, false},
		{"1.5GB", 15e8, false},
		{"500KB", 500e3, false},
		{"4KiB", 4096, false},
		{"fast", 0, true},
		{"10XB", 0, true},
		{"-5MB", 0, true},
	}
	for _, tt := range tests {
		got, err := ParseRate(tt.in)
		if (err != nil) != tt.err || got != tt.want {
			t.Errorf("ParseRate(%q) got %d, %v, want %d, error %v", tt.in, got, err, tt.want, tt.err)
		}
	}
}

// TestConnShaping checks that Listen delays a new connection's first read
// by Handshake and caps what all responses on one connection send
// together: two parallel requests on one HTTP/2 connection share Rate.
func TestConnShaping(t *testing.T) {
	const rate = 4 << 20 // bytes per second, for the connection
	const handshake = 200 * time.Millisecond
	dir := t.TempDir()
	data := make([]byte, 1<<20)
	if err := os.WriteFile(filepath.Join(dir, "blob.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	h := NewHandler(dir, Options{})
	srv := httptest.NewUnstartedServer(h)
	srv.EnableHTTP2 = true
	srv.Listener = Listen(srv.Listener, ConnOptions{Rate: rate, Handshake: handshake})
	srv.StartTLS()
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	client := srv.Client()
	start := time.Now()
	resp, err := client.Get(srv.URL + "/missing")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if d := time.Since(start); d < handshake || resp.ProtoMajor != 2 {
		t.Fatalf("first request: took %v over %s, want at least %v over HTTP/2", d, resp.Proto, handshake)
	}
	// 2 MiB in all on one connection at 4 MiB/s: about 0.5 s; at twice
	// the rate (a cap per response) it would take 0.25 s.
	start = time.Now()
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			resp, err := client.Get(srv.URL + "/blob.bin")
			if err != nil {
				t.Error(err)
				return
			}
			defer resp.Body.Close()
			if n, err := io.Copy(io.Discard, resp.Body); err != nil || n != int64(len(data)) {
				t.Errorf("got %d bytes (%v), want %d", n, err, len(data))
			}
		})
	}
	wg.Wait()
	if d, min := time.Since(start), 400*time.Millisecond; d < min {
		t.Errorf("2 MiB on one connection at 4 MiB/s took %v, want at least %v", d, min)
	}
}
