package tests

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tarmount/tarmount/archive"
	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// runExtract runs `tarmount extract URL DIR args...` and returns its
// output.
func runExtract(t *testing.T, url, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command(binary, append([]string{"extract", url, dir}, args...)...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("tarmount extract: %v\n%s", err, out)
	}
	return string(out)
}

// TestExtractMatchesTarExtract extracts archives of the corpus over HTTP,
// cold (one pass, which saves the index) and then with the saved index
// (parallel spans), and in the background of a mount (materialize), and
// compares each tree with what GNU tar extracts. (TestExtractManyDirectories
// checks tarmount extract's summary line.)
func TestExtractMatchesTarExtract(t *testing.T) {
	needFUSE(t)
	cases := []struct {
		spec tarbuild.Spec
		many int
	}{
		{tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, 2000},
		{tarbuild.Spec{Tool: "gnutar", Format: "gnu", Codec: "none"}, 0},
		{tarbuild.Spec{Tool: "bsdtar", Format: "pax", Codec: "gzip-multi"}, 0},
		{tarbuild.Spec{Tool: "go", Format: "ustar", Codec: "pigz"}, 0},
		{tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "zstd-multi"}, 0},
		{tarbuild.Spec{Tool: "go", Format: "pax", Codec: "zstd-seekable"}, 0},
		{tarbuild.Spec{Tool: "bsdtar", Format: "pax", Codec: "lz4"}, 0},
		{tarbuild.Spec{Tool: "gnutar", Format: "gnu", Codec: "lz4-linked"}, 0},
		// Stream-only: extract runs one pass each time; --materialize
		// reads spans from the decoded copy the mount's pass wrote.
		{tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "zstd"}, 0},
		{tarbuild.Spec{Tool: "bsdtar", Format: "pax", Codec: "xz"}, 0},
	}
	if raceEnabled {
		cases[0].many = 200
	}
	for _, tc := range cases {
		t.Run(tc.spec.String(), func(t *testing.T) {
			t.Parallel()
			topts := corpus.TreeOptionsFor(tc.spec)
			topts.Many = tc.many
			f := newFixture(t, topts, tc.spec, "a"+tc.spec.Ext())
			work, url, ref := f.work, f.url, f.extracted(t)
			cache := filepath.Join(work, "cache")

			cold := filepath.Join(work, "cold")
			opts := libOptions(cache)
			opts.Span = 262144
			s := checkSummary(t, libExtract(t, url, cold, opts, archive.MaterializeOptions{}))
			if !s.OnePass {
				t.Errorf("first extract did not run in one pass: %+v", s)
			}
			treecmp.Compare(t, ref, cold, treecmp.Options{MaxErrors: 20})
			coldDecoded := s.Decoded

			warm := filepath.Join(work, "warm")
			s = checkSummary(t, libExtract(t, url, warm, libOptions(cache), archive.MaterializeOptions{Writers: 3, Decoders: 2}))
			// Spans that hold no file data are not decoded.
			if d := s.Decoded; d <= 0 || d > coldDecoded {
				t.Errorf("extract with a saved index decoded %d bytes, want more than 0 and at most the %d of the one pass: %+v", d, coldDecoded, s)
			}
			streamOnly := tc.spec.Codec == "zstd" || tc.spec.Codec == "xz"
			if streamOnly && !s.OnePass {
				t.Errorf("extract of a stream-only archive did not run in one pass: %+v", s)
			} else if !streamOnly && s.OnePass {
				t.Errorf("extract with a saved index did not read spans in parallel: %+v", s)
			}
			treecmp.Compare(t, ref, warm, treecmp.Options{MaxErrors: 20})
			if s := libExtract(t, url, warm, libOptions(cache), archive.MaterializeOptions{}); s != nil {
				t.Errorf("extract into a complete directory ran again: %+v", s)
			}

			mat := filepath.Join(work, "mat")
			m := libMountWith(t, url, libOptions(cache), libMountOptions{materialize: mat})
			m.waitMaterialized(t)
			m.waitLog(t, "msg=materialized")
			treecmp.Compare(t, ref, mat, treecmp.Options{MaxErrors: 20})
			treecmp.Compare(t, ref, m.dir, treecmp.Options{MaxErrors: 20})
			m.stop(t)
		})
	}
}

