package shaped

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestFaults checks what a client sees of each fault, over HTTP/1.1 and
// HTTP/2: the status and Retry-After of the status faults, a body that
// ends early (cut) or stops (stall), no reply at all (hang), and that the
// identity probe (bytes=0-0) is spared by Force but not by SetAlways.
func TestFaults(t *testing.T) {
	dir := t.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	if err := os.WriteFile(filepath.Join(dir, "blob.bin"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cert, certPEM, err := SelfSigned("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(certPEM)
	for _, proto := range []string{"HTTP/1.1", "HTTP/2.0"} {
		t.Run(proto, func(t *testing.T) {
			f := NewFaults(1)
			h := NewHandler(dir, Options{Faults: f})
			opts := ServerOptions{}
			tr := &http.Transport{}
			if proto == "HTTP/2.0" {
				opts.Certificate = &cert
				tr = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}
			}
			srv, err := StartServer(h, opts)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				f.Release()
				srv.Close()
				h.Close()
			})
			client := &http.Client{Transport: tr}
			get := func(rng string, timeout time.Duration) (int, string, []byte, error) {
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				defer cancel()
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/blob.bin", nil)
				req.Header.Set("Range", rng)
				resp, err := client.Do(req)
				if err != nil {
					return 0, "", nil, err
				}
				defer resp.Body.Close()
				if resp.Proto != proto {
					t.Errorf("got %s, want %s", resp.Proto, proto)
				}
				body, err := io.ReadAll(resp.Body)
				return resp.StatusCode, resp.Header.Get("Retry-After"), body, err
			}
			const rng = "bytes=1000-500999"
			want := data[1000:501000]
			for _, tc := range []struct {
				fault  Fault
				status int
				retry  string
			}{
				{Fault503, 503, ""},
				{Fault429, 429, "1"},
				{Fault500, 500, ""},
			} {
				f.Force(tc.fault)
				code, ra, _, err := get(rng, 10*time.Second)
				if err != nil || code != tc.status || ra != tc.retry {
					t.Errorf("%v: got %d, Retry-After %q, %v; want %d, %q", tc.fault, code, ra, err, tc.status, tc.retry)
				}
			}
			f.Force(FaultCut)
			code, _, body, err := get(rng, 10*time.Second)
			if code != 206 || err == nil || len(body) >= len(want) || !bytes.Equal(body, want[:len(body)]) {
				t.Errorf("cut: got %d, %d bytes (a prefix: %v), %v; want 206, a prefix of %d bytes and an error",
					code, len(body), bytes.Equal(body, want[:min(len(body), len(want))]), err, len(want))
			}
			f.Force(FaultStall)
			start := time.Now()
			code, _, body, err = get(rng, 300*time.Millisecond)
			if code != 206 || !errors.Is(err, context.DeadlineExceeded) || len(body) >= len(want) || time.Since(start) < 300*time.Millisecond {
				t.Errorf("stall: got %d, %d bytes, %v after %v; want 206, fewer than %d bytes, a deadline", code, len(body), err, time.Since(start), len(want))
			}
			f.Force(FaultHang)
			if code, _, _, err = get(rng, 300*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("hang: got %d, %v; want no reply before the deadline", code, err)
			}
			// The probe is spared by Force, not by SetAlways.
			f.Force(Fault503)
			if code, _, _, err := get("bytes=0-0", 10*time.Second); code != 206 || err != nil {
				t.Errorf("probe with a forced fault: got %d, %v; want 206", code, err)
			}
			// The forced 503 waited for the next ranged GET.
			if code, _, _, _ := get(rng, 10*time.Second); code != 503 {
				t.Errorf("after the probe: got %d, want the forced 503", code)
			}
			f.SetAlways(Fault500)
			if code, _, _, _ := get("bytes=0-0", 10*time.Second); code != 500 {
				t.Errorf("probe with SetAlways(500): got %d, want 500", code)
			}
			f.SetAlways(FaultNone)
			code, _, body, err = get(rng, 10*time.Second)
			if code != 206 || err != nil || !bytes.Equal(body, want) {
				t.Errorf("after the faults: got %d, %d bytes, %v; want 206 and the range", code, len(body), err)
			}
			for _, k := range []Fault{Fault503, Fault429, Fault500, FaultCut, FaultStall, FaultHang} {
				n := f.Injected(k)
				if wantN := map[Fault]int64{Fault503: 2, Fault500: 2}[k]; n != max(wantN, 1) {
					t.Errorf("Injected(%v) = %d, want %d", k, n, max(wantN, 1))
				}
			}
		})
	}
}

// TestFaultRates checks that drawn faults come at about their rates.
func TestFaultRates(t *testing.T) {
	f := NewFaults(7)
	f.SetRates(map[Fault]float64{Fault503: 0.2, FaultCut: 0.1})
	req, _ := http.NewRequest(http.MethodGet, "/blob.bin", nil)
	req.Header.Set("Range", "bytes=5-9")
	counts := map[Fault]int{}
	for range 2000 {
		counts[f.pick(req)]++
	}
	if c := counts[Fault503]; c < 320 || c > 480 {
		t.Errorf("503: %d of 2000, want about 400", c)
	}
	if c := counts[FaultCut]; c < 140 || c > 260 {
		t.Errorf("cut: %d of 2000, want about 200", c)
	}
}

// TestServerDownUp checks that a Server refuses connections while down
// and serves again on the same URL once up, that DropConns ends kept-alive
// connections, and that a new certificate reaches new connections only.
func TestServerDownUp(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	good, goodPEM, err := SelfSigned("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	other, _, err := SelfSigned("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(goodPEM)
	h := NewHandler(dir, Options{})
	srv, err := StartServer(h, ServerOptions{Certificate: &good})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close(); h.Close() })
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	get := func() error {
		resp, err := client.Get(srv.URL + "/a")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err == nil && string(b) != "hello" {
			err = fmt.Errorf("got %q", b)
		}
		return err
	}
	if err := get(); err != nil {
		t.Fatal(err)
	}
	srv.Down()
	if err := get(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("while down: got %v, want connection refused", err)
	}
	if err := srv.Up(); err != nil {
		t.Fatal(err)
	}
	if err := get(); err != nil {
		t.Errorf("after Up: %v", err)
	}
	// The kept-alive connection still has the trusted certificate.
	srv.SetCertificate(&other)
	if err := get(); err != nil {
		t.Errorf("new certificate, old connection: %v", err)
	}
	srv.DropConns()
	var cerr *tls.CertificateVerificationError
	if err := get(); !errors.As(err, &cerr) {
		t.Errorf("new certificate, new connection: got %v, want a certificate verification error", err)
	}
	srv.SetCertificate(&good)
	if err := get(); err != nil {
		t.Errorf("trusted certificate again: %v", err)
	}
}
