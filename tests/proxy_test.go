package tests

import (
	"bytes"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// proxyHost is the archive server's name in TestMountThroughProxy: Go
// never sends a request for a loopback address or localhost through a
// proxy, so the URL names a host that only the proxy resolves (to
// 127.0.0.1, in a mount namespace of its own whose /etc/hosts says so).
const proxyHost = "archive.tarmount.test"

// tinyproxy is a running tinyproxy.
type tinyproxy struct {
	addr string // host:port it listens on
	log  string // its log file
}

// startTinyproxy runs tinyproxy (Debian's tinyproxy-bin) on a free port of
// 127.0.0.1 in a mount namespace whose /etc/hosts maps proxyHost to
// 127.0.0.1; CONNECT may reach connectPorts only (tinyproxy allows every
// port when none is listed). The cleanup stops it.
func startTinyproxy(t *testing.T, connectPorts ...int) *tinyproxy {
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
	p := &tinyproxy{addr: l.Addr().String(), log: filepath.Join(dir, "tinyproxy.log")}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	conf := fmt.Sprintf("Port %d\nListen 127.0.0.1\nAllow 127.0.0.1\nMaxClients 64\nTimeout 60\nLogLevel Info\nLogFile %q\n",
		port, p.log)
	for _, cp := range connectPorts {
		conf += fmt.Sprintf("ConnectPort %d\n", cp)
	}
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
		if c, err := net.Dial("tcp", p.addr); err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(p.log)
			t.Fatalf("tinyproxy did not listen on %s:\n%s\n%s", p.addr, out.String(), log)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tinyproxyRequest is the request line tinyproxy logs (LogLevel Connect
// or Info) for each request a client sends it.
var tinyproxyRequest = regexp.MustCompile(`Request \(file descriptor \d+\): (\S+) (\S+) `)

// requests returns the method and target of each request the proxy has
// logged, as "CONNECT host:port" or "GET http://host:port/path".
func (p *tinyproxy) requests(t *testing.T) []string {
	t.Helper()
	log, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	var reqs []string
	for _, m := range tinyproxyRequest.FindAllSubmatch(log, -1) {
		reqs = append(reqs, string(m[1])+" "+string(m[2]))
	}
	return reqs
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
		if r.TLS != nil {
			hd.Set("X-Test-TLS-Server-Name", r.TLS.ServerName)
		}
		h.reqs = append(h.reqs, hd)
		h.mu.Unlock()
		next.ServeHTTP(w, r)
	})
}

// setProxyEnv names proxy in the variable for scheme's URLs only
// (HTTP_PROXY or HTTPS_PROXY), clearing the others and their lower-case
// forms, for the tarmount processes the test starts.
func setProxyEnv(t *testing.T, scheme, proxy string) {
	for _, v := range []string{"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY"} {
		t.Setenv(v, "")
		t.Setenv(strings.ToLower(v), "")
	}
	t.Setenv(strings.ToUpper(scheme)+"_PROXY", proxy)
}

// TestMountThroughProxy mounts and extracts an archive through a real
// proxy (tinyproxy), as fleets reach object storage through proxies and
// p2p layers: http URLs through the one HTTP_PROXY names, which forwards
// each request, and https URLs through the one HTTPS_PROXY names, which
// tunnels each connection (CONNECT) to a server whose certificate, for the
// host name, tarmount trusts from SSL_CERT_FILE. Every connection the
// server accepts comes from the proxy, every request reaches the server
// (over TLS for https), Range and If-Match pass through, and the tree is
// exact. NO_PROXY naming the host sends the requests straight (and, the
// name resolving only at the proxy, fails to resolve it).
func TestMountThroughProxy(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	ref := f.extracted(t)
	files := http.FileServer(http.Dir(filepath.Dir(f.archive)))
	for _, scheme := range []string{"http", "https"} {
		t.Run(scheme, func(t *testing.T) {
			var seen headerLog
			srv := httptest.NewUnstartedServer(seen.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("ETag", `"v1"`) // ServeContent checks If-Match against it
				files.ServeHTTP(w, r)
			})))
			var conns atomic.Int64
			srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
				if s == http.StateNew {
					conns.Add(1)
				}
			}
			if scheme == "https" {
				cert, certPEM, err := shaped.SelfSigned(proxyHost)
				if err != nil {
					t.Fatal(err)
				}
				srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
				srv.EnableHTTP2 = true
				srv.StartTLS()
				t.Setenv("SSL_CERT_FILE", trustFile(t, certPEM))
			} else {
				srv.Start()
			}
			defer srv.Close()
			port := srv.Listener.Addr().(*net.TCPAddr).Port
			proxy := startTinyproxy(t, port)
			hostPort := fmt.Sprintf("%s:%d", proxyHost, port)
			archiveURL := scheme + "://" + hostPort + "/a.tar.gz"
			setProxyEnv(t, scheme, "http://"+proxy.addr)

			m := mount(t, archiveURL, "--cache-dir", filepath.Join(f.work, scheme+"-c1"))
			treecmp.Compare(t, ref, m.dir, treecmp.Options{MaxErrors: 20})
			m.stop(t)
			out := filepath.Join(f.work, scheme+"-out")
			got := runExtract(t, archiveURL, out, "--cache-dir", filepath.Join(f.work, scheme+"-c1"))
			if !strings.Contains(got, "(parallel spans)") {
				t.Errorf("extract with the saved index did not read spans in parallel:\n%s", got)
			}
			treecmp.Compare(t, ref, out, treecmp.Options{MaxErrors: 20})

			// The proxy logs one request per connection it opens to the
			// server: a CONNECT for each tunnel, a GET for each request
			// it forwards.
			var proxied int
			for _, r := range proxy.requests(t) {
				if strings.Contains(r, hostPort) && (scheme == "http" || strings.HasPrefix(r, "CONNECT ")) {
					proxied++
				} else {
					t.Errorf("the proxy got %q, want only requests for %s", r, hostPort)
				}
			}
			if n := conns.Load(); n == 0 || int64(proxied) != n {
				t.Errorf("the server accepted %d connections, the proxy logged %d requests for %s; want as many, at least one",
					n, proxied, hostPort)
			}

			seen.mu.Lock()
			var ranged, pinned, direct int
			for _, h := range seen.reqs {
				// A forwarding proxy adds Via; a tunnel cannot, but the
				// request comes over TLS for the host's name.
				if scheme == "http" && !strings.Contains(h.Get("Via"), "tinyproxy") ||
					scheme == "https" && h.Get("X-Test-TLS-Server-Name") != proxyHost {
					direct++
				}
				// Every range request but the probes that learn an object's
				// identity (bytes=0-0, or fetch.ProbeRange before a first
				// pass) is pinned to the version opened.
				if r := h.Get("Range"); r != "" && r != "bytes=0-0" && r != fetch.ProbeRange {
					ranged++
					if h.Get("If-Match") == `"v1"` {
						pinned++
					} else {
						t.Logf("not pinned: %s %s range %s", h.Get("X-Test-Method"), h.Get("X-Test-Path"), r)
					}
				}
				if got := h.Get("X-Test-Host"); got != hostPort {
					t.Errorf("a request for host %q, want %s", got, hostPort)
				}
			}
			n := len(seen.reqs)
			seen.mu.Unlock()
			t.Logf("%d connections through the proxy, %d requests, %d of them ranges", proxied, n, ranged)
			if n == 0 || direct > 0 {
				t.Errorf("got %d requests, %d of them not as the proxy passes them (http: Via: tinyproxy; https: TLS for %s); want all",
					n, direct, proxyHost)
			}
			if ranged == 0 || pinned != ranged {
				t.Errorf("got %d range requests, %d of them with If-Match: \"v1\" through the proxy; want all", ranged, pinned)
			}

			// NO_PROXY naming the host: straight to a name that only the
			// proxy resolves, so the open fails saying so.
			t.Setenv("NO_PROXY", proxyHost)
			cmd := exec.Command(binary, "ls", archiveURL, "--cache-dir", filepath.Join(f.work, scheme+"-c2"), "--retries", "0")
			lsOut, err := cmd.CombinedOutput()
			if err == nil || !bytes.Contains(lsOut, []byte("no such host")) {
				t.Errorf("with NO_PROXY=%s: got %v, output %q; want the host not found (requests sent straight)", proxyHost, err, lsOut)
			}
		})
	}
}
