package tests

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/s3server"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
)

// s3Proxy forwards requests to an S3 server after a delay each, through
// injected faults, and counts the bytes of the replies, so that a phase
// lasts long enough for a fault to strike it in the middle. The Host
// header goes through as the client sent it, so that signatures still
// match.
type s3Proxy struct {
	latency atomic.Int64 // a time.Duration
	faults  *shaped.Faults
	next    http.Handler // faults.Wrap(the reverse proxy)
	bytes   atomic.Int64
}

func (p *s3Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	t := time.NewTimer(time.Duration(p.latency.Load()))
	defer t.Stop()
	select {
	case <-t.C:
	case <-r.Context().Done():
		return
	}
	p.next.ServeHTTP(&countingWriter{ResponseWriter: w, n: &p.bytes}, r)
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// s3Wrap returns a command prefix that runs a program with none of the
// caller's AWS settings, the S3 server's root credentials unless env
// names others, and env.
func s3Wrap(srv *s3server.Server, env ...string) []string {
	wrap := []string{"env"}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_") {
			wrap = append(wrap, "-u", k)
		}
	}
	wrap = append(wrap, "AWS_CONFIG_FILE=/nonexistent", "AWS_SHARED_CREDENTIALS_FILE=/nonexistent", "AWS_EC2_METADATA_DISABLED=true")
	if len(env) == 0 {
		env = srv.Env()
	}
	return append(wrap, env...)
}

// newS3Site serves the archive from a versitygw as s3://archives/a.tar.gz,
// through an s3Proxy, with an index built through it. It skips t without
// versitygw.
func newS3Site(t *testing.T, a *faultArchive, latency time.Duration) (*faultSite, *s3server.Server, *s3Proxy) {
	t.Helper()
	srv := s3server.ForTest(t, s3server.Options{})
	srv.CreateBucket(t, "archives")
	srv.PutFile(t, "archives", "a.tar.gz", a.path)
	target, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	p := &s3Proxy{faults: shaped.NewFaults(13)}
	p.next = p.faults.Wrap(httputil.NewSingleHostReverseProxy(target))
	p.latency.Store(int64(latency))
	proxy := httptest.NewServer(p)
	t.Cleanup(func() {
		p.faults.Release()
		proxy.Close()
	})
	s := &faultSite{a: a, url: "s3://archives/a.tar.gz", served: p.bytes.Load,
		args: []string{"--endpoint-url", proxy.URL}}
	s.idx = filepath.Join(t.TempDir(), "s3.idx")
	wrap := s3Wrap(srv)
	argv := append(wrap, binary, "index", s.url, "-o", s.idx, "--span", "262144", "--cache-dir", t.TempDir(), "--endpoint-url", proxy.URL)
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("index: %v\n%s", err, out)
	}
	return s, srv, p
}

// goneRow is a way for the archive to go while it is read.
type goneRow struct {
	name string
	// site makes the site and the command prefix tarmount runs with; gone
	// replaces or deletes the archive.
	site func(t *testing.T) (s *faultSite, wrap []string, gone func(t *testing.T))
	// cause is what errors and logs must say; again what a second
	// extraction says.
	cause, again string
}

// TestFaultsGone: the archive is replaced (new content, new ETag) or
// deleted while it is read over HTTP. Nothing retries it: the index pass
// fails the mount; reads of what is not cached fail with EIO and a log
// line that names the cause, and never return bytes of another version;
// an extraction fails, leaving only complete files under real names, and
// a second run fails clearly (the replacement is no archive); a
// materialization stops for good, with only complete files in DIR, while
// the mount still serves them.
// TestFaultsS3 does the same from S3.
func TestFaultsGone(t *testing.T) {
	a := newFaultArchive(t)
	site := func(op func(t *testing.T, path string)) func(t *testing.T) (*faultSite, []string, func(t *testing.T)) {
		return func(t *testing.T) (*faultSite, []string, func(t *testing.T)) {
			s := newFaultSite(t, a, siteOptions{latency: 20 * time.Millisecond, connRate: 256 << 10})
			return s, nil, func(t *testing.T) { op(t, s.path) }
		}
	}
	runGone(t, a, []goneRow{
		{"replaced", site(replaceArchive), "source changed", ""},
		{"deleted", site(func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Error(err)
			}
		}), "fetch: not found (404 Not Found): deleted since it was opened", "404 Not Found"},
	})
}

