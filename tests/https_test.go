package tests

import (
	"bytes"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// trustFile writes the PEM certificates pems to a file for SSL_CERT_FILE
// and returns its path: a tarmount process given it trusts those in place
// of the system's bundle file (Go still reads the system's certificate
// directories, /etc/ssl/certs and the like, which hold no test's CA).
func trustFile(t testing.TB, pems ...[]byte) string {
	t.Helper()
	name := filepath.Join(t.TempDir(), "trusted.pem")
	if err := os.WriteFile(name, bytes.Join(pems, nil), 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// TestMountHTTPS mounts an archive from an HTTPS server that offers
// HTTP/2, as CDNs and object stores do, and checks that the tree matches
// tar -x, that the reads went over HTTP/2 by default and over HTTP/1.1
// with --http1.
func TestMountHTTPS(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{NoBigFiles: true}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	ref := filepath.Join(f.work, "ref")
	if err := os.Mkdir(ref, 0o755); err != nil {
		t.Fatal(err)
	}
	tarbuild.Extract(t, f.archive, ref)

	h := shaped.NewHandler(filepath.Dir(f.archive), shaped.Options{})
	var mu sync.Mutex
	protos := map[string]int{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		protos[r.Proto]++
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	t.Setenv("SSL_CERT_FILE", trustFile(t, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})))

	for _, tc := range []struct {
		name  string
		args  []string
		proto string
	}{
		{"default", nil, "HTTP/2.0"},
		{"http1", []string{"--http1"}, "HTTP/1.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mu.Lock()
			clear(protos)
			mu.Unlock()
			args := append([]string{"--cache-dir", filepath.Join(f.work, "cache-"+tc.name)}, tc.args...)
			m := mount(t, srv.URL+"/a.tar.gz", args...)
			treecmp.Compare(t, ref, m.dir, treecmp.Options{MaxErrors: 20})
			m.stop(t)
			mu.Lock()
			defer mu.Unlock()
			if len(protos) != 1 || protos[tc.proto] == 0 {
				t.Errorf("requests by protocol: got %v, want all %s", protos, tc.proto)
			}
		})
	}
}
