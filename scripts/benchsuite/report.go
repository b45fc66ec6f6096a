package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
)

// Result is one run of one tool in one scenario: a line of runs.jsonl.
type Result struct {
	Scenario string  `json:"scenario"`
	Dataset  string  `json:"dataset"`
	Codec    string  `json:"codec"`
	Profile  string  `json:"profile"`
	Tool     string  `json:"tool"`
	Run      int     `json:"run"`
	Status   string  `json:"status"` // ok, fail, or n/a (the tool cannot do it: see Note)
	Seconds  float64 `json:"seconds"`
	Fetched  int64   `json:"bytes_fetched"` // what the server sent during the step; -1 when not measured
	Requests int64   `json:"requests"`
	Payload  int64   `json:"payload_bytes"` // what the step produced, for MB/s; 0 when not meaningful
	Reads    int     `json:"reads,omitempty"`
	P50      float64 `json:"p50,omitempty"` // seconds per read
	P99      float64 `json:"p99,omitempty"`
	RSS      int64   `json:"rss,omitempty"` // VmHWM in bytes
	// CPU is the user and system time of the step's process and the
	// children it waited for, in seconds; 0 when not measured.
	CPU float64 `json:"cpu_s,omitempty"`
	// Least is, for scenario 10's bytes from the origin, the archive's
	// size plus its published index's: what a run fetches at the least.
	Least int64  `json:"least_bytes,omitempty"`
	Note  string `json:"note,omitempty"`
}

// Statuses of a Result.
const (
	statusOK   = "ok"
	statusFail = "fail"
	statusNA   = "n/a"
)

// Scenario names; their order is the order of the report.
const (
	scColdMount  = "1. cold mount-ready, no index"
	scWarmMount  = "2. warm mount-ready, saved index"
	scRandom     = "3. cold random reads of small files"
	scSeq        = "4. sequential read of the largest member"
	scExtract    = "5. full extraction"
	scGoVersion  = "6a. go version with GOROOT inside"
	scGoBuild    = "6b. go build hello (fresh GOCACHE)"
	scRSS        = "7. peak RSS of the mount"
	scProgress   = "8. progressive mount, no index"
	scIndexPass  = "9. index pass to the end, no index"
	scBoot       = "10. boot, empty cache, object storage"
	scUpgrade    = "11. upgrade of a materialized go tree to another Go release"
	scGzipDecode = "12. gzip decode of the local .tar.gz to /dev/null"
	scTmpfs      = "13. extraction of the local .tar.gz to tmpfs"
	scSeqLocal   = "14. sequential read of the largest member through a mount of the local .tar.gz"
	scOverlap    = "15. first extraction (no index) against its fetch, decode and write alone"
)

var scenarioOrder = []string{scColdMount, scWarmMount, scRandom, scSeq, scExtract, scGoVersion, scGoBuild, scRSS, scProgress, scIndexPass, scBoot, scUpgrade,
	scGzipDecode, scTmpfs, scSeqLocal, scOverlap}

// percentile returns the p-th percentile (0-100) of xs by linear
// interpolation between closest ranks; NaN for no values.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	pos := p / 100 * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := int(math.Ceil(pos))
	return s[lo] + (s[hi]-s[lo])*(pos-float64(lo))
}

// metricOrigin is the metric of scenario 10's bytes from the origin.
const metricOrigin = "MB from the origin"

// metric is what a scenario compares: seconds (lower is better) unless
// the scenario says otherwise.
type metric struct {
	name   string
	higher bool // higher is better
	value  func(Result) float64
}

func metricOf(scenario string) metric {
	if strings.HasPrefix(scenario, scRSS) {
		scenario = scRSS
	}
	switch scenario {
	case scRandom:
		return metric{name: "p50 s per read", value: func(r Result) float64 { return r.P50 }}
	case scSeq, scSeqLocal:
		return metric{name: "MB/s", higher: true, value: func(r Result) float64 {
			if r.Seconds <= 0 {
				return math.NaN()
			}
			return float64(r.Payload) / r.Seconds / 1e6
		}}
	case scRSS:
		return metric{name: "peak RSS MiB", value: func(r Result) float64 { return float64(r.RSS) / (1 << 20) }}
	case bootSc(bootBytes), bootSc(bootRemountBytes):
		return metric{name: metricOrigin, value: func(r Result) float64 { return float64(r.Fetched) / 1e6 }}
	}
	return metric{name: "seconds", value: func(r Result) float64 { return r.Seconds }}
}

