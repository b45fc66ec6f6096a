// Command bench holds the small helpers of scripts/bench-core.sh that are
// awkward in bash: precise polling of a mount, reading the counters of
// scripts/httpserve, and turning the raw measurements into a markdown table
// and a JSON report. It knows nothing of tarmount's packages.
//
//	bench now                                  print the wall clock in seconds (µs precision)
//	bench waitpath -pid PID -timeout 60s PATH  poll stat(PATH) every 2 ms; print the time it answered
//	bench stats BASE_URL                       print "requests bytes" served so far by httpserve
//	bench dur 73ms                             print a Go duration in seconds
//	bench report -in runs.tsv -meta meta.tsv -md OUT.md -json OUT.json
//
// runs.tsv has one measurement per line, tab-separated:
//
//	scenario profile tool run status seconds bytes requests payload note
//
// where status is "ok" or "fail", bytes and requests are what the server
// counted during the measured step (-1 when not measured), payload is the
// number of bytes the step produced (for MB/s; 0 when not meaningful) and
// note is free text. meta.tsv holds "key<TAB>value" lines printed above the
// table and copied into the JSON.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: bench now|waitpath|stats|dur|report ...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "now":
		fmt.Println(seconds(time.Now()))
	case "waitpath":
		err = waitPath(os.Args[2:])
	case "stats":
		err = stats(os.Args[2:])
	case "dur":
		err = dur(os.Args[2:])
	case "report":
		err = report(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func seconds(t time.Time) string {
	return fmt.Sprintf("%d.%06d", t.Unix(), t.Nanosecond()/1000)
}

// waitPath polls stat(path) until it succeeds, the process pid exits, or
// the timeout passes. On success it prints the wall clock time at which the
// stat answered.
func waitPath(args []string) error {
	fs := flag.NewFlagSet("waitpath", flag.ContinueOnError)
	pid := fs.Int("pid", 0, "fail as soon as this process has exited (0: do not watch)")
	timeout := fs.Duration("timeout", 60*time.Second, "give up after this long")
	interval := fs.Duration("interval", 2*time.Millisecond, "time between two stat calls")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return errors.New("usage: bench waitpath [-pid PID] [-timeout D] [-interval D] PATH")
	}
	path := fs.Arg(0)
	deadline := time.Now().Add(*timeout)
	for {
		if _, err := os.Stat(path); err == nil {
			fmt.Println(seconds(time.Now()))
			return nil
		}
		if *pid > 0 && !alive(*pid) {
			return fmt.Errorf("process %d exited before %s appeared", *pid, path)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s did not appear within %s", path, *timeout)
		}
		time.Sleep(*interval)
	}
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the command name, which is in parentheses.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z' && s[i+2] != 'X'
	}
	return true
}

