package tests

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// TestNotifySocket runs a mount as systemd runs a Type=notify service: a
// real unix datagram socket in NOTIFY_SOCKET. READY=1 must come only once
// the mount answers, STATUS= lines must follow materialization to its end,
// and SIGTERM must bring STOPPING=1 and a clean exit.
func TestNotifySocket(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{NoBigFiles: true, Many: 2000}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	sockPath := filepath.Join(f.work, "notify.sock")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	mnt, mat := filepath.Join(f.work, "mnt"), filepath.Join(f.work, "mat")
	os.Mkdir(mnt, 0o755)
	cmd := exec.Command(binary, f.url, mnt, "--mount-name", testMountName, "--cache-dir", filepath.Join(f.work, "cache"),
		"--span", "65536", "--materialize", mat)
	cmd.Env = append(os.Environ(), "NOTIFY_SOCKET="+sockPath)
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		if isMounted(mnt) {
			exec.Command("umount", "-l", mnt).Run()
		}
	})

	// receive returns the next datagram, failing the test after a minute.
	buf := make([]byte, 4096)
	receive := func() string {
		t.Helper()
		sock.SetReadDeadline(time.Now().Add(time.Minute))
		n, _, err := sock.ReadFromUnix(buf)
		if err != nil {
			t.Fatalf("no notification: %v\n%s", err, stderr.String())
		}
		return string(buf[:n])
	}
	first := receive()
	if !strings.HasPrefix(first, "READY=1\n") || !strings.Contains(first, "STATUS=serving") {
		t.Fatalf("first notification: got %q, want READY=1 and a STATUS line", first)
	}
	// Ready means the mount answers now, not soon.
	got, err := os.ReadFile(filepath.Join(mnt, "owners/nobody.txt"))
	if err != nil {
		t.Fatalf("read right after READY=1: %v", err)
	}
	if want := []byte("nobody\n"); !bytes.Equal(got, want) {
		t.Fatalf("owners/nobody.txt right after READY=1: got %q, want %q", got, want)
	}
	// STATUS lines until materialization has finished.
	var statuses []string
	for {
		msg := receive()
		if !strings.HasPrefix(msg, "STATUS=") {
			t.Fatalf("got %q while materializing, want STATUS= lines", msg)
		}
		statuses = append(statuses, msg)
		if strings.Contains(msg, "materialized") {
			break
		}
		if !strings.Contains(msg, "materializing") {
			t.Fatalf("got %q, want materialization progress", msg)
		}
	}
	t.Logf("statuses: %q", statuses)
	treecmp.Compare(t, f.extracted(t), mat, treecmp.Options{MaxErrors: 20})

	cmd.Process.Signal(syscall.SIGTERM)
	if msg := receive(); msg != "STOPPING=1" {
		t.Errorf("after SIGTERM: got %q, want STOPPING=1", msg)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit 30 s after SIGTERM\n%s", stderr.String())
	}
	if isMounted(mnt) {
		t.Errorf("%s still mounted after the server exited", mnt)
	}
}

// TestDaemon checks --daemon: the command returns 0 only once the mount
// answers, with the server left running in the background; `tarmount
// unmount` then ends that server. A mount that cannot start makes the
// command fail with the reason, and leaves nothing mounted or running.
func TestDaemon(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{NoBigFiles: true}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	mnt := filepath.Join(f.work, "mnt")
	os.Mkdir(mnt, 0o755)
	logFile := filepath.Join(f.work, "server.log")
	t.Cleanup(func() {
		if isMounted(mnt) {
			exec.Command("umount", "-l", mnt).Run()
		}
	})

	cmd := exec.Command(binary, f.url, mnt, "--daemon", "--log-file", logFile, "--mount-name", testMountName,
		"--cache-dir", filepath.Join(f.work, "cache"))
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := append(stdout.Bytes(), stderr.Bytes()...)
	if err != nil {
		log, _ := os.ReadFile(logFile)
		t.Fatalf("--daemon: %v\n%s\nserver log:\n%s", err, out, log)
	}
	// The parent has returned: the mount must answer already.
	if !isMounted(mnt) {
		t.Fatalf("--daemon returned (%s) but %s is not mounted", out, mnt)
	}
	ref := f.extracted(t)
	treecmp.Compare(t, ref, mnt, treecmp.Options{MaxErrors: 20})
	pid := serverPID(t, out)
	// Only the pid on stdout: PID=$(tarmount URL MNT --daemon).
	if got := stdout.String(); got != strconv.Itoa(pid)+"\n" {
		t.Errorf("stdout: got %q, want the server's pid %d alone", got, pid)
	}
	if log, _ := os.ReadFile(logFile); !strings.Contains(string(log), "msg=ready") {
		t.Errorf("the server log has no ready line:\n%s", log)
	}

	if out, err := exec.Command(binary, "unmount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("unmount: %v\n%s", err, out)
	}
	waitExit(t, pid)
	if isMounted(mnt) {
		t.Errorf("%s still mounted after unmount", mnt)
	}

	// A mount that fails: the reason reaches the caller.
	cmd = exec.Command(binary, f.base+"/missing.tar.gz", mnt, "--daemon", "--mount-name", testMountName,
		"--cache-dir", filepath.Join(f.work, "cache"))
	out, err = cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("--daemon of a missing archive succeeded: %s", out)
	}
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Errorf("exit code: got %d, want 1", code)
	}
	if !strings.Contains(string(out), "404") && !strings.Contains(strings.ToLower(string(out)), "not found") {
		t.Errorf("--daemon of a missing archive: got %q, want the reason (not found)", out)
	}
	if isMounted(mnt) {
		t.Errorf("%s mounted after a failed --daemon", mnt)
	}
}