// Row summarizes the runs of one tool in one group.
type Row struct {
	Tool      string  `json:"tool"`
	Runs      int     `json:"runs"`
	OK        int     `json:"ok"`
	Failed    int     `json:"failed"`
	NA        bool    `json:"na,omitempty"`
	Median    float64 `json:"median"` // of the group's metric, over the ok runs
	Min       float64 `json:"min"`
	Max       float64 `json:"max"`
	Seconds   float64 `json:"seconds"` // median seconds
	MBps      float64 `json:"mbps,omitempty"`
	Fetched   int64   `json:"bytes_fetched"` // median; -1 when not measured
	Requests  int64   `json:"requests"`
	Reads     int     `json:"reads,omitempty"` // per run
	P50       float64 `json:"p50,omitempty"`
	P99       float64 `json:"p99,omitempty"`
	RSS       int64   `json:"rss,omitempty"`
	CPU       float64 `json:"cpu_s,omitempty"`              // median CPU seconds, over the runs that measured it
	Least     int64   `json:"least_bytes,omitempty"`        // scenario 10: the archive's size plus its published index's
	Ratio     float64 `json:"ratio_to_best_peer,omitempty"` // < 1: better than the best peer
	VsBase    float64 `json:"ratio_to_baseline,omitempty"`  // < 1: better than the baseline build's row
	Target    string  `json:"target,omitempty"`
	TargetMet *bool   `json:"target_met,omitempty"`
	Notes     string  `json:"notes,omitempty"`
}

// Group is one row group: a scenario on one dataset, codec and profile.
type Group struct {
	Scenario string `json:"scenario"`
	Dataset  string `json:"dataset"`
	Codec    string `json:"codec"`
	Profile  string `json:"profile"`
	Metric   string `json:"metric"`
	Higher   bool   `json:"higher_is_better"`
	Rows     []Row  `json:"rows"`
}

// Summary is the summary JSON that the markdown and the chart are made of.
type Summary struct {
	Baseline string      `json:"baseline,omitempty"` // the build the others are compared with (several tarmount builds)
	Meta     [][2]string `json:"meta"`
	Notes    []string    `json:"notes"`
	Groups   []Group     `json:"groups"`
	Targets  []Check     `json:"targets,omitempty"` // scenario 10's and the ratio targets, from the medians of their groups
}

// isTarmount tells tarmount's rows from the peers'.
func isTarmount(tool string) bool { return strings.HasPrefix(tool, "tarmount") }

// isReference marks the rows that a target compares with (the CLI decode,
// the local tree).
func isReference(scenario, tool string) bool {
	switch scenario {
	case scColdMount, scSeq, scIndexPass:
		return strings.HasPrefix(tool, "curl")
	case scGoVersion, scGoBuild:
		return tool == toolLocal
	}
	return false
}

