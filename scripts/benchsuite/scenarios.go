package main

import (
	"context"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Tool names of the rows.
const (
	toolTM          = "tarmount"
	toolRA          = "ratarmount"
	toolTMCold      = "tarmount extract (no index)"
	toolTMIndex     = "tarmount extract (saved index)"
	toolTMMat       = "tarmount --materialize (saved index)"
	toolCurlPigz    = "curl | pigz -d | tar -x"
	toolCurlRapid   = "curl | rapidgzip -d | tar -x"
	toolAria        = "aria2c -x8 -s8, then tar -x"
	toolTMLazy      = "tarmount (lazy, saved index)"
	toolTMDone      = "tarmount (materialized)"
	toolLocal       = "local disk (tar -x)"
	toolTMIndexPass = "tarmount index"
)

// combo is one dataset in one codec served with one profile.
type combo struct {
	d       *dataset
	codec   string
	srv     *server
	url     string
	tmIdx   map[string]string // by build name: cache dir holding tarmount's saved index
	raIdx   string            // index folder holding ratarmount's saved index
	tmNote  map[string]string // by build name: why tarmount's saved index is missing
	raNote  string            // why ratarmount cannot run this combo
	refDone map[int]bool
}

func (s *suite) result(cb *combo, sc, tool string, run int) Result {
	return Result{Scenario: sc, Dataset: cb.d.name, Codec: cb.codec, Profile: cb.srv.name, Tool: tool, Run: run,
		Fetched: -1, Requests: -1}
}

// fail records a failed run and logs it.
func (s *suite) fail(r Result, format string, args ...any) {
	r.Status = statusFail
	r.Seconds = 0
	r.Note = strings.TrimSuffix(strings.TrimSpace(fmt.Sprintf(format, args...)), ":")
	s.record(r)
}

// na records that a tool cannot run a scenario.
func (s *suite) na(cb *combo, sc, tool, note string) {
	r := s.result(cb, sc, tool, 0)
	r.Status = statusNA
	r.Note = note
	s.record(r)
}

// inOrder returns the tools, reversed on even runs.
func inOrder(run int, tools ...string) []string {
	if run%2 == 0 {
		slices.Reverse(tools)
	}
	return tools
}

// measured sets the server counts of a step on r.
func measured(r *Result, c0, c1 counters) {
	r.Fetched, r.Requests = c1.bytes-c0.bytes, c1.requests-c0.requests
}

// startMount starts TOOL on the combo's URL at mnt with cache as its
// cache dir (tarmount) or index folder (ratarmount).
func (s *suite) startMount(cb *combo, tool, mnt, cache, log string, extra ...string) (*proc, error) {
	if err := useMountpoint(mnt); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, err
	}
	var argv []string
	switch base, _ := splitTool(tool); base {
	case toolTM:
		argv = append([]string{s.buildOf(tool).bin, cb.url, mnt, "--cache-dir", cache, "--cache-disk", "0"}, extra...)
	case toolRA:
		argv = []string{s.c.ratarmount, "-f", "--index-folders", cache, cb.url, mnt}
	default:
		return nil, fmt.Errorf("no mount tool %q", tool)
	}
	return startProc(argv, s.env, log)
}

// mountpoint is where tool mounts.
func (s *suite) mountpoint(tool string) string {
	return filepath.Join(s.work, "mnt-"+strings.Map(func(r rune) rune {
		if r == '.' || r == '-' || r == '+' || r >= '0' && r <= '9' || r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' {
			return r
		}
		return '_'
	}, tool))
}

// withPeers returns tarmount's tools followed by the peers, unless the
// run has no peers.
func (s *suite) withPeers(tm []string, peers ...string) []string {
	if !s.c.peers {
		return tm
	}
	return append(tm, peers...)
}

func (s *suite) logPath(cb *combo, what string, run int) string {
	return s.logFile(cb.d.name, cb.codec, cb.srv.name, what, run)
}

// logFile returns the path of the log of what, in a run on dataset in
// codec with profile, in the work dir's logs.
func (s *suite) logFile(dataset, codec, profile, what string, run int) string {
	dir := filepath.Join(s.work, "logs")
	os.MkdirAll(dir, 0o755)
	what = strings.NewReplacer(" ", "_", "/", "_", "|", "_").Replace(what)
	return filepath.Join(dir, fmt.Sprintf("%s.%s.%s.%s.%d.log", dataset, codec, profile, what, run))
}

