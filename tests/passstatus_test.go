package tests

import (
	"archive/tar"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// passStatusJSON is the part of `tarmount status --json` that
// TestStatusDuringPass checks, with the field names docs/status.md documents.
type passStatusJSON struct {
	Index struct {
		Source  string `json:"source"`
		Entries int    `json:"entries"`
		Pass    *struct {
			BytesRead          int64   `json:"bytes_read"`
			BytesTotal         int64   `json:"bytes_total"`
			Percent            float64 `json:"percent"`
			RateBytesPerSecond float64 `json:"rate_bytes_per_second"`
			ETASeconds         float64 `json:"eta_seconds"`
			Entries            int64   `json:"entries"`
			Running            bool    `json:"running"`
		} `json:"pass"`
	} `json:"index"`
	Materialize *struct {
		Files       int64   `json:"files"`
		FilesTotal  int64   `json:"files_total"`
		BytesTotal  int64   `json:"bytes_total"`
		TotalsFinal bool    `json:"totals_final"`
		Percent     float64 `json:"percent"`
		Complete    bool    `json:"complete"`
	} `json:"materialize"`
}

// TestStatusDuringPass mounts an archive without an index, with
// --materialize, over a slow server, and from ready to complete polls
// `tarmount status --json` and `tarmount status`, and scrapes /metrics:
// every answer succeeds and decodes, percents never go back, no line says
// "0 of 0", and the pass's fields move and end at 100%. systemd's STATUS=
// lines report the pass while it runs.
func TestStatusDuringPass(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{Many: 2000}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	fi, err := os.Stat(f.archive)
	if err != nil {
		t.Fatal(err)
	}
	// Each connection at 1/16 of the archive per second (about 200 kB/s,
	// three times the stall watchdog's minimum): a pass of several
	// seconds, long enough for a few polls even when each poll (two
	// processes under the race detector, a scrape) takes a second.
	h := shaped.NewHandler(filepath.Dir(f.archive), shaped.Options{Rate: fi.Size() / 16, Latency: 5 * time.Millisecond})
	srv := httptest.NewServer(h)
	t.Cleanup(func() { srv.Close(); h.Close() })
	url := srv.URL + "/" + filepath.Base(f.archive)

	sockPath := filepath.Join(f.work, "notify.sock")
	sock, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sockPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	notes := make(chan []string, 1)
	go func() {
		var got []string
		buf := make([]byte, 4096)
		for {
			n, _, err := sock.ReadFromUnix(buf)
			if err != nil {
				notes <- got
				return
			}
			got = append(got, string(buf[:n]))
		}
	}()

	mat := filepath.Join(f.work, "mat")
	t.Setenv("NOTIFY_SOCKET", sockPath)
	m := startMount(t, nil, t.TempDir(), url, "--cache-dir", filepath.Join(f.work, "cache"), "--span", "65536",
		"--fetch-workers", "2", "--block-size", "262144", "--materialize", mat, "--metrics-addr", "127.0.0.1:0")
	os.Unsetenv("NOTIFY_SOCKET") // for the status commands; the cleanup restores it
	if err := m.waitReady(time.Minute); err != nil {
		t.Fatal(err)
	}
	match := metricsAddr.FindStringSubmatch(m.stderr.String())
	if match == nil {
		t.Fatalf("no metrics address in the log:\n%s", m.stderr)
	}
	addr := match[1]

	var (
		last                     passStatusJSON
		lastPct, lastMat, lastRd float64
		polls, moving, growing   int
	)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		if time.Now().After(deadline) {
			t.Fatalf("materialization not complete after 2 minutes; last status %+v\n%s", last, m.stderr)
		}
		polls++
		out, err := exec.Command(binary, "status", "--json", m.dir).Output()
		if err != nil {
			t.Fatalf("poll %d: tarmount status --json: %v\n%s", polls, err, stderrOf(err))
		}
		var st passStatusJSON
		if err := json.Unmarshal(out, &st); err != nil {
			t.Fatalf("poll %d: status --json does not decode: %v\n%s", polls, err, out)
		}
		p := st.Index.Pass
		if p == nil || st.Materialize == nil {
			t.Fatalf("poll %d: got no index.pass or no materialize: %s", polls, out)
		}
		if p.Percent < lastPct || st.Materialize.Percent < lastMat {
			t.Fatalf("poll %d: a percent went back: pass %v after %v, materialize %v after %v\n%s",
				polls, p.Percent, lastPct, st.Materialize.Percent, lastMat, out)
		}
		lastPct, lastMat = p.Percent, st.Materialize.Percent
		if p.Running && p.Percent > 0 && p.Percent < 100 && p.RateBytesPerSecond > 0 && p.ETASeconds > 0 && p.Entries > 0 {
			moving++
		}
		if !st.Materialize.TotalsFinal && st.Materialize.FilesTotal > 0 {
			growing++
		}

		text, err := exec.Command(binary, "status", m.dir).Output()
		if err != nil {
			t.Fatalf("poll %d: tarmount status: %v\n%s", polls, err, stderrOf(err))
		}
		if moving == 1 && p.Running {
			t.Logf("tarmount status during the pass:\n%s", text)
		}
		if strings.Contains(string(text), " 0 of 0 ") {
			t.Fatalf("poll %d: tarmount status says 0 of 0:\n%s", polls, text)
		}

		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			t.Fatalf("poll %d: /metrics: %v", polls, err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("poll %d: /metrics: got %d (%v), want 200:\n%s", polls, resp.StatusCode, err, body)
		}
		parser := expfmt.NewTextParser(model.UTF8Validation)
		fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
		if err != nil {
			t.Fatalf("poll %d: parse /metrics: %v", polls, err)
		}
		rd := metricValue(fams, "tarmount_index_pass_read_bytes_total")
		if rd < lastRd || metricValue(fams, "tarmount_index_pass_target_bytes") != float64(fi.Size()) {
			t.Fatalf("poll %d: tarmount_index_pass_read_bytes_total %v after %v, target %v, want growing to %d", polls, rd, lastRd,
				metricValue(fams, "tarmount_index_pass_target_bytes"), fi.Size())
		}
		lastRd = rd

		last = st
		if st.Materialize.Complete {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d polls, %d with the pass moving, %d with growing totals", polls, moving, growing)
	if moving < 2 {
		t.Errorf("got the pass running with its fields moving in %d of %d polls, want a pass of seconds seen moving", moving, polls)
	}
	p := last.Index.Pass
	if p.Running || p.Percent != 100 || p.BytesRead <= 0 || p.BytesTotal != fi.Size() || p.ETASeconds != 0 {
		t.Errorf("pass at the end: got %+v, want ended at 100%% of %d bytes", *p, fi.Size())
	}
	if want := countTar(t, f.archive, func(*tar.Header) bool { return true }); p.Entries != int64(want) {
		t.Errorf("pass entries at the end: got %d, want the archive's %d members", p.Entries, want)
	}
	if mt := last.Materialize; !mt.TotalsFinal || mt.Percent != 100 || mt.FilesTotal == 0 {
		t.Errorf("materialize at the end: got %+v, want final totals at 100%%", *mt)
	}

	m.stop(t)
	sock.Close()
	got := <-notes
	indexing := 0
	for _, n := range got {
		if strings.Contains(n, " 0 of 0 ") {
			t.Errorf("STATUS= says 0 of 0: %q", n)
		}
		if strings.HasPrefix(n, "STATUS=indexing: ") && strings.Contains(n, "% of ") && strings.Contains(n, "; materializing ") {
			indexing++
		}
	}
	if indexing == 0 {
		t.Errorf("got no STATUS=indexing: line during the pass; notifications: %q", got)
	}
	t.Logf("notifications: %q", got)
}
