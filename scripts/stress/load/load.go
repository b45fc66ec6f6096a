// Package load drives a tarmount mount the way many programs at once
// would, and watches the process that serves it. It is the engine of
// scripts/stress.sh (through the stress command) and of the mount-level
// stress test in tests/.
//
// Run mounts an archive with the tarmount binary once per phase (without
// and with --materialize), and has Config.Readers goroutines read random
// ranges of random files through the mount, half of them with O_DIRECT so
// that their reads reach the server instead of the page cache; every byte
// read is compared with a reference tree on local disk. Meanwhile it
// samples the server: open descriptors (/proc/PID/fd), goroutines
// (go_goroutines from --metrics-addr) and resident memory
// (/proc/PID/status). A phase fails when
//
//   - a read fails or returns wrong bytes;
//   - a reader makes no progress for Config.Stall (a deadlock: the server's
//     goroutine stacks are then dumped to its log with SIGQUIT);
//   - descriptors or goroutines grow under load, or do not come back to
//     their level at rest once the readers stop;
//   - the peak resident memory (VmHWM) exceeds --cache-mem plus
//     Config.MemAllowance;
//   - the server dies, or does not unmount and exit 0 on SIGTERM.
//
// The package knows nothing of tarmount's packages: only its command line,
// two of its log lines ("msg=ready", "msg=\"serving metrics\" addr=") and
// its metric names.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Phases.
const (
	PhaseLazy        = "lazy"        // a plain mount: every read is served lazily
	PhaseMaterialize = "materialize" // --materialize fills a local copy meanwhile
)

// Config is a stress run. Zero fields take the defaults noted.
type Config struct {
	Binary string // the tarmount binary (required)
	URL    string // the archive (required)
	// Ref is a tree equal to the archive's contents (required): every
	// regular file below it is read through the mount and compared.
	Ref string
	// Work holds mountpoints, the cache directory, materialization
	// directories and the server logs (required; made if missing).
	Work string
	// Phases in order: PhaseLazy, PhaseMaterialize (default both).
	Phases   []string
	Duration time.Duration // under load, per phase (default 5m)
	Readers  int           // concurrent readers (default 64)
	// Stall is the watchdog's limit: a reader whose open, read or close
	// has not returned for this long is stuck (default 30s).
	Stall    time.Duration
	CacheMem int64 // --cache-mem (default 64 MiB)
	// MemAllowance is what the server may hold beyond CacheMem (tarmount
	// documents about 80 MiB). 0 reports the peak without checking it:
	// the race detector multiplies memory use.
	MemAllowance int64
	// Args are more tarmount flags (--mount-name, --cache-disk, --span).
	Args []string
	Seed uint64
	// Log gets progress lines (nil: none).
	Log io.Writer
}

