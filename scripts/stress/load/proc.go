package load

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// server is a running `tarmount URL MNT` process.
type server struct {
	bin     string
	mnt     string
	logPath string
	cmd     *exec.Cmd
	metrics string // http://HOST:PORT/metrics
	exited  chan struct{}
	err     error // set when exited is closed
	client  *http.Client
}

var metricsAddrRE = regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)

// startServer runs bin with args, logging to logPath, and waits until the
// mount answers (its "msg=ready" line).
func startServer(ctx context.Context, bin, mnt, logPath string, args []string) (*server, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s := &server{bin: bin, mnt: mnt, logPath: logPath, exited: make(chan struct{}),
		client: &http.Client{Timeout: 10 * time.Second}}
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	// Its own process group keeps a terminal's Ctrl-C for this process,
	// which ends the phase in order; if this process dies, the server
	// gets SIGTERM, unmounts and exits.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	if err := s.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.exited)
	}()
	deadline := time.After(5 * time.Minute)
	for {
		log, _ := os.ReadFile(logPath)
		if bytes.Contains(log, []byte("msg=ready")) {
			if m := metricsAddrRE.FindSubmatch(log); m != nil {
				s.metrics = "http://" + string(m[1]) + "/metrics"
			}
			return s, nil
		}
		select {
		case <-s.exited:
			return nil, fmt.Errorf("tarmount exited before the mount was ready: %v\n%s", s.err, tail(log))
		case <-ctx.Done():
			s.stop(30 * time.Second)
			return nil, ctx.Err()
		case <-deadline:
			s.stop(30 * time.Second)
			return nil, fmt.Errorf("mount not ready after 5 minutes:\n%s", tail(log))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *server) pid() int { return s.cmd.Process.Pid }

func (s *server) alive() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// sample reads the server's descriptors, memory and goroutines.
func (s *server) sample() Sample {
	sm := Sample{FDs: -1, Goroutines: -1, Heap: -1}
	if kinds, err := fdKinds(s.pid()); err == nil {
		sm.FDs, sm.Sockets, sm.Pipes = 0, kinds["socket"], kinds["pipe"]
		for _, n := range kinds {
			sm.FDs += n
		}
	}
	sm.RSS, sm.HWM = memory(s.pid())
	m := s.metricsNamed("go_goroutines", "go_memstats_heap_inuse_bytes")
	if v, ok := m["go_goroutines"]; ok {
		sm.Goroutines = int(v)
	}
	if v, ok := m["go_memstats_heap_inuse_bytes"]; ok {
		sm.Heap = int64(v)
	}
	return sm
}

// fdKinds counts the open descriptors of pid by kind: "socket", "pipe",
// "anon_inode:[eventpoll]", "/dev/fuse", and "path" for files and
// directories.
func fdKinds(pid int) (map[string]int, error) {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	kinds := map[string]int{}
	for _, de := range des {
		target, err := os.Readlink(dir + "/" + de.Name())
		if err != nil {
			continue // closed meanwhile
		}
		switch {
		case strings.HasPrefix(target, "socket:"):
			target = "socket"
		case strings.HasPrefix(target, "pipe:"):
			target = "pipe"
		case strings.HasPrefix(target, "/dev/"), strings.HasPrefix(target, "anon_inode:"):
		default:
			target = "path"
		}
		kinds[target]++
	}
	return kinds, nil
}

// describeFDs says what pid holds open, for a leak's report.
func describeFDs(pid int) string {
	kinds, err := fdKinds(pid)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for k, n := range kinds {
		parts = append(parts, fmt.Sprintf("%s %d", k, n))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}

// memory returns VmRSS and VmHWM of pid in bytes (0 when unknown).
func memory(pid int) (rss, hwm int64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(val), " kB"), 10, 64)
		if err != nil {
			continue
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	return rss, hwm
}

// metric scrapes the server and returns the value of the unlabelled
// metric name.
func (s *server) metric(name string) (float64, bool) {
	vals := s.metricsNamed(name)
	v, ok := vals[name]
	return v, ok
}

// metricsNamed scrapes the server once and returns the values of the
// unlabelled metrics among names.
func (s *server) metricsNamed(names ...string) map[string]float64 {
	out := map[string]float64{}
	if s.metrics == "" {
		return out
	}
	resp, err := s.client.Get(s.metrics)
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		for _, n := range names {
			if rest, ok := strings.CutPrefix(line, n+" "); ok {
				if v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64); err == nil {
					out[n] = v
				}
			}
		}
	}
	return out
}

// dumpStacks asks the Go runtime of the server to write every goroutine's
// stack to its log (SIGQUIT, which also ends it), and waits for it to end.
func (s *server) dumpStacks() {
	if !s.alive() {
		return
	}
	s.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-s.exited:
	case <-time.After(30 * time.Second):
		s.cmd.Process.Kill()
		<-s.exited
	}
}

// stop sends SIGTERM and waits up to wait for the server to unmount and
// exit; then it kills it. A mount left behind (the server killed or dead)
// is cleared with `tarmount unmount`. It returns what went wrong.
func (s *server) stop(wait time.Duration) error {
	var errs []error
	if s.alive() {
		s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
			if s.err != nil {
				errs = append(errs, fmt.Errorf("tarmount exited with %v after SIGTERM", s.err))
			}
		case <-time.After(wait):
			errs = append(errs, fmt.Errorf("tarmount did not exit %v after SIGTERM; its goroutines are in its log", wait))
			s.dumpStacks()
		}
	}
	if isMounted(s.mnt) {
		if len(errs) == 0 && s.err == nil {
			errs = append(errs, fmt.Errorf("%s still mounted after tarmount exited", s.mnt))
		}
		if out, err := exec.Command(s.bin, "unmount", s.mnt).CombinedOutput(); err != nil {
			errs = append(errs, fmt.Errorf("tarmount unmount %s: %v: %s", s.mnt, err, bytes.TrimSpace(out)))
		}
	}
	return errors.Join(errs...)
}

// isMounted reports whether dir is a mountpoint (/proc/self/mountinfo; the
// paths used here need no unescaping).
func isMounted(dir string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && f[4] == dir {
			return true
		}
	}
	return false
}

// tail returns the last lines of a log, for error messages.
func tail(log []byte) string {
	lines := strings.Split(strings.TrimRight(string(log), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return strings.Join(lines, "\n")
}
