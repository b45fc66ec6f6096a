package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/json"
	"hash/crc32"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil"
)

func TestPercentile(t *testing.T) {
	tests := []struct {
		xs   []float64
		p    float64
		want float64
	}{
		{[]float64{3}, 50, 3},
		{[]float64{3, 1, 2}, 50, 2},
		{[]float64{1, 2, 3, 4}, 50, 2.5},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0, 1},
		{[]float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 100, 10},
		{[]float64{10, 9, 8, 7, 6, 5, 4, 3, 2, 1}, 90, 9.1},
	}
	for _, tt := range tests {
		if got := percentile(tt.xs, tt.p); math.Abs(got-tt.want) > 1e-9 {
			t.Errorf("percentile(%v, %v) = %v, want %v", tt.xs, tt.p, got, tt.want)
		}
	}
	if got := percentile(nil, 50); !math.IsNaN(got) {
		t.Errorf("percentile(nil) = %v, want NaN", got)
	}
}

func sum(write func(*bytes.Buffer) error, t *testing.T) [32]byte {
	t.Helper()
	var b bytes.Buffer
	if err := write(&b); err != nil {
		t.Fatal(err)
	}
	return sha256.Sum256(b.Bytes())
}

func TestDatasetsAreDeterministic(t *testing.T) {
	tests := []struct {
		name  string
		write func(seed uint64) func(*bytes.Buffer) error
	}{
		{"small", func(seed uint64) func(*bytes.Buffer) error {
			return func(b *bytes.Buffer) error { return writeSmall(b, 300, seed) }
		}},
		{"big", func(seed uint64) func(*bytes.Buffer) error {
			return func(b *bytes.Buffer) error { return writeBig(b, 3<<20+17, seed) }
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := sum(tt.write(1), t), sum(tt.write(1), t)
			if a != b {
				t.Errorf("same seed: got %x and %x, want equal", a, b)
			}
			if c := sum(tt.write(2), t); c == a {
				t.Errorf("seeds 1 and 2 both gave %x, want different", a)
			}
		})
	}
}

func TestSmallFacts(t *testing.T) {
	var b bytes.Buffer
	if err := writeSmall(&b, 1000, 7); err != nil {
		t.Fatal(err)
	}
	tarBytes := int64(b.Len())
	f, err := scanFacts(bytes.NewReader(b.Bytes()), 100, 7, 0)
	if err != nil {
		t.Fatal(err)
	}
	if f.Files != 1000 || f.TarBytes != tarBytes || len(f.Reads) != 100 {
		t.Errorf("got %d files, %d tar bytes, %d reads; want 1000, %d, 100", f.Files, f.TarBytes, len(f.Reads), tarBytes)
	}
	seen := map[string]bool{}
	for _, m := range f.Reads {
		if m.Size < 1<<10 || m.Size > 8<<10 || seen[m.Path] {
			t.Errorf("read %s: size %d, seen before %v; want 1-8 KiB, once", m.Path, m.Size, seen[m.Path])
		}
		seen[m.Path] = true
	}
	if !strings.HasPrefix(f.Probe.Path, "small/d00/d00/") {
		t.Errorf("probe %s, want the first file", f.Probe.Path)
	}
	// Offsets point at each member's data.
	tr := b.Bytes()
	for _, m := range f.Reads[:5] {
		data := tr[m.Offset : m.Offset+m.Size]
		if got := crc32.Checksum(data, castagnoli); got != m.CRC {
			t.Errorf("%s at %d: crc %08x, want %08x", m.Path, m.Offset, got, m.CRC)
		}
	}
	// The files along the stream hold the 10%, 50% and 90% points.
	if len(f.Along) != len(alongPercents) {
		t.Fatalf("got %d files along the stream, want %d", len(f.Along), len(alongPercents))
	}
	for i, m := range f.Along {
		at := tarBytes * alongPercents[i] / 100
		if m.Offset+m.Size <= at || m.Offset > at+8<<10+1024 {
			t.Errorf("file at %d%%: %s at %d+%d, want it to reach past %d", alongPercents[i], m.Path, m.Offset, m.Size, at)
		}
	}
	// The early files are the last ones that end by the 1% and 10% points.
	if len(f.Early) != len(earlyPercents) {
		t.Fatalf("got %d early files, want %d", len(f.Early), len(earlyPercents))
	}
	for i, m := range f.Early {
		at := tarBytes * earlyPercents[i] / 100
		if m.Percent != earlyPercents[i] || m.Offset+m.Size > at || at-(m.Offset+m.Size) > 8<<10+1024 {
			t.Errorf("early file %d: %s at %d%%, %d+%d, want the last to end by %d", i, m.Path, m.Percent, m.Offset, m.Size, at)
		}
	}
	// Spaced reads lie that far apart.
	const spacing = 256 << 10
	sp, err := scanFacts(bytes.NewReader(tr), 100, 7, spacing)
	if err != nil {
		t.Fatal(err)
	}
	if max := int(tarBytes/spacing) + 1; len(sp.Reads) < 2 || len(sp.Reads) > max {
		t.Fatalf("got %d spaced reads, want 2 to %d", len(sp.Reads), max)
	}
	for i, a := range sp.Reads {
		for _, c := range sp.Reads[i+1:] {
			if d := a.Offset - c.Offset; d < spacing && d > -spacing {
				t.Errorf("%s and %s are %d bytes apart, want at least %d", a.Path, c.Path, d, spacing)
			}
		}
	}
}