func (c *Config) defaults() error {
	if c.Binary == "" || c.URL == "" || c.Ref == "" || c.Work == "" {
		return errors.New("load: Binary, URL, Ref and Work are required")
	}
	if len(c.Phases) == 0 {
		c.Phases = []string{PhaseLazy, PhaseMaterialize}
	}
	for _, p := range c.Phases {
		if p != PhaseLazy && p != PhaseMaterialize {
			return fmt.Errorf("load: unknown phase %q (want %s or %s)", p, PhaseLazy, PhaseMaterialize)
		}
	}
	if c.Duration <= 0 {
		c.Duration = 5 * time.Minute
	}
	if c.Readers <= 0 {
		c.Readers = 64
	}
	if c.Stall <= 0 {
		c.Stall = 30 * time.Second
	}
	if c.CacheMem <= 0 {
		c.CacheMem = 64 << 20
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return nil
}

// Sample is the state of the server at one moment.
type Sample struct {
	At         time.Duration // since the readers started (0 for Idle)
	FDs        int           // entries of /proc/PID/fd; -1 if unknown
	Sockets    int           // those of them that are sockets
	Pipes      int           // and pipes
	Goroutines int           // go_goroutines; -1 if unknown
	RSS, HWM   int64         // VmRSS and VmHWM, bytes
	Heap       int64         // go_memstats_heap_inuse_bytes; -1 if unknown
}

// Latency sums up the reads of some readers.
type Latency struct {
	Reads         int64
	P50, P99, Max time.Duration
}

// Report is the outcome of one phase.
type Report struct {
	Phase   string
	Readers int
	Elapsed time.Duration // under load
	Reads   int64         // reads that returned (verified)
	Bytes   int64         // bytes they returned
	Opens   int64
	// Read latency of the readers with O_DIRECT, whose reads all reach
	// tarmount, and of the others, many of whose reads the page cache
	// answers.
	Direct, Buffered Latency
	Errors           int64 // failed or wrong reads
	Fetched          int64 // tarmount_fetch_bytes_total at the end
	// Idle is right after the mount answered; Start, Mid and End are
	// under load: the medians of the first, middle and last thirds of
	// samples taken every second after a warm-up; Rest is once the
	// readers have stopped and the server has settled.
	Idle, Start, Mid, End, Rest Sample
	PeakHWM                     int64 // VmHWM at the end of the phase
	Budget                      int64 // CacheMem + MemAllowance; 0: not checked
	// MatFiles and MatTotal: files materialized of the total;
	// MatDoneAfter: when materialization completed, counted from the
	// start of the load (it may complete after the readers stop; 0: it
	// did not).
	MatFiles, MatTotal int64
	MatDoneAfter       time.Duration
	Log                string   // the server's log
	Violations         []string // empty: the phase passed
}

// Failed reports whether the phase broke a rule.
func (r *Report) Failed() bool { return len(r.Violations) > 0 }

func (r *Report) fail(format string, args ...any) {
	r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
}

// Run runs every phase of c in turn, even after one has failed, and
// returns their reports. The error is for what kept the run from starting
// (a bad Config, an unreadable reference tree); a cancelled ctx ends the
// current phase early and skips the rest.
func Run(ctx context.Context, c Config) ([]Report, error) {
	if err := c.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(c.Work, 0o755); err != nil {
		return nil, err
	}
	files, err := loadFiles(c.Ref)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(c.Log, "reference: %d files, %.1f MB in %s\n", len(files.list), float64(files.total)/1e6, c.Ref)
	var reports []Report
	for i, phase := range c.Phases {
		if ctx.Err() != nil {
			break
		}
		r := &phaseRun{c: &c, files: files, name: phase, seed: c.Seed + uint64(i)*1000}
		reports = append(reports, r.run(ctx))
	}
	return reports, nil
}

// refFile is a regular file of the reference tree.
type refFile struct {
	rel  string
	size int64
}

// fileSet is the reference tree's regular files, with the running total
// of their sizes for picks weighted by size.
type fileSet struct {
	list  []refFile
	cum   []int64 // cum[i]: bytes of list[:i+1]
	total int64
}

func loadFiles(root string) (*fileSet, error) {
	fs := &fileSet{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		fs.list = append(fs.list, refFile{rel, info.Size()})
		fs.total += info.Size()
		fs.cum = append(fs.cum, fs.total)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("load: reference tree: %w", err)
	}
	if len(fs.list) == 0 || fs.total == 0 {
		return nil, fmt.Errorf("load: reference tree %s has no data", root)
	}
	return fs, nil
}

// pick picks a file: three times in four uniformly (most files are small),
// else weighted by size, so that big files are read at many offsets too.
func (fs *fileSet) pick(rng *rand.Rand) refFile {
	if rng.IntN(4) > 0 {
		return fs.list[rng.IntN(len(fs.list))]
	}
	at := rng.Int64N(fs.total)
	i, _ := slices.BinarySearch(fs.cum, at+1)
	return fs.list[i]
}

// errorLog counts read failures and keeps the first few.
type errorLog struct {
	mu    sync.Mutex
	n     int64
	first []string
}

const maxErrorsKept = 10

func (e *errorLog) add(err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.n++
	if len(e.first) < maxErrorsKept {
		e.first = append(e.first, err.Error())
	}
}

func (e *errorLog) count() int64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.n
}

// progressClock is a shared monotonic origin for the readers' progress
// stamps (atomic int64 nanoseconds since it).
type progressClock struct{ origin time.Time }

func (p progressClock) now() int64 { return int64(time.Since(p.origin)) }
