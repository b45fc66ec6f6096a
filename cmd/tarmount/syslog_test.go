package main

import (
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSyslogLevels sends log lines through syslogLines to a syslog
// socket of the test's own: each at the priority of its level field, not
// of a value on the line that quotes another level.
func TestSyslogLevels(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "log")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	t.Setenv(syslogEnv, sock)
	w, err := dialSyslog()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	log := slog.New(slog.NewTextHandler(syslogLines{w}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	log.Error("pass failed", "err", "x")
	log.Warn("retry")
	log.Info("ready", "note", "says level=ERROR inside")
	log.Debug("read")
	buf := make([]byte, 4096)
	// LOG_DAEMON is facility 3: priority 24 + severity.
	for _, want := range []string{"<27>", "<28>", "<30>", "<31>"} {
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := conn.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		if got := string(buf[:n]); !strings.HasPrefix(got, want) || !strings.Contains(got, "tarmount") {
			t.Errorf("got %q, want a message from tarmount with priority %s", got, want)
		}
	}
}
