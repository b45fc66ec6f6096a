// Command tarmount mounts a tarball behind http(s)://, s3:// or a local path
// as a read-only FUSE filesystem, reading only the parts that are used.
//
//	tarmount [flags] URL MOUNTPOINT     mount; stays in the foreground until unmounted or signalled
//	tarmount index [flags] URL          build (or refresh) the index; -o FILE writes it there too
//	tarmount extract [flags] URL DIR    write the whole tree to DIR (parallel spans with an index, else one pass)
//	tarmount unmount MOUNTPOINT         unmount; detaches lazily when busy, clears a dead mount
//	tarmount status MOUNTPOINT          how a running mount is doing (--json for scripts)
//	tarmount pack SRC -o OUT.tar.zst    write a seekable zstd tarball with its index embedded
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"

	"github.com/tarmount/tarmount/archive"
)

const usage = `Usage:
  tarmount [flags] URL MOUNTPOINT    mount the archive read-only (foreground; Ctrl-C unmounts);
                                     without an index, ready at once, serving while it indexes
  tarmount index [flags] URL         build and save the index of the archive
  tarmount extract [flags] URL DIR   write the whole tree to DIR, fast (resumes if interrupted)
  tarmount unmount MOUNTPOINT        unmount (lazily when busy; clears a dead mount)
  tarmount status [--json] MOUNTPOINT  source, index, fetches, caches and materialization
                                     of a running mount (--metrics-addr: Prometheus)
  tarmount ls [flags] URL [PATH...]  list the archive (-l like tar -tv; --json: one object per line)
  tarmount stat [--json] URL PATH... what the archive says of PATH
  tarmount cat URL PATH...           write members to stdout (fetches only their spans)
  tarmount get URL PATH... -C DIR    write members (directories with their contents) under DIR
  tarmount pack SRC -o OUT.tar.zst   write SRC (a directory or a tarball of any codec) as
                                     seekable zstd with the index embedded: it mounts
                                     without an index pass; zstd -d still reads it

URL is http://..., https://..., s3://bucket/key, file:///path or a path.
--materialize DIR must lie outside MOUNTPOINT (symbolic links resolved).

Exit status: 0 on success, and when a signal unmounts a mount whose first
pass had ended; 1 on an error, named in one line "tarmount: ..."; 130 after
SIGINT (Ctrl-C), 143 after SIGTERM that interrupted extract, index, pack or
a mount's first pass ("tarmount: CMD URL: interrupted"; a rerun resumes).
Archives: .tar, .tar.gz (gzip, pigz, multi-member), .tar.zst (seekable,
multi-frame, single-frame), .tar.lz4 (frames, legacy), .tar.bz2 and .tar.xz,
recognised by their content. Single-frame zstd and xz of one block
(xz without -T) are stream-only: the first mount decodes them to CACHE-DIR/decoded.

s3:// reads what the AWS CLI reads: the standard credential chain
(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the shared files, web
identity, SSO, instance role); --profile, else AWS_PROFILE or
AWS_DEFAULT_PROFILE; --region, else the bucket's region as the server
names it, else AWS_REGION, AWS_DEFAULT_REGION or the profile's;
--endpoint-url, else AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the
profile's endpoint_url. --no-sign-request has no variable.

Examples:
  tarmount https://example.com/runtime.tar.gz /mnt/runtime
  tarmount ./runtime.tar /mnt/runtime -o allow_other
  tarmount index https://example.com/runtime.tar.gz -o runtime.tar.gz.idx
  tarmount https://example.com/runtime.tar.gz /mnt/runtime --index runtime.tar.gz.idx
  tarmount s3://bucket/runtime.tar.gz /mnt/runtime --endpoint-url http://127.0.0.1:7070
  tarmount pack ./runtime/ -o runtime.tar.zst
  tarmount s3://bucket/runtime.tar.gz /mnt/runtime --materialize /local/runtime
  tarmount extract https://example.com/runtime.tar.gz /local/runtime
  tarmount ls --json https://example.com/runtime.tar.gz | jq -r 'select(.size > 1e6) | .path'
  tarmount cat https://example.com/runtime.tar.gz go/VERSION

Flags:
`

func main() {
	err := run(os.Args[1:], os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tarmount: %v\n", err)
		var ie *interruptedError
		if errors.As(err, &ie) {
			os.Exit(ie.exitCode())
		}
		os.Exit(1)
	}
}

// config holds the flags shared by the subcommands.
type config struct {
	// ao is what the flags say of the archive: source, index, caches,
	// retries.
	ao         archive.Options
	verbose    bool
	options    string
	publish    bool // index --publish
	level      int  // pack: zstd level
	mountName  string
	mat        materializeFlags
	inspect    inspectFlags
	cpuProfile string
	// daemon: mount in a background server and return once it answers;
	// logFile is where that server logs.
	daemon     bool
	foreground bool
	logFile    string
	// metricsAddr is where a mount serves Prometheus metrics; "" = none.
	metricsAddr string
	// Mount options from -o (allowOther also from --allow-other).
	allowOther, debugFUSE bool
	partialListings       bool
	waitIndex             bool
	// uid and gid, when set, own every entry of the mount.
	uid, gid    *uint32
	showVersion bool
}