// checkSummary checks that an extraction's summary has every figure that
// tarmount extract prints, and returns it.
func checkSummary(t *testing.T, s *archive.ExtractSummary) *archive.ExtractSummary {
	t.Helper()
	if s == nil {
		t.Fatal("extract found its directory already complete")
	}
	if s.Fetched <= 0 || s.Requests <= 0 || s.Decoded <= 0 || s.Codec == "" || s.Elapsed <= 0 {
		t.Errorf("summary without bytes fetched, requests, bytes decoded, codec or time: %+v", s)
	}
	return s
}

// summaryDecoded returns the MB of tar that extract's summary says it
// decoded, after checking that the summary has every figure.
func summaryDecoded(t *testing.T, out string) float64 {
	t.Helper()
	m := regexp.MustCompile(`fetched [0-9.]+ MB in [0-9]+ requests \([0-9.]+ MB/s\), decoded ([0-9.]+) MB of (tar|gzip|zstd|lz4|bzip2|xz) \([0-9.]+ MB/s\), wrote [0-9.]+ MB/s\n`).FindStringSubmatch(out)
	if m == nil {
		t.Errorf("no summary with bytes fetched, decode and write rates:\n%s", out)
		return 0
	}
	d, _ := strconv.ParseFloat(m[1], 64)
	return d
}

// waitLog waits until the mount's log has s.
func waitLog(t *testing.T, m *mounted, s string) {
	t.Helper()
	waitLogWithin(t, m, s, 3*time.Minute)
}

