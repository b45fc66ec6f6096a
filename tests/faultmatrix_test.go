package tests

// The fault matrix: each way a remote end fails, during each phase that
// reads the archive:
//
//	index        the index pass of a first mount
//	read         reads through a mount that has its index
//	extract      tarmount extract, in one pass (no index) and in parallel
//	             spans (with an index)
//	materialize  a mount's --materialize
//
// What each cell must do: reads return the exact bytes or EIO within
// --read-timeout (plus slack); the mount works again once the server
// does; an extraction or materialization that a fault interrupts resumes
// when run again (a materialization, in the same mount) and ends with the
// tree tar -x makes; a half-written file never has a real name. Faults
// the phase can ride out (within --read-timeout and --retries) must not
// fail it at all.
//
// The rows, each run in all five phases (index, read, extract,
// extract-indexed, materialize):
//
//	503 and 429, cut bodies            TestFaultsTransient, TestFaultsS3Transient
//	stalled body, no reply at all      TestFaultsStall
//	connection refused for a while     TestFaultsOutage (TARMOUNT_TEST_OUTAGE)
//	name that stops resolving          TestFaultsDNS (and a .invalid name at open)
//	certificate changed to untrusted   TestFaultsTLS (and untrusted, wrong host at open)
//	archive replaced or deleted        TestFaultsGone (HTTP), TestFaultsS3Gone
//	S3 keys revoked, then good again   TestFaultsS3Credentials
//
// TestMountFaults (faults_test.go) covers reads through 503s and cuts, a
// failing (500) and a silent server, and a replaced archive, with a
// buffered read besides the O_DIRECT one.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// faultSlack is what a bound on a read's time allows beyond
// --read-timeout, for a loaded machine and the race detector.
const faultSlack = 10 * time.Second

// faultArchive is the archive of the fault tests, the tree tar -x makes of
// it, and an index of it built through a healthy server.
type faultArchive struct {
	work, ref, path, idx string
	size                 int64
}