// parseID parses a numeric user or group id into *dst.
func parseID(s string, dst **uint32) error {
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return fmt.Errorf("want a numeric id, got %q", s)
	}
	id := uint32(n)
	*dst = &id
	return nil
}

// headerFlag collects -H 'Name: value' flags.
type headerFlag struct{ h *http.Header }

func (f headerFlag) String() string { return "" }

func (f headerFlag) Set(v string) error {
	name, value, ok := strings.Cut(v, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" {
		return fmt.Errorf("want 'Name: value', got %q", v)
	}
	if *f.h == nil {
		*f.h = http.Header{}
	}
	f.h.Add(name, strings.TrimSpace(value))
	return nil
}

func (c *config) flags(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.BoolVar(&c.verbose, "v", false, "verbose: log every step at debug level")
	ao, d := &c.ao, archive.DefaultOptions()
	fs.StringVar(&ao.CacheDir, "cache-dir", d.CacheDir, "where saved indexes and cached archive blocks live")
	fs.StringVar(&ao.IndexFile, "index", "", "use this index: a `FILE` or a URL (http(s)://, s3://, file://), fetched like the archive (refused if it was built for another version of the archive)")
	fs.BoolVar(&ao.NoSidecar, "no-sidecar", false, "do not look for an index published beside the archive (ARCHIVE"+archive.SidecarSuffix+")")
	fs.BoolVar(&c.publish, "publish", false, "index: also write the index beside the archive as ARCHIVE"+archive.SidecarSuffix+" (a local path, or s3:// with PutObject), which every later mount, extract or ls of the archive finds")
	fs.Var((*optionsFlag)(&c.options), "o", "mount options, comma-separated (repeatable): allow_other, debug, ro, and every flag as name=value (materialize=/dir, cache_dir=/var/cache/tarmount); with index and pack: the output file")
	fs.Int64Var(&ao.Span, "span", 0, "decoded bytes between gzip checkpoints (default 4 MiB)")
	fs.IntVar(&ao.FetchWorkers, "fetch-workers", d.FetchWorkers, "parallel range requests")
	fs.Int64Var(&ao.BlockSize, "block-size", d.BlockSize, "bytes per fetched block (streaming and plain tar reads)")
	fs.Int64Var(&ao.CacheMem, "cache-mem", d.CacheMem, "bytes of decoded data and fetched blocks kept in memory; a mount stays within this plus about 80 MiB, however many processes read")
	fs.Var(headerFlag{&ao.Header}, "H", "extra HTTP request header 'Name: value' (repeatable), e.g. an auth token")
	fs.Var(headerFlag{&ao.Header}, "header", "same as -H")
	fs.BoolVar(&ao.HTTP1, "http1", false, "never use HTTP/2, even when the server offers it (default: HTTP/2 over TLS when offered, on as many connections as fetch workers)")
	fs.IntVar(&ao.Readahead, "readahead", 0, "most spans decoded ahead of a sequential reader (default 8; -1 disables)")
	fs.Int64Var(&ao.CacheDisk, "cache-disk", d.CacheDisk, "bytes of fetched archive data kept on disk under CACHE-DIR/blocks, shared by mounts, whole copies from servers that ignore ranges included (0: none; local archives never)")
	fs.Int64Var(&ao.CacheDecoded, "cache-decoded", d.CacheDecoded, "bytes of decoded tar kept on disk under CACHE-DIR/decoded for stream-only archives (single-frame zstd, single-block xz), in all")
	fs.StringVar(&c.mountName, "mount-name", "tarmount", "filesystem type shown in /proc/mounts as fuse.NAME")
	fs.StringVar(&ao.Region, "region", "", "s3: region of the bucket, which signs every request (default: the one the server names for the bucket, else $AWS_REGION, $AWS_DEFAULT_REGION or the profile's region, else us-east-1)")
	fs.StringVar(&ao.EndpointURL, "endpoint-url", "", "s3: `URL` of an S3-compatible server, e.g. http://127.0.0.1:7070; buckets are then addressed by path (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL or the profile's endpoint_url, else AWS)")
	fs.StringVar(&ao.Profile, "profile", "", "s3: profile of the shared AWS config and credentials files (default: $AWS_PROFILE, $AWS_DEFAULT_PROFILE, else default)")
	fs.BoolVar(&ao.NoSignRequest, "no-sign-request", false, "s3: send requests unsigned, for public buckets, and look for no credentials (no environment variable: the AWS CLI has none)")
	fs.IntVar(&c.level, "level", 3, "pack: zstd compression level (1-22, mapped to the encoder's four speeds)")
	fs.StringVar(&c.cpuProfile, "cpuprofile", "", "write a CPU profile (go tool pprof) of this run to `FILE`")
	fs.BoolVar(&c.daemon, "daemon", false, "mount: serve from a background process and exit once the mount answers (0), or with the reason it failed (1)")
	fs.BoolVar(&c.foreground, "foreground", false, "mount: stay in the foreground until unmounted or signalled (the default; overrides --daemon)")
	fs.StringVar(&c.logFile, "log-file", "", "mount --daemon: append the server's log to `FILE` (default: syslog, the journal under systemd; $TARMOUNT_SYSLOG names another socket)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "mount: serve Prometheus metrics at http://`HOST:PORT`/metrics (port 0: a free port, logged)")
	registerRetry(fs, ao)
	c.mat.register(fs)
	c.inspect.register(fs)
	fs.BoolVar(&c.allowOther, "allow-other", false, "mount: let other users use the mount (same as -o allow_other; needs user_allow_other in /etc/fuse.conf for non-root)")
	fs.Func("uid", "mount: report every entry as owned by this numeric `uid` (default: the owners in the archive)", func(s string) error {
		return parseID(s, &c.uid)
	})
	fs.Func("gid", "mount: report every entry as owned by this numeric `gid` (default: the groups in the archive)", func(s string) error {
		return parseID(s, &c.gid)
	})
	fs.BoolVar(&c.waitIndex, "wait-index", false, "mount: without a saved index, report the mount ready only once the index pass has ended (default: serve the tree while the pass runs)")
	fs.BoolVar(&c.partialListings, "partial-listings", false, "mount: while the first index pass runs, list the names seen so far instead of waiting for complete listings")
	fs.BoolVar(&c.showVersion, "version", false, "print the version and exit")
	fs.Usage = func() {
		printHelp(stderr, strings.TrimPrefix(name, "tarmount "))
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

func run(args []string, stderr io.Writer) (err error) {
	var c config
	orig := args
	cmd := "mount"
	if len(args) > 0 {
		switch args[0] {
		case "index", "unmount", "umount", "mount", "pack", "extract", "ls", "stat", "cat", "get", "status", "version":
			cmd, args = args[0], args[1:]
		}
	}
	fs := c.flags("tarmount "+cmd, stderr)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if c.showVersion || (cmd == "version") {
		fmt.Fprintln(os.Stdout, version())
		return nil
	}
	level := slog.LevelInfo
	if c.verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(serverLog(stderr, &c), &slog.HandlerOptions{Level: level}))
	slog.SetDefault(log)
	c.ao.Logger = log

	if c.cpuProfile != "" {
		f, err := os.Create(c.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("cpu profile: %w", err)
		}
		defer func() {
			pprof.StopCPUProfile()
			f.Close()
		}()
	}

	ctx, stop, got := signalContext(context.Background())
	defer stop()
	defer func() { err = interrupted(err, cmd, pos, got) }()

	switch cmd {
	case "unmount", "umount":
		if len(pos) != 1 {
			return fmt.Errorf("usage: tarmount unmount MOUNTPOINT")
		}
		return unmount(pos[0], log)
	case "status":
		if len(pos) != 1 {
			return fmt.Errorf("usage: tarmount status MOUNTPOINT [--json]")
		}
		return statusCmd(pos[0], c.inspect.json, os.Stdout)
	case "extract":
		if len(pos) != 2 {
			return fmt.Errorf("usage: tarmount extract URL DIR")
		}
		return extractCmd(ctx, pos[0], pos[1], &c, log, stderr)
	case "ls", "stat", "cat", "get":
		return inspectCmd(ctx, cmd, pos, &c, log, os.Stdout)
	case "index":
		if len(pos) != 1 {
			return fmt.Errorf("usage: tarmount index URL [-o FILE]")
		}
		return indexCmd(ctx, pos[0], c.options, &c, log)
	case "pack":
		if len(pos) != 1 {
			return fmt.Errorf("usage: tarmount pack SRC -o OUT.tar.zst")
		}
		return packCmd(ctx, pos[0], c.options, &c, log)
	default:
		if len(pos) != 2 {
			fs.Usage()
			return fmt.Errorf("want URL and MOUNTPOINT, got %d arguments", len(pos))
		}
		if err := c.applyMountOptions(fs); err != nil {
			return err
		}
		if launchedByMount() {
			// mount(8) waits for its helper to exit: serve in the
			// background unless told otherwise.
			c.daemon = true
		}
		if c.daemon && !c.foreground && os.Getenv(readyFDEnv) == "" {
			// The server is this program again, with the same
			// arguments, told by readyFDEnv that it is the server.
			return daemonize(orig, c.logFile, stderr)
		}
		ready := openReadiness()
		defer ready.close()
		err := mount(ctx, stop, pos[0], pos[1], &c, log, ready)
		if err != nil {
			ready.failed(err)
		}
		return err
	}
}
