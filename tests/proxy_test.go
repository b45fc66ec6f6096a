package tests

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// proxyHost is the archive server's name in TestMountThroughProxy: Go
// never sends a request for a loopback address or localhost through a
// proxy, so the URL names a host that only the proxy resolves (to
// 127.0.0.1, in a mount namespace of its own whose /etc/hosts says so).
const proxyHost = "archive.tarmount.test"

// startTinyproxy runs tinyproxy (Debian's tinyproxy-bin) on a free port of
// 127.0.0.1 in a mount namespace whose /etc/hosts maps proxyHost to
// 127.0.0.1, and returns its address; the cleanup stops it.
func startTinyproxy(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("tinyproxy")
	if err != nil {
		testutil.Missing(t, "tinyproxy not installed: %v", err)
	}
	dir := t.TempDir()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := fmt.Sprintf("Port %d\nListen 127.0.0.1\nAllow 127.0.0.1\nMaxClients 64\nTimeout 60\nLogLevel Info\nLogFile %q\n",
		port, filepath.Join(dir, "tinyproxy.log"))
	hosts := "127.0.0.1 localhost\n127.0.0.1 " + proxyHost + "\n"
	for name, data := range map[string]string{"tinyproxy.conf": conf, "hosts": hosts} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command("unshare", "-m", "--propagation", "private", "--",
		"sh", "-c", `mount --bind "$0" /etc/hosts && exec "$@"`, filepath.Join(dir, "hosts"),
		bin, "-d", "-c", filepath.Join(dir, "tinyproxy.conf"))
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "tinyproxy.log"))
			t.Fatalf("tinyproxy did not listen on %s:\n%s\n%s", addr, out.String(), log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// headerLog records the requests a server got.
type headerLog struct {
	mu   sync.Mutex
	reqs []http.Header
}

func (h *headerLog) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		hd := r.Header.Clone()
		hd.Set("X-Test-Method", r.Method)
		hd.Set("X-Test-Host", r.Host)
		hd.Set("X-Test-Path", r.URL.Path)
		h.reqs = append(h.reqs, hd)
		h.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// TestMountThroughProxy mounts and extracts an archive through a real
// HTTP proxy (tinyproxy) named by HTTP_PROXY, as fleets reach object
// storage through proxies and p2p layers: every request reaches the
// server through the proxy, Range and If-Match pass through, and the tree
// is exact. NO_PROXY naming the host sends the requests straight (and,
// the name resolving only at the proxy, fails to resolve it).
func TestMountThroughProxy(t *testing.T) {
	needFUSE(t)
	proxy := startTinyproxy(t)
	f := newFixture(t, corpus.TreeOptions{}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	ref := f.extracted(t)
	var seen headerLog
	files := http.FileServer(http.Dir(filepath.Dir(f.archive)))
	srv := httptest.NewServer(seen.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`) // ServeContent checks If-Match against it
		files.ServeHTTP(w, r)
	})))
	defer srv.Close()
	u, _ := url.Parse(srv.URL)
	archiveURL := "http://" + proxyHost + ":" + u.Port() + "/a.tar.gz"
	// The tarmount processes the test starts inherit these.
	t.Setenv("HTTP_PROXY", "http://"+proxy)
	t.Setenv("HTTPS_PROXY", "http://"+proxy)
	t.Setenv("NO_PROXY", "")

	m := mount(t, archiveURL, "--cache-dir", filepath.Join(f.work, "c1"))
	treecmp.Compare(t, ref, m.dir, treecmp.Options{MaxErrors: 20})
	m.stop(t)
	out := runExtract(t, archiveURL, filepath.Join(f.work, "out"), "--cache-dir", filepath.Join(f.work, "c1"))
	if !strings.Contains(out, "(parallel spans)") {
		t.Errorf("extract with the saved index did not read spans in parallel:\n%s", out)
	}
	treecmp.Compare(t, ref, filepath.Join(f.work, "out"), treecmp.Options{MaxErrors: 20})

	seen.mu.Lock()
	var ranged, pinned, direct int
	for _, h := range seen.reqs {
		if !strings.Contains(h.Get("Via"), "tinyproxy") {
			direct++
		}
		// Every range request but the probes that learn an object's
		// identity (bytes=0-0) is pinned to the version opened.
		if r := h.Get("Range"); r != "" && r != "bytes=0-0" {
			ranged++
			if h.Get("If-Match") == `"v1"` {
				pinned++
			} else {
				t.Logf("not pinned: %s %s range %s", h.Get("X-Test-Method"), h.Get("X-Test-Path"), r)
			}
		}
		if got := h.Get("X-Test-Host"); !strings.HasPrefix(got, proxyHost) {
			t.Errorf("a request for host %q, want %s", got, proxyHost)
		}
	}
	n := len(seen.reqs)
	seen.mu.Unlock()
	if n == 0 || direct > 0 {
		t.Errorf("got %d requests, %d of them not through the proxy (no Via: tinyproxy); want all through it", n, direct)
	}
	if ranged == 0 || pinned != ranged {
		t.Errorf("got %d range requests, %d of them with If-Match: \"v1\" through the proxy; want all", ranged, pinned)
	}

	// NO_PROXY naming the host: straight to a name that only the proxy
	// resolves, so the open fails saying so.
	t.Setenv("NO_PROXY", proxyHost)
	cmd := exec.Command(binary, "ls", archiveURL, "--cache-dir", filepath.Join(f.work, "c2"), "--retries", "0")
	got, err := cmd.CombinedOutput()
	if err == nil || !bytes.Contains(got, []byte("no such host")) {
		t.Errorf("with NO_PROXY=%s: got %v, output %q; want the host not found (requests sent straight)", proxyHost, err, got)
	}
}