// checkMember reads path whole and compares it with m.
func checkMember(path string, m Member) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h := crc32.New(castagnoli)
	n, err := io.CopyBuffer(h, f, make([]byte, 1<<20))
	if err != nil {
		return err
	}
	if n != m.Size || h.Sum32() != m.CRC {
		return fmt.Errorf("%s: %d bytes, crc %08x; want %d bytes, crc %08x", m.Path, n, h.Sum32(), m.Size, m.CRC)
	}
	return nil
}

// countFiles counts the regular files below dir (tarmount's own state
// directory aside).
func countFiles(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".tarmount-partial" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			n++
		}
		return nil
	})
	return n, err
}

// decoder is the fastest CLI that decodes the codec from stdin to stdout.
func decoder(codec string) (label, cmd string) {
	switch codec {
	case "gz":
		return "pigz -d", "pigz -dc"
	case "zst", "seekable":
		return "zstd -d", "zstd -dc"
	case "lz4":
		return "lz4 -d", "lz4 -dc"
	case "bz2":
		return "lbzip2 -d", "lbzip2 -dc"
	case "xz":
		return "xz -d", "xz -T2 -dc"
	}
	return "cat", "cat"
}

// combo runs the scenarios of one dataset, codec and profile.
func (s *suite) combo(ctx context.Context, d *dataset, codec string, srv *server, main, goBuild bool) error {
	cb := &combo{d: d, codec: codec, srv: srv, url: srv.base + "/" + d.object(codec), refDone: map[int]bool{}}
	say("%s %s, profile %s: %s", d.name, codec, srv.name, cb.url)
	sc := s.c.scenarios
	// Scenarios 10 and 11 make indexes of their own, 15 needs none, and
	// 12, 13 and 14 run on the local files; the others use the saved ones.
	saved := false
	for n := range sc {
		saved = saved || n != "10" && n != "11" && n != "15" && !slices.Contains(localScenarios, n)
	}
	if saved {
		if err := s.prepare(ctx, cb); err != nil {
			return err
		}
	}
	type step struct {
		on    bool
		what  string
		tools []string // run one after the other, in alternating order
		one   func(ctx context.Context, cb *combo, run int, tool string) error
		all   func(ctx context.Context, cb *combo, run int) error // or all tools at once
	}
	for run := 1; main && run <= s.c.runs; run++ {
		tm := s.tools(toolTM)
		steps := []step{
			{on: sc["1"] || sc["4"], what: "cold mount-ready", tools: s.withPeers(tm, toolRA, "reference"), one: s.coldMount},
			{on: sc["2"] || sc["3"] || sc["4"], what: "warm mount, random reads, sequential read",
				tools: s.withPeers(slices.Clone(tm), toolRA), one: s.warmMount},
			{on: sc["5"], what: "extraction", all: s.extract},
			{on: sc["15"], what: "first extraction against its jobs alone", all: s.overlap},
			{on: sc["9"], what: "index pass to the end", tools: s.withPeers(s.tools(toolTMIndexPass), "reference"), one: s.indexPass},
			{on: sc["8"], what: "progressive mount", tools: s.withPeers(append(slices.Clone(tm), s.tools(toolTMWait)...), curlTar(codec)),
				one: s.progressiveOne},
		}
		for _, st := range steps {
			if !st.on {
				continue
			}
			say("%s %s %s, run %d/%d: %s", d.name, codec, srv.name, run, s.c.runs, st.what)
			if st.all != nil {
				if err := st.all(ctx, cb, run); err != nil {
					return err
				}
				continue
			}
			for _, t := range inOrder(run, st.tools...) {
				if err := st.one(ctx, cb, run, t); err != nil {
					return err
				}
			}
		}
	}
	if goBuild {
		if err := s.goBuild(ctx, cb); err != nil {
			return err
		}
	}
	// Scenario 10 runs once per dataset and codec, with the profile of its
	// own server.
	if main && sc["10"] && srv.name == s.c.profiles[0] {
		if err := s.boot(ctx, cb); err != nil {
			return err
		}
	}
	// Scenario 11 likewise, on the go dataset.
	if main && sc["11"] && d.kind == "go" && srv.name == s.c.profiles[0] {
		return s.upgrade(ctx, cb)
	}
	return nil
}

