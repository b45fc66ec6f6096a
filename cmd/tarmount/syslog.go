package main

import (
	"bytes"
	"io"
	"log/syslog"
	"os"
	"strings"
)

// A server in the background (--daemon, mount(8) and fstab through the
// mount helper) has no terminal: without --log-file it logs to syslog, as
// mountpoint-s3 does (under systemd, the journal, which listens on
// /dev/log), so that a pass that fails after the mount answered, or a
// server that stops, says why somewhere. $TARMOUNT_SYSLOG names another
// syslog socket (a unix datagram socket path).

const syslogEnv = "TARMOUNT_SYSLOG"

// dialSyslog connects to the syslog socket, tagged tarmount.
func dialSyslog() (*syslog.Writer, error) {
	if addr := os.Getenv(syslogEnv); addr != "" {
		return syslog.Dial("unixgram", addr, syslog.LOG_DAEMON|syslog.LOG_INFO, "tarmount")
	}
	return syslog.New(syslog.LOG_DAEMON|syslog.LOG_INFO, "tarmount")
}

// syslogLines writes each log line (one slog text record per Write) as
// one syslog message, at the priority of the record's level: the
// level=... field that the text handler writes second, after time, so a
// value that quotes "level=ERROR" later on the line does not count.
type syslogLines struct{ w *syslog.Writer }

func (s syslogLines) Write(p []byte) (int, error) {
	line := string(bytes.TrimRight(p, "\n"))
	level := ""
	if _, rest, ok := strings.Cut(line, " level="); ok {
		level, _, _ = strings.Cut(rest, " ")
	}
	var err error
	switch level {
	case "ERROR":
		err = s.w.Err(line)
	case "WARN":
		err = s.w.Warning(line)
	case "DEBUG":
		err = s.w.Debug(line)
	default:
		err = s.w.Info(line)
	}
	if err != nil {
		return 0, err
	}
	return len(p), nil
}

// serverLog is where this process logs: stderr, except for the server of
// a --daemon mount without --log-file, which logs to syslog when it can
// reach it.
func serverLog(stderr io.Writer, c *config) io.Writer {
	if os.Getenv(readyFDEnv) == "" || c.logFile != "" {
		return stderr
	}
	w, err := dialSyslog()
	if err != nil {
		return stderr // discarded by daemonize; it said where to look
	}
	return syslogLines{w}
}
