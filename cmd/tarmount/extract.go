package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/tarmount/tarmount/archive"
)

// materializeFlags are the flags of extract and of the mount's
// --materialize.
type materializeFlags struct {
	dir       string
	writers   int
	decoders  int
	overwrite bool
	quiet     bool
	sync      bool
	// progressEvery is how often progress is logged without a terminal.
	progressEvery time.Duration
	// sel: extract's --strip-components, --exclude and --include.
	sel archive.Selection
}

func newExtractCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "extract [flags] URL DIR",
		Short:   "Write the whole tree to DIR, as fast as the machine allows (resumes if interrupted)",
		GroupID: "archive",
		Long: `Write the whole tree of the archive into DIR, as tar -x -p --numeric-owner
--xattrs would, as fast as the machine allows: spans decoded in parallel
when an index exists, else one streamed pass that also saves the index. An
interrupted extract resumes. A DIR that tarmount made from another version
of the archive is upgraded in place: unchanged files are kept untouched,
changed ones replaced atomically, and what the new version lacks removed. A
non-empty DIR that tarmount did not make is refused unless --overwrite,
which also removes what the archive lacks. Members that tar -x refuses
(names with "..") are left out with a warning, and the exit status is then 1.
Ctrl-C (SIGINT) or SIGTERM stops it with "tarmount: extract URL:
interrupted", exit 130 or 143.

--strip-components, --exclude and --include work as GNU tar's
--strip-components, --exclude and member names given with --wildcards:
patterns match the names as the archive has them; --exclude matches any
trailing run of a name's components, and a directory it matches takes what
it holds along; --include matches from the start of the name, also a
directory with what it holds; '*' matches across '/'. With any of them the
index is read first, then the selected spans.`,
		Example: `  tarmount extract https://example.com/runtime.tar.gz /local/runtime
  tarmount extract s3://bucket/runtime.tar.lz4 /local/runtime --write-workers 16
  tarmount extract ./runtime.tar.zst /local/runtime --quiet --fsync
  tarmount extract https://example.com/go.tar.gz /usr/local/go --strip-components 1 --exclude '*_test.go'`,
		Args: exactArgs(2, "URL and DIR"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if a.c.mat.sel.StripComponents < 0 {
				return &usageError{cmd: cmd, err: fmt.Errorf("--strip-components: want 0 or more, got %d", a.c.mat.sel.StripComponents)}
			}
			return extractCmd(a.ctx, args[0], args[1], &a.c, a.log, a.stderr)
		},
	}
	fs := cmd.Flags()
	addMaterializeFlags(fs, &a.c)
	fs.BoolVarP(&a.c.mat.quiet, "quiet", "q", false, "no progress line, only warnings and errors")
	fs.DurationVar(&a.c.mat.progressEvery, "progress-every", 5*time.Second, "without a terminal, log a progress line this often")
	fs.IntVar(&a.c.mat.sel.StripComponents, "strip-components", 0, "remove this many leading components from names; shorter names are left out")
	fs.StringArrayVar(&a.c.mat.sel.Exclude, "exclude", nil, "leave out names that match this `PATTERN` (repeatable)")
	fs.StringArrayVar(&a.c.mat.sel.Include, "include", nil, "extract only names that match this `PATTERN` (repeatable)")
	addSourceFlags(fs, &a.c)
	return cmd
}

// options are the flags as archive's MaterializeOptions.
func (m *materializeFlags) options() archive.MaterializeOptions {
	return archive.MaterializeOptions{Writers: m.writers, Decoders: m.decoders, Overwrite: m.overwrite, Sync: m.sync, Select: m.sel}
}

// extractCmd writes the whole tree of the archive at url into dir: with
// an index (given, saved or embedded), spans decoded in parallel; without
// one, one streamed pass that extracts and builds the index, saved for
// the next mount.
func extractCmd(ctx context.Context, url, dir string, c *config, log *slog.Logger, stderr io.Writer) error {
	x, err := archive.Extract(ctx, url, dir, c.ao, c.mat.options())
	if err != nil {
		return err
	}
	defer x.Close()
	if x.Complete() {
		if !c.mat.quiet {
			fmt.Fprintf(stderr, "tarmount: %s is already complete\n", x.Dir())
		}
		return nil
	}
	stop := showProgress(stderr, c.mat.quiet, c.mat.progressEvery, log, x)
	s, err := x.Run(ctx)
	stop()
	if err != nil {
		return err
	}
	if !c.mat.quiet {
		mode := "parallel spans"
		if s.OnePass {
			mode = "one pass"
		}
		sec := s.Elapsed.Seconds()
		rate := func(n int64) string { return mb(int64(float64(n)/sec)) + "/s" }
		fmt.Fprintf(stderr, "tarmount: extracted %d files (%s of data, %d entries) into %s in %.2fs (%s): fetched %s in %d requests (%s), decoded %s of %s (%s), wrote %s\n",
			s.Files, mb(s.Bytes), s.Entries, s.Dir, sec, mode,
			mb(s.Fetched), s.Requests, rate(s.Fetched), mb(s.Decoded), s.Codec, rate(s.Decoded), rate(s.Bytes))
	}
	log.Debug("extracted", "elapsed", s.Elapsed, "fetched", s.Fetched, "tar_bytes", s.TarSize, "codec", s.Codec)
	return s.Err()
}

func mb(n int64) string { return fmt.Sprintf("%.1f MB", float64(n)/1e6) }

