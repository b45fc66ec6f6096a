package tests

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// statusJSON is the part of `tarmount status --json` that the tests check,
// with the field names docs/status.md documents.
type statusJSON struct {
	Source     string `json:"source"`
	Mountpoint string `json:"mountpoint"`
	PID        int    `json:"pid"`
	Archive    struct {
		Size  int64  `json:"size"`
		ETag  string `json:"etag"`
		Codec string `json:"codec"`
	} `json:"archive"`
	Index struct {
		Source      string `json:"source"`
		Entries     int    `json:"entries"`
		Checkpoints int    `json:"checkpoints"`
	} `json:"index"`
	Fetch struct {
		Requests int64 `json:"requests"`
		Bytes    int64 `json:"bytes"`
		Retries  int64 `json:"retries"`
	} `json:"fetch"`
	Cache struct {
		SpanMisses  int64 `json:"span_misses"`
		SpanDecodes int64 `json:"span_decodes"`
		DiskEnabled bool  `json:"disk_enabled"`
	} `json:"cache"`
	Materialize *struct {
		Dir        string  `json:"dir"`
		Files      int64   `json:"files"`
		FilesTotal int64   `json:"files_total"`
		Bytes      int64   `json:"bytes"`
		BytesTotal int64   `json:"bytes_total"`
		Percent    float64 `json:"percent"`
		Complete   bool    `json:"complete"`
	} `json:"materialize"`
}

// status runs `tarmount status --json mnt` and decodes it.
func status(t *testing.T, mnt string) statusJSON {
	t.Helper()
	out, err := exec.Command(binary, "status", "--json", mnt).Output()
	if err != nil {
		t.Fatalf("tarmount status --json %s: %v\n%s", mnt, err, stderrOf(err))
	}
	var st statusJSON
	if err := json.Unmarshal(out, &st); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return st
}

func stderrOf(err error) []byte {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.Stderr
	}
	return nil
}

// tarEntries counts the members of a gzipped tar, as Go's archive/tar
// reads them, but hard links: those are more names of their target's
// entry in the index (one inode).
func tarEntries(t *testing.T, path string) int {
	return countTar(t, path, func(h *tar.Header) bool { return h.Typeflag != tar.TypeLink })
}

// countTar counts the headers of a gzipped tar, as Go's archive/tar reads
// them, for which keep is true.
func countTar(t *testing.T, path string, keep func(*tar.Header) bool) int {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return n
		}
		if err != nil {
			t.Fatal(err)
		}
		if keep(h) {
			n++
		}
	}
}

// TestStatus mounts an archive with --materialize, reads from it, and
// checks what `tarmount status --json` says against what happened; then
// that status refuses, clearly, paths that are not a mount's root.
func TestStatus(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{NoBigFiles: true}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	mat := filepath.Join(f.work, "mat")
	m := mount(t, f.url, "--cache-dir", filepath.Join(f.work, "cache"), "--span", "65536", "--materialize", mat)
	readTree(t, m.dir, f.src)

	var st statusJSON
	deadline := time.Now().Add(time.Minute)
	for st = status(t, m.dir); st.Materialize != nil && !st.Materialize.Complete; st = status(t, m.dir) {
		if time.Now().After(deadline) {
			t.Fatalf("materialization not complete after a minute: %+v\n%s", *st.Materialize, m.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fi, err := os.Stat(f.archive)
	if err != nil {
		t.Fatal(err)
	}
	if st.Source != f.url || st.Mountpoint != m.dir || st.PID != m.cmd.Process.Pid {
		t.Errorf("source, mountpoint, pid: got %q, %q, %d, want %q, %q, %d", st.Source, st.Mountpoint, st.PID, f.url, m.dir, m.cmd.Process.Pid)
	}
	if st.Archive.Size != fi.Size() || st.Archive.ETag == "" || st.Archive.Codec != "gzip" {
		t.Errorf("archive: got %+v, want size %d, an ETag and codec gzip", st.Archive, fi.Size())
	}
	if want := tarEntries(t, f.archive); st.Index.Entries != want || st.Index.Source != "built" || st.Index.Checkpoints < 2 {
		t.Errorf("index: got %+v, want %d entries, built, several checkpoints", st.Index, want)
	}
	if st.Fetch.Bytes <= 0 || st.Fetch.Requests <= 0 || st.Fetch.Retries != 0 {
		t.Errorf("fetch: got %+v, want bytes and requests, no retries", st.Fetch)
	}
	// The mount's index pass fed the materializer: reads may all have
	// come from DIR, with no span decoded, and the archive was read once
	// (with the last 64 KiB, where an embedded index would be, twice).
	if !st.Cache.DiskEnabled || st.Fetch.Bytes > fi.Size()+64<<10 {
		t.Errorf("cache, fetch: got %+v, %+v; want a disk cache, and the %d-byte archive fetched once", st.Cache, st.Fetch, fi.Size())
	}
	mt := st.Materialize
	switch {
	case mt == nil:
		t.Fatalf("no materialize in the status of a mount with --materialize")
	case mt.Dir != mat || !mt.Complete || mt.Percent != 100 || mt.Files == 0 || mt.Files != mt.FilesTotal || mt.Bytes != mt.BytesTotal:
		t.Errorf("materialize: got %+v, want %s complete, every file written", *mt, mat)
	}

	out, err := exec.Command(binary, "status", m.dir).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "complete") || !strings.Contains(string(out), f.url) {
		t.Errorf("tarmount status: %v, got\n%s\nwant the source and a complete materialization", err, out)
	}

	sub := ""
	if ents, err := os.ReadDir(m.dir); err == nil {
		for _, e := range ents {
			if e.IsDir() {
				sub = filepath.Join(m.dir, e.Name())
				break
			}
		}
	}
	if sub == "" {
		t.Fatalf("no directory in %s", m.dir)
	}
	for _, p := range []string{f.work, sub} {
		out, err := exec.Command(binary, "status", p).CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "not a tarmount mount") {
			t.Errorf("status %s: got %v,\n%s\nwant exit 1 and 'not a tarmount mount'", p, err, out)
		}
	}
}

var metricsAddr = regexp.MustCompile(`msg="serving metrics" addr=(\S+)`)

// scrape fetches and parses the metrics at addr.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// metricValue returns the value of the series of family name whose labels
// include labels (name=value pairs), or -1 if there is none.
func metricValue(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	fam := fams[name]
	if fam == nil {
		return -1
	}
series:
	for _, m := range fam.GetMetric() {
		for i := 0; i+1 < len(labels); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				found = found || l.GetName() == labels[i] && l.GetValue() == labels[i+1]
			}
			if !found {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue()
		case m.Gauge != nil:
			return m.Gauge.GetValue()
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount())
		}
	}
	return -1
}