func median64(xs []int64) int64 {
	if len(xs) == 0 {
		return -1
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[(len(s)-1)/2]
}

// summarize groups results and computes medians, ratios and targets.
func summarize(results []Result, meta [][2]string, notes []string) Summary {
	type key struct{ sc, ds, codec, prof string }
	byKey := map[key][]Result{}
	var keys []key
	for _, r := range results {
		k := key{r.Scenario, r.Dataset, r.Codec, r.Profile}
		if _, ok := byKey[k]; !ok {
			keys = append(keys, k)
		}
		byKey[k] = append(byKey[k], r)
	}
	rank := func(sc string) int {
		for i, o := range scenarioOrder {
			if strings.HasPrefix(sc, o) {
				return i
			}
		}
		return len(scenarioOrder)
	}
	sort.SliceStable(keys, func(i, j int) bool {
		a, b := keys[i], keys[j]
		if ra, rb := rank(a.sc), rank(b.sc); ra != rb {
			return ra < rb
		}
		// The phases of scenario 7 together; otherwise in the order the
		// suite ran them.
		return a.sc < b.sc
	})
	s := Summary{Meta: meta, Notes: notes}
	// The baseline is the first build of -tarmount, which runs first in
	// the first round of every scenario.
	for _, r := range results {
		if _, name := splitTool(r.Tool); name != "" && isTarmount(r.Tool) {
			s.Baseline = name
			break
		}
	}
	for _, k := range keys {
		m := metricOf(k.sc)
		g := Group{Scenario: k.sc, Dataset: k.ds, Codec: k.codec, Profile: k.prof, Metric: m.name, Higher: m.higher}
		var tools []string
		byTool := map[string][]Result{}
		for _, r := range byKey[k] {
			if _, ok := byTool[r.Tool]; !ok {
				tools = append(tools, r.Tool)
			}
			byTool[r.Tool] = append(byTool[r.Tool], r)
		}
		for _, t := range tools {
			g.Rows = append(g.Rows, summarizeRow(t, byTool[t], m))
		}
		setRatiosAndTargets(&g)
		setVsBaseline(&g, s.Baseline)
		s.Groups = append(s.Groups, g)
	}
	s.Targets = append(bootTargets(s.Groups), ratioChecks(s.Groups)...)
	return s
}

func summarizeRow(tool string, rs []Result, m metric) Row {
	row := Row{Tool: tool, Fetched: -1, Requests: -1}
	var vals, secs, p50, p99, cpu []float64
	var fetched, reqs, rss []int64
	var notes []string
	for _, r := range rs {
		if r.Note != "" && !slices.Contains(notes, r.Note) {
			notes = append(notes, r.Note)
		}
		switch r.Status {
		case statusNA:
			row.NA = true
			continue
		case statusOK:
			row.Runs++
			row.OK++
		default:
			row.Runs++
			row.Failed++
			continue
		}
		if v := m.value(r); !math.IsNaN(v) {
			vals = append(vals, v)
		}
		secs = append(secs, r.Seconds)
		if r.Fetched >= 0 {
			fetched = append(fetched, r.Fetched)
			reqs = append(reqs, r.Requests)
		}
		if r.Reads > 0 {
			row.Reads = r.Reads
			p50 = append(p50, r.P50)
			p99 = append(p99, r.P99)
		}
		if r.RSS > 0 {
			rss = append(rss, r.RSS)
		}
		if r.CPU > 0 {
			cpu = append(cpu, r.CPU)
		}
		if r.Least > 0 {
			row.Least = r.Least
		}
	}
	row.Notes = strings.Join(notes, "; ")
	if len(vals) == 0 {
		row.Median, row.Min, row.Max = math.NaN(), math.NaN(), math.NaN()
		return row
	}
	row.Median = percentile(vals, 50)
	row.Min, row.Max = slices.Min(vals), slices.Max(vals)
	row.Seconds = percentile(secs, 50)
	row.Fetched, row.Requests = median64(fetched), median64(reqs)
	if len(p50) > 0 {
		row.P50, row.P99 = percentile(p50, 50), percentile(p99, 50)
	}
	if len(rss) > 0 {
		row.RSS = median64(rss)
	}
	if len(cpu) > 0 {
		row.CPU = percentile(cpu, 50)
	}
	if m.higher {
		row.MBps = row.Median
	} else if p := rs[0].Payload; p > 0 && row.Seconds > 0 {
		row.MBps = float64(p) / row.Seconds / 1e6
	}
	return row
}

// setRatiosAndTargets compares every row with the best peer of its group
// and checks tarmount's rows against the design targets.
func setRatiosAndTargets(g *Group) {
	best, ref := math.NaN(), math.NaN()
	better := func(a, b float64) bool {
		if math.IsNaN(b) {
			return true
		}
		if g.Higher {
			return a > b
		}
		return a < b
	}
	for _, r := range g.Rows {
		if isTarmount(r.Tool) || math.IsNaN(r.Median) {
			continue
		}
		if better(r.Median, best) {
			best = r.Median
		}
		if isReference(g.Scenario, r.Tool) && better(r.Median, ref) {
			ref = r.Median
		}
	}
	if g.Scenario == scOverlap {
		best = math.NaN() // its other rows are the extraction's parts, not peers
	}
	for i := range g.Rows {
		r := &g.Rows[i]
		if !math.IsNaN(best) && !math.IsNaN(r.Median) && r.Median > 0 && best > 0 {
			if g.Higher {
				r.Ratio = best / r.Median
			} else {
				r.Ratio = r.Median / best
			}
		}
		if isTarmount(r.Tool) {
			setTarget(g, r, best, ref)
		}
	}
}

// ratioTarget is a target of issue 26's comparisons: the median of a
// tarmount row (each build's) at most limit times a peer's median in the
// same group.
type ratioTarget struct {
	scenario, codec string // codec empty: every codec
	profile         string // empty: every profile
	tool, peer      string // tool without its build's name
	limit           float64
	what            string // the target, for the table of checks
	row             bool   // the check is also the row's target
	// atLeast: the scenario's metric is a rate, and the tarmount row's
	// median must be at least limit times the peer's.
	atLeast bool
}

var ratioTargets = []ratioTarget{
	{scGzipDecode, "gz", "", toolTMIndexPass, toolLibdeflate, 1.0, "the index pass of a local .tar.gz", true, false},
	{scGzipDecode, "gz", "", toolTMIndexPass, toolIgzip, 1.0, "the index pass of a local .tar.gz (the moonshot)", false, false},
	{scTmpfs, "gz", "", toolTMIndex, toolTarPlain, 1.5, "extraction to tmpfs with an index", true, false},
	{scExtract, "gz", "objstore", toolTMCold, toolCurlRapid, 0.8, "the first extraction (no index)", true, false},
	{scExtract, "zst", "objstore", toolTMCold, curlTar("zst"), 0.8, "the first extraction (no index)", true, false},
	{scExtract, "lz4", "objstore", toolTMCold, curlTar("lz4"), 0.6, "the first extraction (no index)", true, false},
	{scSeqLocal, "gz", "", toolTMSeqLocal, toolGzip, 1.5, "the MB/s of a sequential read through the mount", true, true},
	{scOverlap, "", "", toolTMCold, toolLongestAlone, overlapMax, "the first extraction (no index)", true, false},
	// Informational: the same bound against what the machine's cores allow.
	{scOverlap, "", "", toolTMCold, toolAloneOrCPU, overlapMax, "the first extraction (no index)", false, false},
}

// ratioChecks checks the rows of every group that a ratio target names,
// in the order of the groups, once per tarmount build; a group without
// the peer's row (a run without peers) has no check. The rows that the
// checks are about get them as their targets.
func ratioChecks(groups []Group) []Check {
	var cs []Check
	for i := range groups {
		g := &groups[i]
		for _, t := range ratioTargets {
			if g.Scenario != t.scenario || t.codec != "" && g.Codec != t.codec || t.profile != "" && g.Profile != t.profile {
				continue
			}
			j := slices.IndexFunc(g.Rows, func(r Row) bool { return r.Tool == t.peer })
			if j < 0 {
				continue
			}
			ref := g.Rows[j].Median
			for k := range g.Rows {
				r := &g.Rows[k]
				if base, _ := splitTool(r.Tool); base != t.tool {
					continue
				}
				cmp, unit := "≤", " s"
				if t.atLeast {
					cmp, unit = "≥", " MB/s"
				}
				c := Check{Scenario: g.Scenario, Dataset: g.Dataset, Codec: g.Codec, Profile: g.Profile, Tool: r.Tool,
					Target: fmt.Sprintf("%s %s %gx %s", t.what, cmp, t.limit, t.peer), Limit: t.limit, Measured: "–"}
				v := r.Median / ref
				if !math.IsNaN(v) && !math.IsInf(v, 0) && v > 0 {
					c.Value, c.Met = v, v <= t.limit
					fmtV := func(x float64) string { return fmtSeconds(x) }
					if t.atLeast {
						c.Met = v >= t.limit
						fmtV = func(x float64) string { return fmt.Sprintf("%.0f", x) }
					}
					c.Measured = fmt.Sprintf("%.3fx (%s%s / %s%s)", v, fmtV(r.Median), unit, fmtV(ref), unit)
					if t.row {
						met := c.Met
						r.Target = fmt.Sprintf("%s %gx %s (%s%s)", cmp, t.limit, t.peer, fmtV(t.limit*ref), unit)
						r.TargetMet = &met
					}
				}
				cs = append(cs, c)
			}
		}
	}
	return cs
}

// setVsBaseline compares each tarmount row of a build with the same
// tool's row of the baseline build.
func setVsBaseline(g *Group, baseline string) {
	if baseline == "" {
		return
	}
	medians := map[string]float64{}
	for _, r := range g.Rows {
		if base, name := splitTool(r.Tool); name == baseline && isTarmount(r.Tool) {
			medians[base] = r.Median
		}
	}
	for i := range g.Rows {
		r := &g.Rows[i]
		base, name := splitTool(r.Tool)
		b, ok := medians[base]
		if name == "" || name == baseline || !ok || math.IsNaN(b) || math.IsNaN(r.Median) || b <= 0 || r.Median <= 0 {
			continue
		}
		if g.Higher {
			r.VsBase = b / r.Median
		} else {
			r.VsBase = r.Median / b
		}
	}
}

// spanBytes is tarmount's default span of decoded bytes: the most that a
// small read should fetch.
const spanBytes = 4 << 20

func setTarget(g *Group, r *Row, best, ref float64) {
	met := func(ok bool) { r.TargetMet = &ok }
	if math.IsNaN(r.Median) {
		return
	}
	switch g.Scenario {
	case scWarmMount:
		r.Target = "< 0.1 s"
		met(r.Median < 0.1)
	case scColdMount, scIndexPass:
		if math.IsNaN(ref) {
			return
		}
		r.Target = fmt.Sprintf("≤ 1.2x CLI decode (%.3g s)", 1.2*ref)
		met(r.Median <= 1.2*ref)
	case scRandom:
		r.Target = "p50 ≤ 60 ms, ≤ 1 span (4 MiB) per read"
		perRead := float64(r.Fetched) / float64(max(r.Reads, 1))
		met(r.P50 <= 0.060 && r.Fetched >= 0 && perRead <= spanBytes)
	case scSeq:
		if math.IsNaN(ref) {
			return
		}
		r.Target = fmt.Sprintf("≥ CLI decode (%.0f MB/s)", ref)
		met(r.Median >= ref)
	case scExtract:
		if math.IsNaN(best) {
			return
		}
		r.Target = fmt.Sprintf("< every peer (%.3g s)", best)
		met(r.Median < best)
	case scGoVersion, scGoBuild:
		if math.IsNaN(ref) {
			return
		}
		r.Target = fmt.Sprintf("≤ 1.1x local (%.3g s)", 1.1*ref)
		met(r.Median <= 1.1*ref)
	}
}

func fmtSeconds(s float64) string {
	switch {
	case math.IsNaN(s):
		return "–"
	case s >= 100:
		return fmt.Sprintf("%.0f", s)
	case s >= 10:
		return fmt.Sprintf("%.1f", s)
	case s >= 1:
		return fmt.Sprintf("%.2f", s)
	default:
		return fmt.Sprintf("%.3g", s)
	}
}

func fmtBytes(n int64) string {
	switch {
	case n < 0:
		return "–"
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.0f kB", float64(n)/1e3)
	default:
		return fmt.Sprintf("%d B", n)
	}
}

func fmtValue(metric string, v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case strings.HasPrefix(metric, "p50"):
		return fmt.Sprintf("%.1f ms", v*1e3)
	case metric == "MB/s":
		return fmt.Sprintf("%.0f MB/s", v)
	case strings.HasPrefix(metric, "peak RSS"):
		return fmt.Sprintf("%.0f MiB", v)
	case metric == metricOrigin:
		return fmt.Sprintf("%.1f MB", v)
	}
	return fmtSeconds(v) + " s"
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// writeMarkdown renders the summary: the meta lines, one table per
// scenario, then the notes.
func writeMarkdown(w io.Writer, s Summary) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "# tarmount benchmark suite")
	fmt.Fprintln(bw)
	for _, m := range s.Meta {
		fmt.Fprintf(bw, "- %s: %s\n", m[0], mdEscape(m[1]))
	}
	if s.Baseline != "" {
		fmt.Fprintf(bw, "- baseline: %s (\"vs %s\" is a row's median over the same tool's row of that build; where the two rows' min–max ranges overlap, the difference is within noise)\n", s.Baseline, s.Baseline)
	}
	last := ""
	for _, g := range s.Groups {
		if g.Scenario != last {
			last = g.Scenario
			fmt.Fprintf(bw, "\n## %s (%s)\n\n", g.Scenario, g.Metric)
			head := "| dataset | codec | profile | tool | median | min–max | CPU | MB/s | fetched | requests | p50 / p99 | peak RSS | vs best peer | target |"
			rule := "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"
			if s.Baseline != "" {
				head += " vs " + mdEscape(s.Baseline) + " |"
				rule += "---:|"
			}
			fmt.Fprintln(bw, head)
			fmt.Fprintln(bw, rule)
		}
		for _, r := range g.Rows {
			cells := rowCells(g, r)
			if s.Baseline != "" {
				vs := ""
				if r.VsBase > 0 {
					vs = fmt.Sprintf("%.2fx", r.VsBase)
				}
				cells = append(cells, vs)
			}
			fmt.Fprintf(bw, "| %s | %s | %s | %s | %s |\n", g.Dataset, g.Codec, g.Profile, mdEscape(r.Tool), strings.Join(cells, " | "))
		}
	}
	last = ""
	for _, c := range s.Targets {
		if c.Scenario != last {
			last = c.Scenario
			fmt.Fprintf(bw, "\n## %s: the targets, from the medians of this run\n\n", strings.TrimSuffix(c.Scenario, ", object storage"))
			fmt.Fprintln(bw, "| dataset | codec | profile | tool | target | measured | met |")
			fmt.Fprintln(bw, "|---|---|---|---|---|---:|---|")
		}
		met := "❌ missed"
		if c.Met {
			met = "✅ met"
		}
		if c.Value == 0 {
			met = "❌ no value"
		}
		fmt.Fprintf(bw, "| %s | %s | %s | %s | %s | %s | %s |\n", c.Dataset, c.Codec, c.Profile, mdEscape(c.Tool), mdEscape(c.Target), c.Measured, met)
	}
	if len(s.Notes) > 0 {
		fmt.Fprintln(bw, "\n## Notes")
		fmt.Fprintln(bw)
		for _, n := range s.Notes {
			fmt.Fprintf(bw, "- %s\n", n)
		}
	}
	return bw.Flush()
}

