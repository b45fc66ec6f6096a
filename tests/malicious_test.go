package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/hostile"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// ran is the outcome of one run of the binary.
type ran struct {
	stdout, stderr string
	err            error
	maxRSS         int64 // peak resident memory, bytes
	elapsed        time.Duration
}

// runTimeout bounds every run of the binary on hostile input: a run that
// takes longer hangs.
const runTimeout = time.Minute

// runBinary runs the binary with args, as cred when not nil, within
// runTimeout, and fails the test on a hang or a Go panic or stack in its
// output. stdout is counted, not kept, when discard.
func runBinary(t *testing.T, cred *syscall.Credential, discard bool, args ...string) ran {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.WaitDelay = 5 * time.Second
	cmd.Env = append(os.Environ(), "GORACE=exitcode=66 halt_on_error=1")
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var stdout, stderr bytes.Buffer
	var counted countWriter
	if discard {
		cmd.Stdout = &counted
	} else {
		cmd.Stdout = &stdout
	}
	cmd.Stderr = &stderr
	start := time.Now()
	var peak int64
	err := cmd.Start()
	if err == nil {
		// The peak is read from /proc while the process runs: its
		// rusage's Maxrss also counts this test process's own peak,
		// which exec (after a vfork) records into the child.
		exited, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			for {
				if v := vmHWM(cmd.Process.Pid); v > peak {
					peak = v
				}
				select {
				case <-exited:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
		}()
		err = cmd.Wait()
		close(exited)
		<-done
	}
	r := ran{stdout: stdout.String(), stderr: stderr.String(), err: err, elapsed: time.Since(start), maxRSS: peak}
	if ctx.Err() != nil {
		t.Fatalf("tarmount %s: no result after %v (hung)\n%s", strings.Join(args, " "), runTimeout, tail(r.stderr))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() == 66 {
		t.Fatalf("tarmount %s: data race\n%s", strings.Join(args, " "), r.stderr)
	}
	if strings.Contains(r.stderr, "panic:") || strings.Contains(r.stderr, "goroutine ") {
		t.Fatalf("tarmount %s: Go panic or stack in the output:\n%s", strings.Join(args, " "), tail(r.stderr))
	}
	return r
}

// vmHWM returns the peak resident memory of a running process, 0 once it
// is gone.
func vmHWM(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// countWriter counts what is written to it.
type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

// tail returns the last few KiB of s.
func tail(s string) string {
	if len(s) > 4096 {
		return "..." + s[len(s)-4096:]
	}
	return s
}

// lines splits output into lines.
func lines(s string) []string { return strings.Split(strings.TrimRight(s, "\n"), "\n") }

// nobody is the unprivileged user the binary runs as to extract without
// root.
var nobody = &syscall.Credential{Uid: 65534, Gid: 65534}

var nobodyOnce sync.Once
var nobodyErr error

// canRunAsNobody lets nobody run the binary (its directory is made
// searchable) and reports whether that works here.
func canRunAsNobody(t *testing.T) error {
	nobodyOnce.Do(func() {
		if os.Geteuid() != 0 {
			nobodyErr = errors.New("only root can run a process as another user")
			return
		}
		if nobodyErr = os.Chmod(filepath.Dir(binary), 0o755); nobodyErr != nil {
			return
		}
		cmd := exec.Command(binary, "--version")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: nobody}
		if out, err := cmd.CombinedOutput(); err != nil {
			nobodyErr = errors.New(err.Error() + ": " + string(out))
		}
	})
	return nobodyErr
}

// TestMaliciousCLI runs `tarmount extract` on every hostile.PathCase:
// in one pass, with a saved index (after `tarmount index`), in one pass
// as an unprivileged user, and in the background of a mount
// (--materialize). Nothing beside DIR may change, DIR must hold the
// case's tree, and stderr must report what was refused.
func TestMaliciousCLI(t *testing.T) {
	needFUSE(t)
	nobodyReason := canRunAsNobody(t)
	for _, tc := range hostile.PathCases() {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			// A base directory every user may search, for the
			// unprivileged run.
			base, err := os.MkdirTemp("", "tarmount-malicious-")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(base) })
			if err := os.Chmod(base, 0o755); err != nil {
				t.Fatal(err)
			}
			work := filepath.Join(base, "work")
			os.Mkdir(work, 0o755)
			outside := hostile.MakeSentinel(t, work)
			archive := filepath.Join(base, "evil.tar.gz")
			if err := os.WriteFile(archive, tarbuild.Gzip(tc.Archive(outside)), 0o644); err != nil {
				t.Fatal(err)
			}
			// Nothing may appear beside the directories extracted into:
			// tarmount keeps its state inside them.
			skip := []string{"cold", "warm", "mat", "nobody"}
			before := hostile.Snapshot(t, work, skip...)
			check := func(t *testing.T, dir string, privileged bool, stderr string, notes ...string) {
				t.Helper()
				for _, d := range hostile.DiffTrees(hostile.Snapshot(t, work, skip...), before) {
					t.Errorf("outside DIR: %s", d)
				}
				want := hostile.ReplaceAbs(tc.WantTree(privileged), outside)
				for _, d := range hostile.DiffTrees(hostile.DescribeTree(t, dir), want) {
					t.Errorf("in DIR: %s", d)
				}
				hostile.CheckNotes(t, "stderr lines", lines(stderr), notes...)
			}
			withScreen := append(slices.Clone(tc.Notes), tc.ScreenNotes...)
			withScreen = append(withScreen, tc.Skips...)
			// An archive with members tar -x refuses extracts the rest,
			// then fails, as GNU tar and bsdtar do.
			refused := slices.ContainsFunc(tc.Skips, func(r string) bool { return !strings.HasPrefix(r, "removing leading") })
			extracted := func(t *testing.T, r ran) {
				t.Helper()
				if !refused {
					if r.err != nil {
						t.Fatalf("extract: %v\n%s", r.err, r.stderr)
					}
					return
				}
				ls := lines(r.stderr)
				if r.err == nil || !strings.Contains(ls[len(ls)-1], "archive members not extracted") {
					t.Fatalf("extract: got %v and a last line %q, want a failure naming the members not extracted\n%s",
						r.err, ls[len(ls)-1], r.stderr)
				}
			}

			t.Run("one-pass", func(t *testing.T) {
				dir := filepath.Join(work, "cold")
				r := runBinary(t, nil, false, "extract", archive, dir, "--cache-dir", filepath.Join(base, "cache-cold"))
				extracted(t, r)
				if !strings.Contains(r.stderr, "(one pass)") {
					t.Errorf("did not extract in one pass:\n%s", r.stderr)
				}
				check(t, dir, true, r.stderr, withScreen...)
			})
			cache := filepath.Join(base, "cache")
			t.Run("indexed", func(t *testing.T) {
				r := runBinary(t, nil, false, "index", archive, "--cache-dir", cache)
				if r.err != nil {
					t.Fatalf("index: %v\n%s", r.err, r.stderr)
				}
				hostile.CheckNotes(t, "index's stderr lines", lines(r.stderr), tc.Skips...)
				dir := filepath.Join(work, "warm")
				r = runBinary(t, nil, false, "extract", archive, dir, "--cache-dir", cache)
				extracted(t, r)
				if !strings.Contains(r.stderr, "(parallel spans)") {
					t.Errorf("did not extract from the saved index:\n%s", r.stderr)
				}
				// The saved index says again what the pass warned of.
				check(t, dir, true, r.stderr, append(slices.Clone(tc.Notes), tc.Skips...)...)
			})
			t.Run("unprivileged", func(t *testing.T) {
				if nobodyReason != nil {
					testutil.Missing(t, "cannot run tarmount as uid 65534 here: %v", nobodyReason)
				}
				// nobody owns the sentinel too: only tarmount's
				// care keeps it from being changed.
				for _, p := range []string{work, outside, filepath.Join(outside, hostile.SentinelFile)} {
					if err := os.Lchown(p, 65534, 65534); err != nil {
						t.Fatal(err)
					}
				}
				nobodyCache := filepath.Join(base, "cache-nobody")
				os.Mkdir(nobodyCache, 0o755)
				os.Lchown(nobodyCache, 65534, 65534)
				before = hostile.Snapshot(t, work, skip...)
				dir := filepath.Join(work, "nobody")
				r := runBinary(t, nobody, false, "extract", archive, dir, "--cache-dir", nobodyCache)
				extracted(t, r)
				check(t, dir, false, r.stderr, append(withScreen, tc.UnprivilegedNotes...)...)
			})
			t.Run("materialize", func(t *testing.T) {
				dir := filepath.Join(work, "mat")
				m := mount(t, archive, "--cache-dir", cache, "--materialize", dir)
				waitLog(t, m, "msg=materialized")
				check(t, dir, true, m.stderr.String(), append(slices.Clone(tc.Notes), tc.Skips...)...)
				m.stop(t)
			})
		})
	}
}
