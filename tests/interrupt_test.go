package tests

import (
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// slowArchive is a gzip tarball of a corpus tree of many files, what
// tar -x extracts from it, and a loopback server that answers each
// request 50 ms late: read in small blocks by one worker (slowFlags),
// the archive takes seconds to stream; read with the default flags, a
// fraction of a second.
type slowArchive struct {
	work, ref, url string
	size           int64
	h              *shaped.Handler
}

func newSlowArchive(t *testing.T) *slowArchive {
	return newSlowArchiveAs(t, "a.tar.gz")
}

// newSlowArchiveAs is newSlowArchive with the archive named name, which
// says how it is compressed: .tar.gz by GNU tar (gzip -6), .tar.zst by
// the zstd CLI (-3, one frame) with a window of 64 KiB (--zstd=wlog=16),
// so that a pass over its 20 MB of tar finds room for resume points
// inside the frame (a mid point every 32 windows).
func newSlowArchiveAs(t *testing.T, name string) *slowArchive {
	t.Helper()
	s := &slowArchive{work: t.TempDir()}
	src, served := filepath.Join(s.work, "src"), filepath.Join(s.work, "served")
	s.ref = filepath.Join(s.work, "ref")
	os.Mkdir(served, 0o755)
	corpus.MakeTree(t, src, corpus.TreeOptions{Many: 2000})
	archive := filepath.Join(served, name)
	switch {
	case strings.HasSuffix(name, ".tar.gz"):
		tarbuild.Archive(t, src, archive, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"})
	case strings.HasSuffix(name, ".tar.zst"):
		plain := filepath.Join(s.work, "a.tar")
		tarbuild.Archive(t, src, plain, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "none"})
		if out, err := exec.Command("zstd", "-q", "-3", "--zstd=wlog=16", plain, "-o", archive).CombinedOutput(); err != nil {
			t.Fatalf("zstd: %v\n%s", err, out)
		}
	default:
		t.Fatalf("newSlowArchiveAs: no codec for %s", name)
	}
	tarbuild.Extract(t, archive, s.ref)
	st, err := os.Stat(archive)
	if err != nil {
		t.Fatal(err)
	}
	s.size = st.Size()
	s.h = shaped.NewHandler(served, shaped.Options{Latency: 50 * time.Millisecond})
	srv := httptest.NewServer(s.h)
	t.Cleanup(func() { srv.Close(); s.h.Close() })
	s.url = srv.URL + "/" + name
	return s
}

// slowFlags make a pass over s take about 3 s: 60 blocks, one at a time.
func (s *slowArchive) slowFlags() []string {
	block := max((s.size/60+4095)/4096*4096, 4096)
	return []string{"--fetch-workers", "1", "--block-size", fmt.Sprint(block)}
}

// interrupt runs the tarmount binary with args, sends it sig once ready
// says so, and returns its exit code and stderr.
func interrupt(t *testing.T, args []string, sig syscall.Signal, ready func(stderr string) bool) (int, string) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.After(2 * time.Minute)
	for !ready(stderr.String()) {
		select {
		case <-exited:
			t.Fatalf("tarmount %s ended before it could be interrupted: %v\n%s", args[0], cmd.ProcessState, stderr.String())
		case <-deadline:
			cmd.Process.Kill()
			<-exited
			t.Fatalf("tarmount %s never got ready to be interrupted\n%s", args[0], stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
	cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-exited
		t.Fatalf("tarmount %s did not exit 30 s after %v\n%s", args[0], sig, stderr.String())
	}
	return cmd.ProcessState.ExitCode(), stderr.String()
}

// checkInterrupted checks that a command that sig stopped exited with
// 128 plus the signal's number, with the line want last, and said
// nothing of corrupt or changed data.
func checkInterrupted(t *testing.T, sig syscall.Signal, code int, stderr, want string) {
	t.Helper()
	if code != 128+int(sig) {
		t.Errorf("exit code: got %d, want %d", code, 128+int(sig))
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	if got := lines[len(lines)-1]; got != want {
		t.Errorf("last line: got %q, want %q", got, want)
	}
	for _, bad := range []string{"corrupt", "changed", "tarscan", "cut short", "truncated"} {
		if strings.Contains(strings.ToLower(stderr), bad) {
			t.Errorf("stderr says %q: got\n%s\nwant nothing of the archive's data", bad, stderr)
		}
	}
}

// TestInterrupts interrupts an extract (one pass, and in spans with an
// index), an index pass, a pack and a mount's first pass with SIGINT and
// SIGTERM: each ends with one line
// "tarmount: CMD URL: interrupted" and exits 130 or 143, nothing is left
// mounted, and a rerun completes.
func TestInterrupts(t *testing.T) {
	needFUSE(t)
	s := newSlowArchive(t)
	// Ready once the pass has read a fifth of the archive.
	midPass := func(string) bool { return s.h.Stats().Bytes > s.size/5 }
	cases := []struct {
		cmd string
		sig syscall.Signal
	}{
		{"extract", syscall.SIGINT}, {"extract", syscall.SIGTERM},
		{"extract-indexed", syscall.SIGINT}, {"extract-indexed", syscall.SIGTERM},
		{"index", syscall.SIGINT}, {"index", syscall.SIGTERM},
		{"pack", syscall.SIGINT}, {"pack", syscall.SIGTERM},
		{"mount", syscall.SIGINT}, {"mount", syscall.SIGTERM},
		{"mount-materialize", syscall.SIGINT}, {"mount-materialize", syscall.SIGTERM},
		{"mount-wait-index", syscall.SIGINT}, {"mount-wait-index", syscall.SIGTERM},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s-%v", tc.cmd, tc.sig), func(t *testing.T) {
			work := t.TempDir()
			cache := filepath.Join(work, "cache")
			dir := filepath.Join(work, "out")
			os.Mkdir(dir, 0o755)
			s.h.ResetStats()
			common := append([]string{"--cache-dir", cache}, s.slowFlags()...)
			switch tc.cmd {
			case "extract":
				code, stderr := interrupt(t, append([]string{"extract", s.url, dir, "--quiet"}, common...), tc.sig, midPass)
				checkInterrupted(t, tc.sig, code, stderr, "tarmount: extract "+s.url+": interrupted")
				runExtract(t, s.url, dir, "--cache-dir", cache)
				treecmp.Compare(t, s.ref, dir, treecmp.Options{MaxErrors: 20})
			case "extract-indexed":
				// Spans of 64 KiB, one request at a time, each 50 ms late.
				idx := filepath.Join(work, "a.idx")
				if out, err := exec.Command(binary, "index", s.url, "--cache-dir", cache, "-o", idx, "--span", "65536").CombinedOutput(); err != nil {
					t.Fatalf("index: %v\n%s", err, out)
				}
				s.h.ResetStats()
				args := []string{"extract", s.url, dir, "--quiet", "--cache-dir", cache, "--index", idx, "--decode-workers", "1", "--fetch-workers", "1"}
				code, stderr := interrupt(t, args, tc.sig, func(string) bool { return s.h.Stats().Requests > 8 })
				checkInterrupted(t, tc.sig, code, stderr, "tarmount: extract "+s.url+": interrupted")
				runExtract(t, s.url, dir, "--cache-dir", cache, "--index", idx)
				treecmp.Compare(t, s.ref, dir, treecmp.Options{MaxErrors: 20})
			case "pack":
				out := filepath.Join(work, "packed", "a.tar.zst")
				code, stderr := interrupt(t, append([]string{"pack", s.url, "-o", out}, common...), tc.sig, midPass)
				checkInterrupted(t, tc.sig, code, stderr, "tarmount: pack "+s.url+": interrupted")
				if left, _ := filepath.Glob(filepath.Join(work, "packed", "*")); len(left) != 0 {
					t.Errorf("after the interrupted pack: got %v, want nothing", left)
				}
				if out, err := exec.Command(binary, "pack", s.url, "-o", out, "--cache-dir", cache).CombinedOutput(); err != nil {
					t.Fatalf("pack after the interrupted one: got %v, want success\n%s", err, out)
				}
				runExtract(t, out, dir, "--cache-dir", cache)
				treecmp.Compare(t, s.ref, dir, treecmp.Options{MaxErrors: 20})
			case "index":
				code, stderr := interrupt(t, append([]string{"index", s.url}, common...), tc.sig, midPass)
				checkInterrupted(t, tc.sig, code, stderr, "tarmount: index "+s.url+": interrupted")
				idx := filepath.Join(work, "a.idx")
				if out, err := exec.Command(binary, "index", s.url, "--cache-dir", cache, "-o", idx).CombinedOutput(); err != nil {
					t.Fatalf("index after the interrupted one: got %v, want success\n%s", err, out)
				}
				runExtract(t, s.url, dir, "--index", idx, "--cache-dir", cache)
				treecmp.Compare(t, s.ref, dir, treecmp.Options{MaxErrors: 20})
			case "mount", "mount-materialize", "mount-wait-index":
				args := append([]string{s.url, dir, "--mount-name", testMountName}, common...)
				ready := func(stderr string) bool { return strings.Contains(stderr, "msg=ready") && midPass(stderr) }
				mat := filepath.Join(work, "mat")
				switch tc.cmd {
				case "mount-materialize":
					args = append(args, "--materialize", mat)
				case "mount-wait-index":
					args, ready = append(args, "--wait-index"), midPass
				}
				code, stderr := interrupt(t, args, tc.sig, ready)
				if strings.Contains(stderr, "msg=indexed") {
					t.Fatalf("the pass ended before the signal: slow the server down\n%s", stderr)
				}
				checkInterrupted(t, tc.sig, code, stderr, "tarmount: mount "+s.url+": interrupted")
				if isMounted(dir) {
					exec.Command("umount", "-l", dir).Run()
					t.Fatalf("%s still mounted after tarmount exited", dir)
				}
				if tc.cmd == "mount-materialize" {
					m := mountAt(t, dir, s.url, "--cache-dir", cache, "--materialize", mat)
					waitLog(t, m, "msg=materialized")
					treecmp.Compare(t, s.ref, mat, treecmp.Options{MaxErrors: 20})
					return
				}
				m := mountAt(t, dir, s.url, "--cache-dir", cache, "--wait-index")
				treecmp.Compare(t, s.ref, m.dir, treecmp.Options{MaxErrors: 20})
			}
		})
	}
}

// TestServedMountStopsCleanly: a signal after the first pass ended only
// unmounts: exit 0, no "interrupted".
func TestServedMountStopsCleanly(t *testing.T) {
	needFUSE(t)
	s := newSlowArchive(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			dir := t.TempDir()
			args := []string{s.url, dir, "--mount-name", testMountName, "--cache-dir", filepath.Join(t.TempDir(), "cache")}
			code, stderr := interrupt(t, args, sig, func(stderr string) bool { return strings.Contains(stderr, "msg=indexed") })
			if code != 0 || strings.Contains(stderr, "interrupted") {
				t.Errorf("got exit %d, stderr\n%s\nwant exit 0, no \"interrupted\"", code, stderr)
			}
			if isMounted(dir) {
				exec.Command("umount", "-l", dir).Run()
				t.Errorf("%s still mounted after tarmount exited", dir)
			}
		})
	}
}

