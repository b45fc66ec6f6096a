package tests

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/scripts/stress/load"
)

// logWriter turns progress lines into test log lines.
type logWriter struct{ t *testing.T }

func (w logWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// TestStress runs the load of scripts/stress.sh briefly: 64 readers read
// random ranges of random files through a mount, verifying every byte, for
// 20 s without and 20 s with --materialize, with caches much smaller than
// the archive, while a watchdog looks for stuck readers and the server's
// descriptors, goroutines and (without the race detector) peak memory are
// checked (see scripts/stress/load for the rules).
func TestStress(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{Many: 2000}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	// A race in the server ends it at once, which the run reports.
	t.Setenv("GORACE", "exitcode=66 halt_on_error=1")
	c := load.Config{
		Binary:   binary,
		URL:      f.url,
		Ref:      f.src,
		Work:     filepath.Join(f.work, "stress"),
		Duration: 20 * time.Second,
		Readers:  64,
		CacheMem: 16 << 20,
		Args:     []string{"--mount-name", testMountName, "--span", "262144", "--cache-disk", "0"},
		Seed:     uint64(time.Now().UnixNano()),
		Log:      logWriter{t},
	}
	if !raceEnabled {
		c.MemAllowance = memoryAllowance
	}
	t.Logf("seed %d", c.Seed)
	reports, err := load.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	var table strings.Builder
	load.WriteTable(&table, reports)
	t.Logf("\n%s", table.String())
	for _, r := range reports {
		for _, v := range r.Violations {
			t.Errorf("%s: %s", r.Phase, v)
		}
	}
	if len(reports) != 2 {
		t.Errorf("got %d phases, want 2", len(reports))
	}
}
