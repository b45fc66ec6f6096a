package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

// Scenario 10's remount: a mount without an index is unmounted once its
// first pass has read 85% of the archive (a reader had what it needed, or
// the machine shut down), and the archive is mounted again with the same
// cache and no disk cache of blocks: the second pass resumes from the
// partial index the first kept. Measured from the second start: when its
// pass ends, and what the origin sent.
const (
	bootRemount      = "g. remount after an unmount at 85% of the pass: pass done"
	bootRemountBytes = "h. remount after an unmount at 85% of the pass: bytes from the origin"
	remountAt        = 85  // percent of the first pass read before the unmount
	remountBytesMax  = 0.2 // the remount's origin bytes over the archive
	remountPoll      = 20 * time.Millisecond
)

// bootRemount runs the remount of scenario 10 once for tool, a build's
// toolBootBare.
func (s *suite) bootRemount(ctx context.Context, cb *combo, bs *bootServe, run int, tool string) error {
	cache := filepath.Join(s.work, "remount-cache")
	os.RemoveAll(cache)
	defer os.RemoveAll(cache)
	mnt := s.mountpoint(toolTM)
	bin := s.buildOf(tool).bin
	rs := []Result{s.result(cb, bootSc(bootRemount), tool, run), s.result(cb, bootSc(bootRemountBytes), tool, run)}
	fail := func(format string, args ...any) error {
		for _, r := range rs {
			s.fail(r, format, args...)
		}
		return nil
	}
	mcb := *cb
	mcb.url = bs.bare
	p, err := s.startMount(&mcb, s.buildOf(tool).tool(toolTM), mnt, cache, s.logPath(cb, tool+"-remount1", run))
	if err != nil {
		return err
	}
	at, err := passPercent(ctx, bin, mnt, p, remountAt)
	stopMount(p, mnt)
	if err != nil {
		return fail("first mount: %v", err)
	}
	if at >= 100 {
		return fail("the first pass ended before it could be stopped at %d%%", remountAt)
	}
	c0 := cb.srv.counters()
	t0 := time.Now()
	p, err = s.startMount(&mcb, s.buildOf(tool).tool(toolTM), mnt, cache, s.logPath(cb, tool+"-remount2", run))
	if err != nil {
		return err
	}
	defer stopMount(p, mnt)
	done, err := waitLog(ctx, p, "msg=indexed", s.c.stepTimeout)
	c1 := cb.srv.counters()
	if err != nil {
		return fail("remount: %v", err)
	}
	if n, err := countFiles(mnt); err != nil || n != cb.d.facts.Files {
		return fail("remount: %d files (%v), want %d", n, err, cb.d.facts.Files)
	}
	rs[0].Status, rs[0].Seconds = statusOK, done.Sub(t0).Seconds()
	measured(&rs[1], c0, c1)
	rs[1].Status, rs[1].Seconds = statusOK, rs[0].Seconds
	if st, err := os.Stat(filepath.Join(cb.d.dir, cb.d.object(cb.codec))); err == nil {
		rs[1].Least = st.Size() // the archive alone
	}
	for _, r := range rs {
		s.record(r)
	}
	return nil
}

// passPercent waits until the first pass of the mount at mnt, served by
// p, has read pct% of the archive (tarmount status), and returns how far
// it was: 100 when it had ended.
func passPercent(ctx context.Context, bin, mnt string, p *proc, pct float64) (float64, error) {
	deadline := time.Now().Add(5 * time.Minute)
	for {
		var st struct {
			Index struct {
				Pass *struct {
					Percent float64 `json:"percent"`
					Running bool    `json:"running"`
				} `json:"pass"`
			} `json:"index"`
		}
		out, err := exec.CommandContext(ctx, bin, "status", mnt, "--json").Output()
		if err == nil && json.Unmarshal(out, &st) == nil && st.Index.Pass != nil {
			switch {
			case !st.Index.Pass.Running:
				return 100, nil
			case st.Index.Pass.Percent >= pct:
				return st.Index.Pass.Percent, nil
			}
		}
		if p.exited() {
			return 0, fmt.Errorf("exited: %s", p.lastLine())
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("the pass did not reach %g%% in 5 minutes", pct)
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(remountPoll):
		}
	}
}