// TestMaterializeIntoMountpoint: --materialize DIR is refused with one
// line, before anything is mounted, when DIR is the mountpoint or under
// it, symbolic links resolved.
func TestMaterializeIntoMountpoint(t *testing.T) {
	needFUSE(t)
	work := t.TempDir()
	src := filepath.Join(work, "src")
	os.MkdirAll(filepath.Join(src, "d"), 0o755)
	os.WriteFile(filepath.Join(src, "d", "f"), []byte("hello\n"), 0o644)
	archive := filepath.Join(work, "a.tar")
	if out, err := exec.Command("tar", "-C", src, "-cf", archive, ".").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	mnt := filepath.Join(work, "mnt")
	os.Mkdir(mnt, 0o755)
	os.Mkdir(filepath.Join(mnt, "existing"), 0o755)
	os.Symlink(mnt, filepath.Join(work, "link"))
	os.Symlink(filepath.Join(mnt, "existing"), filepath.Join(work, "link-sub"))
	for _, dir := range []string{
		mnt,
		mnt + "/",
		filepath.Join(mnt, "sub"),
		filepath.Join(mnt, "existing"),
		filepath.Join(mnt, "existing", "new", "deeper"),
		filepath.Join(work, "link"),
		filepath.Join(work, "link", "sub"),
		filepath.Join(work, "link-sub"),
		filepath.Join(work, "mnt", "..", "mnt", "sub"),
	} {
		t.Run(strings.TrimPrefix(dir, work), func(t *testing.T) {
			cmd := exec.Command(binary, archive, mnt, "--mount-name", testMountName, "--cache-dir", filepath.Join(work, "cache"), "--materialize", dir)
			out, err := cmd.CombinedOutput()
			if isMounted(mnt) {
				exec.Command("umount", "-l", mnt).Run()
				t.Fatalf("%s mounted with --materialize %s", mnt, dir)
			}
			want := fmt.Sprintf("tarmount: --materialize %s is inside the mountpoint %s\n", dir, mnt)
			if code := cmd.ProcessState.ExitCode(); code != 1 || string(out) != want {
				t.Errorf("got exit %d (%v), output %q; want exit 1, output %q", code, err, out, want)
			}
			if _, err := os.Stat(filepath.Join(mnt, "sub")); err == nil {
				t.Errorf("got %s/sub, want nothing made under the mountpoint", mnt)
			}
		})
	}
}