// prepare saves tarmount's and ratarmount's indexes (untimed).
func (s *suite) prepare(ctx context.Context, cb *combo) error {
	tag := fmt.Sprintf("%s-%s-%s", cb.d.name, cb.codec, cb.srv.name)
	cb.tmIdx, cb.tmNote = map[string]string{}, map[string]string{}
	cb.raIdx = filepath.Join(s.work, "idx", "ra-"+tag)
	for _, b := range s.c.builds {
		// Each build saves its own index: their formats may differ.
		idx := filepath.Join(s.work, "idx", "tm-"+tag)
		if b.name != "" {
			idx += "-" + b.name
		}
		cb.tmIdx[b.name] = idx
		info("saving %s's index (tarmount index URL --cache-dir D)", b.tool(toolTM))
		if msg, err := runCmd(ctx, s.c.indexTimeout, s.env, "", b.bin, "index", cb.url, "--cache-dir", idx,
			"--cache-disk", "0"); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			cb.tmNote[b.name] = fmt.Sprintf("%s index failed: %v: %s", b.tool(toolTM), err, lastLine(msg))
			warnf("%s", cb.tmNote[b.name])
		}
	}
	if !s.c.peers {
		return nil
	}
	if s.c.ratarmount == "" {
		cb.raNote = "ratarmount " + s.c.ratarNote
		return nil
	}
	info("saving ratarmount's index (a first mount with --index-folders D)")
	mnt := s.mountpoint(toolRA)
	p, err := s.startMount(cb, toolRA, mnt, cb.raIdx, s.logPath(cb, "ratarmount-index", 0))
	if err != nil {
		return err
	}
	_, err = waitPath(ctx, p, mnt, filepath.Join(mnt, cb.d.facts.Probe.Path), s.c.indexTimeout)
	stopMount(p, mnt)
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		cb.raNote = fmt.Sprintf("ratarmount could not mount %s: %v", cb.d.object(cb.codec), err)
		warnf("%s", cb.raNote)
		s.note("%s", cb.raNote)
	}
	return nil
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

// coldMount is scenario 1 for one tool (and the CLI-decode reference that
// scenario 4 compares with).
func (s *suite) coldMount(ctx context.Context, cb *combo, run int, tool string) error {
	sc := s.c.scenarios
	if tool == "reference" {
		var scs []string
		if sc["1"] {
			scs = append(scs, scColdMount)
		}
		if sc["4"] && cb.d.facts.Largest.Size >= 1<<20 {
			scs = append(scs, scSeq)
		}
		return s.reference(ctx, cb, run, scs...)
	}
	if !sc["1"] {
		return nil
	}
	r := s.result(cb, scColdMount, tool, run)
	if tool == toolRA && cb.raNote != "" {
		if run == 1 {
			s.na(cb, scColdMount, tool, cb.raNote)
		}
		return nil
	}
	cache := filepath.Join(s.work, "cold-cache")
	os.RemoveAll(cache)
	defer os.RemoveAll(cache)
	mnt := s.mountpoint(tool)
	c0 := cb.srv.counters()
	t0 := time.Now()
	p, err := s.startMount(cb, tool, mnt, cache, s.logPath(cb, tool+"-cold", run))
	if err != nil {
		return err
	}
	ready, err := waitPath(ctx, p, mnt, filepath.Join(mnt, cb.d.facts.Probe.Path), s.c.indexTimeout)
	c1 := cb.srv.counters()
	if err != nil {
		stopMount(p, mnt)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.fail(r, "mount did not answer: %v", err)
		return nil
	}
	r.Seconds = ready.Sub(t0).Seconds()
	measured(&r, c0, c1)
	r.Payload = cb.d.facts.TarBytes
	checkErr := checkMember(filepath.Join(mnt, cb.d.facts.Probe.Path), cb.d.facts.Probe)
	r.RSS = vmHWM(p.pid())
	stopMount(p, mnt)
	if checkErr != nil {
		s.fail(r, "content check: %v", checkErr)
		return nil
	}
	r.Status = statusOK
	s.record(r)
	s.recordRSS(cb, "cold mount", tool, run, r.RSS)
	return nil
}

func (s *suite) recordRSS(cb *combo, phase, tool string, run int, rss int64) {
	if rss <= 0 {
		return
	}
	r := s.result(cb, scRSS+": "+phase, tool, run)
	r.Status, r.RSS = statusOK, rss
	s.record(r)
}