func TestTextCompressesAbout3x(t *testing.T) {
	p := make([]byte, 4<<20)
	newTextGen(1).fill(p)
	var z bytes.Buffer
	w, _ := gzip.NewWriterLevel(&z, 6)
	w.Write(p)
	w.Close()
	r := float64(len(p)) / float64(z.Len())
	t.Logf("gzip -6 ratio %.2f", r)
	if r < 2.3 || r > 4 {
		t.Errorf("gzip -6 ratio %.2f, want about 3", r)
	}
}

func TestReport(t *testing.T) {
	mk := func(sc, tool string, run int, secs float64) Result {
		return Result{Scenario: sc, Dataset: "go", Codec: "gz", Profile: "objstore", Tool: tool, Run: run,
			Status: statusOK, Seconds: secs, Fetched: 100, Requests: 1}
	}
	rs := []Result{
		mk(scWarmMount, toolTM, 1, 0.04), mk(scWarmMount, toolTM, 2, 0.05), mk(scWarmMount, toolTM, 3, 0.03),
		mk(scWarmMount, toolRA, 1, 1.2), mk(scWarmMount, toolRA, 2, 1.0),
		{Scenario: scWarmMount, Dataset: "go", Codec: "gz", Profile: "objstore", Tool: toolRA, Run: 3, Status: statusFail, Note: "boom"},
		mk(scColdMount, "curl | pigz -d", 1, 1.0), mk(scColdMount, toolTM, 1, 1.3),
		{Scenario: scExtract, Dataset: "go", Codec: "gz", Profile: "objstore", Tool: toolAria, Status: statusNA, Note: "aria2c is not installed"},
	}
	s := summarize(rs, [][2]string{{"date", "today"}}, []string{"a note"})
	if len(s.Groups) != 3 || s.Groups[0].Scenario != scColdMount || s.Groups[1].Scenario != scWarmMount {
		t.Fatalf("groups %+v, want cold, warm, extraction", s.Groups)
	}
	warm := s.Groups[1]
	tm, ra := warm.Rows[0], warm.Rows[1]
	if tm.Median != 0.04 || tm.Min != 0.03 || tm.Max != 0.05 || tm.TargetMet == nil || !*tm.TargetMet {
		t.Errorf("tarmount row %+v, want median 0.04, 0.03-0.05, target met", tm)
	}
	if ra.OK != 2 || ra.Failed != 1 || ra.Median != 1.1 {
		t.Errorf("ratarmount row %+v, want 2 ok, 1 failed, median 1.1", ra)
	}
	if math.Abs(tm.Ratio-0.04/1.1) > 1e-9 {
		t.Errorf("ratio %v, want %v", tm.Ratio, 0.04/1.1)
	}
	if c := s.Groups[0].Rows[1]; c.TargetMet == nil || *c.TargetMet {
		t.Errorf("cold tarmount 1.3 s vs decode 1.0 s: target met %v, want false", c.TargetMet)
	}
	checkReport(t, s,
		"| go | gz | objstore | tarmount | 0.04 s |",
		"n/a: aria2c is not installed",
		"(1/3 runs failed)",
		"✅ < 0.1 s",
		"❌ ≤ 1.2x CLI decode",
		"- a note",
	)
}