// runGone runs each row in each phase.
func runGone(t *testing.T, a *faultArchive, rows []goneRow) {
	for _, row := range rows {
		for _, phase := range []string{"index", "read", "extract", "extract-indexed", "materialize"} {
			t.Run(row.name+"/"+phase, func(t *testing.T) {
				t.Parallel()
				s, wrap, gone := row.site(t)
				f := fault{start: gone, at: a.size / 4, wrap: wrap}
				switch phase {
				case "index":
					goneIndex(t, s, f, row.cause)
				case "read":
					goneRead(t, s, f, row.cause)
				case "extract", "extract-indexed":
					goneExtract(t, s, f, phase == "extract-indexed", row.cause, row.again)
				case "materialize":
					goneMaterialize(t, s, f, row.cause)
				}
			})
		}
	}
}

// goneArgs are the flags of the phases of TestFaultsGone.
func goneArgs(t *testing.T, s *faultSite, extra ...string) []string {
	return append(faultArgs(t.TempDir(), 5*time.Second, 7, extra...), s.args...)
}

// goneIndex: the archive goes during the index pass; the mount fails,
// naming the cause.
func goneIndex(t *testing.T, s *faultSite, f fault, cause string) {
	// The pass before the mount answers, as in phaseIndex.
	m := startMount(t, f.wrap, t.TempDir(), s.url, append(goneArgs(t, s), "--wait-index")...)
	tl := f.timeline(t, s.served, m.exited)
	err := m.waitReady(time.Minute)
	if !tl.finish() {
		t.Fatal("the index pass ended before the archive went")
	}
	if err == nil {
		t.Fatalf("the mount was ready although the archive went during its index pass:\n%s", lastLines(m.stderr.String(), 20))
	}
	<-m.exited
	log := m.stderr.String()
	if !strings.Contains(lastLines(log, 1), cause) {
		t.Errorf("the failed mount's last line does not say %q:\n%s", cause, lastLines(log, 20))
	}
	checkNotRetried(t, log, cause)
}

// goneRead: the archive goes while mounted; reads of what is not cached
// fail with EIO and never return other bytes.
func goneRead(t *testing.T, s *faultSite, f fault, cause string) {
	m := startMount(t, f.wrap, t.TempDir(), s.url, goneArgs(t, s, "--index", s.idx)...)
	if err := m.waitReady(time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(m.dir, corpus.PathReadme)); err != nil || !bytes.Equal(got, s.a.want(t, corpus.PathReadme)) {
		t.Fatalf("read before the archive went: %v", err)
	}
	f.at = 0
	f.timeline(t, s.served, nil).finish()
	elapsed, err := readWithin(t, time.Minute, func() error {
		_, err := readDirect(filepath.Join(m.dir, corpus.PathBig))
		return err
	})
	// A replaced archive is a stale file handle, as NFS says of a file
	// replaced on the server; a deleted one, an I/O error.
	want := syscall.EIO
	if cause == "source changed" {
		want = syscall.ESTALE
	}
	if !errors.Is(err, want) || elapsed > 5*time.Second+faultSlack {
		t.Errorf("O_DIRECT read of a span not cached: got %v after %v, want %v at once", err, elapsed, want)
	}
	failed := 0
	readSample(t, m.dir, 40, func(rel string, data []byte, err error) {
		switch {
		case err != nil && errors.Is(err, want):
			failed++
		case err != nil:
			t.Errorf("%s: got %v, want %v", rel, err, want)
		case !bytes.Equal(data, s.a.want(t, rel)):
			t.Errorf("%s: bytes that are not the archive's as mounted", rel)
		}
	})
	if failed == 0 {
		t.Error("no read failed after the archive went")
	}
	m.stop(t)
	log := m.stderr.String()
	if !strings.Contains(grepLines(log, `msg="request failed"`, 1000), cause) {
		t.Errorf("no request failed line says %q:\n%s", cause, lastLines(log, 20))
	}
	checkNotRetried(t, log, cause)
	t.Logf("%d files failed; %s", failed, lastLines(grepLines(log, `msg="request failed"`, 600), 1))
}