// reference decodes the whole object with the codec's CLI, for scenarios 1,
// 4 and 9, and records the run in each of scs.
func (s *suite) reference(ctx context.Context, cb *combo, run int, scs ...string) error {
	label, cmd := decoder(cb.codec)
	tool := "curl | " + label
	c0 := cb.srv.counters()
	t0 := time.Now()
	out, err := runCmd(ctx, s.c.stepTimeout, s.env, "", "bash", "-o", "pipefail", "-c",
		`curl -sSf "$1" | `+cmd+` | wc -c`, "_", cb.url)
	secs := time.Since(t0).Seconds()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	for _, sc := range scs {
		r := s.result(cb, sc, tool, run)
		measured(&r, c0, cb.srv.counters())
		r.Payload = cb.d.facts.TarBytes
		switch n, _ := strconv.ParseInt(lastLine(out), 10, 64); {
		case err != nil:
			s.fail(r, "%v: %s", err, lastLine(out))
		case n != cb.d.facts.TarBytes:
			s.fail(r, "decoded %d bytes, want %d", n, cb.d.facts.TarBytes)
		default:
			r.Status, r.Seconds = statusOK, secs
			s.record(r)
		}
	}
	return nil
}

// warmMount is scenarios 2, 3 and 4 on one fresh mount with the saved
// index: mount-ready, the random small reads, the sequential read.
func (s *suite) warmMount(ctx context.Context, cb *combo, run int, tool string) error {
	sc := s.c.scenarios
	f := cb.d.facts
	doReads := sc["3"] && len(f.Reads) > 0
	doSeq := sc["4"] && f.Largest.Size >= 1<<20
	var scs []string
	if sc["2"] {
		scs = append(scs, scWarmMount)
	}
	if doReads {
		scs = append(scs, scRandom)
	}
	if doSeq {
		scs = append(scs, scSeq)
	}
	if len(scs) == 0 {
		return nil
	}
	_, bn := splitTool(tool)
	note, cache := cb.tmNote[bn], cb.tmIdx[bn]
	if tool == toolRA {
		note, cache = cb.raNote, cb.raIdx
		if note != "" {
			if run == 1 {
				for _, x := range scs {
					s.na(cb, x, tool, note)
				}
			}
			return nil
		}
	}
	if note != "" {
		for _, x := range scs {
			s.fail(s.result(cb, x, tool, run), "%s", note)
		}
		return nil
	}
	mnt := s.mountpoint(tool)
	c0 := cb.srv.counters()
	t0 := time.Now()
	p, err := s.startMount(cb, tool, mnt, cache, s.logPath(cb, tool+"-warm", run))
	if err != nil {
		return err
	}
	defer stopMount(p, mnt)
	ready, err := waitPath(ctx, p, mnt, filepath.Join(mnt, f.Probe.Path), s.c.mountTimeout)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, x := range scs {
			s.fail(s.result(cb, x, tool, run), "mount did not answer: %v", err)
		}
		return nil
	}
	if sc["2"] {
		r := s.result(cb, scWarmMount, tool, run)
		measured(&r, c0, cb.srv.counters())
		r.Status, r.Seconds = statusOK, ready.Sub(t0).Seconds()
		s.record(r)
	}
	if doReads {
		r := s.result(cb, scRandom, tool, run)
		var lat []float64
		var bad error
		c1 := cb.srv.counters()
		t1 := time.Now()
		for _, m := range f.Reads {
			t := time.Now()
			b, err := os.ReadFile(filepath.Join(mnt, m.Path))
			lat = append(lat, time.Since(t).Seconds())
			if err == nil && (int64(len(b)) != m.Size || crc32.Checksum(b, castagnoli) != m.CRC) {
				err = fmt.Errorf("%s: content differs from the archive", m.Path)
			}
			if err != nil && bad == nil {
				bad = err
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
		}
		r.Seconds = time.Since(t1).Seconds()
		measured(&r, c1, cb.srv.counters())
		r.Reads, r.P50, r.P99 = len(lat), percentile(lat, 50), percentile(lat, 99)
		if bad != nil {
			s.fail(r, "%v", bad)
		} else {
			r.Status = statusOK
			s.record(r)
		}
	}
	if doSeq {
		r := s.result(cb, scSeq, tool, run)
		c1 := cb.srv.counters()
		t1 := time.Now()
		err := checkMember(filepath.Join(mnt, f.Largest.Path), f.Largest)
		r.Seconds = time.Since(t1).Seconds()
		measured(&r, c1, cb.srv.counters())
		r.Payload = f.Largest.Size
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			s.fail(r, "%v", err)
		} else {
			r.Status = statusOK
			s.record(r)
		}
	}
	s.recordRSS(cb, "warm mount + reads", tool, run, vmHWM(p.pid()))
	return nil
}

