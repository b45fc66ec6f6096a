package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Scenario 10, boot: a machine starts with an empty cache and a fresh
// disk, and needs a tree from a remote tarball served like object storage,
// with an index published beside the archive (`tarmount index FILE
// --publish`) and without one. From the start of each tool: when `go
// version` run from the tree is done (the go dataset), when the tree is
// fully local, when the first byte of the last files within the first 1%
// and 10% of the tar stream can be read, and (without an index) when the
// listing is complete; and what the origin sent for the whole run. The
// tools: `tarmount URL MNT --materialize DIR` with and without the
// published index, `tarmount extract` with it (what the fully-local
// target compares with), curl | tar -x, and aria2c then tar -x. The
// probes start with the tool and retry every 20 ms, as in scenario 8.

// Tool names of scenario 10.
const (
	toolBootIndexed = "tarmount --materialize (published index)"
	toolBootBare    = "tarmount --materialize (no index)"
	toolBootExtract = "tarmount extract (published index)"
)

// The measurements of scenario 10; the letters order the report's tables
// (bootFile gives d and e).
const (
	bootGoVersion = "a. go version done"
	bootLocal     = "b. fully local"
	bootBytes     = "c. bytes from the origin, whole run"
	bootListing   = "f. complete listing (index pass ended)"
)

// bootFile names the measurement of the early file at pct% of the tar
// stream.
func bootFile(pct int64) string {
	return fmt.Sprintf("%c. first byte of the last file within %d%%", 'd'+slices.Index(earlyPercents, pct), pct)
}

func bootSc(what string) string { return scBoot + ": " + what }

// bootProfile is the only profile scenario 10 runs with.
const bootProfile = "objstore"

// sidecarSuffix names an index published beside its archive.
const sidecarSuffix = ".tarmount-index"

// The design's targets of scenario 10.
const (
	bootGoVersionMax = 0.3  // seconds to go version done, with a published index
	bootLocalMax     = 1.1  // fully local over tarmount extract with the index
	bootBytesMax     = 1.02 // origin bytes over the archive and its index
	bootEarlyMax     = 0.25 // the file within 10% over the complete listing, no index
)

// bootServe is what scenario 10 serves for one dataset and codec, on a
// server of its own: the archive (hard links, or copies, of the dataset's
// file) once beside each tarmount build's published index, and once alone.
type bootServe struct {
	srv     *server
	dir     string
	bare    string            // URL of the archive without an index
	indexed map[string]string // by build name: URL of the archive beside its index
	least   map[string]int64  // by build name: the archive's size plus its index's
	note    map[string]string // by build name: why its index could not be published
}

// serveBoot publishes the index of every build beside its copy of the
// archive (untimed) and serves them.
func (s *suite) serveBoot(ctx context.Context, cb *combo) (*bootServe, error) {
	obj := cb.d.object(cb.codec)
	src := filepath.Join(cb.d.dir, obj)
	st, err := os.Stat(src)
	if err != nil {
		return nil, err
	}
	bs := &bootServe{dir: filepath.Join(s.work, "boot"), indexed: map[string]string{}, least: map[string]int64{},
		note: map[string]string{}}
	os.RemoveAll(bs.dir)
	place := func(sub string) (string, error) {
		dst := filepath.Join(bs.dir, sub, obj)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return "", err
		}
		if os.Link(src, dst) == nil {
			return dst, nil
		}
		if out, err := runCmd(ctx, s.c.stepTimeout, s.env, "", "cp", src, dst); err != nil {
			return "", fmt.Errorf("copy %s: %v: %s", src, err, lastLine(out))
		}
		return dst, nil
	}
	if _, err := place("bare"); err != nil {
		bs.close()
		return nil, err
	}
	cache := filepath.Join(s.work, "boot-cache")
	defer os.RemoveAll(cache)
	paths := map[string]string{}
	for _, b := range s.c.builds {
		sub := "published"
		if b.name != "" {
			sub += "-" + b.name
		}
		local, err := place(sub)
		if err != nil {
			bs.close()
			return nil, err
		}
		info("publishing %s's index (tarmount index FILE --publish)", b.tool(toolTM))
		os.RemoveAll(cache)
		out, err := runCmd(ctx, s.c.indexTimeout, s.env, "", b.bin, "index", local, "--publish", "--cache-dir", cache, "--cache-disk", "0")
		if ctx.Err() != nil {
			bs.close()
			return nil, ctx.Err()
		}
		var ist os.FileInfo
		if err == nil {
			ist, err = os.Stat(local + sidecarSuffix)
		}
		if err != nil {
			bs.note[b.name] = fmt.Sprintf("%s index --publish failed: %v: %s", b.tool(toolTM), err, lastLine(out))
			warnf("%s", bs.note[b.name])
			continue
		}
		bs.least[b.name] = st.Size() + ist.Size()
		paths[b.name] = sub + "/" + obj
		info("%s: %s, its index %s", obj, fmtBytes(st.Size()), fmtBytes(ist.Size()))
	}
	if bs.srv, err = startServer(bootProfile, bs.dir); err != nil {
		bs.close()
		return nil, err
	}
	bs.bare = bs.srv.base + "/bare/" + obj
	for name, p := range paths {
		bs.indexed[name] = bs.srv.base + "/" + p
	}
	return bs, nil
}