// stats prints the request and byte counters of an httpserve instance.
func stats(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: bench stats BASE_URL")
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Get(strings.TrimSuffix(args[0], "/") + "/-/stats")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /-/stats: %s", resp.Status)
	}
	var s struct {
		Requests int64 `json:"requests"`
		Bytes    int64 `json:"bytes"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&s); err != nil {
		return fmt.Errorf("GET /-/stats: %w", err)
	}
	fmt.Println(s.Requests, s.Bytes)
	return nil
}

func dur(args []string) error {
	if len(args) != 1 {
		return errors.New("usage: bench dur DURATION")
	}
	d, err := time.ParseDuration(args[0])
	if err != nil {
		return err
	}
	fmt.Printf("%.6f\n", d.Seconds())
	return nil
}

// run is one line of runs.tsv.
type run struct {
	Scenario string  `json:"scenario"`
	Profile  string  `json:"profile"`
	Tool     string  `json:"tool"`
	Run      int     `json:"run"`
	OK       bool    `json:"ok"`
	Seconds  float64 `json:"seconds"`
	Bytes    int64   `json:"bytes_fetched"` // -1: not measured
	Requests int64   `json:"requests"`      // -1: not measured
	Payload  int64   `json:"payload_bytes"`
	Note     string  `json:"note,omitempty"`
}

// summary aggregates the runs of one (scenario, profile, tool).
type summary struct {
	Scenario   string   `json:"scenario"`
	Profile    string   `json:"profile"`
	Tool       string   `json:"tool"`
	Runs       int      `json:"runs"`
	Failed     int      `json:"failed"`
	Median     float64  `json:"median_seconds"`
	Min        float64  `json:"min_seconds"`
	Max        float64  `json:"max_seconds"`
	MBps       float64  `json:"mb_per_second,omitempty"` // payload / median, 1e6 B
	Bytes      int64    `json:"median_bytes_fetched"`    // -1: not measured
	MinBytes   int64    `json:"min_bytes_fetched"`
	MaxBytes   int64    `json:"max_bytes_fetched"`
	Requests   int64    `json:"median_requests"`
	Target     string   `json:"target,omitempty"`
	TargetMet  *bool    `json:"target_met,omitempty"`
	Notes      []string `json:"notes,omitempty"`
	payloadSum int64
	timed      int // runs with a time
}

func readRuns(path string) ([]run, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var runs []run
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		fields := strings.Split(sc.Text(), "\t")
		if len(fields) < 9 {
			return nil, fmt.Errorf("%s:%d: want 9 or 10 fields, got %d", path, line, len(fields))
		}
		r := run{Scenario: fields[0], Profile: fields[1], Tool: fields[2], OK: fields[4] == "ok"}
		r.Run, _ = strconv.Atoi(fields[3])
		// "-": no time (a failed step, or a row that counts bytes only).
		if r.Seconds, err = strconv.ParseFloat(fields[5], 64); err != nil {
			r.Seconds = math.NaN()
		}
		if r.Bytes, err = strconv.ParseInt(fields[6], 10, 64); err != nil {
			r.Bytes = -1
		}
		if r.Requests, err = strconv.ParseInt(fields[7], 10, 64); err != nil {
			r.Requests = -1
		}
		r.Payload, _ = strconv.ParseInt(fields[8], 10, 64)
		if len(fields) > 9 {
			r.Note = strings.Join(fields[9:], " ")
		}
		runs = append(runs, r)
	}
	return runs, sc.Err()
}

// meta is an ordered list of key/value pairs.
type meta [][2]string

func (m meta) get(k string) string {
	for _, kv := range m {
		if kv[0] == k {
			return kv[1]
		}
	}
	return ""
}

func readMeta(path string) (meta, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var m meta
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, "\t")
		if ok {
			m = append(m, [2]string{k, v})
		}
	}
	return m, nil
}

func median[T int64 | float64](xs []T) T {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func summarize(runs []run, m meta) []*summary {
	var out []*summary
	idx := map[[3]string]*summary{}
	secs := map[*summary][]float64{}
	bytes := map[*summary][]int64{}
	reqs := map[*summary][]int64{}
	for _, r := range runs {
		k := [3]string{r.Scenario, r.Profile, r.Tool}
		s := idx[k]
		if s == nil {
			s = &summary{Scenario: r.Scenario, Profile: r.Profile, Tool: r.Tool, Bytes: -1, MinBytes: -1, MaxBytes: -1, Requests: -1}
			idx[k] = s
			out = append(out, s)
		}
		s.Runs++
		if !r.OK {
			s.Failed++
			if r.Note != "" && !slices.Contains(s.Notes, r.Note) {
				s.Notes = append(s.Notes, r.Note)
			}
			continue
		}
		if r.Note != "" && !slices.Contains(s.Notes, r.Note) && len(s.Notes) < 3 {
			s.Notes = append(s.Notes, r.Note)
		}
		if !math.IsNaN(r.Seconds) {
			secs[s] = append(secs[s], r.Seconds)
			s.payloadSum += r.Payload
		}
		if r.Bytes >= 0 {
			bytes[s] = append(bytes[s], r.Bytes)
		}
		if r.Requests >= 0 {
			reqs[s] = append(reqs[s], r.Requests)
		}
	}
	// The single-stream decode rate that a sequential read should reach:
	// gzip -d on the local file.
	var decodeMBps float64
	objectSize, _ := strconv.ParseInt(m.get("_object_bytes"), 10, 64)
	spanMax, _ := strconv.ParseInt(m.get("_span_bytes"), 10, 64)
	for _, s := range out {
		if xs := secs[s]; len(xs) > 0 {
			s.timed = len(xs)
			s.Median, s.Min, s.Max = median(xs), slices.Min(xs), slices.Max(xs)
			if s.payloadSum > 0 && s.Median > 0 {
				s.MBps = float64(s.payloadSum) / float64(len(xs)) / s.Median / 1e6
			}
		}
		if xs := bytes[s]; len(xs) > 0 {
			s.Bytes, s.MinBytes, s.MaxBytes = median(xs), slices.Min(xs), slices.Max(xs)
		}
		if xs := reqs[s]; len(xs) > 0 {
			s.Requests = median(xs)
		}
		if s.Scenario == scFirstMount && s.Tool == refDecoder {
			decodeMBps = s.MBps
		}
	}
	for _, s := range out {
		if !strings.HasPrefix(s.Tool, "tarmount") || len(secs[s]) == 0 {
			continue
		}
		var met bool
		switch {
		case s.Scenario == scRemount && s.Tool == "tarmount":
			s.Target, met = "< 0.1 s", s.Median < 0.1
		case s.Scenario == scFirstMount && s.Bytes >= 0 && objectSize > 0:
			s.Target, met = "≤ 1.05x object", float64(s.MaxBytes) <= 1.05*float64(objectSize)
		case s.Scenario == scSeqRead && s.Tool == "tarmount" && decodeMBps > 0:
			s.Target = fmt.Sprintf("≥ %s (%.0f MB/s)", refDecoder, decodeMBps)
			met = s.MBps >= decodeMBps
		case s.Scenario == scColdRead && s.Bytes >= 0 && spanMax > 0:
			s.Target = fmt.Sprintf("≤ 2 requests, ≤ 1 span (%s)", human(spanMax))
			met = s.Requests <= 2 && s.MaxBytes <= spanMax
		default:
			continue
		}
		s.TargetMet = &met
	}
	return out
}

// Scenario names shared with bench-core.sh.
const (
	scColdRead   = "1. cold small-file read (saved index)"
	scRemount    = "2. remount with saved index"
	scFirstMount = "3. first mount, no index (index pass)"
	scSeqRead    = "4. sequential read of the largest file"
	refDecoder   = "gzip -d < FILE"
)

func human(n int64) string {
	switch {
	case n < 0:
		return "–"
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	case n >= 1e3:
		return fmt.Sprintf("%.0f kB", float64(n)/1e3)
	default:
		return fmt.Sprintf("%d B", n)
	}
}

// cell escapes the pipes of a markdown table cell.
func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func fmtSec(x float64) string {
	switch {
	case math.IsNaN(x):
		return "–"
	case x < 0.01:
		return fmt.Sprintf("%.4f", x)
	case x < 1:
		return fmt.Sprintf("%.3f", x)
	default:
		return fmt.Sprintf("%.2f", x)
	}
}

func report(args []string) error {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	in := fs.String("in", "", "runs.tsv")
	metaPath := fs.String("meta", "", "meta.tsv")
	mdPath := fs.String("md", "", "write the markdown here (and to stdout)")
	jsonPath := fs.String("json", "", "write the JSON here")
	notesPath := fs.String("notes", "", "optional file of lines added under the table")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" || *metaPath == "" {
		return errors.New("usage: bench report -in runs.tsv -meta meta.tsv [-md OUT.md] [-json OUT.json] [-notes FILE]")
	}
	runs, err := readRuns(*in)
	if err != nil {
		return err
	}
	m, err := readMeta(*metaPath)
	if err != nil {
		return err
	}
	var notes []string
	if *notesPath != "" {
		if b, err := os.ReadFile(*notesPath); err == nil {
			for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
				if l != "" {
					notes = append(notes, l)
				}
			}
		}
	}
	sums := summarize(runs, m)
	// Group the table by scenario, then profile in order of appearance;
	// tools keep the order in which they first ran.
	profileRank := map[string]int{}
	for _, s := range sums {
		if _, ok := profileRank[s.Profile]; !ok {
			profileRank[s.Profile] = len(profileRank)
		}
	}
	slices.SortStableFunc(sums, func(a, b *summary) int {
		if c := strings.Compare(a.Scenario, b.Scenario); c != 0 {
			return c
		}
		return profileRank[a.Profile] - profileRank[b.Profile]
	})

	var b strings.Builder
	fmt.Fprintf(&b, "# tarmount core benchmark\n\n")
	for _, kv := range m {
		if !strings.HasPrefix(kv[0], "_") { // "_key": for the JSON only
			fmt.Fprintf(&b, "- %s: %s\n", kv[0], kv[1])
		}
	}
	fmt.Fprintf(&b, "\n| scenario | profile | tool | median s | min–max s | MB/s | fetched (median, min–max) | requests | target |\n")
	fmt.Fprintf(&b, "|---|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, s := range sums {
		mbps := ""
		if s.MBps > 0 {
			mbps = fmt.Sprintf("%.0f", s.MBps)
		}
		fetched, reqs := "–", "–"
		if s.Bytes >= 0 {
			fetched = human(s.Bytes)
			if s.MinBytes != s.MaxBytes {
				fetched += fmt.Sprintf(" (%s–%s)", human(s.MinBytes), human(s.MaxBytes))
			}
		}
		if s.Requests >= 0 {
			reqs = strconv.FormatInt(s.Requests, 10)
		}
		target := s.Target
		if s.TargetMet != nil {
			if *s.TargetMet {
				target = "✅ " + target
			} else {
				target = "❌ " + target
			}
		}
		median, minmax := "–", "–"
		if s.timed > 0 {
			median = fmtSec(s.Median)
			minmax = fmtSec(s.Min) + "–" + fmtSec(s.Max)
		}
		tool := s.Tool
		if s.Failed > 0 {
			tool += fmt.Sprintf(" (%d/%d failed: %s)", s.Failed, s.Runs, strings.Join(s.Notes, "; "))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			cell(s.Scenario), cell(s.Profile), cell(tool), median, minmax, mbps, fetched, reqs, target)
	}
	if len(notes) > 0 {
		fmt.Fprintf(&b, "\nNotes:\n")
		for _, n := range notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	fmt.Print(b.String())
	if *mdPath != "" {
		if err := os.WriteFile(*mdPath, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	if *jsonPath != "" {
		metaObj := map[string]string{}
		for _, kv := range m {
			metaObj[kv[0]] = kv[1]
		}
		for i := range runs {
			if math.IsNaN(runs[i].Seconds) {
				runs[i].Seconds = -1
			}
		}
		j, err := json.MarshalIndent(struct {
			Meta    map[string]string `json:"meta"`
			Summary []*summary        `json:"summary"`
			Runs    []run             `json:"runs"`
			Notes   []string          `json:"notes"`
		}{metaObj, sums, runs, notes}, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonPath, append(j, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}