// TestMetrics scrapes /metrics of a running mount: FUSE reads are counted
// and timed, and the bytes fetched are what the HTTP server served.
func TestMetrics(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{NoBigFiles: true}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	// --no-sidecar: the bytes the server sends are then the archive's
	// alone (the published index's 404 is no fetch of the archive).
	m := mount(t, f.url, "--cache-dir", filepath.Join(f.work, "cache"), "--span", "65536", "--metrics-addr", "127.0.0.1:0", "--no-sidecar")
	match := metricsAddr.FindStringSubmatch(m.stderr.String())
	if match == nil {
		t.Fatalf("no metrics address in the log:\n%s", m.stderr)
	}
	addr := match[1]

	before := scrape(t, addr)
	readsBefore := metricValue(before, "tarmount_fuse_ops_total", "op", "read")
	readTree(t, m.dir, f.src)
	os.Stat(filepath.Join(m.dir, "no such file"))
	after := scrape(t, addr)
	if reads := metricValue(after, "tarmount_fuse_ops_total", "op", "read"); reads <= max(readsBefore, 0) {
		t.Errorf("tarmount_fuse_ops_total{op=read}: %v before reading the tree, %v after, want more", readsBefore, reads)
	}
	if n := metricValue(after, "tarmount_fuse_op_duration_seconds", "op", "read"); n <= 0 {
		t.Errorf("tarmount_fuse_op_duration_seconds{op=read}: got %v observations, want some", n)
	}
	if n := metricValue(after, "tarmount_fuse_op_errors_total", "op", "lookup", "errno", "ENOENT"); n < 1 {
		t.Errorf("tarmount_fuse_op_errors_total{op=lookup,errno=ENOENT} after a missing name: got %v, want 1 or more", n)
	}
	// The server also served the identity probe of the open, which
	// before a first pass brings the archive's first bytes (all of
	// this small one): the pass uses them, and they count as fetched.
	fetched := metricValue(after, "tarmount_fetch_bytes_total")
	if served := f.server.Stats().Bytes; fetched <= 0 || int64(fetched) != served {
		t.Errorf("tarmount_fetch_bytes_total: got %v, want what the HTTP server served (%d)", fetched, served)
	}
	if got, want := metricValue(after, "tarmount_index_entries"), float64(tarEntries(t, f.archive)); got != want {
		t.Errorf("tarmount_index_entries: got %v, want %v", got, want)
	}
	for _, name := range []string{"tarmount_fetch_requests_total", "tarmount_span_decodes_total", "tarmount_cache_memory_bytes"} {
		if v := metricValue(after, name); v <= 0 {
			t.Errorf("%s: got %v, want > 0", name, v)
		}
	}
	if v := metricValue(after, "tarmount_cache_memory_hits_total", "cache", "spans"); v < 0 {
		t.Errorf("tarmount_cache_memory_hits_total{cache=spans}: missing")
	}
	if v := metricValue(after, "tarmount_materialize_complete"); v != -1 {
		t.Errorf("tarmount_materialize_complete without --materialize: got %v, want no such metric", v)
	}
}