func (bs *bootServe) close() {
	if bs.srv != nil {
		bs.srv.close()
	}
	os.RemoveAll(bs.dir)
}

// boot is scenario 10 for one dataset and codec: RUNS rounds of every
// tool, in alternating order, each round's trees on a filesystem of their
// own.
func (s *suite) boot(ctx context.Context, cb *combo) error {
	bs, err := s.serveBoot(ctx, cb)
	if err != nil {
		return err
	}
	defer bs.close()
	bcb := *cb
	bcb.srv, bcb.url = bs.srv, bs.bare
	var tools []string
	for _, base := range []string{toolBootIndexed, toolBootBare, toolBootExtract} {
		tools = append(tools, s.tools(base)...)
	}
	tools = s.withPeers(tools, curlTar(cb.codec), toolAria)
	if cb.codec == "seekable" {
		s.note("Scenario 10 on a seekable .tar.zst: tarmount pack embeds its index, so the rows \"no index\" use that one.")
	}
	for run := 1; run <= s.c.runs; run++ {
		say("%s %s %s, run %d/%d: boot with an empty cache", cb.d.name, cb.codec, bs.srv.name, run, s.c.runs)
		if err := s.bootRound(ctx, &bcb, bs, run, inOrder(run, slices.Clone(tools)...)); err != nil {
			return err
		}
	}
	return nil
}

func (s *suite) bootRound(ctx context.Context, cb *combo, bs *bootServe, run int, tools []string) error {
	ts := s.newTrees(ctx, cb, run, len(tools)+1)
	defer ts.close()
	for _, tool := range tools {
		if err := s.bootOne(ctx, cb, bs, ts, run, tool); err != nil {
			return err
		}
	}
	// A seekable .tar.zst embeds its index: no pass to stop.
	for _, tool := range tools {
		if base, _ := splitTool(tool); base == toolBootBare && cb.codec != "seekable" {
			if err := s.bootRemount(ctx, cb, bs, run, tool); err != nil {
				return err
			}
		}
	}
	return nil
}

// bootLabels are the measurements of scenario 10 for a tool's base name
// on a dataset in a codec.
func bootLabels(d *dataset, codec, base string) []string {
	var ls []string
	if d.kind == "go" {
		ls = append(ls, bootGoVersion)
	}
	ls = append(ls, bootLocal, bootBytes)
	for _, m := range d.facts.Early {
		ls = append(ls, bootFile(m.Percent))
	}
	// A seekable .tar.zst embeds its index: no pass to wait for.
	if base == toolBootBare && codec != "seekable" {
		ls = append(ls, bootListing)
	}
	return ls
}

