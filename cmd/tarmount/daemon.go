package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Readiness: a mount tells whoever started it when it answers, or why it
// failed. Two listeners, both optional:
//
//   - systemd (Type=notify): datagrams to $NOTIFY_SOCKET, READY=1 once
//     the mount answers, STATUS= lines (materialization progress),
//     STOPPING=1 on the way out (sd_notify(3));
//   - the parent of --daemon: a pipe whose descriptor is in
//     $TARMOUNT_READY_FD; the server writes "ok\n" once ready, or the
//     error that stopped it, and closes it.
//
//	tarmount --daemon URL MNT            tarmount URL MNT (child, new session)
//	  |  pipe r  <---------------------  pipe w (fd 3): "ok\n" | "error text"
//	  |  exit 0 on "ok", else print the text and exit 1

const readyFDEnv = "TARMOUNT_READY_FD"

// readiness reports to the listeners found in the environment. Its
// methods are safe to call on nil and from several goroutines.
type readiness struct {
	mu     sync.Mutex
	notify *net.UnixConn // nil without $NOTIFY_SOCKET
	pipe   *os.File      // nil unless started by --daemon; nil once told
}

// openReadiness finds the listeners and removes their variables from the
// environment, so that programs started later do not report for us.
func openReadiness() *readiness {
	r := &readiness{}
	if addr := os.Getenv("NOTIFY_SOCKET"); addr != "" {
		os.Unsetenv("NOTIFY_SOCKET")
		if addr[0] == '@' {
			addr = "\x00" + addr[1:] // abstract namespace
		}
		if c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"}); err == nil {
			r.notify = c
		}
	}
	if s := os.Getenv(readyFDEnv); s != "" {
		os.Unsetenv(readyFDEnv)
		if fd, err := strconv.Atoi(s); err == nil && fd > 2 {
			r.pipe = os.NewFile(uintptr(fd), "ready")
		}
	}
	return r
}

// sendLocked sends one datagram to systemd; the caller holds r.mu.
func (r *readiness) sendLocked(state string) {
	if r.notify != nil {
		r.notify.Write([]byte(state))
	}
}

func (r *readiness) send(state string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sendLocked(state)
}

// tellParentLocked writes msg to a --daemon parent and closes the pipe,
// once; the caller holds r.mu.
func (r *readiness) tellParentLocked(msg string) {
	if r.pipe != nil {
		r.pipe.WriteString(msg)
		r.pipe.Close()
		r.pipe = nil
	}
}

// ready says the mount answers.
func (r *readiness) ready(status string) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sendLocked("READY=1\nSTATUS=" + status)
	r.tellParentLocked("ok\n")
}

// status reports progress (systemd shows it in systemctl status).
func (r *readiness) status(s string) { r.send("STATUS=" + s) }

// stopping says the server is on its way out.
func (r *readiness) stopping() { r.send("STOPPING=1") }

// failed passes err to a --daemon parent still waiting, and says it to
// systemd.
func (r *readiness) failed(err error) {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sendLocked("STATUS=failed: " + err.Error())
	r.tellParentLocked(err.Error())
}

// close releases the listeners; a --daemon parent not yet told learns
// that the server is gone.
func (r *readiness) close() {
	if r == nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.notify != nil {
		r.notify.Close()
		r.notify = nil
	}
	if r.pipe != nil {
		r.pipe.Close()
		r.pipe = nil
	}
}

// daemonize starts this program again with the same arguments as the
// server of the mount, in a new session with its output in logFile (or
// discarded), and returns once the mount answers, with the server's pid
// on stdout, or with the error that stopped it.
func daemonize(args []string, logFile string, stdout, stderr io.Writer) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	out, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if logFile != "" {
		out, err = os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	}
	if err != nil {
		return fmt.Errorf("daemon: log file: %w", err)
	}
	defer out.Close()
	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("daemon: %w", err)
	}
	defer pr.Close()
	cmd := exec.Command(exe, args...)
	cmd.Env = append(os.Environ(), readyFDEnv+"=3")
	cmd.ExtraFiles = []*os.File{pw}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		pw.Close()
		return fmt.Errorf("daemon: %w", err)
	}
	pw.Close()
	msg, _ := io.ReadAll(pr) // ends when the server closes its end or dies
	if string(msg) == "ok\n" {
		where := logFile
		if where == "" {
			where = logWhere()
		}
		// The pid on stdout, for PID=$(tarmount ... --daemon).
		fmt.Fprintf(stdout, "%d\n", cmd.Process.Pid)
		fmt.Fprintf(stderr, "tarmount: mounted (server pid %d; its log: %s)\n", cmd.Process.Pid, where)
		cmd.Process.Release()
		return nil
	}
	werr := cmd.Wait()
	if len(msg) > 0 {
		return errors.New(strings.TrimSpace(string(msg)))
	}
	if logFile != "" {
		return fmt.Errorf("the server exited before the mount was ready (%v); see %s", werr, logFile)
	}
	return fmt.Errorf("the server exited before the mount was ready (%v); %s", werr, logWhere())
}

// logWhere says where the server of a --daemon mount without --log-file
// logs: syslog when this machine has one, else nowhere.
func logWhere() string {
	w, err := dialSyslog()
	if err != nil {
		return "no syslog here (" + err.Error() + "): --log-file FILE keeps its log"
	}
	w.Close()
	return "syslog (journalctl -t tarmount under systemd)"
}
