// Command tarmount mounts a tarball behind http(s)://, s3:// or a local path
// as a read-only FUSE filesystem, reading only the parts that are used.
//
//	tarmount [flags] URL MOUNTPOINT     mount; stays in the foreground until unmounted or signalled
//	tarmount index [flags] URL          build (or refresh) the index; -o FILE writes it there too
//	tarmount extract [flags] URL DIR    write the whole tree to DIR (parallel spans with an index, else one pass)
//	tarmount unmount MOUNTPOINT         unmount; detaches lazily when busy, clears a dead mount
//	tarmount status MOUNTPOINT          how a running mount is doing (--json for scripts)
//	tarmount pack SRC -o OUT.tar.zst    write a seekable zstd tarball with its index embedded
//
// and ls, stat, cat and get to read an archive without mounting it. The
// commands are cobra commands, one file each; root.go wires them.
package main

import (
	"os"

	"github.com/tarmount/tarmount/archive"
)

func main() {
	os.Exit(execute(os.Args[1:], os.Stdout, os.Stderr))
}

// config holds the flags shared by the subcommands.
type config struct {
	// ao is what the flags say of the archive: source, index, caches,
	// retries.
	ao         archive.Options
	verbose    bool
	options    string // mount: -o
	output     string // index, pack: -o
	publish    bool   // index --publish
	level      int    // pack: zstd level
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
	uid, gid *uint32
	// nonempty: mount over a non-empty directory without a warning.
	nonempty bool
}
