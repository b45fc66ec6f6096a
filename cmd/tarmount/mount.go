package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/archive"
	tfs "github.com/tarmount/tarmount/fs"
)

// mountLong is the help of a mount, the root's own job.
const mountLong = `A mount stays in the foreground until it is unmounted (tarmount unmount,
umount) or signalled (Ctrl-C unmounts), or serves from the background with
--daemon, which prints the server's pid on stdout. With --materialize DIR it
also writes the whole tree to DIR in the background and serves each file
from DIR once it is there; DIR must lie outside MOUNTPOINT (symbolic links
resolved).

Through mount(8) and /etc/fstab, every flag is a mount option, name=value:
  mount -t fuse.tarmount URL MNT -o ro,allow_other,materialize=/dir
  URL  MNT  fuse.tarmount  ro,allow_other,materialize=/dir,nofail  0  0`

const mountExample = `  tarmount https://example.com/runtime.tar.gz /mnt/runtime
  tarmount ./runtime.tar /mnt/runtime -o allow_other
  tarmount s3://bucket/runtime.tar.gz /mnt/runtime --endpoint-url http://127.0.0.1:7070
  tarmount s3://bucket/runtime.tar.gz /mnt/runtime --materialize /local/runtime --daemon
  tarmount https://example.com/runtime.tar.gz /mnt/runtime --index runtime.tar.gz.tarmount-index`

// newMountCmd is `tarmount mount URL MOUNTPOINT`, the same as the root's
// `tarmount URL MOUNTPOINT`.
func newMountCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "mount [flags] URL MOUNTPOINT",
		Short:   "Mount the archive read-only (the same as tarmount URL MOUNTPOINT)",
		GroupID: "archive",
		Long:    mountLong,
		Example: mountExample,
		Args:    exactArgs(2, "URL and MOUNTPOINT"),
		RunE:    a.runMount,
	}
	addSourceFlags(cmd.Flags(), &a.c)
	addMountFlags(cmd.Flags(), &a.c)
	return cmd
}

// runMount mounts args[0] on args[1]; with no arguments it shows the help.
func (a *app) runMount(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return cmd.Help()
	}
	c := &a.c
	ignored, err := c.applyMountOptions(cmd.Flags(), flagElsewhere(cmd.Root()))
	if err != nil {
		return &usageError{cmd: cmd, err: err}
	}
	for _, o := range ignored {
		a.log.Warn("mount option ignored: a flag of another command", "option", o)
	}
	if launchedByMount() {
		// mount(8) waits for its helper to exit: serve in the
		// background unless told otherwise.
		c.daemon = true
	}
	if c.daemon && !c.foreground && os.Getenv(readyFDEnv) == "" {
		// The server is this program again, with the same arguments,
		// told by readyFDEnv that it is the server.
		return daemonize(a.args, c.logFile, a.stdout, a.stderr)
	}
	ready := openReadiness()
	defer ready.close()
	err = mount(a.ctx, a.stop, args[0], args[1], c, a.log, ready)
	if err != nil {
		ready.failed(err)
	}
	return err
}

// memoryReserve is the heap a mount may hold beyond its caches: FUSE
// request buffers (at most fs.MaxInflightRequestBytes), spans being
// decoded, the index and the runtime's own.
const memoryReserve = 48 << 20