// newFaultArchive makes a corpus tree (a few MB of .tar.gz with 300 small
// files), its reference extraction and its index with 256 KiB spans.
func newFaultArchive(t *testing.T) *faultArchive {
	t.Helper()
	needFUSE(t)
	a := &faultArchive{work: t.TempDir()}
	src := filepath.Join(a.work, "src")
	a.ref = filepath.Join(a.work, "ref")
	served := filepath.Join(a.work, "served")
	for _, d := range []string{a.ref, served} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	corpus.MakeTree(t, src, corpus.TreeOptions{Many: 300})
	a.path = filepath.Join(served, "a.tar.gz")
	tarbuild.Archive(t, src, a.path, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"})
	tarbuild.Extract(t, a.path, a.ref)
	st, err := os.Stat(a.path)
	if err != nil {
		t.Fatal(err)
	}
	a.size = st.Size()
	url, _ := serve(t, served)
	a.idx = filepath.Join(a.work, "a.idx")
	out, err := exec.Command(binary, "index", url+"/a.tar.gz", "-o", a.idx, "--span", "262144",
		"--cache-dir", filepath.Join(a.work, "cache")).CombinedOutput()
	if err != nil {
		t.Fatalf("index: %v\n%s", err, out)
	}
	return a
}

// want returns the content of rel in the reference tree.
func (a *faultArchive) want(t *testing.T, rel string) []byte {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(a.ref, rel))
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// faultSite serves a copy of the archive (its own name, so that it can be
// replaced or deleted) through injected faults, from a server that can go
// down and come back.
type faultSite struct {
	a      *faultArchive
	path   string // the served file
	faults *shaped.Faults
	h      *shaped.Handler
	srv    *shaped.Server
	url    string
	// idx is an index of the archive as this site serves it (its
	// identity); served counts the bytes of replies; args go to every
	// tarmount run.
	idx    string
	served func() int64
	args   []string
}

// siteOptions shape a site: a delay before each reply and a bandwidth cap
// per connection make a phase last long enough for a fault to hit it in
// the middle.
type siteOptions struct {
	latency  time.Duration
	connRate int64
	server   shaped.ServerOptions
	host     string // the URL's host name instead of 127.0.0.1
}

func newFaultSite(t *testing.T, a *faultArchive, o siteOptions) *faultSite {
	t.Helper()
	dir := t.TempDir()
	s := &faultSite{a: a, path: filepath.Join(dir, "a.tar.gz"), faults: shaped.NewFaults(11)}
	if err := os.Link(a.path, s.path); err != nil {
		t.Fatal(err)
	}
	s.h = shaped.NewHandler(dir, shaped.Options{Latency: o.latency, Faults: s.faults})
	o.server.Conn.Rate = o.connRate
	srv, err := shaped.StartServer(s.h, o.server)
	if err != nil {
		t.Fatal(err)
	}
	s.srv = srv
	t.Cleanup(func() {
		s.faults.Release()
		srv.Close()
		s.h.Close()
	})
	s.url = srv.URL + "/a.tar.gz"
	s.idx = a.idx
	s.served = func() int64 { return s.h.Stats().Bytes }
	if o.host != "" {
		s.url = strings.Replace(s.url, "127.0.0.1", o.host, 1)
	}
	return s
}

// faultArgs are the flags of every phase: no disk cache (every read goes
// to the server), small blocks and spans (many requests), the read
// timeout, the retries, and extra.
func faultArgs(cache string, readTimeout time.Duration, retries int, extra ...string) []string {
	return append([]string{"--cache-dir", cache, "--cache-disk", "0", "--block-size", "65536", "--span", "262144",
		"--fetch-workers", "4", "--read-timeout", readTimeout.String(), "--retries", fmt.Sprint(retries)}, extra...)
}

// fault is one row of the matrix, injected into a phase.
type fault struct {
	// start begins the fault and stop ends it; nil does nothing.
	start, stop func(t *testing.T)
	// at is how many bytes the server has served in the phase when the
	// fault starts: 0 starts it before the phase.
	at int64
	// hold is how long the fault lasts; 0 ends it with the phase (or,
	// when the phase fails, once it has failed).
	hold time.Duration
	// wrap is the command that runs tarmount, if any (see dnsNamespace).
	wrap []string
}

// timeline runs f against a phase that has begun: once served() tells of f.at
// more bytes it starts f, and f.hold later (or at finish when f.hold is 0)
// stops it.
func (f fault) timeline(t *testing.T, served func() int64, done <-chan struct{}) *timeline {
	t.Helper()
	tl := &timeline{f: f, started: make(chan bool, 1), stopped: make(chan struct{}), stop: make(chan struct{})}
	base := served()
	go func() {
		defer close(tl.stopped)
		for f.at > 0 && served()-base < f.at {
			select {
			case <-done:
				tl.started <- false
				return
			case <-tl.stop:
				tl.started <- false
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		if f.start != nil {
			f.start(t)
		}
		tl.started <- true
		if f.hold > 0 {
			select {
			case <-time.After(f.hold):
			case <-tl.stop: // the test is over
			}
		} else {
			<-tl.stop
		}
		if f.stop != nil {
			f.stop(t)
		}
	}()
	t.Cleanup(func() {
		tl.end()
		<-tl.stopped
	})
	return tl
}

// timeline is a fault under way.
type timeline struct {
	f       fault
	started chan bool // one value: whether f started, put back by whoever reads it
	stopped chan struct{}
	stop    chan struct{}
	once    sync.Once
}

func (tl *timeline) end() { tl.once.Do(func() { close(tl.stop) }) }

// wait waits until the fault has started (true), or will not (false: the
// phase was over first).
func (tl *timeline) wait() bool {
	ok := <-tl.started
	tl.started <- ok
	return ok
}

// finish waits until the fault is over (ending it now if it has no hold)
// and reports whether it started before the phase was over.
func (tl *timeline) finish() bool {
	ok := tl.wait()
	if tl.f.hold == 0 || !ok {
		tl.end()
	}
	<-tl.stopped
	return ok
}

// expect is what a phase must do under a fault.
type expect struct {
	// errs, when set, are what the phase's error (or the mount's log)
	// must say: the fault makes it fail. Empty: the phase rides it out.
	errs []string
}

func (e expect) check(t *testing.T, what, out string) {
	t.Helper()
	for _, s := range e.errs {
		if !strings.Contains(out, s) {
			t.Errorf("%s does not say %q:\n%s", what, s, lastLines(out, 30))
		}
	}
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[%d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// phaseIndex mounts the archive without an index while f strikes the
// index pass. A fault it rides out leaves a mount whose tree is tar -x's;
// one it does not makes the mount fail with e.errs, and once the fault is
// over a new mount works.
func phaseIndex(t *testing.T, s *faultSite, f fault, readTimeout time.Duration, retries int, e expect) (log string) {
	// The pass before the mount answers (--wait-index): a fault there
	// refuses the mount. TestProgressivePassFails covers a pass that
	// fails once the mount answers.
	args := append(append(faultArgs(t.TempDir(), readTimeout, retries), s.args...), "--wait-index")
	m := startMount(t, f.wrap, bindTarget(t, f.wrap), s.url, args...)
	tl := f.timeline(t, s.served, m.exited)
	err := m.waitReady(3 * time.Minute)
	if !tl.finish() {
		t.Error("the index pass ended before the fault started")
	}
	log = m.stderr.String()
	if len(e.errs) == 0 {
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(log, "msg=indexing") {
			t.Errorf("the mount did not index:\n%s", log)
		}
		treecmp.Compare(t, s.a.ref, m.dir, treecmp.Options{MaxErrors: 20})
		m.stop(t)
		return m.stderr.String()
	}
	if err == nil {
		t.Fatalf("the mount was ready despite the fault:\n%s", lastLines(log, 30))
	}
	<-m.exited
	e.check(t, "the failed mount", log)
	if isMounted(m.dir) {
		t.Errorf("%s is mounted after a failed mount", m.dir)
	}
	m = startMount(t, f.wrap, bindTarget(t, f.wrap), s.url, args...)
	if err := m.waitReady(3 * time.Minute); err != nil {
		t.Fatalf("mount once the fault is over: %v", err)
	}
	treecmp.Compare(t, s.a.ref, m.dir, treecmp.Options{MaxErrors: 20})
	m.stop(t)
	return log
}

// phaseRead mounts the archive with its index and reads through the mount
// while f is on: exact bytes, or (when e.errs is set) EIO within the read
// timeout with a log line that says why. Once f is over, every file reads
// exactly.
func phaseRead(t *testing.T, s *faultSite, f fault, readTimeout time.Duration, retries int, e expect) (log string) {
	m := startMount(t, f.wrap, bindTarget(t, f.wrap), s.url,
		append(faultArgs(t.TempDir(), readTimeout, retries, "--index", s.idx), s.args...)...)
	if err := m.waitReady(time.Minute); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(filepath.Join(m.dir, corpus.PathReadme)); err != nil || !bytes.Equal(got, s.a.want(t, corpus.PathReadme)) {
		t.Fatalf("read before the fault: %v", err)
	}
	f.at = 0
	tl := f.timeline(t, s.served, nil)
	tl.wait()
	// One O_DIRECT read of a span not read yet: exactly one read reaches
	// tarmount, so its time is bounded by --read-timeout.
	big := filepath.Join(m.dir, corpus.PathBig)
	elapsed, err := readWithin(t, readTimeout+time.Minute, func() error {
		got, err := readDirect(big)
		if err == nil && !bytes.Equal(got, s.a.want(t, corpus.PathBig)[:len(got)]) {
			return errors.New("wrong bytes")
		}
		return err
	})
	switch {
	case len(e.errs) > 0 && !errors.Is(err, syscall.EIO):
		t.Errorf("read during the fault: got %v, want EIO", err)
	case len(e.errs) == 0 && err != nil:
		t.Errorf("read during the fault: %v", err)
	}
	if elapsed > readTimeout+faultSlack {
		t.Errorf("read during the fault took %v, want within --read-timeout %v (+ %v)", elapsed, readTimeout, faultSlack)
	}
	if len(e.errs) == 0 {
		// Every file, while the fault is on.
		readAll(t, m.dir, func(rel string, data []byte, err error) {
			if err != nil {
				t.Errorf("%s during the fault: %v", rel, err)
			} else if !bytes.Equal(data, s.a.want(t, rel)) {
				t.Errorf("%s during the fault: wrong bytes", rel)
			}
		})
	}
	tl.finish()
	readAll(t, m.dir, func(rel string, data []byte, err error) {
		if err != nil {
			t.Errorf("%s after the fault: %v", rel, err)
		} else if !bytes.Equal(data, s.a.want(t, rel)) {
			t.Errorf("%s after the fault: wrong bytes", rel)
		}
	})
	m.stop(t)
	if len(e.errs) > 0 {
		e.check(t, "the mount's log", m.stderr.String())
	}
	t.Logf("read during the fault: %v after %v", err, elapsed.Round(time.Millisecond))
	return m.stderr.String()
}

// runUnderFault runs argv, its output captured, while f's timeline starts
// and ends the fault, and reports whether the fault started before the
// command ended.
func runUnderFault(t *testing.T, s *faultSite, f fault, argv []string) (out string, started bool, err error) {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	var buf syncBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	tl := f.timeline(t, s.served, done)
	err = cmd.Wait()
	close(done)
	started = tl.finish()
	return buf.String(), started, err
}

// phaseExtract runs tarmount extract (with the index when indexed, else
// in one pass) while f strikes it. A fault it rides out leaves tar -x's
// tree; one it does not makes it fail with e.errs, leaving no
// half-written file under a real name, and once f is over a second run
// completes the tree.
func phaseExtract(t *testing.T, s *faultSite, f fault, indexed bool, readTimeout time.Duration, retries int, e expect) (log string) {
	dir := filepath.Join(t.TempDir(), "out")
	args := append(faultArgs(t.TempDir(), readTimeout, retries, "--quiet", "--decode-workers", "2"), s.args...)
	if indexed {
		args = append(args, "--index", s.idx)
	}
	run := func(f fault) (string, error) {
		argv := append(append(append([]string(nil), f.wrap...), binary, "extract", s.url, dir), args...)
		out, started, err := runUnderFault(t, s, f, argv)
		if !started {
			t.Error("the extraction ended before the fault started")
		}
		return out, err
	}
	out, err := run(f)
	if len(e.errs) == 0 {
		if err != nil {
			t.Fatalf("extract: %v\n%s", err, lastLines(out, 30))
		}
		treecmp.Compare(t, s.a.ref, dir, treecmp.Options{MaxErrors: 20})
		return out
	}
	if err == nil {
		t.Fatalf("extract succeeded despite the fault:\n%s", lastLines(out, 30))
	}
	log = out
	e.check(t, "the failed extract", out)
	checkComplete(t, s.a.ref, dir)
	before := s.served()
	out, err = run(fault{wrap: f.wrap})
	if err != nil {
		t.Fatalf("extract once the fault is over: %v\n%s", err, lastLines(out, 30))
	}
	treecmp.Compare(t, s.a.ref, dir, treecmp.Options{MaxErrors: 20})
	t.Logf("the second run fetched %d of %d bytes", s.served()-before, s.a.size)
	return log
}

// phaseMaterialize mounts the archive with its index and --materialize
// while f strikes the materialization. Whether it rides the fault out or
// stops (then e.errs are in the log, and no half-written file has a real
// name), it resumes in the same mount once f is over and ends with tar
// -x's tree; reads through the mount stay exact.
func phaseMaterialize(t *testing.T, s *faultSite, f fault, readTimeout time.Duration, retries int, e expect) (log string) {
	mat := filepath.Join(t.TempDir(), "mat")
	m := startMount(t, f.wrap, bindTarget(t, f.wrap), s.url, append(faultArgs(t.TempDir(), readTimeout, retries,
		"--index", s.idx, "--materialize", mat, "--decode-workers", "2"), s.args...)...)
	if err := m.waitReady(time.Minute); err != nil {
		t.Fatal(err)
	}
	tl := f.timeline(t, s.served, nil)
	if len(e.errs) > 0 {
		waitLogWithin(t, m, "materialize interrupted", time.Minute)
		checkComplete(t, s.a.ref, mat)
	}
	tl.finish()
	waitLogWithin(t, m, "msg=materialized", 2*time.Minute)
	treecmp.Compare(t, s.a.ref, mat, treecmp.Options{MaxErrors: 20})
	readAll(t, m.dir, func(rel string, data []byte, err error) {
		if err != nil {
			t.Errorf("%s through the mount: %v", rel, err)
		} else if !bytes.Equal(data, s.a.want(t, rel)) {
			t.Errorf("%s through the mount: wrong bytes", rel)
		}
	})
	m.stop(t)
	e.check(t, "the mount's log", m.stderr.String())
	t.Logf("materialization:\n%s", grepLines(m.stderr.String(), "materializ", 400))
	return m.stderr.String()
}

// grepLines returns the lines of s that contain sub, each cut to width.
func grepLines(s, sub string, width int) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			if len(l) > width {
				l = l[:width] + "..."
			}
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// checkComplete checks that every file with a name under dir (the state
// directory aside) has its whole content: a half-written file never has
// a real name.
func checkComplete(t *testing.T, ref, dir string) {
	t.Helper()
	n := 0
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if info.IsDir() && rel == ".tarmount-partial" {
			return filepath.SkipDir
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		got, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		want, err := os.ReadFile(filepath.Join(ref, rel))
		switch {
		case err != nil:
			t.Errorf("%s: not in the archive: %v", rel, err)
		case !bytes.Equal(got, want):
			t.Errorf("%s has a name but not its content (%d of %d bytes)", rel, len(got), len(want))
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d complete files in %s after the failure", n, filepath.Base(dir))
}

// bindTarget returns a new mountpoint: for a tarmount run in its own mount
// namespace (wrap set), a directory bind-mounted on itself and shared, so
// that the FUSE mount made there shows here too.
func bindTarget(t *testing.T, wrap []string) string {
	t.Helper()
	dir := t.TempDir()
	if len(wrap) == 0 {
		return dir
	}
	for _, args := range [][]string{{"--bind", dir, dir}, {"--make-shared", dir}} {
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Fatalf("mount %v: %v: %s", args, err, out)
		}
	}
	t.Cleanup(func() {
		// After the mount's own cleanup (cleanups run last first).
		exec.Command("umount", "-l", dir).Run()
	})
	return dir
}

// outage is how long the server stays away in TestFaultsOutage: a few
// seconds by default, TARMOUNT_TEST_OUTAGE (a duration such as 1m) for a
// longer run. The read timeout of the phases that must fail stays 2 s, so
// the code path is the same whatever the length.
func outage(t *testing.T) time.Duration {
	if v := os.Getenv("TARMOUNT_TEST_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("TARMOUNT_TEST_OUTAGE=%q: want a positive duration", v)
		}
		return d
	}
	return 5 * time.Second
}

// transientFault is a row of faults that every phase rides out: drawn at
// rates, after some forced ones.
type transientFault struct {
	name  string
	rates map[shaped.Fault]float64
	force []shaped.Fault
	// readTimeout: a stall is caught by the watchdog after its 5 s
	// grace, so a read must be allowed longer than that.
	readTimeout time.Duration
}

// TestFaultsTransient: 503s with throttling (429 with Retry-After), and
// cut connections, in every phase. Each is ridden out: every phase
// completes with exact bytes and tar -x's tree.
func TestFaultsTransient(t *testing.T) {
	runTransient(t, []transientFault{
		{"503-429", map[shaped.Fault]float64{shaped.Fault503: 0.1, shaped.Fault429: 0.05},
			[]shaped.Fault{shaped.Fault429, shaped.Fault503, shaped.Fault503}, 10 * time.Second},
		{"cut", map[shaped.Fault]float64{shaped.FaultCut: 0.1},
			[]shaped.Fault{shaped.FaultCut, shaped.FaultCut}, 10 * time.Second},
	})
}

// TestFaultsStall: a body that stops in the middle, and a reply that
// never starts (not even a status line), in every phase: the stall
// watchdog (--min-speed) restarts the transfer where it stopped, and
// every phase completes with exact bytes and tar -x's tree.
func TestFaultsStall(t *testing.T) {
	runTransient(t, []transientFault{
		{"stall", nil, []shaped.Fault{shaped.FaultStall}, 30 * time.Second},
		{"hang", nil, []shaped.Fault{shaped.FaultHang}, 30 * time.Second},
	})
}

func runTransient(t *testing.T, rows []transientFault) {
	a := newFaultArchive(t)
	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := newFaultSite(t, a, siteOptions{})
			f := fault{
				start: func(t *testing.T) { s.faults.SetRates(tc.rates); s.faults.Force(tc.force...) },
				stop:  func(t *testing.T) { s.faults.SetRates(nil) },
			}
			for _, ph := range []struct {
				name string
				run  func(t *testing.T)
			}{
				{"index", func(t *testing.T) { phaseIndex(t, s, f, tc.readTimeout, 7, expect{}) }},
				{"read", func(t *testing.T) { phaseRead(t, s, f, tc.readTimeout, 7, expect{}) }},
				{"extract", func(t *testing.T) { phaseExtract(t, s, f, false, tc.readTimeout, 7, expect{}) }},
				{"extract-indexed", func(t *testing.T) { phaseExtract(t, s, f, true, tc.readTimeout, 7, expect{}) }},
				{"materialize", func(t *testing.T) { phaseMaterialize(t, s, f, tc.readTimeout, 7, expect{}) }},
			} {
				injected := func() [3]int64 {
					return [3]int64{s.faults.Injected(shaped.Fault503) + s.faults.Injected(shaped.Fault429),
						s.faults.Injected(shaped.FaultCut), s.faults.Injected(shaped.FaultStall) + s.faults.Injected(shaped.FaultHang)}
				}
				before := injected()
				ran := false // not when -run leaves it out
				t.Run(ph.name, func(t *testing.T) { ran = true; ph.run(t) })
				if !ran {
					continue
				}
				after := injected()
				if after == before {
					t.Errorf("%s: no fault was injected", ph.name)
				}
				t.Logf("%s: injected 5xx/429 %d, cuts %d, stalls and hangs %d", ph.name, after[0]-before[0], after[1]-before[1], after[2]-before[2])
			}
		})
	}
}

// faultPhase is one stage of a fault matrix test: it runs the index
// pass, reads, an extraction or a materialization under fault f.
type faultPhase struct {
	name string
	run  func(t *testing.T, s *faultSite, f fault)
}

// awayPhases are the stages under a server that is away for a while
// (down, or its name not resolving), cause being what the failures say:
// the index pass, allowed long, retries until the server is back and logs
// its retries; reads, extractions and materialization, allowed short,
// fail naming cause and work again once it is back.
func awayPhases(long, short time.Duration, cause string) []faultPhase {
	failing := expect{errs: []string{cause}}
	return []faultPhase{
		{"index", func(t *testing.T, s *faultSite, f fault) {
			log := phaseIndex(t, s, f, long, 1000, expect{})
			expect{errs: []string{"msg=retry", cause}}.check(t, "the index pass's log", log)
		}},
		{"read", func(t *testing.T, s *faultSite, f fault) { phaseRead(t, s, f, short, 1000, failing) }},
		{"extract", func(t *testing.T, s *faultSite, f fault) { phaseExtract(t, s, f, false, short, 1000, failing) }},
		{"extract-indexed", func(t *testing.T, s *faultSite, f fault) { phaseExtract(t, s, f, true, short, 1000, failing) }},
		{"materialize", func(t *testing.T, s *faultSite, f fault) { phaseMaterialize(t, s, f, short, 1000, failing) }},
	}
}

// TestFaultsOutage: the server goes away (connection refused) for a while
// (outage) and comes back. The index pass rides it out when
// --read-timeout is longer; reads during it fail with EIO within a
// shorter --read-timeout and succeed once it is back; an extraction
// fails, naming the refused connections, and a second run completes it; a
// materialization stops and resumes in the same mount.
func TestFaultsOutage(t *testing.T) {
	a := newFaultArchive(t)
	away := outage(t)
	const short = 2 * time.Second
	// A mount or extraction that must fail does so within short; the
	// index pass, allowed more than the outage, retries until it is over.
	long := away + 15*time.Second
	for _, ph := range awayPhases(long, short, "connection refused") {
		t.Run(ph.name, func(t *testing.T) {
			t.Parallel()
			// Slow enough that the server goes away in the middle.
			s := newFaultSite(t, a, siteOptions{latency: 20 * time.Millisecond, connRate: 256 << 10})
			f := fault{
				start: func(t *testing.T) { s.srv.Down() },
				stop: func(t *testing.T) {
					if err := s.srv.Up(); err != nil {
						t.Error(err)
					}
				},
				at:   a.size / 4,
				hold: away,
			}
			ph.run(t, s, f)
		})
	}
}
