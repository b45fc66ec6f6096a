package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/schollz/progressbar/v3"
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
interrupted", exit 130 or 143.`,
		Example: `  tarmount extract https://example.com/runtime.tar.gz /local/runtime
  tarmount extract s3://bucket/runtime.tar.lz4 /local/runtime --write-workers 16
  tarmount extract ./runtime.tar.zst /local/runtime --quiet --fsync`,
		Args: exactArgs(2, "URL and DIR"),
		RunE: func(_ *cobra.Command, args []string) error {
			return extractCmd(a.ctx, args[0], args[1], &a.c, a.log, a.stderr)
		},
	}
	fs := cmd.Flags()
	addMaterializeFlags(fs, &a.c.mat)
	fs.BoolVarP(&a.c.mat.quiet, "quiet", "q", false, "no progress bar or progress lines, only warnings and errors")
	addSourceFlags(fs, &a.c)
	return cmd
}

// options are the flags as archive's MaterializeOptions.
func (m *materializeFlags) options() archive.MaterializeOptions {
	return archive.MaterializeOptions{Writers: m.writers, Decoders: m.decoders, Overwrite: m.overwrite, Sync: m.sync}
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
	stop := showProgress(stderr, c.mat.quiet, log, x)
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

// showProgress reports progress until the returned function is called: a
// bar on a terminal, a plain line every 5 s otherwise, nothing when quiet.
// A one-pass extraction counts archive bytes read, else file bytes
// written.
func showProgress(w io.Writer, quiet bool, log *slog.Logger, x *archive.Extraction) (stop func()) {
	if quiet {
		return func() {}
	}
	prog, onePass := x.Progress(), x.OnePass()
	// cur is how far the current phase is: reading the archive (a one
	// pass extraction, until its pass ends), then writing.
	cur := func() (done, total int64, reading bool) {
		if consumed, size := x.Read(); onePass && consumed < size {
			return consumed, size, true
		}
		return prog.Bytes.Load(), max(prog.BytesTotal.Load(), 1), false
	}
	done := make(chan struct{})
	finished := make(chan struct{})
	f, isFile := w.(*os.File)
	tty := isFile && term.IsTerminal(int(f.Fd()))
	go func() {
		defer close(finished)
		if !tty {
			t := time.NewTicker(5 * time.Second)
			defer t.Stop()
			for {
				select {
				case <-done:
					return
				case <-t.C:
					d, total, _ := cur()
					log.Info("extracting", "done", fmt.Sprintf("%.0f%%", 100*float64(d)/float64(total)),
						"files", prog.Files.Load(), "bytes", prog.Bytes.Load())
				}
			}
		}
		var bar *progressbar.ProgressBar
		phase := -1
		t := time.NewTicker(150 * time.Millisecond)
		defer t.Stop()
		for {
			d, total, reading := cur()
			p := 1
			if reading {
				p = 0
			}
			if p != phase {
				if bar != nil {
					bar.Finish()
					fmt.Fprintln(w)
				}
				desc := "writing"
				if p == 0 {
					desc = "reading archive"
				}
				bar = progressbar.NewOptions64(total, progressbar.OptionSetWriter(w), progressbar.OptionShowBytes(true),
					progressbar.OptionSetDescription(desc), progressbar.OptionSetPredictTime(true),
					progressbar.OptionShowElapsedTimeOnFinish(), progressbar.OptionSetWidth(30), progressbar.OptionThrottle(100*time.Millisecond))
				phase = p
			}
			bar.ChangeMax64(total)
			bar.Describe(fmt.Sprintf("%s, %d/%d files", map[int]string{0: "reading archive", 1: "writing"}[p], prog.Files.Load(), prog.FilesTotal.Load()))
			bar.Set64(d)
			select {
			case <-done:
				bar.Finish()
				fmt.Fprintln(w)
				return
			case <-t.C:
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
