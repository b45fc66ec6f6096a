// Command benchsuite is tarmount's benchmark suite against its peers (and
// of tarmount builds against each other, -tarmount old=PATH,new=PATH): it
// makes the datasets (the Go toolchain, 200k small files, one big file, each
// as .tar, .tar.gz, .tar.zst, seekable .tar.zst and .tar.lz4), serves them
// on 127.0.0.1 with scripts/httpserve/shaped (shaped like object storage, or
// not), runs every scenario with tarmount and its peers in the same run,
// alternating their order, and writes every run as JSON lines, a summary
// JSON and a markdown table. scripts/bench-suite.sh installs the peers,
// builds the binaries and runs it; scripts/bench-chart.py draws the chart.
//
// It drives the tarmount binary like a user would and imports none of
// tarmount's packages.
//
//	benchsuite -tarmount BIN -ratarmount BIN -scratch DIR -out DIR [flags]
//	benchsuite -tarmount old=BIN,new=BIN -peers=false -scenarios extract,cold-read -runs 2 ...
//	benchsuite -render OUT/runs.jsonl -out DIR   (the reports again, from the runs)
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/shaped"
)

type config struct {
	scratch, out   string
	builds         []build // the tarmount binaries, the baseline first
	peers          bool    // run the peers too (false: tarmount's rows alone)
	ratarmount     string
	ratarNote      string // why ratarmount is missing
	rapidgzip      string
	runs           int
	datasets       []string
	codecs         []string // empty: per-dataset defaults
	profiles       []string
	scenarios      map[string]bool
	bigSize        int64
	smallFiles     int
	reads          int
	seed           uint64
	goBuildCodecs  []string
	stepTimeout    time.Duration
	goBuildTimeout time.Duration
	mountTimeout   time.Duration
	indexTimeout   time.Duration
	keep           bool
	sharedFS       bool // extract into the work dir's filesystem, not a new one per run
	render         string
	metaExtra      []string
	datasetsOnly   bool
	alone          string // -alone: time one job of scenario 15 and stop
	startedAtClock time.Time
}

// allCodecs are the forms a dataset can be served in: bz2 and xz (that
// of xz -T, in blocks) only when CODECS names them.
var allCodecs = []string{"tar", "gz", "zst", "seekable", "lz4", "bz2", "xz"}

// defaultCodecs keeps the default run near an hour on two cores: the
// common codecs for the Go toolchain, gzip for the big datasets.
var defaultCodecs = map[string][]string{
	"go":    {"tar", "gz", "zst", "seekable", "lz4"},
	"small": {"gz"},
	"big":   {"gz"},
}

func main() {
	cfg, err := parseFlags()
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchsuite:", err)
		os.Exit(2)
	}
	if cfg.alone != "" {
		if err := runAlone(cfg.alone, flag.Arg(0)); err != nil {
			fatalf("%v", err)
		}
		return
	}
	if cfg.render != "" {
		if err := render(cfg, cfg.render, nil, nil); err != nil {
			fatalf("%v", err)
		}
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	interrupted := false
	go func() {
		<-sigs
		interrupted = true
		warnf("interrupted: stopping the suite's processes and mounts")
		cancel()
		<-sigs
		cleanupAll()
		os.Exit(130)
	}()
	err = run(ctx, cfg)
	cleanupAll()
	if interrupted {
		os.Exit(130)
	}
	if err != nil {
		fatalf("%v", err)
	}
}

