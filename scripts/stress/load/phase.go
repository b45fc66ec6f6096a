package load

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Leak rules. Under load the counts move with the requests in flight (a
// goroutine per FUSE request, a descriptor per file that materialization
// writes or passthrough serves), so growth is judged against the number of
// readers. At rest they must come back near where they started, but for
// two pools that keep what the load made them open: idle HTTP connections
// (tarmount keeps up to 64 per host until they time out) and go-fuse's
// splice pipes (a pair per read served at once, kept for reuse).
const (
	fdSlackLoad   = 32     // End.FDs <= Start.FDs + readers + this
	fdSlackRest   = 16     // at rest, descriptors but sockets and pipes: <= Idle + this
	socketsRest   = 64 + 8 // at rest, sockets: <= Idle.Sockets + this
	pipesRest     = 8      // at rest, pipes: <= Idle.Pipes + 2*readers + this
	goSlackLoad   = 64     // the fewest goroutines in the last third <= Start.Goroutines + 2*readers + this
	goSlackRest   = 64     // Rest.Goroutines <= Idle.Goroutines + this
	restSettle    = 20 * time.Second
	progressEvery = 10 * time.Second
)

// phaseRun is one phase: a mount, readers, a monitor.
type phaseRun struct {
	c     *Config
	files *fileSet
	name  string
	seed  uint64
	rep   Report
	start time.Time // when the readers started
	// What the server held open at the end of the load and at rest,
	// for the report of a leak.
	endFDs, restFDs string
	// endFloor is the fewest goroutines of any sample in the last third
	// of the load (-1: unknown).
	endFloor int
}

func (p *phaseRun) run(ctx context.Context) Report {
	c := p.c
	none := Sample{FDs: -1, Goroutines: -1, Heap: -1}
	p.rep = Report{Phase: p.name, Readers: c.Readers, Idle: none, Start: none, Mid: none, End: none, Rest: none}
	p.endFloor = -1
	if c.MemAllowance > 0 {
		p.rep.Budget = c.CacheMem + c.MemAllowance
	}
	mnt := filepath.Join(c.Work, "mnt-"+p.name)
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		p.rep.fail("mountpoint: %v", err)
		return p.rep
	}
	args := []string{c.URL, mnt, "--cache-dir", filepath.Join(c.Work, "cache"),
		"--cache-mem", strconv.FormatInt(c.CacheMem, 10), "--metrics-addr", "127.0.0.1:0"}
	if p.name == PhaseMaterialize {
		mat := filepath.Join(c.Work, "mat")
		os.RemoveAll(mat)
		os.Remove(filepath.Join(c.Work, ".mat.tarmount"))
		args = append(args, "--materialize", mat)
	}
	args = append(args, c.Args...)
	p.rep.Log = filepath.Join(c.Work, "tarmount-"+p.name+".log")
	fmt.Fprintf(c.Log, "%s: mounting (log %s)\n", p.name, p.rep.Log)
	srv, err := startServer(ctx, c.Binary, mnt, p.rep.Log, args)
	if err != nil {
		p.rep.fail("mount: %v", err)
		return p.rep
	}
	if srv.metrics == "" {
		p.rep.fail("no metrics address in the log: goroutines are not checked")
	}
	p.rep.Idle = srv.sample()
	p.load(ctx, srv)
	if srv.alive() && ctx.Err() == nil {
		p.settle(srv)
	}
	if srv.alive() {
		_, p.rep.PeakHWM = memory(srv.pid())
		m := srv.metricsNamed("tarmount_fetch_bytes_total", "tarmount_materialize_files_written_total", "tarmount_materialize_target_files")
		p.rep.Fetched = int64(m["tarmount_fetch_bytes_total"])
		p.rep.MatFiles, p.rep.MatTotal = int64(m["tarmount_materialize_files_written_total"]), int64(m["tarmount_materialize_target_files"])
	}
	if err := srv.stop(30 * time.Second); err != nil {
		p.rep.fail("stop: %v", err)
	}
	p.check()
	return p.rep
}