// waitLogWithin waits until the mount's log has s, at most limit.
func waitLogWithin(t *testing.T, m *mounted, s string, limit time.Duration) {
	t.Helper()
	deadline := time.After(limit)
	for !strings.Contains(m.stderr.String(), s) {
		select {
		case <-m.exited:
			t.Fatalf("tarmount exited: %v\n%s", m.err, m.stderr)
		case <-deadline:
			t.Fatalf("no %q after %v:\n%s", s, limit, m.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// journalLines counts the entries in DIR's journal.
func journalLines(dir string) int {
	b, _ := os.ReadFile(filepath.Join(dir, ".tarmount-partial", "journal"))
	return strings.Count(string(b), "\n") - 1
}

// TestExtractKill9Resumes kills `tarmount extract` with SIGKILL in the
// middle, from a slow server, and runs it again: the result equals what
// tar -x extracts. It does so in the one-pass mode (killed while staging)
// and with an index (killed once the journal has entries).
func TestExtractKill9Resumes(t *testing.T) {
	needFUSE(t)
	work := t.TempDir()
	src, ref, served := filepath.Join(work, "src"), filepath.Join(work, "ref"), filepath.Join(work, "served")
	os.Mkdir(served, 0o755)
	many := 3000
	if raceEnabled {
		many = 500
	}
	corpus.MakeTree(t, src, corpus.TreeOptions{Many: many})
	archive := filepath.Join(served, "a.tar.gz")
	tarbuild.Archive(t, src, archive, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"})
	tarbuild.Extract(t, archive, ref)
	st, _ := os.Stat(archive)
	// Slow enough that the extraction takes a few seconds.
	h := shaped.NewHandler(served, shaped.Options{Rate: st.Size() / 4, Latency: 5 * time.Millisecond})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	url := srv.URL + "/a.tar.gz"

	kill := func(t *testing.T, url, dir string, args []string, ready func() bool) {
		t.Helper()
		cmd := exec.Command(binary, append([]string{"extract", url, dir, "--quiet"}, args...)...)
		var out syncBuffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		deadline := time.After(2 * time.Minute)
		for !ready() {
			select {
			case err := <-exited:
				t.Fatalf("extract ended before it could be killed: %v\n%s", err, out.String())
			case <-deadline:
				cmd.Process.Kill()
				t.Fatalf("extract never got ready to be killed\n%s", out.String())
			case <-time.After(5 * time.Millisecond):
			}
		}
		cmd.Process.Signal(syscall.SIGKILL)
		<-exited
	}
	t.Run("one-pass", func(t *testing.T) {
		dir := filepath.Join(work, "cold")
		cache := filepath.Join(work, "cache-cold")
		// Killed in the middle of the pass, with files staged (unnamed,
		// so they vanish with the process).
		kill(t, url, dir, []string{"--cache-dir", cache}, func() bool {
			return h.Stats().Bytes > st.Size()/3
		})
		if _, err := os.Stat(filepath.Join(dir, ".tarmount-partial")); err != nil {
			t.Fatalf("no state left by the killed run: %v", err)
		}
		runExtract(t, url, dir, "--cache-dir", cache)
		treecmp.Compare(t, ref, dir, treecmp.Options{MaxErrors: 20})
	})
	t.Run("indexed", func(t *testing.T) {
		// Reads in spans are small ranges that a rate cap hardly slows:
		// 100 ms before each reply and one decoder make the run last
		// seconds, so that it is killed with some files journaled (the
		// journal is flushed every 200 ms) and others not.
		slow := shaped.NewHandler(served, shaped.Options{Latency: 100 * time.Millisecond})
		slowSrv := httptest.NewServer(slow)
		t.Cleanup(func() { slowSrv.Close(); slow.Close() })
		url := slowSrv.URL + "/a.tar.gz"
		dir := filepath.Join(work, "warm")
		cache := filepath.Join(work, "cache-warm")
		idx := exec.Command(binary, "index", url, "--cache-dir", cache, "-o", filepath.Join(work, "a.idx"), "--span", "131072")
		if out, err := idx.CombinedOutput(); err != nil {
			t.Fatalf("index: %v\n%s", err, out)
		}
		args := []string{"--index", filepath.Join(work, "a.idx"), "--decode-workers", "1", "--fetch-workers", "1"}
		kill(t, url, dir, args, func() bool { return journalLines(dir) > 100 })
		done := journalLines(dir)
		slow.ResetStats()
		out := runExtract(t, url, dir, args...)
		treecmp.Compare(t, ref, dir, treecmp.Options{MaxErrors: 20})
		if done <= 0 {
			t.Errorf("journal had %d entries at the kill", done)
		}
		if got, total := slow.Stats().Bytes, st.Size(); got >= total {
			t.Errorf("the resumed run fetched %d bytes, want less than the archive (%d): it did not resume", got, total)
		}
		t.Logf("killed with %d files journaled; resumed run fetched %d of %d bytes: %s", done, slow.Stats().Bytes, st.Size(), strings.TrimSpace(out))
	})
}

// coldReads is an archive of many small files served like object storage,
// with its index saved, and the files that materialization reaches last.
type coldReads struct {
	work, src, url, cache string
	h                     *shaped.Handler
	// picks: 15 files spread over the archive's second half, last first,
	// each in a span of its own.
	picks []string
}

func newColdReads(tb testing.TB) *coldReads {
	needFUSE(tb)
	c := &coldReads{work: tb.TempDir()}
	c.src = filepath.Join(c.work, "src")
	served := filepath.Join(c.work, "served")
	os.Mkdir(served, 0o755)
	// 3000 files of 2-8 KiB of hex text (about 2x compressible), in 30
	// directories: 15 MB of tar, so that spans hold few files.
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		d := filepath.Join(c.src, "many", fmt.Sprintf("d%02d", i%30))
		os.MkdirAll(d, 0o755)
		raw := make([]byte, 1024+rng.IntN(3072))
		for k := range raw {
			raw[k] = byte(rng.Uint32())
		}
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%05d", i)), []byte(hex.EncodeToString(raw)), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	archive := filepath.Join(served, "a.tar.gz")
	tarCmd := exec.Command("bash", "-c", fmt.Sprintf("tar -C %q -cf - many | gzip -1 > %q", c.src, archive))
	if out, err := tarCmd.CombinedOutput(); err != nil {
		tb.Fatalf("%v: %s", err, out)
	}
	c.h = shaped.NewHandler(served, shaped.Options{Latency: 20 * time.Millisecond, Rate: 80e6})
	srv := httptest.NewServer(c.h)
	tb.Cleanup(func() { srv.Close(); c.h.Close() })
	c.url = srv.URL + "/a.tar.gz"
	c.cache = filepath.Join(c.work, "cache")
	// Build and save the index once; every mount loads it.
	opts := libOptions(c.cache)
	opts.Span = 65536
	libIndex(tb, c.url, opts)
	// Archive order is tar's directory order: list it.
	list, err := exec.Command("bash", "-c", fmt.Sprintf("tar -tzf %q | grep -v /$", archive)).Output()
	if err != nil {
		tb.Fatal(err)
	}
	files := strings.Fields(string(list))
	for i := len(files) - 1; i >= len(files)/2 && len(c.picks) < 15; i -= len(files) / 32 {
		c.picks = append(c.picks, files[i])
	}
	return c
}

// read mounts the archive with the saved index (and no disk cache), and
// reads every pick through the mount, materializing it into mat (with 6
// decoders) when mat is not empty. It checks each file's bytes, and returns the
// median read time and how many picks were not yet on disk when read.
func (c *coldReads) read(tb testing.TB, mat string) (median time.Duration, lazy int) {
	opts := libOptions(c.cache)
	opts.CacheDisk = 0
	m := libMountWith(tb, c.url, opts, libMountOptions{materialize: mat, mat: archive.MaterializeOptions{Decoders: 6}})
	defer m.stop(tb)
	var lat []time.Duration
	for _, p := range c.picks {
		if mat != "" {
			if _, err := os.Lstat(filepath.Join(mat, p)); err != nil {
				lazy++
			}
		}
		start := time.Now()
		got, err := os.ReadFile(filepath.Join(m.dir, p))
		lat = append(lat, time.Since(start))
		if err != nil {
			tb.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(c.src, p))
		if err != nil {
			tb.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			tb.Fatalf("%s through the mount: got %d bytes that differ from the %d of the source", p, len(got), len(want))
		}
	}
	if strings.Contains(m.log.String(), "msg=indexing") {
		tb.Errorf("the mount indexed the archive instead of loading the saved index:\n%s", m.log)
	}
	slices.Sort(lat)
	return lat[len(lat)/2], lazy
}

// TestMaterializeColdReads reads, through a mount whose materialization
// runs, files that it has not reached yet: each read returns the file's
// bytes. The first pick is the archive's last file, read at once, so at
// least that read must come before its file is on disk, or the test
// would check nothing it is about.
func TestMaterializeColdReads(t *testing.T) {
	c := newColdReads(t)
	median, lazy := c.read(t, filepath.Join(c.work, "mat"))
	t.Logf("median cold read %v; %d of %d reads before the file was on disk; server: %+v", median, lazy, len(c.picks), c.h.Stats())
	if lazy == 0 {
		t.Errorf("all %d files were on disk before they were read: no read was served from the archive", len(c.picks))
	}
}

// BenchmarkMaterializeColdReads measures cold reads through the mount of
// files that materialization has not reached yet, with and without
// materialization running, over a server shaped like object storage (the
// background job must not make them wait: the target is within 2x).
// Each iteration mounts twice, alternating, with a fresh materialization
// directory; it reports the medians over all reads and their ratio:
//
//	go test -run '^$' -bench BenchmarkMaterializeColdReads -benchtime 5x ./tests
func BenchmarkMaterializeColdReads(b *testing.B) {
	c := newColdReads(b)
	var alone, with []time.Duration
	lazy, reads := 0, 0
	b.ResetTimer()
	for i := range b.N {
		base, _ := c.read(b, "")
		m, l := c.read(b, filepath.Join(c.work, fmt.Sprintf("mat%d", i)))
		alone, with = append(alone, base), append(with, m)
		lazy, reads = lazy+l, reads+len(c.picks)
	}
	b.StopTimer()
	slices.Sort(alone)
	slices.Sort(with)
	a, w := alone[len(alone)/2], with[len(with)/2]
	b.ReportMetric(float64(a.Microseconds())/1e3, "ms/read-alone")
	b.ReportMetric(float64(w.Microseconds())/1e3, "ms/read-materializing")
	b.ReportMetric(float64(w)/float64(a), "ratio")
	b.ReportMetric(float64(lazy)/float64(reads), "lazy-fraction")
}

// TestExtractManyDirectories extracts, under an open-file limit of 256
// (soft and hard, so that Go cannot raise it), a GNU tar archive of 3000
// directories served over HTTP: cold (one pass) and with the saved index,
// each equal to what tar -x extracts. Extraction keeps at most a quarter of
// the limit of directories open and opens the others again as it needs
// them.
func TestExtractManyDirectories(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		testutil.Missing(t, "needs bash")
	}
	work := t.TempDir()
	src, ref, served := filepath.Join(work, "src"), filepath.Join(work, "ref"), filepath.Join(work, "served")
	os.Mkdir(served, 0o755)
	for i := range 3000 {
		d := filepath.Join(src, "top", fmt.Sprintf("a%02d", i%60), fmt.Sprintf("b%04d", i))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "f"), []byte(strings.Repeat(fmt.Sprintf("%d\n", i), 1+i%100)), 0o644); err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			os.Chmod(d, 0o555)
		}
	}
	archive := filepath.Join(served, "a.tar.gz")
	if out, err := exec.Command("tar", "-C", src, "-czf", archive, "top").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v: %s", err, out)
	}
	tarbuild.Extract(t, archive, ref)
	base, _ := serve(t, served)
	url := base + "/a.tar.gz"
	cache := filepath.Join(work, "cache")
	for _, mode := range []string{"one pass", "parallel spans"} {
		dir := filepath.Join(work, strings.ReplaceAll(mode, " ", "-"))
		cmd := exec.Command("bash", "-c", `ulimit -n 256 && exec "$@"`, "_", binary, "extract", url, dir, "--cache-dir", cache, "--span", "65536")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: extract under ulimit -n 256: %v\n%s", mode, err, tail(string(out)))
		}
		if !strings.Contains(string(out), "("+mode+")") {
			t.Errorf("extract did not run in %s:\n%s", mode, out)
		}
		summaryDecoded(t, string(out))
		treecmp.Compare(t, ref, dir, treecmp.Options{SkipRoot: true, MaxErrors: 20})
	}
}