func parseFlags() (*config, error) {
	c := &config{startedAtClock: time.Now()}
	var err error
	var tarmount, datasets, codecs, profiles, scenarios, bigSize, goBuild, meta string
	var seed uint64
	flag.StringVar(&c.scratch, "scratch", filepath.Join(os.TempDir(), "tarmount-suite"), "datasets (kept) and work files")
	flag.StringVar(&c.out, "out", "", "where the reports go (default SCRATCH/out)")
	flag.StringVar(&tarmount, "tarmount", "tarmount", "tarmount binary, or several as NAME=PATH,NAME=PATH (the first is the baseline the others are compared with)")
	flag.BoolVar(&c.peers, "peers", true, "run the peers (ratarmount, the CLI decoders, curl | tar, aria2c, the local tree); false: tarmount's rows alone")
	flag.StringVar(&c.ratarmount, "ratarmount", "", "ratarmount binary (empty: not installed, see -ratarmount-note)")
	flag.StringVar(&c.ratarNote, "ratarmount-note", "not installed", "why ratarmount is missing, for the report")
	flag.StringVar(&c.rapidgzip, "rapidgzip", "", "rapidgzip binary (empty: not installed)")
	flag.IntVar(&c.runs, "runs", 3, "runs per scenario and tool")
	flag.StringVar(&datasets, "datasets", "go,small,big", "datasets: go, small, big")
	flag.StringVar(&codecs, "codecs", "", "codecs for every dataset: tar, gz, zst, seekable, lz4 (default: all for go, gz for small and big)")
	flag.StringVar(&profiles, "profiles", "objstore", "server profiles: objstore (20 ms, 80 MB/s per connection), unshaped")
	flag.StringVar(&scenarios, "scenarios", "1,2,3,4,5,6", "scenarios to run, by number or name: "+scenarioHelp()+" (7, peak RSS, comes with every mount)")
	flag.StringVar(&bigSize, "big-size", "2GiB", "size of the big dataset's file (e.g. 256MiB)")
	flag.IntVar(&c.smallFiles, "small-files", 200000, "files in the small dataset")
	flag.IntVar(&c.reads, "reads", 100, "small files read at random in scenario 3")
	flag.Uint64Var(&seed, "seed", 1, "seed of the generated datasets and of the choice of reads")
	flag.StringVar(&goBuild, "gobuild-codecs", "gz", "codecs of the go dataset that scenario 6 runs on")
	flag.DurationVar(&c.stepTimeout, "step-timeout", 15*time.Minute, "longest one timed step may take")
	flag.DurationVar(&c.goBuildTimeout, "gobuild-timeout", 5*time.Minute, "longest go version or go build may take in scenario 6 (a slower run counts as failed)")
	flag.DurationVar(&c.mountTimeout, "mount-timeout", 2*time.Minute, "longest a mount with a saved index may take to answer")
	flag.DurationVar(&c.indexTimeout, "index-timeout", 15*time.Minute, "longest a mount without an index may take to answer")
	flag.BoolVar(&c.keep, "keep", false, "keep the work dir (logs, caches)")
	flag.BoolVar(&c.sharedFS, "shared-fs", false, "scenario 5: extract into the work dir's filesystem (deleting each run's trees and waiting 40 s) instead of a new ext4 filesystem per run on a loop device")
	flag.StringVar(&c.render, "render", "", "only render the reports from this runs.jsonl")
	flag.StringVar(&meta, "meta", "", "extra 'key=value' lines for the report, separated by ';'")
	flag.BoolVar(&c.datasetsOnly, "datasets-only", false, "make the datasets and stop")
	flag.StringVar(&c.alone, "alone", "", "fetch URL or decode FILE to nothing, as scenario 15 times it, and stop")
	flag.Parse()
	if c.alone != "" {
		if flag.NArg() != 1 {
			return nil, errors.New("-alone fetch URL, or -alone decode FILE")
		}
		return c, nil
	}
	if flag.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q", flag.Args())
	}
	c.seed = seed
	list := func(s string) []string {
		return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' })
	}
	c.datasets, c.codecs, c.profiles, c.goBuildCodecs = list(datasets), list(codecs), list(profiles), list(goBuild)
	for _, d := range c.datasets {
		if _, ok := defaultCodecs[d]; !ok {
			return nil, fmt.Errorf("unknown dataset %q (go, small, big)", d)
		}
	}
	for _, k := range append(slices.Clone(c.codecs), c.goBuildCodecs...) {
		if !slices.Contains(allCodecs, k) {
			return nil, fmt.Errorf("unknown codec %q (%s)", k, strings.Join(allCodecs, ", "))
		}
	}
	for _, p := range c.profiles {
		if _, ok := profileOptions[p]; !ok {
			return nil, fmt.Errorf("unknown profile %q (objstore, unshaped)", p)
		}
	}
	if c.builds, err = parseBuilds(tarmount); err != nil {
		return nil, err
	}
	if c.scenarios, err = parseScenarios(list(scenarios)); err != nil {
		return nil, err
	}
	n, err := parseSize(bigSize)
	if err != nil {
		return nil, err
	}
	c.bigSize = n
	if c.runs < 1 {
		return nil, errors.New("-runs must be at least 1")
	}
	if c.out == "" {
		c.out = filepath.Join(c.scratch, "out")
	}
	if meta != "" {
		c.metaExtra = strings.Split(meta, ";")
	}
	return c, nil
}