// checkReport renders s as JSON and markdown, and checks that the
// markdown holds every one of wants.
func checkReport(t *testing.T, s Summary, wants ...string) {
	t.Helper()
	if _, err := json.Marshal(jsonSafe(s)); err != nil {
		t.Errorf("summary JSON: %v", err)
	}
	var md bytes.Buffer
	if err := writeMarkdown(&md, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range wants {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

func BenchmarkTextFill(b *testing.B) {
	p := make([]byte, 1<<20)
	g := newTextGen(1)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		g.fill(p)
	}
}

// TestScratchFS makes a filesystem of its own in a loop-mounted image,
// writes to it, and removes it: nothing is left, the loop device included.
func TestScratchFS(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "needs root (losetup, mount)")
	}
	for _, c := range []string{"losetup", "mkfs.ext4", "findmnt"} {
		if _, err := exec.LookPath(c); err != nil {
			testutil.Missing(t, "needs %s", c)
		}
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		testutil.Missing(t, "no loop devices here")
	}
	work := t.TempDir()
	// Not a whole number of sectors: rounded up to whole MiB.
	f, err := newScratchFS(context.Background(), work, 64<<20+100, 2000)
	if err != nil {
		t.Fatal(err)
	}
	var st, wst syscall.Stat_t
	if err := syscall.Stat(f.dir, &st); err != nil {
		t.Fatal(err)
	}
	syscall.Stat(work, &wst)
	if st.Dev == wst.Dev {
		t.Errorf("%s is on the work dir's filesystem, want one of its own", f.dir)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "a"), []byte("hello"), 0o644); err != nil {
		t.Error(err)
	}
	loop := f.loop
	f.close()
	if _, err := os.Stat(f.img); !os.IsNotExist(err) {
		t.Errorf("image %s still there: %v", f.img, err)
	}
	if out, _ := exec.Command("losetup", "-a").Output(); strings.Contains(string(out), f.img) {
		t.Errorf("loop device %s still attached: %s", loop, out)
	}
}

func TestBootTargets(t *testing.T) {
	mk := func(what, tool string, run int, secs float64) Result {
		return Result{Scenario: bootSc(what), Dataset: "go", Codec: "gz", Profile: bootProfile, Tool: tool, Run: run,
			Status: statusOK, Seconds: secs, Fetched: -1, Requests: -1}
	}
	origin := func(tool string, run int, fetched int64) Result {
		r := mk(bootBytes, tool, run, 2)
		r.Fetched, r.Requests, r.Least = fetched, 10, 100
		return r
	}
	file10 := bootFile(10)
	idx, bare, ext := toolBootIndexed+" [new]", toolBootBare+" [new]", toolBootExtract+" [new]"
	var rs []Result
	for run := 1; run <= 3; run++ {
		rs = append(rs,
			mk(bootGoVersion, idx, run, []float64{0.2, 0.25, 0.4}[run-1]),
			mk(bootLocal, idx, run, 1.2), mk(bootLocal, ext, run, 1.0), mk(bootLocal, curlTar("gz"), run, 2),
			origin(idx, run, []int64{101, 150, 100}[run-1]),
			mk(file10, bare, run, 0.5), mk(bootListing, bare, run, 4),
			// The old build's mount never answered.
			Result{Scenario: bootSc(bootGoVersion), Dataset: "go", Codec: "gz", Profile: bootProfile,
				Tool: toolBootIndexed + " [old]", Run: run, Status: statusFail, Note: "boom"},
		)
	}
	s := summarize(rs, nil, nil)
	type want struct {
		tool, measured string
		value          float64
		met            bool
	}
	old := toolBootIndexed + " [old]"
	wants := []want{
		{idx, "0.25 s", 0.25, true},
		{idx, "1.200x (1.20 s / 1.00 s)", 1.2, false},
		{idx, "1.010x (101 B / 100 B)", 1.01, true},
		{bare, "0.125 (0.5 s / 4.00 s)", 0.125, true},
		// A build without values fails every check.
		{old, "–", 0, false},
		{old, "–", 0, false},
		{old, "–", 0, false},
		{toolBootBare + " [old]", "–", 0, false},
	}
	if len(s.Targets) != len(wants) {
		t.Fatalf("got %d checks %+v, want %d", len(s.Targets), s.Targets, len(wants))
	}
	for i, w := range wants {
		c := s.Targets[i]
		if c.Tool != w.tool || c.Measured != w.measured || math.Abs(c.Value-w.value) > 1e-9 || c.Met != w.met {
			t.Errorf("check %d (%s): got %s %q %v met %v, want %s %q %v met %v", i, c.Target, c.Tool, c.Measured, c.Value, c.Met,
				w.tool, w.measured, w.value, w.met)
		}
	}
	// The rows carry their targets.
	for _, g := range s.Groups {
		for _, r := range g.Rows {
			marked := r.TargetMet != nil
			wantMarked := r.Tool == idx || (r.Tool == bare && g.Scenario == bootSc(file10))
			if marked != wantMarked {
				t.Errorf("%s, %s: target %q, want one: %v", g.Scenario, r.Tool, r.Target, wantMarked)
			}
		}
	}
	checkReport(t, s,
		"| go | gz | objstore | tarmount --materialize (published index) [new] | 0.25 s | 0.2 s–0.4 s |",
		"✅ ≤ 0.3 s",
		"❌ ≤ 1.1x extract with the index (1.10 s)",
		"✅ ≤ 1.02x archive + index (102 B)",
		"✅ ≤ 0.25 of the complete listing (1.00 s)",
		"the targets, from the medians of this run",
		"| go | gz | objstore | tarmount --materialize (published index) [new] | bytes from the origin with a published index ≤ 1.02x archive + index | 1.010x (101 B / 100 B) | ✅ met |",
		"| go | gz | objstore | tarmount --materialize (published index) [old] | go version done with a published index ≤ 0.3 s | – | ❌ no value |",
	)
}

