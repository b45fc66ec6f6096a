package tests

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/s3server"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
)

// TestFaultsS3Transient: TestFaultsTransient from S3 (versitygw behind a
// proxy that injects the faults): 503s and throttling (429 with
// Retry-After), and cut connections, in every phase, ridden out.
func TestFaultsS3Transient(t *testing.T) {
	a := newFaultArchive(t)
	for _, tc := range []transientFault{
		{"503-429", map[shaped.Fault]float64{shaped.Fault503: 0.1, shaped.Fault429: 0.05},
			[]shaped.Fault{shaped.Fault429, shaped.Fault503}, 10 * time.Second},
		{"cut", map[shaped.Fault]float64{shaped.FaultCut: 0.1}, []shaped.Fault{shaped.FaultCut}, 10 * time.Second},
	} {
		for _, phase := range []string{"index", "read", "extract", "extract-indexed", "materialize"} {
			t.Run(tc.name+"/"+phase, func(t *testing.T) {
				t.Parallel()
				s, srv, p := newS3Site(t, a, 0)
				f := fault{
					start: func(t *testing.T) { p.faults.SetRates(tc.rates); p.faults.Force(tc.force...) },
					stop:  func(t *testing.T) { p.faults.SetRates(nil) },
					wrap:  s3Wrap(srv),
				}
				switch phase {
				case "index":
					phaseIndex(t, s, f, tc.readTimeout, 7, expect{})
				case "read":
					phaseRead(t, s, f, tc.readTimeout, 7, expect{})
				case "extract", "extract-indexed":
					phaseExtract(t, s, f, phase == "extract-indexed", tc.readTimeout, 7, expect{})
				case "materialize":
					phaseMaterialize(t, s, f, tc.readTimeout, 7, expect{})
				}
				n := p.faults.Injected(shaped.Fault503) + p.faults.Injected(shaped.Fault429) + p.faults.Injected(shaped.FaultCut)
				if n == 0 {
					t.Error("no fault was injected")
				}
				t.Logf("injected %d faults", n)
			})
		}
	}
}

// TestFaultsS3Gone: TestFaultsGone from S3 (versitygw, unversioned): the
// object replaced by a PutObject (412 on IfMatch) or deleted (404
// NoSuchKey) while it is read.
func TestFaultsS3Gone(t *testing.T) {
	a := newFaultArchive(t)
	site := func(op func(t *testing.T, srv *s3server.Server)) func(t *testing.T) (*faultSite, []string, func(t *testing.T)) {
		return func(t *testing.T) (*faultSite, []string, func(t *testing.T)) {
			s, srv, p := newS3Site(t, a, 150*time.Millisecond)
			return s, s3Wrap(srv), func(t *testing.T) {
				op(t, srv)
				p.latency.Store(0) // what follows reads what failed, file by file
			}
		}
	}
	runGone(t, a, []goneRow{
		{"replaced", site(func(t *testing.T, srv *s3server.Server) {
			srv.Put(t, "archives", "a.tar.gz", bytes.Repeat([]byte{0xA5}, int(a.size)))
		}), "source changed", ""},
		{"deleted", site(func(t *testing.T, srv *s3server.Server) { srv.Delete(t, "archives", "a.tar.gz") }),
			"HTTP 404 NoSuchKey: The specified key does not exist.): deleted since it was opened", "NoSuchKey"},
	})
}

// credentialProcess is an AWS profile whose credentials come from a
// process (credential_process), as with SSO or a vault helper: it answers
// what its files hold, already expired, so that the SDK asks again for
// every request and a change takes effect at once.
type credentialProcess struct {
	dir  string
	wrap []string // runs tarmount with this profile and no other credentials
}

func newCredentialProcess(t *testing.T, srv *s3server.Server) *credentialProcess {
	t.Helper()
	c := &credentialProcess{dir: t.TempDir()}
	script := `#!/bin/sh
d=$(dirname "$0")
printf '{"Version":1,"AccessKeyId":"%s","SecretAccessKey":"%s","Expiration":"2000-01-01T00:00:00Z"}\n' "$(cat "$d/key")" "$(cat "$d/secret")"
`
	conf := fmt.Sprintf("[profile faults]\ncredential_process = sh %s\n", filepath.Join(c.dir, "creds.sh"))
	for name, content := range map[string]string{"creds.sh": script, "config": conf} {
		if err := os.WriteFile(filepath.Join(c.dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.set(t, s3server.AccessKey, s3server.SecretKey)
	c.wrap = s3Wrap(srv, "AWS_CONFIG_FILE="+filepath.Join(c.dir, "config"), "AWS_PROFILE=faults")
	return c
}

// set makes the process answer key and secret from now on.
func (c *credentialProcess) set(t *testing.T, key, secret string) {
	for name, v := range map[string]string{"key": key, "secret": secret} {
		tmp := filepath.Join(c.dir, name+".tmp")
		if err := os.WriteFile(tmp, []byte(v), 0o644); err != nil {
			t.Error(err)
			return
		}
		if err := os.Rename(tmp, filepath.Join(c.dir, name)); err != nil {
			t.Error(err)
		}
	}
}

// TestFaultsS3Credentials: S3 credentials that go bad while the archive
// is read (a credential process that starts answering keys the server
// does not know, as when a key is revoked or a user removed), then good
// again.

// (A new secret for the same access key id would go unnoticed: the SDK's
// signer caches the signing key it derives per access key id and day.) The index pass fails the
// mount, naming the server's reason, and a mount works once they are good
// again; reads fail with EIO at once, saying why, and succeed once they
// are good; an extraction fails and a second run completes it; a
// materialization stops and resumes in the same mount.
func TestFaultsS3Credentials(t *testing.T) {
	a := newFaultArchive(t)
	const short = 2 * time.Second
	// S3 answers an unknown key 403 InvalidAccessKeyId; versitygw 404
	// XAdminUserNotFound.
	refused := expect{errs: []string{"HTTP 404 XAdminUserNotFound: No user exists with the provided access key ID"}}
	for _, ph := range []faultPhase{
		{"index", func(t *testing.T, s *faultSite, f fault) { phaseIndex(t, s, f, short, 7, refused) }},
		{"read", func(t *testing.T, s *faultSite, f fault) { phaseRead(t, s, f, short, 7, refused) }},
		{"extract", func(t *testing.T, s *faultSite, f fault) { phaseExtract(t, s, f, false, short, 7, refused) }},
		{"extract-indexed", func(t *testing.T, s *faultSite, f fault) { phaseExtract(t, s, f, true, short, 7, refused) }},
		{"materialize", func(t *testing.T, s *faultSite, f fault) { phaseMaterialize(t, s, f, short, 7, refused) }},
	} {
		t.Run(ph.name, func(t *testing.T) {
			t.Parallel()
			s, srv, p := newS3Site(t, a, 100*time.Millisecond)
			c := newCredentialProcess(t, srv)
			f := fault{
				start: func(t *testing.T) { c.set(t, "AKIAREVOKED0000000000", "revoked-secret") },
				stop: func(t *testing.T) {
					c.set(t, s3server.AccessKey, s3server.SecretKey)
					p.latency.Store(0)
				},
				at:   a.size / 4,
				wrap: c.wrap,
			}
			ph.run(t, s, f)
		})
	}
}
