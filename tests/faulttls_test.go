package tests

import (
	"crypto/tls"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/shaped"
)

// TestFaultsTLS: certificates that must not be accepted. At open, a
// server whose certificate is not trusted, or is for another host name,
// makes a mount and an extraction fail at once, naming the reason. Once
// the archive is open, the server's certificate changes to an untrusted
// one (and its connections drop): the index pass fails and a mount works
// once the trusted one is back; reads fail with EIO, saying why, and
// succeed once it is back; an extraction fails and a second run
// completes it; a materialization stops and resumes in the same mount.
// No byte ever comes over a connection that was not verified.
func TestFaultsTLS(t *testing.T) {
	a := newFaultArchive(t)
	trusted, trustedPEM, err := shaped.SelfSigned("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	untrusted, _, err := shaped.SelfSigned("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	otherHost, otherHostPEM, err := shaped.SelfSigned("127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	// tarmount trusts these two, from SSL_CERT_FILE.
	wrap := []string{"env", "SSL_CERT_FILE=" + trustFile(t, trustedPEM, otherHostPEM)}
	const unknownAuthority = "x509: certificate signed by unknown authority"

	for _, tc := range []struct {
		name string
		cert *tls.Certificate
		want string
	}{
		{"open-untrusted", &untrusted, unknownAuthority},
		{"open-wrong-host", &otherHost, "x509: certificate is valid for 127.0.0.2, not 127.0.0.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFaultSite(t, a, siteOptions{server: shaped.ServerOptions{Certificate: tc.cert}})
			for _, cmd := range [][]string{
				{binary, s.url, t.TempDir(), "--mount-name", testMountName, "--cache-dir", t.TempDir()},
				{binary, "extract", s.url, filepath.Join(t.TempDir(), "out"), "--cache-dir", t.TempDir()},
			} {
				start := time.Now()
				argv := append(append([]string(nil), wrap...), cmd...)
				out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
				elapsed := time.Since(start)
				last := lastLines(string(out), 1)
				if err == nil || !strings.HasPrefix(last, "tarmount: open "+s.url) || !strings.Contains(last, tc.want) {
					t.Errorf("%s: got %v, last line %q; want a tarmount: open error naming %q", cmd[1], err, last, tc.want)
				}
				if elapsed > faultSlack {
					t.Errorf("%s: failed after %v: a certificate error is not retried", cmd[1], elapsed)
				}
				if st := s.h.Stats(); st.Requests != 0 {
					t.Errorf("%s: the server served %d requests over unverified connections", cmd[1], st.Requests)
				}
			}
		})
	}

	const short = 2 * time.Second
	untrustedNow := expect{errs: []string{unknownAuthority}}
	for _, ph := range []faultPhase{
		{"changed/index", func(t *testing.T, s *faultSite, f fault) { phaseIndex(t, s, f, short, 1000, untrustedNow) }},
		{"changed/read", func(t *testing.T, s *faultSite, f fault) { phaseRead(t, s, f, short, 1000, untrustedNow) }},
		{"changed/extract", func(t *testing.T, s *faultSite, f fault) { phaseExtract(t, s, f, false, short, 1000, untrustedNow) }},
		{"changed/extract-indexed", func(t *testing.T, s *faultSite, f fault) {
			phaseExtract(t, s, f, true, short, 1000, untrustedNow)
		}},
		{"changed/materialize", func(t *testing.T, s *faultSite, f fault) {
			phaseMaterialize(t, s, f, short, 1000, untrustedNow)
		}},
	} {
		t.Run(ph.name, func(t *testing.T) {
			t.Parallel()
			s := newFaultSite(t, a, siteOptions{latency: 20 * time.Millisecond, connRate: 256 << 10,
				server: shaped.ServerOptions{Certificate: &trusted}})
			f := fault{
				start: func(t *testing.T) {
					s.srv.SetCertificate(&untrusted)
					s.srv.DropConns()
				},
				stop: func(t *testing.T) { s.srv.SetCertificate(&trusted) },
				at:   a.size / 4,
				wrap: wrap,
			}
			ph.run(t, s, f)
		})
	}
}