func TestBootNames(t *testing.T) {
	if got, want := bootFile(1), "d. first byte of the last file within 1%"; got != want {
		t.Errorf("bootFile(1) = %q, want %q", got, want)
	}
	if got, want := bootFile(10), "e. first byte of the last file within 10%"; got != want {
		t.Errorf("bootFile(10) = %q, want %q", got, want)
	}
	for _, name := range []string{"10", "boot"} {
		m, err := parseScenarios([]string{name})
		if err != nil || len(m) != 1 || !m["10"] {
			t.Errorf("parseScenarios(%s) = %v, %v; want scenario 10", name, m, err)
		}
	}
}

func TestLocalScenarioNames(t *testing.T) {
	tests := []struct {
		names     []string
		anyLocal  bool
		onlyLocal bool
	}{
		{[]string{"gzip-decode"}, true, true},
		{[]string{"12", "extract-tmpfs"}, true, true},
		{[]string{"gzip-decode", "extract-tmpfs", "extract"}, true, false},
		{[]string{"extract", "boot"}, false, false},
	}
	for _, tt := range tests {
		m, err := parseScenarios(tt.names)
		if err != nil {
			t.Fatalf("parseScenarios(%v): %v", tt.names, err)
		}
		c := &config{scenarios: m}
		if got := c.anyLocal(); got != tt.anyLocal {
			t.Errorf("%v: anyLocal() = %v, want %v", tt.names, got, tt.anyLocal)
		}
		if got := c.onlyLocal(); got != tt.onlyLocal {
			t.Errorf("%v: onlyLocal() = %v, want %v", tt.names, got, tt.onlyLocal)
		}
	}
	for name, want := range map[string]string{"gzip-decode": "12", "extract-tmpfs": "13", "seq-read-local": "14"} {
		if m, err := parseScenarios([]string{name}); err != nil || len(m) != 1 || !m[want] {
			t.Errorf("parseScenarios(%s) = %v, %v; want scenario %s", name, m, err, want)
		}
	}
}

func TestExtractPeers(t *testing.T) {
	s := &suite{c: &config{peers: true, builds: []build{{bin: "tarmount"}}}}
	tests := []struct {
		codec      string
		has, lacks string
	}{
		{"gz", toolCurlRapid, toolCurlZstd},
		{"zst", toolCurlZstd, toolCurlRapid},
		{"seekable", toolCurlZstd, toolCurlPigz},
		{"lz4", curlTar("lz4"), toolCurlZstd},
	}
	for _, tt := range tests {
		tools := s.extractTools(tt.codec)
		if !slices.Contains(tools, tt.has) || slices.Contains(tools, tt.lacks) {
			t.Errorf("%s: tools %q, want %q and not %q", tt.codec, tools, tt.has, tt.lacks)
		}
		if _, na := s.peerCmd(tt.codec, tt.has, "http://x/a", "/d", "/dl"); tt.has != toolCurlRapid && na != "" {
			t.Errorf("%s: peerCmd(%s) says %q, want a command", tt.codec, tt.has, na)
		}
	}
}