// indexPass is scenario 9 for one tool: `tarmount index URL` with an
// empty cache, from start to exit (the whole first pass, which a mount
// runs behind a tree that already answers), or the CLI decoding the object.
func (s *suite) indexPass(ctx context.Context, cb *combo, run int, tool string) error {
	if tool == "reference" {
		return s.reference(ctx, cb, run, scIndexPass)
	}
	r := s.result(cb, scIndexPass, tool, run)
	r.Payload = cb.d.facts.TarBytes
	cache := filepath.Join(s.work, "cold-cache")
	os.RemoveAll(cache)
	defer os.RemoveAll(cache)
	out, err := timeStep(cb, &r, func() (string, error) {
		return keepCPU(&r)(runCmdCPU(ctx, s.c.indexTimeout, s.env, "", s.buildOf(tool).bin, "index", cb.url, "--cache-dir", cache, "--cache-disk", "0"))
	})
	return s.settle(ctx, r, out, err)
}

// settle records r after its timed step, which printed out and ended with
// err: failed with err and out's last line, or ok. Once ctx is done it
// records nothing and returns ctx's error.
func (s *suite) settle(ctx context.Context, r Result, out string, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		s.fail(r, "%v: %s", err, lastLine(out))
	default:
		r.Status = statusOK
		s.record(r)
	}
	return nil
}

// keepCPU returns a function that sets r's CPU time from runCmdCPU's
// results and passes on its output and error.
func keepCPU(r *Result) func(string, time.Duration, error) (string, error) {
	return func(out string, cpu time.Duration, err error) (string, error) {
		r.CPU = cpu.Seconds()
		return out, err
	}
}

// timeStep runs f as r's timed step: it sets r's seconds and what the
// server counted meanwhile, and returns f's output and error.
func timeStep(cb *combo, r *Result, f func() (string, error)) (string, error) {
	c0 := cb.srv.counters()
	t0 := time.Now()
	out, err := f()
	r.Seconds = time.Since(t0).Seconds()
	measured(r, c0, cb.srv.counters())
	return out, err
}

// extractTools are the tools of scenario 5 for a codec.
func (s *suite) extractTools(codec string) []string {
	var tm []string
	for _, base := range []string{toolTMCold, toolTMIndex, toolTMMat} {
		tm = append(tm, s.tools(base)...)
	}
	if !s.c.peers {
		return tm
	}
	tools := append(tm, curlTar(codec))
	switch codec {
	case "gz":
		tools = append(tools, toolCurlPigz, toolCurlRapid)
	case "zst", "seekable":
		tools = append(tools, toolCurlZstd)
	}
	return append(tools, toolAria)
}

func curlTar(codec string) string {
	switch codec {
	case "gz":
		return "curl | tar -xz"
	case "zst", "seekable":
		return "curl | tar --zstd -x"
	case "lz4":
		return "curl | lz4 -dc | tar -x"
	case "bz2":
		return "curl | tar -xj"
	case "xz":
		return "curl | tar -xJ"
	}
	return "curl | tar -x"
}

// extract is scenario 5: one run of every tool, in alternating order.
func (s *suite) extract(ctx context.Context, cb *combo, run int) error {
	tools := inOrder(run, s.extractTools(cb.codec)...)
	ts := s.newTrees(ctx, cb, run, len(tools)+1)
	defer ts.close()
	for _, tool := range tools {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r := s.result(cb, scExtract, tool, run)
		r.Payload = cb.d.facts.TarBytes
		var argv []string
		base, bn := splitTool(tool)
		switch base {
		case toolTMCold:
			cold := filepath.Join(s.work, "cold-cache")
			os.RemoveAll(cold)
			defer os.RemoveAll(cold)
			argv = []string{s.buildOf(tool).bin, "extract", cb.url, ts.dest, "--cache-dir", cold, "--cache-disk", "0", "--quiet"}
		case toolTMIndex:
			argv = []string{s.buildOf(tool).bin, "extract", cb.url, ts.dest, "--cache-dir", cb.tmIdx[bn], "--cache-disk", "0", "--quiet"}
		case toolTMMat:
		default:
			var na string
			if argv, na = s.peerCmd(cb.codec, tool, cb.url, ts.dest, ts.dl); na != "" {
				if run == 1 {
					s.na(cb, scExtract, tool, na)
				}
				continue
			}
		}
		if (base == toolTMIndex || base == toolTMMat) && cb.tmNote[bn] != "" {
			s.fail(r, "%s", cb.tmNote[bn])
			continue
		}
		if err := ts.next(ctx); err != nil {
			return err
		}
		out, err := timeStep(cb, &r, func() (string, error) {
			if base == toolTMMat {
				return "", s.materialize(ctx, cb, s.buildOf(tool), run, ts.dest, &r)
			}
			return keepCPU(&r)(runCmdCPU(ctx, s.c.stepTimeout, s.env, "", argv...))
		})
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err != nil {
			s.fail(r, "%v: %s", err, lastLine(out))
			continue
		}
		n, err := countFiles(ts.dest)
		switch {
		case err != nil:
			s.fail(r, "count files: %v", err)
		case n != cb.d.facts.Files:
			s.fail(r, "%d files extracted, want %d", n, cb.d.facts.Files)
		default:
			r.Status = statusOK
			s.record(r)
		}
	}
	return nil
}

