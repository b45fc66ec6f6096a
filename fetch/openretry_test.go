package fetch

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
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

// TestOpenPermanentFailures checks that an open which every attempt would
// fail the same way is tried once, without a retry warning, while 408 and
// 429 are retried. Connections count the attempts that never reach the
// handler (TLS against plain HTTP, an untrusted certificate).
func TestOpenPermanentFailures(t *testing.T) {
	const attempts = 3
	tests := []struct {
		name      string
		serveTLS  bool   // serve over TLS, with a certificate the client does not trust
		scheme    string // of the URL asked
		status    int    // the handler's reply; 0 redirects to the same URL
		want      string // in the error
		wantConns int64  // -1: not checked
		wantReqs  int64  // requests that reached the handler; -1: not checked
		wantWarns int
	}{
		{name: "https to a plain HTTP port", scheme: "https", status: http.StatusOK,
			want: "server gave HTTP response to HTTPS client", wantConns: 1, wantReqs: 0},
		{name: "untrusted certificate", serveTLS: true, scheme: "https", status: http.StatusOK,
			want: "certificate", wantConns: 1, wantReqs: 0},
		{name: "redirect loop", scheme: "http", status: 0,
			want: "redirect loop", wantConns: -1, wantReqs: maxRedirects},
		{name: "400", scheme: "http", status: http.StatusBadRequest, want: "400", wantConns: -1, wantReqs: 1},
		{name: "401", scheme: "http", status: http.StatusUnauthorized, want: "401", wantConns: -1, wantReqs: 1},
		{name: "403", scheme: "http", status: http.StatusForbidden, want: "403", wantConns: -1, wantReqs: 1},
		{name: "451", scheme: "http", status: http.StatusUnavailableForLegalReasons, want: "451", wantConns: -1, wantReqs: 1},
		{name: "408 is retried", scheme: "http", status: http.StatusRequestTimeout, want: "408",
			wantConns: -1, wantReqs: attempts, wantWarns: attempts - 1},
		{name: "429 is retried", scheme: "http", status: http.StatusTooManyRequests, want: "429",
			wantConns: -1, wantReqs: attempts, wantWarns: attempts - 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var conns, reqs atomic.Int64
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				reqs.Add(1)
				if tt.status == 0 {
					http.Redirect(w, r, r.URL.Path, http.StatusFound)
					return
				}
				http.Error(w, "no", tt.status)
			}))
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			srv.Config.ErrorLog = log.New(io.Discard, "", 0) // TLS handshake errors
			if tt.serveTLS {
				srv.StartTLS()
			} else {
				srv.Start()
			}
			defer srv.Close()
			var logged bytes.Buffer
			ropts := RetryOptions{MaxAttempts: attempts, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond,
				Deadline: 10 * time.Second, Logger: slog.New(slog.NewTextHandler(&logged, nil))}
			u := tt.scheme + "://" + srv.Listener.Addr().String() + "/a.tar"

			src, err := OpenWithRetry(t.Context(), u, Options{}, ropts)
			if err == nil {
				src.Close()
				t.Fatalf("got no error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %q, want it to contain %q", err, tt.want)
			}
			if got := strings.Count(err.Error(), u); got != 1 {
				t.Errorf("got %q, which names the URL %d times, want once", err, got)
			}
			if got := conns.Load(); tt.wantConns >= 0 && got != tt.wantConns {
				t.Errorf("got %d connections, want %d", got, tt.wantConns)
			}
			if got := reqs.Load(); tt.wantReqs >= 0 && got != tt.wantReqs {
				t.Errorf("got %d requests, want %d", got, tt.wantReqs)
			}
			if got := strings.Count(logged.String(), "level=WARN"); got != tt.wantWarns {
				t.Errorf("got %d retry warnings, want %d:\n%s", got, tt.wantWarns, logged.String())
			}
		})
	}
}
