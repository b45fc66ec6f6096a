package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Scenario 8, the progressive mount: how soon files are usable when a
// machine starts from a remote tarball with no index yet. From the start
// of each tool, the time until the first byte of the files at 10%, 50% and
// 90% of the tar stream can be read, `go version` runs from the tree (the
// go dataset), all of these, and (tarmount) the index pass ends; for a
// mount that serves while it indexes, one that is ready only after its
// pass (--wait-index), and curl | tar -x, whose files appear as tar writes
// them. The probes start with the tool and retry every 20 ms, as services
// started at boot would.

// Tool names of scenario 8.
const (
	toolTMWait = "tarmount --wait-index"
)

// probeEvery is how often a probe retries: faster polling costs the tools
// that make files appear late CPU.
const probeEvery = 20 * time.Millisecond

// progressSc names a measurement of scenario 8; the letters order the
// report's tables.
func progressSc(what string) string {
	letter := map[string]string{"go version": "d", "all of them": "e", "index pass ended": "f"}[what]
	if letter == "" {
		letter = map[string]string{"10": "a", "50": "b", "90": "c"}[strings.TrimSuffix(strings.TrimPrefix(what, "file at "), "%")]
	}
	return scProgress + ": " + letter + ". " + what
}

// progressiveOne is one run of scenario 8 for one tool.
func (s *suite) progressiveOne(ctx context.Context, cb *combo, run int, tool string) error {
	f := cb.d.facts
	var labels []string
	var paths []string
	for i, m := range f.Along {
		labels = append(labels, fmt.Sprintf("file at %d%%", alongPercents[i]))
		paths = append(paths, m.Path)
	}
	if cb.d.kind == "go" {
		labels = append(labels, "go version")
	}
	base, _ := splitTool(tool)
	var root, mnt string
	var p *proc
	var err error
	cache := filepath.Join(s.work, "cold-cache")
	os.RemoveAll(cache)
	defer os.RemoveAll(cache)
	t0 := time.Now()
	switch base {
	case toolTM, toolTMWait:
		mnt = s.mountpoint(toolTM)
		var extra []string
		if base == toolTMWait {
			extra = []string{"--wait-index"}
		}
		p, err = s.startMount(cb, s.buildOf(tool).tool(toolTM), mnt, cache, s.logPath(cb, tool+"-progressive", run), extra...)
		root = mnt
	default:
		root = filepath.Join(s.work, "progressive-tree")
		os.RemoveAll(root)
		defer os.RemoveAll(root)
		if err := os.MkdirAll(root, 0o755); err != nil {
			return err
		}
		argv, _ := s.peerCmd(cb.codec, curlTar(cb.codec), cb.url, root, "")
		p, err = startProc(argv, s.env, s.logPath(cb, "curl-tar-progressive", run))
	}
	if err != nil {
		return err
	}
	stop := func() {
		if mnt != "" {
			stopMount(p, mnt)
		} else {
			p.stop(15 * time.Second)
		}
	}
	defer stop()

	// The probes, and the end of the index pass, all at once.
	pctx, cancel := context.WithTimeout(ctx, s.c.stepTimeout)
	defer cancel()
	var ms []milestone
	for i, l := range labels {
		if i < len(paths) {
			ms = append(ms, probing(l, firstByte(filepath.Join(root, paths[i]))))
		} else {
			ms = append(ms, probing(l, goVersion(s.env, "", filepath.Join(root, cb.d.top))))
		}
	}
	if mnt != "" {
		ms = append(ms, milestone{"index pass ended", func(ctx context.Context) (time.Time, error) {
			return waitLog(ctx, p, "msg=indexed", s.c.stepTimeout)
		}})
	}
	at, errs := await(pctx, t0, s.c.stepTimeout, ms)
	done, passEnd := at[:len(labels)], time.Duration(0)
	var passErr error
	if mnt != "" {
		passEnd, passErr = at[len(labels)], errs[len(labels)]
	}
	if mnt == "" {
		// tar may still be writing the files whose first byte was seen.
		select {
		case <-p.done:
		case <-pctx.Done():
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	all := time.Duration(0)
	var bad []string
	if mnt == "" && p.exited() && p.err != nil {
		bad = append(bad, fmt.Sprintf("%v: %s", p.err, p.lastLine()))
	}
	for i, e := range errs[:len(labels)] {
		if e != nil {
			bad = append(bad, e.Error())
		}
		all = max(all, done[i])
	}
	// Every probe read a first byte; the files must also be whole.
	for _, m := range f.Along {
		if err := checkMember(filepath.Join(root, m.Path), m); err != nil {
			bad = append(bad, "content check: "+err.Error())
		}
	}
	for i, l := range labels {
		r := s.result(cb, progressSc(l), tool, run)
		if len(bad) > 0 {
			s.fail(r, "%s", strings.Join(bad, "; "))
			continue
		}
		r.Status, r.Seconds = statusOK, done[i].Seconds()
		s.record(r)
	}
	if len(labels) > 0 {
		r := s.result(cb, progressSc("all of them"), tool, run)
		if len(bad) > 0 {
			s.fail(r, "%s", strings.Join(bad, "; "))
		} else {
			r.Status, r.Seconds = statusOK, all.Seconds()
			s.record(r)
		}
	}
	if mnt != "" {
		r := s.result(cb, progressSc("index pass ended"), tool, run)
		if passErr != nil {
			s.fail(r, "%v", passErr)
		} else {
			r.Status, r.Seconds = statusOK, passEnd.Seconds()
			s.record(r)
		}
	}
	return nil
}

// milestone is a moment that a scenario times from the start of a tool:
// wait blocks until it comes and returns when, or fails.
type milestone struct {
	label string
	wait  func(ctx context.Context) (time.Time, error)
}

// probing is the milestone at which probe first succeeds, retried every
// probeEvery from the start, as services started at boot would.
func probing(label string, probe func(ctx context.Context) error) milestone {
	return milestone{label, func(ctx context.Context) (time.Time, error) {
		for {
			if probe(ctx) == nil {
				return time.Now(), nil
			}
			select {
			case <-ctx.Done():
				return time.Time{}, errors.New("not usable")
			case <-time.After(probeEvery):
			}
		}
	}}
}

// errGaveUp is the failure of the milestones that await stopped waiting
// for because another one failed.
var errGaveUp = errors.New("not waited for after another failed")

// await waits for every milestone at once, for at most timeout; it
// returns the time from t0 to each, and why each failed. Once one fails
// (the tool exited, say), it waits for no other.
func await(ctx context.Context, t0 time.Time, timeout time.Duration, ms []milestone) ([]time.Duration, []error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ctx, giveUp := context.WithCancelCause(ctx)
	defer giveUp(nil)
	at := make([]time.Duration, len(ms))
	errs := make([]error, len(ms))
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() {
			t, err := m.wait(ctx)
			if err == nil {
				at[i] = t.Sub(t0)
				return
			}
			switch cause := context.Cause(ctx); {
			case errors.Is(cause, errGaveUp):
				errs[i] = fmt.Errorf("%s: %w", m.label, errGaveUp)
			case cause != nil:
				errs[i] = fmt.Errorf("%s: %v within %s", m.label, err, timeout)
			default:
				errs[i] = fmt.Errorf("%s: %w", m.label, err)
				giveUp(errGaveUp)
			}
		})
	}
	wg.Wait()
	return at, errs
}

// firstByte is a probe that opens path and reads one byte of it.
func firstByte(path string) func(context.Context) error {
	return func(context.Context) error { return readFirstByte(path) }
}

// goVersion is a probe that runs `go version` of the toolchain at goroot
// with env in dir.
func goVersion(env []string, dir, goroot string) func(context.Context) error {
	return func(ctx context.Context) error {
		out, err := runCmd(ctx, time.Minute, env, dir, viaShell(filepath.Join(goroot, "bin", "go"), "version")...)
		if err == nil && !strings.HasPrefix(out, "go version go") {
			err = fmt.Errorf("go version printed %q", lastLine(out))
		}
		return err
	}
}

// readFirstByte opens path and reads one byte of it.
func readFirstByte(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	var b [1]byte
	_, err = f.Read(b[:])
	return err
}