// load runs the readers for the phase's duration under the watchdog, and
// samples the server as it goes.
func (p *phaseRun) load(ctx context.Context, srv *server) {
	c := p.c
	p.start = time.Now()
	clock := progressClock{origin: p.start}
	errs := &errorLog{}
	readers := make([]*reader, c.Readers)
	rctx, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	var wg sync.WaitGroup
	for i := range readers {
		readers[i] = newReader(i, srv.mnt, c.Ref, p.files, p.seed, clock, errs)
		wg.Add(1)
		go func() {
			defer wg.Done()
			readers[i].run(rctx)
		}()
	}
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()

	// After a warm-up the server is sampled every second; Start, Mid and
	// End are the medians of the first, middle and last thirds of the
	// samples, which a passing burst does not move.
	warmup := min(max(c.Duration/10, 2*time.Second), 30*time.Second, c.Duration/2)
	var series []Sample
	var stalled, stopping bool
	var lastProgress, stopAt time.Duration
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	ctxDone := ctx.Done()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
		case <-ctxDone:
			ctxDone = nil
		}
		now := time.Duration(clock.now())
		if !stopping && (!srv.alive() || now >= c.Duration || ctx.Err() != nil) {
			if srv.alive() {
				p.endFDs = describeFDs(srv.pid())
			} else if !stalled {
				p.rep.fail("tarmount exited under load (%v): see %s", srv.err, p.rep.Log)
			}
			p.rep.Elapsed = now
			stopping, stopAt = true, now
			stopReaders()
		}
		if p.name == PhaseMaterialize && p.rep.MatDoneAfter == 0 && srv.alive() {
			if v, ok := srv.metric("tarmount_materialize_complete"); ok && v == 1 {
				p.rep.MatDoneAfter = now
			}
		}
		if !stalled {
			if r, o, idle := stuck(readers, clock, c.Stall); r != nil {
				stalled = true
				p.rep.fail("deadlock: reader %d made no progress for %v, %s; goroutine stacks of tarmount in %s",
					r.id, idle.Round(time.Second), o.describe(), p.rep.Log)
				// SIGQUIT ends the server: the readers blocked in
				// its mount get ECONNABORTED and return.
				srv.dumpStacks()
			}
		}
		if stopping {
			if now-stopAt > c.Stall+10*time.Second {
				p.rep.fail("readers did not return %v after they were told to stop", (now - stopAt).Round(time.Second))
				break loop
			}
			continue
		}
		if now >= warmup {
			s := srv.sample()
			s.At = now
			series = append(series, s)
		}
		if now-lastProgress >= progressEvery {
			lastProgress = now
			p.progress(srv, readers, errs, now)
		}
	}
	if k := len(series) / 3; k > 0 {
		p.rep.Start, p.rep.Mid, p.rep.End = median(series[:k]), median(series[k:len(series)-k]), median(series[len(series)-k:])
		for _, sm := range series[len(series)-k:] {
			if sm.Goroutines >= 0 && (p.endFloor < 0 || sm.Goroutines < p.endFloor) {
				p.endFloor = sm.Goroutines
			}
		}
	} else if !p.rep.Failed() && ctx.Err() == nil {
		p.rep.fail("the phase ended after %v, before enough samples were taken", p.rep.Elapsed.Round(time.Second))
	}
	for _, r := range readers {
		p.rep.Reads += r.reads.Load()
		p.rep.Bytes += r.bytes.Load()
		p.rep.Opens += r.opens.Load()
	}
	p.rep.Direct = latency(readers, true)
	p.rep.Buffered = latency(readers, false)
	p.rep.Errors = errs.count()
	errs.mu.Lock()
	for _, e := range errs.first {
		p.rep.fail("read: %s", e)
	}
	if errs.n > int64(len(errs.first)) {
		p.rep.fail("read: %d more failed", errs.n-int64(len(errs.first)))
	}
	errs.mu.Unlock()
}