// scenarioNames are the scenarios -scenarios accepts, by number and name.
var scenarioNames = [][2]string{
	{"1", "cold-mount"},
	{"2", "warm-mount"},
	{"3", "cold-read"},
	{"4", "seq-read"},
	{"5", "extract"},
	{"6", "go-build"},
	{"8", "progressive"},
	{"9", "index-pass"},
	{"10", "boot"},
	{"11", "upgrade"},
	{"12", "gzip-decode"},
	{"13", "extract-tmpfs"},
	{"14", "seq-read-local"},
	{"15", "overlap"},
}

func scenarioHelp() string {
	var hs []string
	for _, n := range scenarioNames {
		hs = append(hs, n[0]+" "+n[1])
	}
	return strings.Join(hs, ", ")
}

// parseScenarios returns the chosen scenarios by number.
func parseScenarios(names []string) (map[string]bool, error) {
	m := map[string]bool{}
	for _, x := range names {
		i := slices.IndexFunc(scenarioNames, func(n [2]string) bool { return x == n[0] || x == n[1] })
		if i < 0 {
			return nil, fmt.Errorf("unknown scenario %q (%s)", x, scenarioHelp())
		}
		m[scenarioNames[i][0]] = true
	}
	return m, nil
}

// anyLocal reports whether a scenario on the local files (12, 13, 14) is
// chosen.
func (c *config) anyLocal() bool {
	return slices.ContainsFunc(localScenarios, func(n string) bool { return c.scenarios[n] })
}

// onlyLocal reports whether every chosen scenario runs on the local files
// alone: no server, no combination of codec and profile.
func (c *config) onlyLocal() bool {
	for n := range c.scenarios {
		if !slices.Contains(localScenarios, n) {
			return false
		}
	}
	return true
}

// parseSize reads 2GiB, 256MiB, 64KiB or a number of bytes.
func parseSize(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}}
	mult := int64(1)
	for _, u := range units {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = v, u.mult
			break
		}
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("bad size %q (e.g. 2GiB, 256MiB)", s)
	}
	return int64(n * float64(mult)), nil
}

func warnf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "benchsuite: warning: "+format+"\n", args...)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "benchsuite: FAILED: "+format+"\n", args...)
	os.Exit(1)
}

func say(format string, args ...any)  { fmt.Fprintf(os.Stderr, "==> "+format+"\n", args...) }
func info(format string, args ...any) { fmt.Fprintf(os.Stderr, "    "+format+"\n", args...) }

// ------------------------------------------------------------ servers

var profileOptions = map[string]shaped.Options{
	"objstore": {Latency: 20 * time.Millisecond, Rate: 80e6},
	"unshaped": {},
}

type server struct {
	name string
	h    *shaped.Handler
	srv  *http.Server
	base string
}

func startServer(name, dir string) (*server, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	h := shaped.NewHandler(dir, profileOptions[name])
	s := &server{name: name, h: h, srv: &http.Server{Handler: h}, base: "http://" + ln.Addr().String()}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			warnf("server %s: %v", name, err)
		}
	}()
	return s, nil
}

func (s *server) close() {
	s.srv.Close()
	s.h.Close()
}

// counters are what the server served so far.
type counters struct{ requests, bytes int64 }