// peerCmd returns the command line with which an extracting peer
// (curl | tar -x and its variants, aria2c then tar -x) writes the tree of
// url into dest, downloading into dl; or why it cannot run here.
func (s *suite) peerCmd(codec, tool, url, dest, dl string) (argv []string, na string) {
	sh := func(script string) []string {
		return []string{"bash", "-o", "pipefail", "-c", script, "_", url, dest, dl, s.c.rapidgzip}
	}
	_, dec := decoder(codec)
	switch tool {
	case curlTar(codec):
		if codec == "lz4" {
			return sh(`curl -sSf "$1" | lz4 -dc | tar -x -C "$2"`), ""
		}
		tarFlag := map[string]string{"gz": "-z", "zst": "--zstd", "seekable": "--zstd", "bz2": "-j", "xz": "-J"}[codec]
		return sh(`curl -sSf "$1" | tar -x ` + tarFlag + ` -C "$2"`), ""
	case toolCurlPigz:
		return sh(`curl -sSf "$1" | pigz -dc | tar -x -C "$2"`), ""
	case toolCurlZstd:
		return sh(`curl -sSf "$1" | zstd -dc | tar -x -C "$2"`), ""
	case toolCurlRapid:
		if s.c.rapidgzip == "" {
			return nil, "rapidgzip is not installed (it comes with ratarmount)"
		}
		return sh(`curl -sSf "$1" | "$4" -d -c | tar -x -C "$2"`), ""
	case toolAria:
		if _, err := exec.LookPath("aria2c"); err != nil {
			return nil, "aria2c is not installed"
		}
		return sh(`aria2c -q -x8 -s8 -k1M --allow-overwrite=true --auto-file-renaming=false -d "$3" -o obj "$1" && ` +
			dec + ` < "$3/obj" | tar -x -C "$2"`), ""
	}
	return nil, fmt.Sprintf("no extracting peer %q", tool)
}

// trees are where the tools of one run of scenarios 5 and 10 write their
// trees: each in turn gets dest (its tree) and dl (its downloads) empty,
// the previous tool's moved aside, not deleted, until the run ends.
type trees struct {
	root, dest, dl string
	n              int    // trees handed out
	done           func() // ends the run's use of root
}

// newTrees gives the trees of one run a filesystem of their own
// (scratchFS) with room for n trees of the dataset, kept until the run
// ends: ext4 checks every inode freed in the last minutes when it
// allocates one (recently_deleted under ext4_create), so a run that
// starts after big trees were deleted pays for it (tarmount's one-pass
// extraction of 200k small files: 18 s after a fresh rm -rf, 8.6 s
// without one). With -shared-fs, or when no such filesystem can be made,
// the trees go to the work dir and are deleted after the run, followed by
// a wait that undoes some of it.
func (s *suite) newTrees(ctx context.Context, cb *combo, run, n int) *trees {
	f := cb.d.facts
	perTree := f.TarBytes + int64(f.Files+f.Dirs)*4096
	t := &trees{root: s.work}
	if !s.c.sharedFS {
		fsys, err := newScratchFS(ctx, s.work, int64(n)*perTree*5/4+1<<30, int64(n)*int64(f.Entries+100)*5/4+1<<14)
		switch {
		case err == nil:
			t.root, t.done = fsys.dir, fsys.close
		case run == 1:
			warnf("%s %s: no filesystem of its own for the trees (%v): writing them into %s", cb.d.name, cb.codec, err, s.work)
		}
	}
	if t.done == nil {
		t.done = func() {
			os.RemoveAll(filepath.Join(s.work, "trash"))
			exec.Command("sync").Run()
			time.Sleep(40 * time.Second)
		}
	}
	t.dest = filepath.Join(t.root, "x", "dest")
	t.dl = filepath.Join(t.root, "x", "dl")
	return t
}

