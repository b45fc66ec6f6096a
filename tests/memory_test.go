package tests

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// peakRSS returns the peak resident set size of a process (VmHWM).
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc status")
	return 0
}

// memoryAllowance is what a mount may use beyond --cache-mem, whatever the
// number of readers: the runtime, FUSE request buffers (bounded by
// fs.MaxInflightRequestBytes), the index and spans being decoded.
const memoryAllowance = 80 << 20

// TestMemoryBudget reads random ranges of random files with 64 and then
// 256 readers through a mount whose caches are much smaller than the
// archive, and checks the process's peak resident memory against the
// budget given with --cache-mem plus memoryAllowance. It runs without the
// race detector (which multiplies memory use): scripts/test.sh runs it on
// its own for that.
func TestMemoryBudget(t *testing.T) {
	needFUSE(t)
	if raceEnabled {
		t.Skip("the race detector multiplies memory use")
	}
	work := t.TempDir()
	src := filepath.Join(work, "src")
	corpus.MakeTree(t, src, corpus.TreeOptions{NoSparse: true})
	// 96 MiB in 24 files of pseudo-random text: many spans, far more than
	// the caches hold.
	rng := rand.New(rand.NewPCG(1, 2))
	var names []string
	for i := 0; i < 24; i++ {
		name := fmt.Sprintf("data/f%02d.txt", i)
		b := make([]byte, 4<<20)
		for j := range b {
			b[j] = "abcdefghijklmnopqrstuvwxyz0123456789 \n"[rng.IntN(38)]
		}
		if err := os.MkdirAll(filepath.Join(src, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	archive := filepath.Join(work, "a.tar.gz")
	tarbuild.Archive(t, src, archive, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"})

	const budget = 64 << 20
	for _, readers := range []int{64, 256} {
		t.Run(fmt.Sprintf("%dreaders", readers), func(t *testing.T) {
			// Readers after the index pass (--wait-index): while the
			// pass runs, its block cache and the readers of the
			// partial index come on top of this budget (about 30 MiB
			// more with 64 readers), a known gap.
			m := mount(t, archive, "--cache-dir", filepath.Join(work, "cache"), "--cache-mem", strconv.Itoa(budget), "--wait-index")
			var wg sync.WaitGroup
			errs := make(chan error, readers)
			for g := 0; g < readers; g++ {
				wg.Add(1)
				go func(g int) {
					defer wg.Done()
					r := rand.New(rand.NewPCG(uint64(g), 3))
					buf := make([]byte, 256<<10)
					for i := 0; i < 30; i++ {
						name := names[r.IntN(len(names))]
						f, err := os.Open(filepath.Join(m.dir, name))
						if err != nil {
							errs <- err
							return
						}
						off := r.Int64N(4<<20 - int64(len(buf)))
						if _, err := f.ReadAt(buf, off); err != nil {
							errs <- fmt.Errorf("%s at %d: %w", name, off, err)
						}
						f.Close()
					}
				}(g)
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Error(err)
			}
			peak := peakRSS(t, m.cmd.Process.Pid)
			t.Logf("peak RSS %.1f MiB with --cache-mem %d MiB and %d readers", float64(peak)/(1<<20), budget>>20, readers)
			if peak > budget+memoryAllowance {
				t.Errorf("peak RSS %d MiB, want at most %d MiB (--cache-mem) + %d MiB", peak>>20, budget>>20, memoryAllowance>>20)
			}
		})
	}
}