func (s *server) counters() counters {
	st := s.h.Stats()
	return counters{st.Requests, st.Bytes}
}

// ------------------------------------------------------------ datasets

// dataset is one generated tarball and its compressed forms.
type dataset struct {
	kind  string // go, small, big
	name  string // also the stem of its files
	dir   string
	facts *Facts
	top   string // top directory in the archive
}

func (d *dataset) tarPath() string { return filepath.Join(d.dir, d.name+".tar") }

// object returns the file name of the dataset in a codec.
func (d *dataset) object(codec string) string {
	switch codec {
	case "gz":
		return d.name + ".tar.gz"
	case "zst":
		return d.name + ".tar.zst"
	case "seekable":
		return d.name + ".seekable.tar.zst"
	case "lz4":
		return d.name + ".tar.lz4"
	case "bz2":
		return d.name + ".tar.bz2"
	case "xz":
		return d.name + ".tar.xz"
	}
	return d.name + ".tar"
}

func sizeName(n int64) string {
	if n%(1<<30) == 0 {
		return fmt.Sprintf("%dGiB", n>>30)
	}
	return fmt.Sprintf("%dMiB", n>>20)
}

// makeDataset writes the dataset's .tar and the compressed forms it needs
// (each once; an existing file is kept).
func makeDataset(ctx context.Context, c *config, kind string, codecs []string) (*dataset, error) {
	dir := filepath.Join(c.scratch, "data")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	d := &dataset{kind: kind, name: kind, dir: dir, top: kind}
	var write func(w io.Writer) error
	switch kind {
	case "go":
		out, err := exec.Command("go", "env", "GOROOT").Output()
		if err != nil {
			return nil, fmt.Errorf("go env GOROOT: %w", err)
		}
		goroot := strings.TrimSpace(string(out))
		write = func(w io.Writer) error { return writeTree(w, goroot, "go") }
	case "small":
		if c.smallFiles != 200000 {
			d.name = fmt.Sprintf("small-%d", c.smallFiles)
		}
		write = func(w io.Writer) error { return writeSmall(w, c.smallFiles, c.seed) }
	case "big":
		d.name = "big-" + sizeName(c.bigSize)
		write = func(w io.Writer) error { return writeBig(w, c.bigSize, c.seed) }
	}
	if _, err := os.Stat(d.tarPath()); err != nil {
		say("making %s (once)", d.tarPath())
	}
	if err := writeFile(d.tarPath(), func(w io.Writer) error { return write(w) }); err != nil {
		return nil, err
	}
	for _, k := range codecs {
		out := filepath.Join(dir, d.object(k))
		if _, err := os.Stat(out); err == nil || k == "tar" {
			continue
		}
		say("making %s (once)", out)
		var sh string
		switch k {
		case "gz":
			sh = `pigz -6 -c "$1" > "$2"`
		case "zst":
			sh = `zstd -q -3 -c "$1" > "$2"` // one frame
		case "lz4":
			sh = `lz4 -q -c "$1" > "$2"`
		case "bz2":
			sh = `lbzip2 -9 -c "$1" > "$2"`
		case "xz":
			sh = `xz -T2 -6 -c "$1" > "$2"` // blocks of 24 MiB
		case "seekable":
			sh = `"$3" pack "$1" -o "$2"`
		}
		tmp := out + ".tmp"
		if msg, err := runCmd(ctx, time.Hour, os.Environ(), "", "bash", "-o", "pipefail", "-c", sh, "_",
			d.tarPath(), tmp, c.builds[len(c.builds)-1].bin); err != nil {
			os.Remove(tmp)
			return nil, fmt.Errorf("make %s: %v: %s", out, err, msg)
		}
		if err := os.Rename(tmp, out); err != nil {
			return nil, err
		}
	}
	facts, err := loadFacts(d.tarPath(), c.reads, c.seed)
	if err != nil {
		return nil, err
	}
	d.facts = facts
	if i := strings.IndexByte(facts.Probe.Path, '/'); i > 0 {
		d.top = facts.Probe.Path[:i]
	}
	return d, nil
}