func rowCells(g Group, r Row) []string {
	if r.OK == 0 {
		what := "failed"
		if r.NA && r.Failed == 0 {
			what = "n/a"
		}
		note := what
		if r.Failed > 0 {
			note = fmt.Sprintf("%s (%d/%d runs)", what, r.Failed, r.Runs)
		}
		if r.Notes != "" {
			note += ": " + mdEscape(r.Notes)
		}
		return []string{note, "", "", "", "", "", "", "", "", ""}
	}
	med := fmtValue(g.Metric, r.Median)
	if r.Failed > 0 {
		med += fmt.Sprintf(" (%d/%d runs failed)", r.Failed, r.Runs)
	}
	if r.Notes != "" {
		med += " ¹"
	}
	rng := fmtValue(g.Metric, r.Min) + "–" + fmtValue(g.Metric, r.Max)
	if r.OK == 1 {
		rng = ""
	}
	cpu := ""
	if r.CPU > 0 {
		cpu = fmtSeconds(r.CPU) + " s"
	}
	mbps := ""
	if r.MBps > 0 {
		mbps = fmt.Sprintf("%.0f", r.MBps)
	}
	reqs := ""
	if r.Requests >= 0 {
		reqs = fmt.Sprint(r.Requests)
	}
	lat := ""
	if r.P50 > 0 {
		lat = fmt.Sprintf("%.1f / %.1f ms", r.P50*1e3, r.P99*1e3)
	}
	rss := ""
	if r.RSS > 0 {
		rss = fmt.Sprintf("%.0f MiB", float64(r.RSS)/(1<<20))
	}
	ratio := ""
	if r.Ratio > 0 {
		ratio = fmt.Sprintf("%.2fx", r.Ratio)
	}
	target := ""
	if r.TargetMet != nil {
		mark := "❌"
		if *r.TargetMet {
			mark = "✅"
		}
		target = mark + " " + mdEscape(r.Target)
	}
	if r.Notes != "" {
		target = strings.TrimSpace(target + " ¹ " + mdEscape(r.Notes))
	}
	return []string{med, rng, cpu, mbps, fmtBytes(r.Fetched), reqs, lat, rss, ratio, target}
}

// readResults reads runs.jsonl.
func readResults(path string) ([]Result, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rs []Result
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if len(strings.TrimSpace(sc.Text())) == 0 {
			continue
		}
		var r Result
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		rs = append(rs, r)
	}
	return rs, sc.Err()
}