// TestExtractProgressLines: without a terminal, a one-pass extraction
// logs progress lines that say the phase, the percent of the archive read,
// bytes of the archive's size, a rate, an ETA, the members read and the
// files written; the percent grows, and the members are counted while the
// archive is read.
func TestExtractProgressLines(t *testing.T) {
	work := t.TempDir()
	src, served := filepath.Join(work, "src"), filepath.Join(work, "served")
	os.Mkdir(served, 0o755)
	corpus.MakeTree(t, src, corpus.TreeOptions{Many: 1000})
	archive := filepath.Join(served, "a.tar.gz")
	tarbuild.Archive(t, src, archive, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"})
	st, _ := os.Stat(archive)
	// About three seconds to read.
	h := shaped.NewHandler(served, shaped.Options{Rate: st.Size() / 3, Latency: 5 * time.Millisecond})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	r := runBinary(t, nil, false, "extract", srv.URL+"/a.tar.gz", filepath.Join(work, "x"), "--cache-dir", filepath.Join(work, "cache"),
		"--progress-every", "300ms", "--fetch-workers", "1")
	if r.err != nil {
		t.Fatalf("extract: %v\n%s", r.err, r.stderr)
	}
	line := regexp.MustCompile(`msg=extracting phase="reading archive" done=(\d+)% bytes="[0-9.]+ MB" of="([0-9.]+) MB" rate="[0-9.]+ MB/s" eta=(\S+) members=(\d+) files=\d+`)
	var percents []int
	files := 0
	for l := range strings.SplitSeq(r.stderr, "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		if want := fmt.Sprintf("%.1f", float64(st.Size())/1e6); m[2] != want {
			t.Errorf("of=%s MB, want the archive's %s MB: %s", m[2], want, l)
		}
		p, _ := strconv.Atoi(m[1])
		percents = append(percents, p)
		n, _ := strconv.Atoi(m[4])
		files = max(files, n)
	}
	if len(percents) < 3 || !slices.IsSorted(percents) || percents[len(percents)-1] == percents[0] {
		t.Errorf("percents of the archive read: got %v, want three or more, growing\n%s", percents, r.stderr)
	}
	if files == 0 {
		t.Errorf("no line counted the members read while the archive was read\n%s", r.stderr)
	}
}