// bootOne is one run of scenario 10 for one tool.
func (s *suite) bootOne(ctx context.Context, cb *combo, bs *bootServe, ts *trees, run int, tool string) error {
	f := cb.d.facts
	base, bn := splitTool(tool)
	labels := bootLabels(cb.d, cb.codec, base)
	url := bs.bare
	if base == toolBootIndexed || base == toolBootExtract {
		if note := bs.note[bn]; note != "" {
			for _, l := range labels {
				s.fail(s.result(cb, bootSc(l), tool, run), "%s", note)
			}
			return nil
		}
		url = bs.indexed[bn]
	}
	cache := filepath.Join(s.work, "cold-cache")
	os.RemoveAll(cache)
	defer os.RemoveAll(cache)
	mount := base == toolBootIndexed || base == toolBootBare
	var argv []string
	switch {
	case mount:
	case base == toolBootExtract:
		argv = []string{s.buildOf(tool).bin, "extract", url, ts.dest, "--cache-dir", cache, "--cache-disk", "0", "--quiet"}
	default:
		var na string
		if argv, na = s.peerCmd(cb.codec, tool, url, ts.dest, ts.dl); na != "" {
			if run == 1 {
				for _, l := range labels {
					s.na(cb, bootSc(l), tool, na)
				}
			}
			return nil
		}
	}
	if err := ts.next(ctx); err != nil {
		return err
	}
	log := s.logPath(cb, tool+"-boot", run)
	root, mnt := ts.dest, s.mountpoint(toolTM)
	c0 := cb.srv.counters()
	t0 := time.Now()
	var p *proc
	var err error
	if mount {
		root = mnt
		mcb := *cb
		mcb.url = url
		p, err = s.startMount(&mcb, s.buildOf(tool).tool(toolTM), mnt, cache, log, "--materialize", ts.dest)
	} else {
		p, err = startProc(argv, s.env, log)
	}
	if err != nil {
		return err
	}
	defer func() {
		if mount {
			stopMount(p, mnt)
		} else {
			p.stop(15 * time.Second)
		}
	}()

	// Every measurement at once; fully local is the state tarmount
	// keeps on DIR saying DIR is whole, or the command's exit.
	var ms []milestone
	for _, l := range labels {
		switch l {
		case bootGoVersion:
			goroot := filepath.Join(root, cb.d.top)
			ms = append(ms, probing(l, goVersion(s.goEnv(goroot), s.work, goroot)))
		case bootLocal:
			ms = append(ms, milestone{l, func(ctx context.Context) (time.Time, error) {
				if mount {
					return waitComplete(ctx, p, ts.dest)
				}
				return waitExit(ctx, p)
			}})
		case bootListing:
			ms = append(ms, milestone{l, func(ctx context.Context) (time.Time, error) {
				return waitLog(ctx, p, "msg=indexed", s.c.stepTimeout)
			}})
		}
	}
	for _, m := range f.Early {
		ms = append(ms, probing(bootFile(m.Percent), firstByte(filepath.Join(root, m.Path))))
	}
	at, errs := await(ctx, t0, s.c.stepTimeout, ms)
	whole := time.Since(t0)
	c1 := cb.srv.counters()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var bad []string
	for _, e := range errs {
		if e != nil {
			bad = append(bad, e.Error())
		}
	}
	// The files read early must be whole, the tree complete, and
	// without an index the listing too.
	for _, m := range f.Early {
		if err := checkMember(filepath.Join(root, m.Path), m.Member); err != nil {
			bad = append(bad, "content check: "+err.Error())
		}
	}
	trees := []string{ts.dest}
	if base == toolBootBare {
		trees = append(trees, mnt)
	}
	for _, dir := range trees {
		if n, err := countFiles(dir); err != nil || n != f.Files {
			bad = append(bad, fmt.Sprintf("%s: %d files (%v), want %d", dir, n, err, f.Files))
		}
	}
	var rss int64
	if mount {
		rss = vmHWM(p.pid())
	}
	for i, m := range ms {
		r := s.result(cb, bootSc(m.label), tool, run)
		if len(bad) > 0 {
			s.fail(r, "%s", strings.Join(bad, "; "))
			continue
		}
		r.Status, r.Seconds = statusOK, at[i].Seconds()
		s.record(r)
	}
	r := s.result(cb, bootSc(bootBytes), tool, run)
	measured(&r, c0, c1)
	r.Seconds, r.Least = whole.Seconds(), bs.least[bn]
	if len(bad) > 0 {
		s.fail(r, "%s", strings.Join(bad, "; "))
		return nil
	}
	r.Status = statusOK
	s.record(r)
	s.recordRSS(cb, "boot", tool, run, rss)
	return nil
}

// ------------------------------------------------------------ report

// Check is one target of scenario 10 (or a ratio target, ratioChecks) for
// one tarmount build on one dataset, codec and profile: a figure, or a
// ratio of two medians, of the same run of the suite.
type Check struct {
	Scenario string  `json:"scenario"`
	Dataset  string  `json:"dataset"`
	Codec    string  `json:"codec"`
	Profile  string  `json:"profile"`
	Tool     string  `json:"tool"`     // the row the target is about
	Target   string  `json:"target"`   // what the design asks
	Value    float64 `json:"value"`    // seconds or a ratio; 0 when a row has no value
	Limit    float64 `json:"limit"`    // the most Value may be
	Measured string  `json:"measured"` // Value and what it is made of
	Met      bool    `json:"met"`
}

// rows returns the group's rows; none for no group.
func (g *Group) rows() []Row {
	if g == nil {
		return nil
	}
	return g.Rows
}

