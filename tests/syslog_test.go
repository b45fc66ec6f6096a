package tests

import (
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestDaemonLogsToSyslog mounts a truncated .tar.gz with --daemon and no
// --log-file: the mount answers (the pass has read the first members), so
// the command returns 0 and says where the server logs; the pass then
// fails, and the reason reaches syslog (a socket of the test's own,
// named by $TARMOUNT_SYSLOG) as an error from tarmount, instead of being
// thrown away.
func TestDaemonLogsToSyslog(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "full.tar.gz")
	data, err := os.ReadFile(f.archive)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(filepath.Dir(f.archive), "cut.tar.gz")
	if err := os.WriteFile(cut, data[:len(data)*2/3], 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "log")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	mnt := filepath.Join(f.work, "mnt")
	os.Mkdir(mnt, 0o755)
	t.Cleanup(func() {
		if isMounted(mnt) {
			exec.Command("umount", "-l", mnt).Run()
		}
	})
	cmd := exec.Command(binary, f.base+"/cut.tar.gz", mnt, "--daemon", "--mount-name", testMountName,
		"--cache-dir", filepath.Join(f.work, "cache"))
	cmd.Env = append(os.Environ(), "TARMOUNT_SYSLOG="+sock)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("--daemon of a truncated archive: %v\n%s\nwant it mounted, the pass failing later", err, out)
	}
	if !strings.Contains(string(out), "its log: syslog") {
		t.Errorf("--daemon output %q does not say the server logs to syslog", out)
	}
	// Read the server's messages until the failure, or give up.
	deadline := time.Now().Add(time.Minute)
	var got []string
	buf := make([]byte, 64<<10)
	for time.Now().Before(deadline) {
		conn.SetReadDeadline(deadline)
		n, err := conn.Read(buf)
		if err != nil {
			break
		}
		msg := string(buf[:n])
		got = append(got, msg)
		// <27> is LOG_DAEMON|LOG_ERR.
		if strings.HasPrefix(msg, "<27>") && strings.Contains(msg, "tarmount") && strings.Contains(msg, "index pass failed") {
			return
		}
	}
	t.Errorf("no error from tarmount about the failed pass reached syslog; got:\n%s", strings.Join(got, "\n"))
}