// TestMountHelper mounts through mount(8) and fuse3's helper, as an
// /etc/fstab line does: `mount -t fuse.tarmount URL MNT -o OPTIONS`, with
// tarmount on the helper's PATH (a link in /usr/local/sbin, made for the
// test). mount must return only once the mount answers, with the server
// in the background and every flag given as an option; umount ends the
// server. An unknown option fails the mount with the reason.
func TestMountHelper(t *testing.T) {
	needFUSE(t)
	if _, err := os.Stat("/sbin/mount.fuse3"); err != nil {
		testutil.Missing(t, "fuse3's mount helper is not installed")
	}
	const link = "/usr/local/sbin/tarmount"
	if target, err := os.Readlink(link); err == nil {
		if !strings.HasPrefix(target, os.TempDir()) {
			t.Skipf("%s is an installed tarmount (%s): not replacing it", link, target)
		}
		os.Remove(link) // a link left by an earlier run of this test
	} else if _, err := os.Lstat(link); err == nil {
		t.Skipf("%s exists: not replacing it", link)
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(binary, link); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(link) })

	f := newFixture(t, corpus.TreeOptions{NoBigFiles: true}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	mnt, mat, logFile := filepath.Join(f.work, "mnt"), filepath.Join(f.work, "mat"), filepath.Join(f.work, "server.log")
	os.Mkdir(mnt, 0o755)
	t.Cleanup(func() {
		if isMounted(mnt) {
			exec.Command("umount", "-l", mnt).Run()
		}
	})
	opts := strings.Join([]string{"ro", "allow_other", "nofail", "mount_name=" + testMountName,
		"cache_dir=" + filepath.Join(f.work, "cache"), "materialize=" + mat, "log-file=" + logFile, "span=65536"}, ",")
	out, err := exec.Command("mount", "-t", "fuse.tarmount", f.url, mnt, "-o", opts).CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(logFile)
		t.Fatalf("mount: %v\n%s\nserver log:\n%s", err, out, log)
	}
	if !isMounted(mnt) {
		t.Fatalf("mount returned (%s) but %s is not mounted", out, mnt)
	}
	mounts, _ := os.ReadFile("/proc/mounts")
	var line string
	for _, l := range strings.Split(string(mounts), "\n") {
		if fields := strings.Fields(l); len(fields) > 3 && fields[1] == mnt {
			line = l
		}
	}
	if want := "fuse." + testMountName; !strings.Contains(line, want) || !strings.Contains(line, "allow_other") || !strings.Contains(line, " ro,") {
		t.Errorf("/proc/mounts: got %q, want type %s, ro and allow_other", line, want)
	}
	ref := f.extracted(t)
	treecmp.Compare(t, ref, mnt, treecmp.Options{MaxErrors: 20})
	pid := serverPID(t, out)
	// materialize=DIR reached the server: its log says so.
	deadline := time.Now().Add(time.Minute)
	for {
		log, _ := os.ReadFile(logFile)
		if strings.Contains(string(log), "msg=materialized") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("materialize= given as a mount option: no materialized line in a minute:\n%s", log)
		}
		time.Sleep(20 * time.Millisecond)
	}
	treecmp.Compare(t, ref, mat, treecmp.Options{MaxErrors: 20})

	if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v\n%s", err, out)
	}
	waitExit(t, pid)

	out, err = exec.Command("mount", "-t", "fuse.tarmount", f.url, mnt, "-o", "ro,no_such_option=1").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "no_such_option") {
		t.Errorf("mount with an unknown option: got %v, %q; want a failure naming the option", err, out)
	}
	if isMounted(mnt) {
		t.Errorf("%s mounted after a failed mount", mnt)
	}
}

// extracted returns the fixture's archive as GNU tar extracts it.
func (f *fixture) extracted(t *testing.T) string {
	t.Helper()
	ref := filepath.Join(f.work, "ref")
	if err := os.Mkdir(ref, 0o755); err != nil {
		t.Fatal(err)
	}
	tarbuild.Extract(t, f.archive, ref)
	return ref
}

// serverPID returns the pid of the background server that a --daemon
// parent names in its output; the test's cleanup kills it.
func serverPID(t *testing.T, out []byte) int {
	t.Helper()
	m := regexp.MustCompile(`server pid (\d+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("output %q names no server pid", out)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	return pid
}

// waitExit waits up to 30 s for process pid to exit after an unmount.
func waitExit(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for syscall.Kill(pid, 0) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("server %d still running 30 s after the unmount", pid)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