// mount serves the archive at url on mountpoint until it is unmounted or
// ctx is done, and tells ready (systemd, a --daemon parent) when the mount
// answers, how materialization goes, and when it stops.
func mount(ctx context.Context, stop context.CancelFunc, url, mountpoint string, c *config, log *slog.Logger, ready *readiness) error {
	// Check the mountpoint before the index pass, which may take long.
	if st, err := os.Stat(mountpoint); err != nil {
		return fmt.Errorf("mountpoint: %w", err)
	} else if !st.IsDir() {
		return fmt.Errorf("mountpoint %s is not a directory", mountpoint)
	}
	if c.mat.dir != "" {
		if err := outsideMountpoint(c.mat.dir, mountpoint); err != nil {
			return err
		}
	}
	// After the refusals: a command line refused says only why.
	if !c.nonempty && !emptyDir(mountpoint) && !isMountpoint(mountpoint) {
		log.Warn("mountpoint is not empty: what it holds is hidden while mounted (--nonempty: no warning)", "path", mountpoint)
	}
	// The caches hold cache-mem bytes; a soft limit a little above keeps
	// the garbage collector from letting the heap grow to twice that, so
	// that the whole process stays within cache-mem plus about 80 MiB.
	debug.SetMemoryLimit(c.ao.CacheMem + memoryReserve)
	start := time.Now()
	a, err := archive.Open(ctx, url, c.ao)
	if err != nil {
		return err
	}
	defer a.Close()
	var bg *archive.Materializer
	if c.mat.dir != "" {
		// DIR is refused if it is not ours before anything is mounted.
		if bg, err = a.Materialize(c.mat.dir, c.mat.options()); err != nil {
			return err
		}
	}
	// With --wait-index, STATUS= tells how the pass goes before READY=1.
	built, reported := make(chan struct{}), make(chan struct{})
	if c.waitIndex && a.Index() == nil {
		go func() {
			defer close(reported)
			reportBuild(a, ready, built)
		}()
	} else {
		close(reported)
	}
	err = a.Start(ctx, c.waitIndex)
	close(built)
	<-reported
	if err != nil {
		return err
	}
	fsOpts := tfs.Options{
		Logger: log, Name: c.mountName, FsName: a.String(), AllowOther: c.allowOther, Debug: c.debugFUSE,
		UID: c.uid, GID: c.gid, PartialListings: c.partialListings,
	}
	if bg != nil {
		fsOpts.Local = bg
	}
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return err
	}
	status := &statusSource{a: a, materialize: bg != nil, mountpoint: abs, started: start}
	fsOpts.Status = status.json
	if c.metricsAddr != "" {
		m := newMetrics(status)
		stopMetrics, err := serveMetrics(c.metricsAddr, m.reg, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
		fsOpts.Observe = m.observe
	}
	server, err := tfs.Mount(mountpoint, a.Tree(), fsOpts)
	if err != nil {
		return err // it names the mountpoint
	}
	if bg != nil {
		bg.Run()
	}
	if a.Indexing() {
		log.Info("ready", "path", mountpoint, "indexing", true, "elapsed", time.Since(start).Round(time.Millisecond))
		ready.ready(fmt.Sprintf("serving %s while indexing it", a))
	} else {
		log.Info("ready", "path", mountpoint, "entries", a.Index().Len(), "elapsed", time.Since(start).Round(time.Millisecond))
		ready.ready(fmt.Sprintf("serving %d entries of %s", a.Index().Len(), a))
	}
	done := make(chan struct{})
	go func() {
		server.Wait()
		close(done)
	}()
	go report(a, bg, ready, done)
	// A pass that fails after the mount answered ends the mount, as it
	// would have refused it: reads waiting for it have failed with EIO,
	// and the server exits with the reason.
	var passErr error
	signalled := false
	pass := a.PassDone()
	passDone := pass
	for wait := true; wait; {
		select {
		case <-done:
			ready.stopping()
			log.Info("unmounted", "path", mountpoint)
			return nil
		case <-passDone:
			passDone = nil
			if err := a.PassErr(); err != nil && ctx.Err() == nil {
				passErr, wait = err, false
			}
		case <-ctx.Done():
			wait, signalled = false, true
		}
	}
	ready.stopping()
	stop() // a second signal kills the process
	if signalled && pass != nil {
		// The signal ends the first pass too. One that it cut short
		// makes this an interruption (exit 130 or 143); one that had
		// ended well leaves a mount that served, which ends cleanly.
		<-pass
		passErr = a.PassErr()
	}
	if err := tfs.Unmount(mountpoint); err != nil {
		if !errors.Is(err, tfs.ErrBusy) {
			return err // it names the mountpoint
		}
		log.Warn("mount busy: detached lazily; it goes away when the last file is closed", "path", mountpoint)
	}
	<-done
	log.Info("unmounted", "path", mountpoint)
	return passErr
}

// emptyDir reports whether dir holds nothing (or cannot be read, which
// the mount will say).
func emptyDir(dir string) bool {
	f, err := os.Open(dir)
	if err != nil {
		return true
	}
	defer f.Close()
	names, _ := f.Readdirnames(1)
	return len(names) == 0
}

// isMountpoint reports whether dir is the root of a mount (its device is
// not its parent's): a mount on it is refused later, with its reason.
func isMountpoint(dir string) bool {
	var st, parent unix.Stat_t
	if unix.Stat(dir, &st) != nil || unix.Stat(filepath.Join(dir, ".."), &parent) != nil {
		return false
	}
	return st.Dev != parent.Dev
}

// outsideMountpoint refuses a --materialize DIR that is the mountpoint or
// lies under it, symbolic links resolved: the tree would be written into
// the mount, and its files left under the mountpoint after unmount.
func outsideMountpoint(dir, mountpoint string) error {
	d, err := resolvePath(dir)
	if err != nil {
		return fmt.Errorf("--materialize %s: %w", dir, err)
	}
	m, err := resolvePath(mountpoint)
	if err != nil {
		return fmt.Errorf("mountpoint: %w", err)
	}
	if rel, err := filepath.Rel(m, d); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return fmt.Errorf("--materialize %s is inside the mountpoint %s", dir, mountpoint)
	}
	return nil
}

// resolvePath is p made absolute with its symbolic links resolved, as far
// as p exists; the names that do not exist yet follow as they are.
func resolvePath(p string) (string, error) {
	p, err := filepath.Abs(p)
	if err != nil {
		return "", err
	}
	rest := ""
	for {
		r, err := filepath.EvalSymlinks(p)
		if err == nil {
			return filepath.Join(r, rest), nil
		}
		parent := filepath.Dir(p)
		if !errors.Is(err, os.ErrNotExist) || parent == p {
			return "", err
		}
		rest = filepath.Join(filepath.Base(p), rest)
		p = parent
	}
}