// goneExtract: the archive goes during an extraction; it fails, naming
// the cause, with only complete files under real names, and a second run
// refuses (again: what it says) without touching them.
func goneExtract(t *testing.T, s *faultSite, f fault, indexed bool, cause, again string) {
	dir := filepath.Join(t.TempDir(), "out")
	args := goneArgs(t, s, "--quiet", "--decode-workers", "2")
	if indexed {
		args = append(args, "--index", s.idx)
	}
	argv := append(append(append([]string(nil), f.wrap...), binary, "extract", s.url, dir), args...)
	run := func() (string, error) {
		out, _, err := runUnderFault(t, s, f, argv)
		return out, err
	}
	out, err := run()
	if err == nil {
		t.Fatalf("extract succeeded although the archive went:\n%s", lastLines(out, 20))
	}
	first := lastLines(out, 1)
	if !strings.Contains(lastLines(out, 1), cause) {
		t.Errorf("the failed extract's last line does not say %q:\n%s", cause, lastLines(out, 20))
	}
	checkNotRetried(t, out, cause)
	checkComplete(t, s.a.ref, dir)
	f.start, f.at = nil, 0
	out, err = run()
	last := lastLines(out, 1)
	switch {
	case err == nil:
		t.Errorf("a second extract succeeded although the archive is gone:\n%s", lastLines(out, 20))
	case again == "" && indexed:
		again = "index was built for another version"
	case again == "":
		// DIR, which tarmount made from the version that went, would
		// be upgraded: the object that replaced it is no archive.
		again = "not a tar archive"
	}
	if !strings.Contains(last, again) {
		t.Errorf("the second extract's last line does not say %q:\n%s", again, lastLines(out, 20))
	}
	checkComplete(t, s.a.ref, dir)
	t.Logf("first run: %s\nsecond run: %s", first, last)
}

// goneMaterialize: the archive goes during a materialization; it stops
// for good, naming the cause, with only complete files in DIR, which the
// mount still serves.
func goneMaterialize(t *testing.T, s *faultSite, f fault, cause string) {
	mat := filepath.Join(t.TempDir(), "mat")
	m := startMount(t, f.wrap, t.TempDir(), s.url, goneArgs(t, s, "--index", s.idx, "--materialize", mat, "--decode-workers", "2")...)
	if err := m.waitReady(time.Minute); err != nil {
		t.Fatal(err)
	}
	tl := f.timeline(t, s.served, nil)
	waitLogWithin(t, m, "materialize failed", time.Minute)
	if !tl.finish() {
		t.Fatal("the materialization ended before the archive went")
	}
	checkComplete(t, s.a.ref, mat)
	readSample(t, m.dir, 40, func(rel string, data []byte, err error) {
		switch {
		case err != nil && !errors.Is(err, syscall.EIO) && !errors.Is(err, syscall.ESTALE):
			t.Errorf("%s: got %v, want EIO or ESTALE", rel, err)
		case err == nil && !bytes.Equal(data, s.a.want(t, rel)):
			t.Errorf("%s through the mount: bytes that are not the archive's as mounted", rel)
		}
	})
	m.stop(t)
	log := m.stderr.String()
	if l := grepLines(log, "materialize failed", 2000); !strings.Contains(l, cause) {
		t.Errorf("the materialize failed line does not say %q:\n%s", cause, l)
	}
	if strings.Contains(log, "materialize interrupted") {
		t.Errorf("a materialization of an archive that went was resumed:\n%s", grepLines(log, "materializ", 300))
	}
}

// readSample reads n regular files below dir, spread over the tree (the
// largest ones among them), and calls check with what each read returned:
// reads that fail are not cached, and reading every file would take long
// through a slow server.
func readSample(t *testing.T, dir string, n int, check func(rel string, data []byte, err error)) {
	t.Helper()
	var all []string
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if info.Mode().IsRegular() {
			all = append(all, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	step := max(1, len(all)/n)
	for i := 0; i < len(all); i += step {
		rel, _ := filepath.Rel(dir, all[i])
		data, err := os.ReadFile(all[i])
		check(rel, data, err)
	}
	for _, rel := range []string{corpus.PathBig, corpus.PathBig2, corpus.PathSparse} {
		data, err := os.ReadFile(filepath.Join(dir, rel))
		check(rel, data, err)
	}
}

// checkNotRetried fails if a retry line of log names cause: a changed or
// deleted archive is final.
func checkNotRetried(t *testing.T, log, cause string) {
	t.Helper()
	if l := grepLines(grepLines(log, "msg=retry", 1000), cause, 300); l != "" {
		t.Errorf("retried although final:\n%s", l)
	}
}
