package main

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"
	"github.com/spf13/pflag"

	"github.com/tarmount/tarmount/archive"
)

// The flags, in groups that commands attach where they apply: every
// command that opens an archive takes the source flags, the mount takes
// the mount flags, and so on. Each group is declared once.

// sizeValue is a flag of bytes: a plain number, or one with a unit as
// go-humanize reads it (64MiB, 512KiB, 1G = 10^9, 1GiB = 2^30).
type sizeValue struct {
	p *int64
	// zero is what 0 stands for in the help ("" prints 0 as it is).
	zero string
}

func (v sizeValue) String() string {
	if *v.p == 0 && v.zero != "" {
		return v.zero
	}
	return formatSize(*v.p)
}

// formatSize writes n bytes in the largest binary unit that divides it
// (4MiB, 1536KiB, 100).
func formatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return strconv.FormatInt(n/u.size, 10) + u.name
		}
	}
	return strconv.FormatInt(n, 10)
}

func (v sizeValue) Set(s string) error {
	n, err := humanize.ParseBytes(s)
	if err != nil || n > math.MaxInt64 {
		return fmt.Errorf("want a size such as 65536, 64MiB or 1G, got %q", s)
	}
	*v.p = int64(n)
	return nil
}

func (sizeValue) Type() string { return "size" }

// sizeVar declares a size flag on fs.
func sizeVar(fs *pflag.FlagSet, p *int64, name, usage string) *pflag.Flag {
	fs.Var(sizeValue{p: p}, name, usage)
	return fs.Lookup(name)
}

// headerValue collects -H 'Name: value' flags.
type headerValue struct{ h *http.Header }

func (f headerValue) String() string { return "" }

func (f headerValue) Set(v string) error {
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

func (headerValue) Type() string { return "header" }

// funcValue is a flag whose value a function checks and stores.
type funcValue struct {
	set  func(string) error
	show string
	typ  string
}

func (f *funcValue) String() string { return f.show }
func (f *funcValue) Set(s string) error {
	if err := f.set(s); err != nil {
		return err
	}
	f.show = s
	return nil
}
func (f *funcValue) Type() string { return f.typ }

// funcVar declares a flag of type typ that set parses.
func funcVar(fs *pflag.FlagSet, name, typ, usage string, set func(string) error) {
	fs.Var(&funcValue{set: set, typ: typ}, name, usage)
}

// oldNames adds, for each flag of fs with a one-letter shorthand, a hidden
// long flag of that letter (--o, --v, --H, --l, --C): the flag package
// that tarmount used before took them so, and command lines and fstab
// entries written then must keep working.
func oldNames(fs *pflag.FlagSet) {
	var short []*pflag.Flag
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Shorthand != "" && f.Shorthand != "h" && f.Shorthand != "q" && fs.Lookup(f.Shorthand) == nil {
			short = append(short, f)
		}
	})
	for _, f := range short {
		fs.AddFlag(&pflag.Flag{Name: f.Shorthand, Usage: f.Usage, Value: f.Value, DefValue: f.DefValue,
			NoOptDefVal: f.NoOptDefVal, Hidden: true})
	}
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

// addSourceFlags adds the flags that say how to open an archive: the
// source, the index, the caches and the bounds on reads.
func addSourceFlags(fs *pflag.FlagSet, c *config) {
	ao, d := &c.ao, archive.DefaultOptions()
	*ao = d
	fs.StringVar(&ao.CacheDir, "cache-dir", d.CacheDir, "where saved indexes and cached archive blocks live")
	fs.Lookup("cache-dir").DefValue = "$XDG_CACHE_HOME/tarmount, else ~/.cache/tarmount" // not this machine's
	fs.StringVar(&ao.IndexFile, "index", "", "use this index: a `FILE` or a URL (http(s)://, s3://, file://), fetched like the archive (refused if it was built for another version of the archive)")
	fs.BoolVar(&ao.NoSidecar, "no-sidecar", false, "do not look for an index published beside the archive (ARCHIVE"+archive.SidecarSuffix+")")
	fs.Var(sizeValue{p: &ao.Span, zero: "4MiB"}, "span", "decoded bytes between checkpoints of an index pass")
	fs.IntVar(&ao.FetchWorkers, "fetch-workers", d.FetchWorkers, "parallel range requests")
	sizeVar(fs, &ao.BlockSize, "block-size", "bytes per fetched block (streaming and plain tar reads)")
	sizeVar(fs, &ao.CacheMem, "cache-mem", "decoded data and fetched blocks kept in memory; a mount stays within this plus about 80 MiB, however many processes read")
	fs.VarP(headerValue{&ao.Header}, "header", "H", "extra HTTP request header 'Name: value' (repeatable), e.g. an auth token")
	fs.BoolVar(&ao.HTTP1, "http1", false, "never use HTTP/2, even when the server offers it (default: HTTP/2 over TLS when offered, on as many connections as fetch workers)")
	fs.IntVar(&ao.Readahead, "readahead", 0, "most spans decoded ahead of a sequential reader (0: 8; -1 disables)")
	sizeVar(fs, &ao.CacheDisk, "cache-disk", "fetched archive data kept on disk under CACHE-DIR/blocks, shared by mounts, whole copies from servers that ignore ranges included (0: none; local archives never)")
	sizeVar(fs, &ao.CacheDecoded, "cache-decoded", "decoded tar kept on disk under CACHE-DIR/decoded for stream-only archives (single-frame zstd, single-block xz), in all")
	fs.StringVar(&ao.Region, "region", "", "s3: region of the bucket, which signs every request (default: the one the server names for the bucket, else $AWS_REGION, $AWS_DEFAULT_REGION or the profile's region, else us-east-1)")
	fs.StringVar(&ao.EndpointURL, "endpoint-url", "", "s3: `URL` of an S3-compatible server, e.g. http://127.0.0.1:7070; buckets are then addressed by path (default: $AWS_ENDPOINT_URL_S3, $AWS_ENDPOINT_URL or the profile's endpoint_url, else AWS)")
	fs.StringVar(&ao.Profile, "profile", "", "s3: profile of the shared AWS config and credentials files (default: $AWS_PROFILE, $AWS_DEFAULT_PROFILE, else default)")
	fs.BoolVar(&ao.NoSignRequest, "no-sign-request", false, "s3: send requests unsigned, for public buckets, and look for no credentials (no environment variable: the AWS CLI has none)")
	ao.ReadTimeout, ao.Retries, ao.MinSpeed = archive.DefaultReadTimeout, archive.DefaultRetries, archive.DefaultMinSpeed
	fs.DurationVar(&ao.ReadTimeout, "read-timeout", ao.ReadTimeout, "give up a read of the source after this long, retries included: the reading process gets EIO")
	funcVar(fs, "retries", "int", fmt.Sprintf("retries of a range request that failed transiently (5xx, throttling, cut connection, stall); 0 disables (default %d)", ao.Retries),
		func(s string) error {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				return fmt.Errorf("want a number of retries, 0 or more, got %q", s)
			}
			ao.Retries = n
			return nil
		})
	sizeVar(fs, &ao.MinSpeed, "min-speed", "bytes per second below which a transfer counts as stalled (after a 5 s grace) and is restarted where it stopped; 0 disables")
}