// showProgress reports progress until the returned function is called:
// a line redrawn in place on a terminal, a log line every 5 s otherwise,
// nothing when quiet. Both say the same: what is being done (reading the
// archive in a one-pass extraction, until its pass ends; then writing),
// bytes done of the total and the percent, the rate and an ETA from the
// rate smoothed over about ten seconds, the members read while the
// archive is read, and the files written (of how many, once that is
// known).
func showProgress(w io.Writer, quiet bool, logEvery time.Duration, log *slog.Logger, x *archive.Extraction) (stop func()) {
	if quiet {
		return func() {}
	}
	prog, onePass := x.Progress(), x.OnePass()
	sample := func() progressSample {
		s := progressSample{files: prog.Files.Load()}
		if prog.TotalsKnown.Load() {
			s.filesTotal = prog.FilesTotal.Load()
		}
		if consumed, size := x.Read(); onePass && consumed < size {
			s.phase, s.done, s.total, s.members = "reading archive", consumed, size, x.Members()
		} else {
			s.phase, s.done, s.total = "writing", prog.Bytes.Load(), prog.BytesTotal.Load()
		}
		return s
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	f, isFile := w.(*os.File)
	tty := isFile && term.IsTerminal(int(f.Fd()))
	go func() {
		defer close(finished)
		every := logEvery
		if tty {
			every = 200 * time.Millisecond
		}
		t := time.NewTicker(every)
		defer t.Stop()
		var m rateMeter
		phase := ""
		for {
			select {
			case <-done:
				if tty && phase != "" {
					fmt.Fprint(w, "\r\x1b[K")
				}
				return
			case now := <-t.C:
				s := sample()
				if s.phase != phase {
					m, phase = rateMeter{}, s.phase
				}
				rate, eta := m.update(now, s.done, s.total)
				if tty {
					fmt.Fprintf(w, "\r\x1b[K%s", s.line(rate, eta))
					continue
				}
				attrs := []any{"phase", s.phase, "done", s.percent(), "bytes", mb(s.done), "of", mb(s.total),
					"rate", mb(int64(rate)) + "/s", "eta", etaText(eta)}
				if s.phase == "reading archive" {
					attrs = append(attrs, "members", s.members)
				}
				attrs = append(attrs, "files", s.files)
				if s.filesTotal > 0 {
					attrs = append(attrs, "files_total", s.filesTotal)
				}
				log.Info("extracting", attrs...)
			}
		}
	}()
	return func() {
		select {
		case <-done:
		default:
			close(done)
		}
		<-finished
	}
}

// progressSample is how far an extraction is.
type progressSample struct {
	phase             string
	done, total       int64 // bytes of the phase
	files, filesTotal int64 // written; filesTotal: 0 until known
	members           int64 // read from the archive, while it is read
}

func (s progressSample) percent() string {
	if s.total <= 0 {
		return "?"
	}
	return fmt.Sprintf("%.0f%%", 100*float64(min(s.done, s.total))/float64(s.total))
}

// line is the progress line of a terminal.
func (s progressSample) line(rate float64, eta time.Duration) string {
	files := fmt.Sprintf("%d files", s.files)
	if s.filesTotal > 0 {
		files = fmt.Sprintf("%d/%d files", s.files, s.filesTotal)
	}
	if s.members > 0 {
		files = fmt.Sprintf("%d members read, %s", s.members, files)
	}
	return fmt.Sprintf("%s %4s  %s of %s  %s/s  ETA %s  %s", s.phase, s.percent(), mb(s.done), mb(s.total),
		mb(int64(rate)), etaText(eta), files)
}

// etaText writes an ETA to the second; negative means unknown.
func etaText(eta time.Duration) string {
	if eta < 0 {
		return "?"
	}
	return eta.Round(time.Second).String()
}

// rateMeter smooths a rate of progress: an exponential moving average
// over about ten seconds, so that the ETA it gives does not jump with each
// burst or stall of the network.
type rateMeter struct {
	start, last time.Time
	lastDone    int64
	rate        float64 // bytes per second
}

// rateWindow is the time constant of the average.
const rateWindow = 10 * time.Second

// update takes the bytes done at now, of total, and returns the smoothed
// rate and the time left at it (-1 until it is known: the first second).
func (m *rateMeter) update(now time.Time, done, total int64) (rate float64, eta time.Duration) {
	if m.start.IsZero() {
		m.start, m.last, m.lastDone = now, now, done
		return 0, -1
	}
	dt := now.Sub(m.last).Seconds()
	if dt <= 0 {
		return m.rate, m.eta(now, done, total)
	}
	inst := float64(done-m.lastDone) / dt
	// Until the window has passed, the plain average since the start.
	if since := now.Sub(m.start).Seconds(); since < rateWindow.Seconds() {
		m.rate = m.rate*(1-dt/since) + float64(done-m.lastDone)/since
	} else {
		a := 1 - math.Exp(-dt/rateWindow.Seconds())
		m.rate += a * (inst - m.rate)
	}
	m.last, m.lastDone = now, done
	return m.rate, m.eta(now, done, total)
}

func (m *rateMeter) eta(now time.Time, done, total int64) time.Duration {
	if now.Sub(m.start) < time.Second || m.rate <= 0 || total <= 0 {
		return -1
	}
	return time.Duration(float64(max(total-done, 0)) / m.rate * float64(time.Second))
}