// ------------------------------------------------------------ the run

// suite holds what every scenario uses.
type suite struct {
	c       *config
	work    string
	results []Result
	jsonl   *os.File
	notes   []string
	servers map[string]*server
	env     []string
	goLocal string // the go dataset extracted on local disk, for scenario 6
}

func (s *suite) note(format string, args ...any) {
	n := fmt.Sprintf(format, args...)
	if !slices.Contains(s.notes, n) {
		s.notes = append(s.notes, n)
	}
}

func (s *suite) record(r Result) {
	s.results = append(s.results, r)
	b, _ := json.Marshal(r)
	s.jsonl.Write(append(b, '\n'))
	tool := r.Tool
	for _, sc := range []string{scProgress, scBoot} {
		if what, ok := strings.CutPrefix(r.Scenario, sc+": "); ok {
			tool += " (" + what + ")"
		}
	}
	line := fmt.Sprintf("%s: %s", tool, r.Status)
	switch {
	case r.Status == statusOK && strings.HasPrefix(r.Scenario, scRSS):
		line = fmt.Sprintf("%s: peak RSS %.0f MiB (%s)", r.Tool, float64(r.RSS)/(1<<20), strings.TrimPrefix(r.Scenario, scRSS+": "))
	case r.Status == statusOK:
		line = fmt.Sprintf("%s: %.3f s", tool, r.Seconds)
		if r.Reads > 0 {
			line += fmt.Sprintf(", p50 %.1f ms, p99 %.1f ms", r.P50*1e3, r.P99*1e3)
		}
		if r.Payload > 0 && r.Seconds > 0 {
			line += fmt.Sprintf(", %.0f MB/s", float64(r.Payload)/r.Seconds/1e6)
		}
		if r.RSS > 0 {
			line += fmt.Sprintf(", peak RSS %.0f MiB", float64(r.RSS)/(1<<20))
		}
	}
	if r.Fetched >= 0 {
		line += fmt.Sprintf(" (fetched %s, %d req)", fmtBytes(r.Fetched), r.Requests)
	}
	if r.Note != "" {
		line += ": " + r.Note
	}
	info("%s", line)
}

