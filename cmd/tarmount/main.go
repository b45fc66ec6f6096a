// Command tarmount mounts a tarball behind http(s):// or a local path as a
// read-only FUSE filesystem, reading only the parts that are used.
//
//	tarmount [flags] URL MOUNTPOINT     mount; stays in the foreground until unmounted or signalled
//	tarmount index [flags] URL          build (or refresh) the index; -o FILE writes it there too
//	tarmount unmount MOUNTPOINT         unmount; detaches lazily when busy, clears a dead mount
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

const usage = `Usage:
  tarmount [flags] URL MOUNTPOINT    mount the archive read-only (foreground; Ctrl-C unmounts)
  tarmount index [flags] URL         build and save the index of the archive
  tarmount unmount MOUNTPOINT        unmount (lazily when busy; clears a dead mount)

URL is http://..., https://..., file:///path or a path. Archives: .tar and
.tar.gz (gzip, pigz, multi-member), recognised by their content.

Examples:
  tarmount https://example.com/runtime.tar.gz /mnt/runtime
  tarmount ./runtime.tar /mnt/runtime -o allow_other
  tarmount index https://example.com/runtime.tar.gz -o runtime.tar.gz.idx
  tarmount https://example.com/runtime.tar.gz /mnt/runtime --index runtime.tar.gz.idx

Flags:
`

func main() {
	err := run(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tarmount: %v\n", err)
		os.Exit(1)
	}
}

// config holds the flags shared by the subcommands.
type config struct {
	verbose   bool
	cacheDir  string
	indexFile string
	output    string
	options   string
	span      int64
	workers   int
	cacheMem  int64
	mountName string
	retry     retryConfig
}

func (c *config) flags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&c.verbose, "v", false, "verbose: log every step at debug level")
	fs.StringVar(&c.cacheDir, "cache-dir", defaultCacheDir(), "where saved indexes live")
	fs.StringVar(&c.indexFile, "index", "", "use this index file (refused if it was built for another version of the archive)")
	fs.StringVar(&c.options, "o", "", "mount options, comma-separated: allow_other, debug (with index: output file)")
	fs.Int64Var(&c.span, "span", 0, "decoded bytes between gzip checkpoints (default 4 MiB)")
	fs.IntVar(&c.workers, "fetch-workers", 8, "parallel range requests")
	fs.Int64Var(&c.cacheMem, "cache-mem", 256<<20, "bytes of decoded data and fetched blocks kept in memory")
	fs.StringVar(&c.mountName, "mount-name", "tarmount", "filesystem type shown in /proc/mounts as fuse.NAME")
	c.retry.register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, usage)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses flags that may come before, between or after the
// positional arguments.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos = append(pos, args[0])
		args = args[1:]
	}
}

func run(args []string, stderr io.Writer) error {
	var c config
	cmd := "mount"
	if len(args) > 0 {
		switch args[0] {
		case "index", "unmount", "umount", "mount":
			cmd, args = args[0], args[1:]
		}
	}
	fs := c.flags("tarmount "+cmd, stderr)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	level := slog.LevelInfo
	if c.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	switch cmd {
	case "unmount", "umount":
		if len(pos) != 1 {
			return fmt.Errorf("usage: tarmount unmount MOUNTPOINT")
		}
		return unmount(pos[0], log)
	case "index":
		if len(pos) != 1 {
			return fmt.Errorf("usage: tarmount index URL [-o FILE]")
		}
		c.output = c.options
		return indexCmd(ctx, pos[0], &c, log)
	default:
		if len(pos) != 2 {
			fs.Usage()
			return fmt.Errorf("want URL and MOUNTPOINT, got %d arguments", len(pos))
		}
		return mount(ctx, stop, pos[0], pos[1], &c, log)
	}
}

// mountOptions splits -o into known options.
func mountOptions(s string) (allowOther, debug bool, err error) {
	for _, o := range strings.Split(s, ",") {
		switch strings.TrimSpace(o) {
		case "":
		case "allow_other":
			allowOther = true
		case "debug":
			debug = true
		case "ro":
		default:
			return false, false, fmt.Errorf("unknown mount option %q (known: allow_other, debug, ro)", o)
		}
	}
	return allowOther, debug, nil
}
