package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/internal/xattr"
)

// Every process the suite starts runs in its own process group (so a
// Ctrl-C on the terminal reaches only the suite, which then stops them), is
// stopped by its own PID or group id, and every mountpoint it uses is
// detached at the end.

// procs tracks the long-lived processes (mounts) and the mountpoints.
type procs struct {
	mu     sync.Mutex
	live   map[int]*proc
	mounts map[string]bool
}

var registry = &procs{live: map[int]*proc{}, mounts: map[string]bool{}}

// proc is a started background process.
type proc struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when it has exited
	err  error         // its exit, once done is closed
}

// startProc starts argv in the background with its output in logPath.
func startProc(argv []string, env []string, logPath string) (*proc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	p := &proc{cmd: cmd, log: logPath, done: make(chan struct{})}
	registry.mu.Lock()
	registry.live[cmd.Process.Pid] = p
	registry.mu.Unlock()
	go func() {
		p.err = cmd.Wait()
		lf.Close()
		close(p.done)
	}()
	return p, nil
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process group, then SIGKILL after grace.
func (p *proc) stop(grace time.Duration) { p.terminate(grace, nil) }

// stopMount stops a mount process (tarmount and ratarmount unmount on
// SIGTERM); if it lingers, the mount is detached before SIGKILL. mnt is
// never left mounted.
func stopMount(p *proc, mnt string) {
	defer detach(mnt)
	p.terminate(15*time.Second, func() {
		warnf("mount process %d did not exit 15 s after SIGTERM; detaching %s", p.pid(), mnt)
		detach(mnt)
	})
}

// terminate sends SIGTERM to the process group and waits grace for it to
// exit; then it calls lingering (if set) and waits 5 s more, then sends
// SIGKILL. The process leaves the registry either way.
func (p *proc) terminate(grace time.Duration, lingering func()) {
	defer func() {
		registry.mu.Lock()
		delete(registry.live, p.pid())
		registry.mu.Unlock()
	}()
	if p.exited() {
		return
	}
	wait := func(d time.Duration) bool {
		select {
		case <-p.done:
			return true
		case <-time.After(d):
			return false
		}
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	if wait(grace) {
		return
	}
	if lingering != nil {
		lingering()
		if wait(5 * time.Second) {
			return
		}
	}
	warnf("process %d (%s) did not exit after SIGTERM; killing it", p.pid(), p.cmd.Path)
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	if !wait(5 * time.Second) {
		warnf("process %d survived SIGKILL", p.pid())
	}
}

// lastLine returns the last non-empty line of the process's log.
func (p *proc) lastLine() string {
	b, _ := os.ReadFile(p.log)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// vmHWM returns the peak resident set size of pid in bytes (0 if unknown).
func vmHWM(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// isMounted reports whether dir is a mountpoint in /proc/mounts.
func isMounted(dir string) bool {
	b, err := os.ReadFile("/proc/mounts")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && f[1] == dir {
			return true
		}
	}
	return false
}

// detach lazily unmounts dir if it is mounted.
func detach(dir string) {
	if !isMounted(dir) {
		return
	}
	if exec.Command("fusermount3", "-u", "-z", dir).Run() == nil {
		return
	}
	if exec.Command("umount", "-l", dir).Run() != nil {
		warnf("could not unmount %s", dir)
	}
}

// useMountpoint makes dir and remembers it for the final cleanup.
func useMountpoint(dir string) error {
	if isMounted(dir) {
		return fmt.Errorf("%s is already mounted", dir)
	}
	registry.mu.Lock()
	registry.mounts[dir] = true
	registry.mu.Unlock()
	return os.MkdirAll(dir, 0o755)
}

// cleanupAll stops every live process and detaches every mountpoint.
func cleanupAll() {
	registry.mu.Lock()
	var ps []*proc
	for _, p := range registry.live {
		ps = append(ps, p)
	}
	var ms []string
	for m := range registry.mounts {
		ms = append(ms, m)
	}
	registry.mu.Unlock()
	for _, p := range ps {
		p.stop(15 * time.Second)
	}
	for _, m := range ms {
		detach(m)
	}
}

// waitPath polls stat(path) every 2 ms until it answers, p exits, ctx is
// done or the timeout passes; it returns the time it answered. A mount at
// mnt that stays up 10 s without path fails at once (a tool that mounted
// the archive as something else).
func waitPath(ctx context.Context, p *proc, mnt, path string, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	var mountedAt time.Time
	for i := 0; ; i++ {
		if _, err := os.Stat(path); err == nil {
			return time.Now(), nil
		}
		if p != nil && p.exited() {
			return time.Time{}, fmt.Errorf("exited before %s answered: %s", path, p.lastLine())
		}
		if i%50 == 0 && mountedAt.IsZero() && isMounted(mnt) {
			mountedAt = time.Now()
		}
		if !mountedAt.IsZero() && time.Since(mountedAt) > 10*time.Second {
			return time.Time{}, fmt.Errorf("mounted, but %s is missing", path)
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s did not answer within %s", path, timeout)
		}
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// waitLog polls p's log every 10 ms until a line holds needle; it returns
// the time it saw it.
func waitLog(ctx context.Context, p *proc, needle string, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	nb := []byte(needle)
	for {
		if b, err := os.ReadFile(p.log); err == nil && bytes.Contains(b, nb) {
			return time.Now(), nil
		}
		if p.exited() {
			return time.Time{}, fmt.Errorf("exited before logging %s: %s", needle, p.lastLine())
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("no %s in the log within %s", needle, timeout)
		}
		if err := ctx.Err(); err != nil {
			return time.Time{}, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitExit waits for p to exit; it returns when, or why it failed.
func waitExit(ctx context.Context, p *proc) (time.Time, error) {
	select {
	case <-p.done:
		if p.err != nil {
			return time.Time{}, fmt.Errorf("%v: %s", p.err, p.lastLine())
		}
		return time.Now(), nil
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
}

// waitComplete polls every 2 ms the marker that tarmount writes beside a
// DIR it materializes (.DIR.tarmount, JSON whose "complete" becomes true,
// by a rename, once DIR is whole); it returns the time it saw DIR complete.
func waitComplete(ctx context.Context, p *proc, dir string) (time.Time, error) {
	// The state tarmount keeps on DIR (materialize's state.go), or where
	// the filesystem has no user xattrs, beside it.
	legacy := filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".tarmount")
	buf := make([]byte, 4096)
	for {
		var m struct {
			Complete bool `json:"complete"`
		}
		b, err := []byte(nil), error(nil)
		if n, xerr := unix.Lgetxattr(dir, xattr.State, buf); xerr == nil {
			b = buf[:n]
		} else {
			b, err = os.ReadFile(legacy)
		}
		if err == nil && json.Unmarshal(b, &m) == nil && m.Complete {
			return time.Now(), nil
		}
		if p.exited() {
			return time.Time{}, fmt.Errorf("exited before %s was complete: %s", dir, p.lastLine())
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// viaShell returns argv run by sh, which execs it. A program that lies in
// a mount must never be started straight from this process: the mount
// reads it from the origin server that this process runs, but Go starts
// a program with vfork, and the thread that waits in vfork until the
// program is loaded holds up the garbage collector's stop-the-world, and
// with it the whole process, server included. The load then waits until
// the mount's read gives up (--read-timeout, 2 minutes by default) and
// fails with EIO. sh lies on local disk: its own exec of argv may wait
// for the mount without stopping this process.
func viaShell(argv ...string) []string {
	return append([]string{"/bin/sh", "-c", `exec "$0" "$@"`}, argv...)
}

// runCmd runs argv to completion in its own process group, killed with
// its group when ctx is done or the timeout passes; it returns the
// combined output (the last 4 KiB) and the error.
func runCmd(ctx context.Context, timeout time.Duration, env []string, dir string, argv ...string) (string, error) {
	out, _, err := runCmdCPU(ctx, timeout, env, dir, argv...)
	return out, err
}

// runCmdCPU is runCmd that also returns the CPU time (user and system)
// of the process and of the children it waited for, such as the tools of
// a shell pipeline: the rusage that wait4 reports.
func runCmdCPU(ctx context.Context, timeout time.Duration, env []string, dir string, argv ...string) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = env
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out tailBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("timed out after %s", timeout)
	}
	var cpu time.Duration
	if ps := cmd.ProcessState; ps != nil {
		cpu = ps.UserTime() + ps.SystemTime()
	}
	return out.String(), cpu, err
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