// next makes dest and dl empty for the next tool, untimed: the previous
// tree moved aside, its writes on disk and the page cache empty, so that
// no tool pays for the one before (a full page cache makes file creation
// several times slower here: GNU tar -x of the Go tree takes 2 s after a
// drop, 7-13 s without).
func (t *trees) next(ctx context.Context) error {
	t.aside(strconv.Itoa(t.n))
	t.n++
	if err := os.MkdirAll(t.dest, 0o755); err != nil {
		return err
	}
	os.MkdirAll(t.dl, 0o755)
	exec.CommandContext(ctx, "sync").Run()
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0) // root only; else as it is
	return nil
}

// aside moves the current tree (dest and dl) to the trash under name.
func (t *trees) aside(name string) {
	trash := filepath.Join(t.root, "trash")
	os.MkdirAll(trash, 0o755)
	os.Rename(filepath.Dir(t.dest), filepath.Join(trash, name))
}

// close ends the run: the trees go with their filesystem, or are deleted.
func (t *trees) close() {
	t.aside("last")
	t.done()
}

// materialize runs `tarmount URL MNT --materialize DEST` with the saved
// index until its log says msg=materialized; it sets r.Seconds and r.RSS.
func (s *suite) materialize(ctx context.Context, cb *combo, b build, run int, dest string, r *Result) error {
	mnt := s.mountpoint(toolTM)
	t0 := time.Now()
	p, err := s.startMount(cb, b.tool(toolTM), mnt, cb.tmIdx[b.name], s.logPath(cb, b.tool("materialize"), run), "--materialize", dest)
	if err != nil {
		return err
	}
	done, err := waitLog(ctx, p, "msg=materialized", s.c.stepTimeout)
	r.Seconds = done.Sub(t0).Seconds()
	r.RSS = vmHWM(p.pid())
	stopMount(p, mnt)
	if err == nil {
		s.recordRSS(cb, "materialize", b.tool(toolTM), run, r.RSS)
	}
	return err
}

// goBuild is scenario 6: go version and go build with GOROOT inside a
// lazy tarmount mount, a materialized one, ratarmount and a local tree.
func (s *suite) goBuild(ctx context.Context, cb *combo) error {
	if s.goLocal == "" {
		s.goLocal = filepath.Join(s.work, "golocal")
		os.MkdirAll(s.goLocal, 0o755)
		if out, err := runCmd(ctx, s.c.stepTimeout, s.env, "", "tar", "-xf", cb.d.tarPath(), "-C", s.goLocal); err != nil {
			return fmt.Errorf("extract the local go tree: %v: %s", err, out)
		}
	}
	hello := filepath.Join(s.work, "hello")
	os.MkdirAll(hello, 0o755)
	os.WriteFile(filepath.Join(hello, "go.mod"), []byte("module hello\n\ngo 1.21\n"), 0o644)
	os.WriteFile(filepath.Join(hello, "main.go"), []byte("package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"hello\") }\n"), 0o644)
	for run := 1; run <= s.c.runs; run++ {
		say("%s %s %s, run %d/%d: go version and go build with GOROOT inside", cb.d.name, cb.codec, cb.srv.name, run, s.c.runs)
		tm := append(s.tools(toolTMLazy), s.tools(toolTMDone)...)
		for _, tool := range inOrder(run, s.withPeers(tm, toolRA, toolLocal)...) {
			if err := s.goBuildOne(ctx, cb, run, tool, hello); err != nil {
				return err
			}
		}
	}
	return nil
}

// goEnv is the environment of the go command of the toolchain at root,
// with GOROOT=root and GOCACHE and GOPATH in the work dir.
func (s *suite) goEnv(root string) []string {
	return []string{"PATH=" + filepath.Join(root, "bin") + ":" + os.Getenv("PATH"), "HOME=" + s.work,
		"GOROOT=" + root, "GOCACHE=" + s.goCache(), "GOPATH=" + s.goPath(), "GOTOOLCHAIN=local", "GOENV=off",
		"GOTELEMETRY=off", "CGO_ENABLED=0", "GOFLAGS=", "LC_ALL=C"}
}