// median returns the median of each field of ss (which is not empty) on
// its own; At is the middle sample's.
func median(ss []Sample) Sample {
	mid := func(f func(Sample) int64) int64 {
		v := make([]int64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	return Sample{
		At:         ss[len(ss)/2].At,
		FDs:        int(mid(func(s Sample) int64 { return int64(s.FDs) })),
		Sockets:    int(mid(func(s Sample) int64 { return int64(s.Sockets) })),
		Pipes:      int(mid(func(s Sample) int64 { return int64(s.Pipes) })),
		Goroutines: int(mid(func(s Sample) int64 { return int64(s.Goroutines) })),
		RSS:        mid(func(s Sample) int64 { return s.RSS }),
		HWM:        mid(func(s Sample) int64 { return s.HWM }),
		Heap:       mid(func(s Sample) int64 { return s.Heap }),
	}
}

// stuck returns a reader whose last call returned longer than limit ago,
// what it is doing and for how long.
func stuck(readers []*reader, clock progressClock, limit time.Duration) (*reader, *op, time.Duration) {
	now := clock.now()
	for _, r := range readers {
		if idle := time.Duration(now - r.progress.Load()); idle > limit {
			return r, r.doing.Load(), idle
		}
	}
	return nil, nil, 0
}

// latency sums up the reads of the readers with O_DIRECT or without.
func latency(readers []*reader, direct bool) Latency {
	var h histogram
	var l Latency
	for _, r := range readers {
		if r.direct == direct {
			h.merge(&r.hist)
			l.Reads += r.reads.Load()
		}
	}
	l.Max = time.Duration(h.max.Load())
	l.P50, l.P99 = min(h.quantile(0.50), l.Max), min(h.quantile(0.99), l.Max)
	return l
}

func (p *phaseRun) progress(srv *server, readers []*reader, errs *errorLog, now time.Duration) {
	var reads int64
	for _, r := range readers {
		reads += r.reads.Load()
	}
	d := latency(readers, true)
	s := srv.sample()
	line := fmt.Sprintf("%s %s: %d reads (%.0f/s; O_DIRECT %.0f/s, p50 %v p99 %v), %d errors; fds %d, goroutines %d, RSS %.0f MiB (peak %.0f MiB, Go heap %.0f MiB)",
		p.name, now.Round(time.Second), reads, float64(reads)/now.Seconds(), float64(d.Reads)/now.Seconds(),
		roundDur(d.P50), roundDur(d.P99), errs.count(), s.FDs, s.Goroutines, mib(s.RSS), mib(s.HWM), mib(s.Heap))
	if p.name == PhaseMaterialize {
		m := srv.metricsNamed("tarmount_materialize_files_written_total", "tarmount_materialize_target_files")
		line += fmt.Sprintf(", materialized %.0f of %.0f files", m["tarmount_materialize_files_written_total"], m["tarmount_materialize_target_files"])
	}
	fmt.Fprintln(p.c.Log, line)
}

// settle waits, once the readers have stopped, for materialization to
// complete (in that phase) and then for descriptors and goroutines to come
// back near their level at rest, and records the last sample. A
// materialization that writes no file for Config.Stall is stuck.
func (p *phaseRun) settle(srv *server) {
	if p.name == PhaseMaterialize {
		const (
			done    = "tarmount_materialize_complete"
			written = "tarmount_materialize_files_written_total"
		)
		last, lastAt := -1.0, time.Now()
		for srv.alive() && p.rep.MatDoneAfter == 0 {
			m := srv.metricsNamed(done, written)
			if m[done] == 1 {
				p.rep.MatDoneAfter = time.Since(p.start)
				break
			}
			if m[written] != last {
				last, lastAt = m[written], time.Now()
			} else if time.Since(lastAt) > p.c.Stall {
				p.rep.fail("materialization stuck: no file written for %v after the readers stopped (%.0f written); goroutine stacks of tarmount in %s",
					p.c.Stall, last, p.rep.Log)
				srv.dumpStacks()
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	deadline := time.Now().Add(restSettle)
	for srv.alive() {
		s := srv.sample()
		p.rep.Rest = s
		p.restFDs = describeFDs(srv.pid())
		if p.restOK(s) || time.Now().After(deadline) {
			return
		}
		time.Sleep(500 * time.Millisecond)
	}
}

func (p *phaseRun) restOK(s Sample) bool {
	idle := p.rep.Idle
	return files(s) <= files(idle)+fdSlackRest && s.Sockets <= idle.Sockets+socketsRest &&
		s.Pipes <= idle.Pipes+2*p.c.Readers+pipesRest && s.Goroutines <= idle.Goroutines+goSlackRest
}

// files is the descriptors of s but sockets and pipes.
func files(s Sample) int { return s.FDs - s.Sockets - s.Pipes }

// check applies the leak and memory rules to the samples.
func (p *phaseRun) check() {
	r := &p.rep
	n := r.Readers
	if r.Start.FDs >= 0 && r.End.FDs >= 0 && r.End.FDs > r.Start.FDs+n+fdSlackLoad {
		r.fail("fd leak under load: median %d open in the first third, %d in the last (allowed: %d); at the end: %s",
			r.Start.FDs, r.End.FDs, r.Start.FDs+n+fdSlackLoad, p.endFDs)
	}
	// Under load the goroutines are mostly the FUSE requests in flight
	// (go-fuse serves each on a goroutine, and starts a reader for the
	// next), which come in bursts: a median of the last third reached
	// 443 against 57 in the first on a 2-core machine, and 29 at rest.
	// Goroutines that leak never end, so they raise every sample: the
	// rule takes the fewest in the last third.
	if r.Start.Goroutines >= 0 && p.endFloor >= 0 && p.endFloor > r.Start.Goroutines+2*n+goSlackLoad {
		r.fail("goroutine leak under load: median %d in the first third, at least %d in every sample of the last (allowed: %d)",
			r.Start.Goroutines, p.endFloor, r.Start.Goroutines+2*n+goSlackLoad)
	}
	if r.Idle.FDs >= 0 && r.Rest.FDs >= 0 {
		if got, idle := files(r.Rest), files(r.Idle); got > idle+fdSlackRest {
			r.fail("fd leak: %d descriptors but sockets and pipes open at rest after the load, %d before it (allowed: %d): %s",
				got, idle, idle+fdSlackRest, p.restFDs)
		}
		if r.Rest.Sockets > r.Idle.Sockets+socketsRest {
			r.fail("socket leak: %d open at rest after the load, %d before it (allowed: %d)", r.Rest.Sockets, r.Idle.Sockets, r.Idle.Sockets+socketsRest)
		}
		if limit := r.Idle.Pipes + 2*n + pipesRest; r.Rest.Pipes > limit {
			r.fail("pipe leak: %d open at rest after the load, %d before it (allowed: %d)", r.Rest.Pipes, r.Idle.Pipes, limit)
		}
	}
	if r.Idle.Goroutines >= 0 && r.Rest.Goroutines >= 0 && r.Rest.Goroutines > r.Idle.Goroutines+goSlackRest {
		r.fail("goroutine leak: %d at rest after the load, %d before it (allowed: %d)", r.Rest.Goroutines, r.Idle.Goroutines, r.Idle.Goroutines+goSlackRest)
	}
	if r.Budget > 0 && r.PeakHWM > r.Budget {
		r.fail("memory: peak RSS %.1f MiB, budget %.1f MiB (--cache-mem %.0f MiB + %.0f MiB)", mib(r.PeakHWM), mib(r.Budget), mib(p.c.CacheMem), mib(p.c.MemAllowance))
	}
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// roundDur rounds d to three significant digits or so.
func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}