// TestExtractSelection: extract's --strip-components, --exclude and
// --include give the tree that GNU tar's --strip-components, --exclude
// and member names with --wildcards give, without an index and with one.
// One difference is deliberate: a hard link whose target is left out
// holds the data itself, where GNU tar fails to make it (plus).
func TestExtractSelection(t *testing.T) {
	needTools(t, "tar")
	work := t.TempDir()
	src := filepath.Join(work, "src")
	for _, f := range []string{"top/a.md", "top/b.txt", "top/pkg/c.md", "top/pkg/sub/d.md", "top/pkg/sub/e_test.go",
		"top/other/f_test.go", "top/other/g.go", "top/md/h.txt"} {
		p := filepath.Join(src, f)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(f+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Symlink("a.md", filepath.Join(src, "top", "sl"))
	os.Link(filepath.Join(src, "top", "b.txt"), filepath.Join(src, "top", "other", "hl"))
	archive := filepath.Join(work, "a.tar.gz")
	if out, err := exec.Command("tar", "-C", src, "-czf", archive, "top").CombinedOutput(); err != nil {
		t.Fatalf("tar: %v\n%s", err, out)
	}
	for i, tc := range []struct {
		gnu, ours []string
		plus      map[string]string // file in DIR -> the file of src it holds
	}{
		{[]string{"--strip-components=1"}, []string{"--strip-components", "1"}, nil},
		{[]string{"--strip-components=2"}, []string{"--strip-components=2"}, map[string]string{"hl": "top/b.txt"}},
		{[]string{"--exclude=*.md"}, []string{"--exclude", "*.md"}, nil},
		{[]string{"--exclude=sub"}, []string{"--exclude", "sub"}, nil},
		{[]string{"--exclude=top/pkg", "--exclude=md"}, []string{"--exclude", "top/pkg", "--exclude", "md"}, nil},
		{[]string{"--wildcards", "top/pkg/*"}, []string{"--include", "top/pkg/*"}, nil},
		{[]string{"--wildcards", "top/a.md", "top/other"}, []string{"--include", "top/a.md", "--include", "top/other"},
			map[string]string{"top/other/hl": "top/b.txt"}},
		{[]string{"--strip-components=1", "--exclude=*_test.go", "--wildcards", "top/pkg", "top/b.txt"},
			[]string{"--strip-components=1", "--exclude=*_test.go", "--include=top/pkg", "--include=top/b.txt"}, nil},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			ref := filepath.Join(work, fmt.Sprintf("ref%d", i))
			os.Mkdir(ref, 0o755)
			gnu := append([]string{"-x", "-p", "--numeric-owner", "-f", archive, "-C", ref}, tc.gnu...)
			if out, err := exec.Command("tar", gnu...).CombinedOutput(); err != nil && tc.plus == nil {
				t.Fatalf("tar %q: %v\n%s", gnu, err, out)
			}
			for p, from := range tc.plus {
				data, _ := os.ReadFile(filepath.Join(src, from))
				if err := os.WriteFile(filepath.Join(ref, p), data, 0o644); err != nil {
					t.Fatal(err)
				}
				os.Chtimes(filepath.Join(ref, p), time.Now(), mustStat(t, filepath.Join(src, from)).ModTime().Truncate(time.Second)) // the archive keeps seconds
			}
			cache := filepath.Join(work, fmt.Sprintf("cache%d", i))
			for _, run := range []string{"no index", "saved index"} {
				dest := filepath.Join(work, fmt.Sprintf("x%d-%s", i, strings.ReplaceAll(run, " ", "-")))
				r := runBinary(t, nil, false, append([]string{"extract", archive, dest, "--cache-dir", cache, "--quiet"}, tc.ours...)...)
				if r.err != nil {
					t.Fatalf("%s: extract %q: %v\n%s", run, tc.ours, r.err, r.stderr)
				}
				treecmp.Compare(t, ref, dest, treecmp.Options{MaxErrors: 20, SkipRoot: true, SkipDirMTime: true})
			}
		})
	}
}

func mustStat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return fi
}