// checkSourceFlags checks what the flag package cannot.
func checkSourceFlags(c *config) error {
	if c.ao.ReadTimeout <= 0 {
		return fmt.Errorf("--read-timeout: want a positive duration such as 30s or 2m, got %v", c.ao.ReadTimeout)
	}
	return nil
}

// addMaterializeFlags adds the flags of extract and of the mount's
// --materialize.
func addMaterializeFlags(fs *pflag.FlagSet, c *config) {
	m := &c.mat
	c.ao.FrameResumeMin = archive.DefaultFrameResumeMin
	sizeVar(fs, &c.ao.FrameResumeMin, "frame-resume-min", "a one-pass extraction, or a materialization that writes no decoded copy, of a remote single-frame .tar.zst at least this big keeps resume points inside the frame, so that a run stopped or killed resumes there; that costs about a tenth of the pass's CPU (0: any size)")
	fs.IntVar(&m.writers, "write-workers", 0, "files written at once (0: 8 per core, at least 16)")
	fs.IntVar(&m.decoders, "decode-workers", 0, "spans fetched and decoded at once (0: 4 per core, at least 8)")
	fs.BoolVar(&m.overwrite, "overwrite", false, "replace what a non-empty directory that tarmount did not make holds: write the archive's tree and remove what the archive lacks")
	fs.BoolVar(&m.sync, "fsync", false, "make the extracted tree durable (syncfs) before marking it complete, so that the mark holds after a power failure")
}

// addMountFlags adds the flags of a mount.
func addMountFlags(fs *pflag.FlagSet, c *config) {
	fs.VarP((*optionsFlag)(&c.options), "options", "o", "mount options, comma-separated (repeatable): allow_other, debug, ro, and every flag as name=value (materialize=/dir, cache_dir=/var/cache/tarmount)")
	fs.StringVar(&c.mat.dir, "materialize", "", "also write the whole tree to this `DIR` in the background, and serve files from it once complete")
	addMaterializeFlags(fs, c)
	fs.StringVar(&c.mountName, "mount-name", "tarmount", "filesystem type shown in /proc/mounts as fuse.NAME")
	fs.BoolVar(&c.daemon, "daemon", false, "serve from a background process and exit once the mount answers (0, its pid on stdout), or with the reason it failed (1)")
	fs.BoolVar(&c.foreground, "foreground", false, "stay in the foreground until unmounted or signalled (the default; overrides --daemon)")
	fs.StringVar(&c.logFile, "log-file", "", "with --daemon: append the server's log to `FILE` (default: syslog, the journal under systemd; $TARMOUNT_SYSLOG names another socket)")
	fs.StringVar(&c.metricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://`HOST:PORT`/metrics (port 0: a free port, logged)")
	fs.BoolVar(&c.allowOther, "allow-other", false, "let other users use the mount (same as -o allow_other; needs user_allow_other in /etc/fuse.conf for non-root)")
	funcVar(fs, "uid", "uid", "report every entry as owned by this numeric uid (default: the owners in the archive)", func(s string) error { return parseID(s, &c.uid) })
	funcVar(fs, "gid", "gid", "report every entry as owned by this numeric gid (default: the groups in the archive)", func(s string) error { return parseID(s, &c.gid) })
	fs.BoolVar(&c.waitIndex, "wait-index", false, "without a saved index, report the mount ready only once the index pass has ended (default: serve the tree while the pass runs)")
	fs.BoolVar(&c.partialListings, "partial-listings", false, "while the first index pass runs, list the names seen so far instead of waiting for complete listings")
	fs.BoolVar(&c.nonempty, "nonempty", false, "mount over a directory that is not empty without a warning (what it holds is hidden while mounted)")
}