func (s *suite) goCache() string { return filepath.Join(s.work, "gocache") }
func (s *suite) goPath() string  { return filepath.Join(s.work, "gopath") }

func (s *suite) goBuildOne(ctx context.Context, cb *combo, run int, tool, hello string) error {
	rv := s.result(cb, scGoVersion, tool, run)
	rb := s.result(cb, scGoBuild, tool, run)
	failBoth := func(format string, args ...any) {
		s.fail(rv, format, args...)
		s.fail(rb, format, args...)
	}
	var p *proc
	var mnt string
	var err error
	root := ""
	switch tool {
	case toolLocal:
		root = filepath.Join(s.goLocal, cb.d.top)
	case toolRA:
		if cb.raNote != "" {
			if run == 1 {
				s.na(cb, scGoVersion, tool, cb.raNote)
				s.na(cb, scGoBuild, tool, cb.raNote)
			}
			return nil
		}
		mnt = s.mountpoint(toolRA)
		if p, err = s.startMount(cb, toolRA, mnt, cb.raIdx, s.logPath(cb, "ratarmount-go", run)); err != nil {
			return err
		}
		_, err = waitPath(ctx, p, mnt, filepath.Join(mnt, cb.d.facts.Probe.Path), s.c.mountTimeout)
	default:
		b := s.buildOf(tool)
		if cb.tmNote[b.name] != "" {
			failBoth("%s", cb.tmNote[b.name])
			return nil
		}
		mnt = s.mountpoint(toolTM)
		if base, _ := splitTool(tool); base == toolTMDone {
			mat := filepath.Join(s.work, "mat", "go")
			os.RemoveAll(filepath.Dir(mat))
			os.MkdirAll(mat, 0o755)
			defer os.RemoveAll(filepath.Dir(mat))
			if p, err = s.startMount(cb, b.tool(toolTM), mnt, cb.tmIdx[b.name], s.logPath(cb, b.tool("tarmount-go-mat"), run), "--materialize", mat); err != nil {
				return err
			}
			_, err = waitLog(ctx, p, "msg=materialized", s.c.stepTimeout)
		} else {
			if p, err = s.startMount(cb, b.tool(toolTM), mnt, cb.tmIdx[b.name], s.logPath(cb, b.tool("tarmount-go"), run)); err != nil {
				return err
			}
			_, err = waitPath(ctx, p, mnt, filepath.Join(mnt, cb.d.facts.Probe.Path), s.c.mountTimeout)
		}
	}
	if p != nil {
		defer stopMount(p, mnt)
		root = filepath.Join(mnt, cb.d.top)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		failBoth("mount did not answer: %v", err)
		return nil
	}
	env := s.goEnv(root)
	for _, d := range []string{s.goCache(), s.goPath()} {
		os.RemoveAll(d)
		os.MkdirAll(d, 0o755)
	}
	gobin := filepath.Join(root, "bin", "go")
	t0 := time.Now()
	out, err := runCmd(ctx, s.c.goBuildTimeout, env, hello, viaShell(gobin, "version")...)
	rv.Seconds = time.Since(t0).Seconds()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil || !strings.HasPrefix(out, "go version go") {
		s.fail(rv, "go version: %v: %s", err, lastLine(out))
	} else {
		rv.Status = statusOK
		s.record(rv)
	}
	bin := filepath.Join(s.work, "hello.out")
	os.Remove(bin)
	t0 = time.Now()
	out, err = runCmd(ctx, s.c.goBuildTimeout, env, hello, viaShell(gobin, "build", "-o", bin, ".")...)
	rb.Seconds = time.Since(t0).Seconds()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if err == nil {
		var got string
		got, err = runCmd(ctx, time.Minute, env, hello, bin)
		if err == nil && got != "hello" {
			err = fmt.Errorf("the program printed %q", got)
		}
	}
	if err != nil {
		s.fail(rb, "go build: %v: %s", err, lastLine(out))
	} else {
		rb.Status = statusOK
		s.record(rb)
	}
	if p != nil {
		phase, name := "go build", toolRA
		switch base, _ := splitTool(tool); base {
		case toolTMLazy:
			name = s.buildOf(tool).tool(toolTM)
		case toolTMDone:
			phase, name = "go build (materialized)", s.buildOf(tool).tool(toolTM)
		}
		s.recordRSS(cb, phase, name, run, vmHWM(p.pid()))
	}
	return nil
}
