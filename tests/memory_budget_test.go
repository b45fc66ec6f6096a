//go:build !race

package tests

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestMemoryBudget reads random ranges of random files with 64 and then
// 256 readers through a mount whose caches are much smaller than the
// archive, and checks the process's peak resident memory against the
// budget given with --cache-mem plus memoryAllowance. It is built without
// the race detector only (which multiplies memory use): scripts/test.sh
// runs it in a run of its own for that.
func TestMemoryBudget(t *testing.T) {
	needFUSE(t)
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