// bootTargets checks scenario 10's rows against the design's targets,
// marks those rows with them, and returns the checks.
func bootTargets(groups []Group) []Check {
	type key struct{ ds, codec, prof string }
	var keys []key
	byWhat := map[key]map[string]*Group{}
	for i := range groups {
		g := &groups[i]
		what, ok := strings.CutPrefix(g.Scenario, scBoot+": ")
		if !ok {
			continue
		}
		k := key{g.Dataset, g.Codec, g.Profile}
		if byWhat[k] == nil {
			byWhat[k] = map[string]*Group{}
			keys = append(keys, k)
		}
		byWhat[k][what] = g
	}
	var cs []Check
	for _, k := range keys {
		gs := byWhat[k]
		row := func(what, base, build string) *Row {
			g := gs[what]
			if g == nil {
				return nil
			}
			for i := range g.Rows {
				if b, n := splitTool(g.Rows[i].Tool); b == base && n == build {
					return &g.Rows[i]
				}
			}
			return nil
		}
		// One set of checks per build that has rows of the mount with the
		// published index, in the order of its rows.
		var builds []string
		for _, what := range []string{bootGoVersion, bootLocal, bootBytes} {
			for _, r := range gs[what].rows() {
				if b, n := splitTool(r.Tool); b == toolBootIndexed && !slices.Contains(builds, n) {
					builds = append(builds, n)
				}
			}
		}
		for _, b := range builds {
			check := func(r *Row, base, target, rowTarget string, value, limit float64, measured string) {
				c := Check{Scenario: scBoot, Dataset: k.ds, Codec: k.codec, Profile: k.prof, Tool: build{name: b}.tool(base), Target: target,
					Limit: limit, Measured: "–"}
				if r != nil && !math.IsNaN(value) && !math.IsInf(value, 0) && value > 0 {
					c.Value, c.Measured, c.Met = value, measured, value <= limit
					met := c.Met
					r.Target, r.TargetMet = rowTarget, &met
				}
				cs = append(cs, c)
			}
			median := func(r *Row) float64 {
				if r == nil {
					return math.NaN()
				}
				return r.Median
			}
			if gs[bootGoVersion] != nil {
				r := row(bootGoVersion, toolBootIndexed, b)
				v := median(r)
				check(r, toolBootIndexed, fmt.Sprintf("go version done with a published index ≤ %g s", bootGoVersionMax),
					fmt.Sprintf("≤ %g s", bootGoVersionMax), v, bootGoVersionMax, fmtSeconds(v)+" s")
			}
			r, ref := row(bootLocal, toolBootIndexed, b), row(bootLocal, toolBootExtract, b)
			v, w := median(r), median(ref)
			check(r, toolBootIndexed, fmt.Sprintf("fully local with a published index ≤ %gx tarmount extract with it", bootLocalMax),
				fmt.Sprintf("≤ %gx extract with the index (%s s)", bootLocalMax, fmtSeconds(bootLocalMax*w)),
				v/w, bootLocalMax, fmt.Sprintf("%.3fx (%s s / %s s)", v/w, fmtSeconds(v), fmtSeconds(w)))
			r = row(bootBytes, toolBootIndexed, b)
			least, fetched := math.NaN(), math.NaN()
			if r != nil && r.Least > 0 && r.Fetched >= 0 {
				least, fetched = float64(r.Least), float64(r.Fetched)
			}
			check(r, toolBootIndexed, fmt.Sprintf("bytes from the origin with a published index ≤ %gx archive + index", bootBytesMax),
				fmt.Sprintf("≤ %gx archive + index (%s)", bootBytesMax, fmtBytes(int64(bootBytesMax*least))),
				fetched/least, bootBytesMax, fmt.Sprintf("%.3fx (%s / %s)", fetched/least, fmtBytes(int64(fetched)), fmtBytes(int64(least))))
			if gs[bootRemountBytes] != nil {
				r := row(bootRemountBytes, toolBootBare, b)
				size, fetched := math.NaN(), math.NaN()
				if r != nil && r.Least > 0 && r.Fetched >= 0 {
					size, fetched = float64(r.Least), float64(r.Fetched)
				}
				check(r, toolBootBare, fmt.Sprintf("a remount after an unmount at %d%% of the first pass fetches ≤ %gx the archive", remountAt, remountBytesMax),
					fmt.Sprintf("≤ %gx the archive (%s)", remountBytesMax, fmtBytes(int64(remountBytesMax*size))),
					fetched/size, remountBytesMax, fmt.Sprintf("%.3fx (%s / %s)", fetched/size, fmtBytes(int64(fetched)), fmtBytes(int64(size))))
			}
			early := bootFile(earlyPercents[len(earlyPercents)-1])
			if gs[early] != nil {
				r, ref := row(early, toolBootBare, b), row(bootListing, toolBootBare, b)
				v, w := median(r), median(ref)
				check(r, toolBootBare, fmt.Sprintf("without an index, the file within the first %d%% readable ≤ 1/4 of the time to a complete listing",
					earlyPercents[len(earlyPercents)-1]),
					fmt.Sprintf("≤ %g of the complete listing (%s s)", bootEarlyMax, fmtSeconds(bootEarlyMax*w)),
					v/w, bootEarlyMax, fmt.Sprintf("%.3f (%s s / %s s)", v/w, fmtSeconds(v), fmtSeconds(w)))
			}
		}
	}
	return cs
}
