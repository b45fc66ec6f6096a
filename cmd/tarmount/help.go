package main

import (
	"fmt"
	"io"
	"runtime/debug"
	"strconv"
)

// commandHelp is what `tarmount CMD --help` prints above the flags: the
// synopsis and examples of one subcommand.
var commandHelp = map[string]string{
	"index": `Usage: tarmount index [flags] URL [-o FILE] [--publish]

Build the index of the archive at URL in one streamed pass and save it in
the cache directory (keyed by the archive's identity); -o also writes it to
FILE. --publish writes it beside the archive as URL.tarmount-index (a local
path, or s3:// with PutObject), where every later mount, extract or ls of
the archive, on any machine, finds it by itself (--no-sidecar: they do not
look). For an http(s) archive, copy FILE there as URL.tarmount-index.
Ctrl-C (SIGINT) or SIGTERM stops it with "tarmount: index URL: interrupted",
exit 130 or 143, and saves nothing.

Examples:
  tarmount index s3://bucket/runtime.tar.gz --publish
  tarmount index https://example.com/runtime.tar.gz -o runtime.tar.gz.tarmount-index
  tarmount https://example.com/runtime.tar.gz /mnt/runtime --index runtime.tar.gz.tarmount-index
  tarmount https://example.com/runtime.tar.gz /mnt/runtime --index https://example.com/idx/runtime.idx
`,
	"extract": `Usage: tarmount extract [flags] URL DIR

Write the whole tree of the archive into DIR, as tar -x -p --numeric-owner
--xattrs would, as fast as the machine allows: spans decoded in parallel
when an index exists, else one streamed pass that also saves the index. An
interrupted extract resumes. A DIR that tarmount made from another version
of the archive is upgraded in place: unchanged files are kept untouched,
changed ones replaced atomically, and what the new version lacks removed. A
non-empty DIR that tarmount did not make is refused unless --overwrite,
which also removes what the archive lacks.
Ctrl-C (SIGINT) or SIGTERM stops it with "tarmount: extract URL:
interrupted", exit 130 or 143.

Examples:
  tarmount extract https://example.com/runtime.tar.gz /local/runtime
  tarmount extract s3://bucket/runtime.tar.lz4 /local/runtime --write-workers 16
  tarmount extract ./runtime.tar.zst /local/runtime --quiet --fsync
`,
	"unmount": `Usage: tarmount unmount MOUNTPOINT

Unmount a tarmount mount: lazily (detached now, gone when the last file is
closed) when it is busy, and also when its server died (a dead mount).

Example:
  tarmount unmount /mnt/runtime
`,
	"status": `Usage: tarmount status [--json] MOUNTPOINT

What a running mount is doing: its source, index, bytes fetched, caches and
materialization progress. --json prints the same as one JSON object.

Examples:
  tarmount status /mnt/runtime
  tarmount status --json /mnt/runtime | jq .materialize
`,
	"ls": `Usage: tarmount ls [flags] URL [PATH...]

List the archive without mounting it (the saved index if there is one, else
one pass that saves it): names, -l like tar -tv, --json one object per line.

Examples:
  tarmount ls https://example.com/runtime.tar.gz go/bin
  tarmount ls -l s3://bucket/runtime.tar.gz
  tarmount ls --json https://example.com/runtime.tar.gz | jq -r 'select(.size > 1e6) | .path'
`,
	"stat": `Usage: tarmount stat [--json] URL PATH...

What the archive says of each PATH (type, size, mode, owner, times, link,
xattrs), without mounting it.

Example:
  tarmount stat --json https://example.com/runtime.tar.gz go/VERSION
`,
	"cat": `Usage: tarmount cat [flags] URL PATH...

Write members to standard output, fetching only the spans that hold them.

Example:
  tarmount cat https://example.com/runtime.tar.gz go/VERSION
`,
	"get": `Usage: tarmount get [flags] URL PATH... -C DIR

Write members (directories with what they hold) under DIR, fetching only
their spans; never outside DIR.

Example:
  tarmount get https://example.com/runtime.tar.gz go/bin go/VERSION -C ./out
`,
	"pack": `Usage: tarmount pack [flags] SRC -o OUT.tar.zst

Write SRC (a directory, or a tarball of any codec at a path or URL) as
seekable zstd with frames of one span and the index embedded: it mounts
with no index pass, and zstd -d still reads it.

Examples:
  tarmount pack ./runtime/ -o runtime.tar.zst
  tarmount pack https://example.com/old.tar.bz2 -o runtime.tar.zst --level 9
`,
}

// printHelp writes the help of cmd (the general usage for a mount).
func printHelp(w io.Writer, cmd string) {
	if h, ok := commandHelp[cmd]; ok {
		fmt.Fprint(w, h, "\nFlags (not all apply to every command):\n")
		return
	}
	fmt.Fprint(w, usage)
}

// buildVersion is set at build time by scripts that know it:
//
//	go build -ldflags "-X main.buildVersion=$(git describe --always --dirty)" ./cmd/tarmount
var buildVersion string

// version says which tarmount this is: buildVersion, else the module
// version and the commit it was built from, as the Go toolchain recorded
// them (with -buildvcs).
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "tarmount (unknown version)"
	}
	v := info.Main.Version
	if buildVersion != "" {
		v = buildVersion
	}
	var rev, dirty, goVersion string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if b, _ := strconv.ParseBool(s.Value); b {
				dirty = "+modified"
			}
		}
	}
	goVersion = info.GoVersion
	if rev != "" {
		v += fmt.Sprintf(" (commit %.12s%s)", rev, dirty)
	}
	return fmt.Sprintf("tarmount %s, %s", v, goVersion)
}