func run(ctx context.Context, c *config) error {
	for _, d := range []*string{&c.scratch, &c.out} {
		if err := os.MkdirAll(*d, 0o755); err != nil {
			return err
		}
		abs, err := filepath.Abs(*d)
		if err != nil {
			return err
		}
		*d = abs
	}
	if _, err := os.Stat("/dev/fuse"); err != nil && !c.datasetsOnly {
		return errors.New("/dev/fuse is missing: FUSE mounts are impossible here")
	}
	// Datasets first: they are kept, so an interrupted run keeps them.
	var sets []*dataset
	codecsOf := map[string][]string{}
	for _, kind := range c.datasets {
		codecs := c.codecs
		if len(codecs) == 0 {
			codecs = defaultCodecs[kind]
		}
		need := slices.Clone(codecs)
		if c.anyLocal() {
			if !slices.Contains(need, "gz") {
				need = append(need, "gz")
			}
		}
		if kind == "go" && c.scenarios["6"] {
			for _, k := range c.goBuildCodecs {
				if !slices.Contains(need, k) {
					need = append(need, k)
				}
			}
		}
		d, err := makeDataset(ctx, c, kind, need)
		if err != nil {
			return fmt.Errorf("dataset %s: %w", kind, err)
		}
		sets = append(sets, d)
		codecsOf[d.name] = codecs
		info("%s: %s tar, %d entries (%d files, %d dirs, %d symlinks); largest %s (%s)", d.name,
			fmtBytes(d.facts.TarBytes), d.facts.Entries, d.facts.Files, d.facts.Dirs, d.facts.Symlinks,
			d.facts.Largest.Path, fmtBytes(d.facts.Largest.Size))
	}
	if c.datasetsOnly {
		return nil
	}
	work, err := os.MkdirTemp(c.scratch, "run.")
	if err != nil {
		return err
	}
	s := &suite{c: c, work: work, servers: map[string]*server{}, env: os.Environ()}
	defer func() {
		if c.keep {
			info("work files kept in %s", work)
			return
		}
		for m := range registry.mounts {
			if isMounted(m) {
				warnf("%s is still mounted; leaving %s in place", m, work)
				return
			}
		}
		os.RemoveAll(work)
	}()
	s.jsonl, err = os.Create(filepath.Join(c.out, "runs.jsonl"))
	if err != nil {
		return err
	}
	defer s.jsonl.Close()
	for _, p := range c.profiles {
		srv, err := startServer(p, filepath.Join(c.scratch, "data"))
		if err != nil {
			return err
		}
		defer srv.close()
		s.servers[p] = srv
		info("profile %s: %s", p, srv.base)
	}
	if c.ratarmount == "" {
		s.note("ratarmount: %s; its rows say n/a", c.ratarNote)
	}
	load0 := loadavg()
	t0 := time.Now()
	for _, d := range sets {
		if err := s.gzipLocal(ctx, d); err != nil {
			return err
		}
		if c.onlyLocal() {
			continue
		}
		codecs := codecsOf[d.name]
		build := d.kind == "go" && c.scenarios["6"]
		for _, k := range allCodecs {
			main := slices.Contains(codecs, k)
			onlyBuild := build && slices.Contains(c.goBuildCodecs, k)
			for i, p := range c.profiles {
				// Scenario 6 runs on the first profile only.
				goBuild := onlyBuild && i == 0
				if main || goBuild {
					if err := s.combo(ctx, d, k, s.servers[p], main, goBuild); err != nil {
						return err
					}
				}
			}
		}
	}
	meta := s.meta(sets, load0, time.Since(t0))
	return render(c, filepath.Join(c.out, "runs.jsonl"), meta, s.notes)
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func (s *suite) meta(sets []*dataset, load0 string, took time.Duration) [][2]string {
	c := s.c
	var m [][2]string
	add := func(k, v string) { m = append(m, [2]string{k, v}) }
	add("date", time.Now().UTC().Format(time.RFC3339))
	cpu := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "model name"); ok {
				cpu = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	add("machine", fmt.Sprintf("%d cores, %s", runtime.NumCPU(), cpu))
	add("load average (1, 5, 15 min)", fmt.Sprintf("%s at the start, %s at the end", load0, loadavg()))
	add("runs", fmt.Sprintf("%d per tool and scenario, tool order reversed on even runs; %s of measuring", c.runs, took.Round(time.Second)))
	for _, d := range sets {
		var objs []string
		for _, k := range allCodecs {
			if st, err := os.Stat(filepath.Join(d.dir, d.object(k))); err == nil {
				objs = append(objs, fmt.Sprintf("%s %s", k, fmtBytes(st.Size())))
			}
		}
		add("dataset "+d.name, fmt.Sprintf("%d entries (%d files, %d dirs), tar %s; %s; largest member %s (%s); %d small reads (< 64 KiB, seed %d)",
			d.facts.Entries, d.facts.Files, d.facts.Dirs, fmtBytes(d.facts.TarBytes), strings.Join(objs, ", "),
			d.facts.Largest.Path, fmtBytes(d.facts.Largest.Size), len(d.facts.Reads), c.seed))
	}
	if len(c.builds) > 1 {
		var bs []string
		for i, b := range c.builds {
			v, err := exec.Command(b.bin, "--version").Output()
			line := lastLine(string(v))
			if err != nil || line == "" {
				line = "no --version"
			}
			if i == 0 {
				line += ", the baseline"
			}
			bs = append(bs, fmt.Sprintf("%s: %s (%s)", b.name, filepath.Base(b.bin), line))
		}
		add("tarmount builds", strings.Join(bs, "; "))
	}
	add("profiles", "objstore = 20 ms before each response, 80 MB/s per connection; unshaped = no delay or cap; both on 127.0.0.1")
	for _, e := range c.metaExtra {
		if k, v, ok := strings.Cut(e, "="); ok {
			add(strings.TrimSpace(k), strings.TrimSpace(v))
		}
	}
	return m
}

// render writes summary.json and suite.md from the runs, and prints the
// markdown.
func render(c *config, runsPath string, meta [][2]string, notes []string) error {
	rs, err := readResults(runsPath)
	if err != nil {
		return err
	}
	if meta == nil {
		// Rendering again: keep what the last summary said.
		if b, err := os.ReadFile(filepath.Join(c.out, "summary.json")); err == nil {
			var old Summary
			if json.Unmarshal(b, &old) == nil {
				meta, notes = old.Meta, old.Notes
			}
		}
	}
	notes = append(slices.Clone(notes), standingNotes...)
	notes = slices.Compact(notes)
	sum := summarize(rs, meta, notes)
	if err := os.MkdirAll(c.out, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(jsonSafe(sum), "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.out, "summary.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(c.out, "suite.md"))
	if err != nil {
		return err
	}
	if err := writeMarkdown(f, sum); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return writeMarkdown(os.Stdout, sum)
}

// jsonSafe returns a copy of s with the NaN of rows without an ok run
// (JSON has no NaN) set to 0; "ok": 0 says there is no value.
func jsonSafe(s Summary) Summary {
	s.Groups = slices.Clone(s.Groups)
	for i := range s.Groups {
		g := &s.Groups[i]
		g.Rows = slices.Clone(g.Rows)
		for j := range g.Rows {
			r := &g.Rows[j]
			for _, f := range []*float64{&r.Median, &r.Min, &r.Max, &r.Seconds, &r.MBps, &r.P50, &r.P99, &r.Ratio} {
				if math.IsNaN(*f) || math.IsInf(*f, 0) {
					*f = 0
				}
			}
		}
	}
	return s
}

// standingNotes explain how the suite measures; every report carries them.
var standingNotes = []string{
	"Times are medians over the ok runs (min–max beside); a run whose check failed (content, file count, exit status) is counted as failed, never as a time. \"fetched\" and \"requests\" are what the server counted during the timed step (median).",
	"Mount-ready is process start until stat of a known file in the mount answers (polled every 2 ms). Cold: an empty cache or index folder; warm: the index saved by an untimed first pass (`tarmount index`, a first ratarmount mount). tarmount always runs with --cache-disk 0.",
	"\"vs best peer\" is the row's median over the best peer's in its group (for MB/s: the peer's rate over the row's), so below 1 is better than every peer.",
	"The CLI-decode reference (`curl URL | DECODER | wc -c`) of scenario 1 also serves as scenario 4's reference, from the same run; its MB/s counts the whole tar stream.",
	"Scenario 3 reads each chosen file once with one read of the whole file, on a fresh mount with the saved index, in a fixed random order; the files (below 64 KiB, up to -reads of them) lie at least 5 MiB apart in the tar stream, so that no read finds its data decoded by an earlier one; p50/p99 are per file, and \"fetched\" covers all the reads.",
	"Extraction runs `sync` and drops the page cache (untimed, as root) before each run; each run of the tools writes to a new ext4 filesystem of its own (an image on a loop device with direct I/O, with a journal when the scratch filesystem has one), kept until the run ends and then deleted, so that no run creates files right after a large deletion (-shared-fs: the scratch filesystem itself, trees deleted after each run and a 40 s wait); the check is the count of regular files. --materialize runs with the saved index, from process start until its log says msg=materialized.",
	"Scenario 6 runs `GOROOT=R R/bin/go version` and `go build` of a hello-world module (GOCACHE fresh each run, CGO_ENABLED=0, GOTOOLCHAIN=local); the local tree is `tar -x` of the same archive, warm in the page cache.",
	"A single-frame .tar.zst cannot be entered in the middle: tarmount's first pass decodes it to its cache dir, so warm mounts serve reads from that local copy (fetched 0).",
	"Peak RSS is VmHWM of the mount process (tarmount, or ratarmount's python), read just before it is stopped.",
	"Scenario 8 (when chosen) times, from the start of each tool, the first byte of the files at 10%, 50% and 90% of the tar stream, `go version` from the tree (go dataset) and all of them, each probe retrying every 20 ms from the start; and when tarmount's log says the index pass ended. tarmount mounts with an empty cache, serving during its pass or (--wait-index) after it; curl | tar -x writes a tree on the work dir's filesystem. The three files are checked whole afterwards.",
	"Scenario 9 (when chosen) is `tarmount index URL` with an empty cache, from start to exit, against the CLI decoding the whole object as in scenario 1.",
	"Scenario 10 (when chosen) serves the archive on a server of its own shaped like object storage, beside an index that `tarmount index FILE --publish` made from the local file (untimed), and alone. Each tool starts with an empty cache dir and writes to an empty dir on the round's own ext4 filesystem, after `sync` and a drop of the page cache, as in scenario 5. From process start: a. `GOROOT=R R/bin/go version` done, R the toolchain in the mount (tarmount --materialize) or in the tree written (the others), retried every 20 ms; b. fully local: the state tarmount keeps on DIR (the xattr user.tarmount.state) says complete (polled every 2 ms), or the command exited; c. what the server sent from start to the end of the last measurement; d, e. the first byte of the last file that ends within the first 1% and 10% of the tar stream, through the mount or in the tree, retried every 20 ms; f. without an index, the log's msg=indexed (the index pass ended: the listing is complete); g, h. a mount without an index (and without --materialize) stopped with SIGTERM once `tarmount status` says its pass has read 85% of the archive, then mounted again with the same cache dir: from the second start to its msg=indexed, and what the server sent meanwhile (--cache-disk 0 throughout). Checked afterwards: those files whole, the tree's file count, and without an index the mount's. The targets are figures or ratios of medians of the same run.",
	"Scenario 12 (when chosen) decodes the dataset's local .tar.gz, read once before (untimed) so that every tool reads it from the page cache, to /dev/null: `tarmount index FILE` with an empty cache dir (--no-sidecar; it also writes the index there) against libdeflate-gunzip -c, igzip -dc, rapidgzip -P1 -d -c and gzip -dc; from start to exit.",
	"Scenario 13 (when chosen) extracts the local .tar.gz into a tmpfs mounted for each run of each tool and unmounted after it: `tarmount extract FILE DIR` with an empty cache dir and with the index saved before (untimed), against `tar -x` of the plain .tar (the write floor) and `pigz -dc FILE | tar -x`; from start to exit, the check being the count of regular files.",
	"Scenario 14 (when chosen) mounts the local .tar.gz with the index saved before (`tarmount FILE MNT --cache-disk 0 --no-sidecar`), waits until the dataset's largest member answers stat, and reads it whole, in order, with 1 MiB reads (timed from the first read to the last, then checked from the page cache); gzip -dc decodes the whole archive to /dev/null. Each row's MB/s are of what it read: the member, or the whole tar.",
	"Scenario 15 (when chosen) times the first extraction (`tarmount extract URL DIR`, no index, an empty cache) beside its three jobs alone, in alternating order: fetch alone is the object fetched as the first pass fetches it (the open's first bytes, then parallel range requests of growing blocks) and thrown away, in a process of its own (`benchsuite -alone fetch URL`); decode alone is the local copy of the object, read once before (untimed), decoded as the pass decodes it and thrown away (`benchsuite -alone decode FILE`); write alone is `tarmount extract` of the local plain .tar, read once before, with the newest build. Each tree goes to the round's own ext4, after `sync` and a drop of the page cache, as in scenario 5. The row \"" + toolLongestAlone + "\" is the longest of the three in each run; the check compares the medians. The CPU column is the user and system time of each step's process and its children (the rusage of wait4; the loopback server runs in the driver and is in no row). \"" + toolCPUFloor + "\" is, per run, the three jobs' CPU time added and divided by the machine's cores: the least time in which the cores can do the three together, however well they overlap. A second check compares the extraction with the longer of that floor and the longest alone; it is informational, the issue's bound is the first.",
}