func TestRatioChecks(t *testing.T) {
	mk := func(sc, codec, prof, tool string, run int, secs float64) Result {
		return Result{Scenario: sc, Dataset: "go", Codec: codec, Profile: prof, Tool: tool, Run: run,
			Status: statusOK, Seconds: secs, Fetched: -1, Requests: -1}
	}
	var rs []Result
	for run := 1; run <= 3; run++ {
		rs = append(rs,
			mk(scGzipDecode, "gz", profileLocal, toolTMIndexPass, run, []float64{0.9, 1.0, 1.1}[run-1]),
			mk(scGzipDecode, "gz", profileLocal, toolLibdeflate, run, 0.5),
			mk(scGzipDecode, "gz", profileLocal, toolIgzip, run, 0.4),
			mk(scTmpfs, "gz", profileLocal, toolTMIndex, run, 0.6),
			mk(scTmpfs, "gz", profileLocal, toolTMCold, run, 1.4),
			mk(scTmpfs, "gz", profileLocal, toolTarPlain, run, 0.5),
			mk(scExtract, "gz", "objstore", toolTMCold, run, 0.8),
			mk(scExtract, "gz", "objstore", toolCurlRapid, run, 1.0),
			mk(scExtract, "zst", "objstore", toolTMCold, run, 1.0),
			mk(scExtract, "zst", "objstore", curlTar("zst"), run, 1.0),
			// No check on another profile.
			mk(scExtract, "gz", "unshaped", toolTMCold, run, 0.8),
			mk(scExtract, "gz", "unshaped", toolCurlRapid, run, 1.0),
		)
		// Rates: 25 MB in 0.05 s (500 MB/s) against 250 MB in 1 s.
		seq := mk(scSeqLocal, "gz", profileLocal, toolTMSeqLocal, run, 0.05)
		seq.Payload = 25e6
		gz := mk(scSeqLocal, "gz", profileLocal, toolGzip, run, 1)
		gz.Payload = 250e6
		// The zst extraction's CPU time: 1.4, 1.5 and 1.6 s.
		zst := mk(scOverlap, "zst", "objstore", toolTMCold, run, 0.8)
		zst.CPU = 1.3 + 0.1*float64(run)
		rs = append(rs, seq, gz,
			// Every codec has the overlap check.
			mk(scOverlap, "gz", "objstore", toolTMCold, run, 0.69),
			mk(scOverlap, "gz", "objstore", toolLongestAlone, run, 0.6),
			zst,
			mk(scOverlap, "zst", "objstore", toolLongestAlone, run, 0.5),
			// Only where the CPU floor was computed, the second check.
			mk(scOverlap, "zst", "objstore", toolAloneOrCPU, run, 0.75))
	}
	// The peer failed: the lz4 row still gets its check, without a value.
	rs = append(rs, mk(scExtract, "lz4", "objstore", toolTMCold, 1, 0.5),
		Result{Scenario: scExtract, Dataset: "go", Codec: "lz4", Profile: "objstore", Tool: curlTar("lz4"), Status: statusFail, Note: "boom"})
	s := summarize(rs, nil, nil)
	type want struct {
		scenario, codec, tool string
		value                 float64
		met                   bool
		measured              string
	}
	// In the order of the report's groups.
	wants := []want{
		{scExtract, "gz", toolTMCold, 0.8, true, "0.800x (0.8 s / 1.00 s)"},
		{scExtract, "zst", toolTMCold, 1, false, "1.000x (1.00 s / 1.00 s)"},
		{scExtract, "lz4", toolTMCold, 0, false, "–"},
		{scGzipDecode, "gz", toolTMIndexPass, 2, false, "2.000x (1.00 s / 0.5 s)"},
		{scGzipDecode, "gz", toolTMIndexPass, 2.5, false, "2.500x (1.00 s / 0.4 s)"},
		{scTmpfs, "gz", toolTMIndex, 1.2, true, "1.200x (0.6 s / 0.5 s)"},
		{scSeqLocal, "gz", toolTMSeqLocal, 2, true, "2.000x (500 MB/s / 250 MB/s)"},
		{scOverlap, "gz", toolTMCold, 1.15, true, "1.150x (0.69 s / 0.6 s)"},
		{scOverlap, "zst", toolTMCold, 1.6, false, "1.600x (0.8 s / 0.5 s)"},
		{scOverlap, "zst", toolTMCold, 0.8 / 0.75, true, "1.067x (0.8 s / 0.75 s)"},
	}
	if len(s.Targets) != len(wants) {
		t.Fatalf("got %d checks %+v, want %d", len(s.Targets), s.Targets, len(wants))
	}
	for i, w := range wants {
		c := s.Targets[i]
		if c.Scenario != w.scenario || c.Codec != w.codec || c.Tool != w.tool || math.Abs(c.Value-w.value) > 1e-9 ||
			c.Met != w.met || c.Measured != w.measured {
			t.Errorf("check %d: got %s %s %s %v met %v %q, want %s %s %s %v met %v %q", i, c.Scenario, c.Codec, c.Tool, c.Value,
				c.Met, c.Measured, w.scenario, w.codec, w.tool, w.value, w.met, w.measured)
		}
	}
	// The rows carry the checks as their targets (not the moonshot's).
	for _, g := range s.Groups {
		for _, r := range g.Rows {
			if g.Scenario == scGzipDecode && r.Tool == toolTMIndexPass && r.Target != "≤ 1x libdeflate-gunzip -c (0.5 s)" {
				t.Errorf("index pass row: target %q, want the one over libdeflate-gunzip", r.Target)
			}
			if g.Scenario == scSeqLocal && r.Tool == toolTMSeqLocal && r.Target != "≥ 1.5x gzip -dc (375 MB/s)" {
				t.Errorf("sequential read row: target %q, want at least 1.5x gzip -dc's rate", r.Target)
			}
			if g.Scenario == scExtract && g.Profile == "unshaped" && r.Tool == toolTMCold && r.Target != "< every peer (1 s)" {
				t.Errorf("unshaped extraction row: target %q, want scenario 5's own", r.Target)
			}
		}
	}
	checkReport(t, s,
		"## 12. gzip decode of the local .tar.gz to /dev/null: the targets, from the medians of this run",
		"| go | gz | local | tarmount index | the index pass of a local .tar.gz ≤ 1x libdeflate-gunzip -c | 2.000x (1.00 s / 0.5 s) | ❌ missed |",
		"## 13. extraction of the local .tar.gz to tmpfs: the targets",
		"✅ ≤ 1.5x tar -x of the plain .tar (0.75 s)",
		"## 5. full extraction: the targets",
		"| ✅ ≤ 0.8x curl \\| rapidgzip -d \\| tar -x (0.8 s) |",
		"| go | lz4 | objstore | tarmount extract (no index) | the first extraction (no index) ≤ 0.6x curl \\| lz4 -dc \\| tar -x | – | ❌ no value |",
		"| go | zst | objstore | tarmount extract (no index) | the first extraction (no index) ≤ 1.15x "+toolLongestAlone+" | 1.600x (0.8 s / 0.5 s) | ❌ missed |",
		"| go | zst | objstore | tarmount extract (no index) | the first extraction (no index) ≤ 1.15x "+toolAloneOrCPU+" | 1.067x (0.8 s / 0.75 s) | ✅ met |",
		// The median CPU time, in its own column after the range.
		"| go | zst | objstore | tarmount extract (no index) | 0.8 s | 0.8 s–0.8 s | 1.50 s |",
		// The row carries the bound, not the informational one.
		"✅ ≤ 1.15x "+toolLongestAlone+" (0.69 s)",
	)
}

func TestRatioChecksPerBuild(t *testing.T) {
	var rs []Result
	for _, r := range []struct {
		tool string
		secs float64
	}{{toolTMIndex + " [old]", 1.0}, {toolTMIndex + " [new]", 0.7}, {toolTarPlain, 0.5}} {
		rs = append(rs, Result{Scenario: scTmpfs, Dataset: "go", Codec: "gz", Profile: profileLocal, Tool: r.tool, Run: 1,
			Status: statusOK, Seconds: r.secs, Fetched: -1, Requests: -1})
	}
	s := summarize(rs, nil, nil)
	if len(s.Targets) != 2 {
		t.Fatalf("got %d checks %+v, want one per build", len(s.Targets), s.Targets)
	}
	for i, w := range []struct {
		tool string
		met  bool
	}{{toolTMIndex + " [old]", false}, {toolTMIndex + " [new]", true}} {
		if c := s.Targets[i]; c.Tool != w.tool || c.Met != w.met {
			t.Errorf("check %d: got %s met %v, want %s met %v", i, c.Tool, c.Met, w.tool, w.met)
		}
	}
}
