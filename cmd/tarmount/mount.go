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

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/archive"
	tfs "github.com/tarmount/tarmount/fs"
)

// indexCmd builds the index of the archive at url, saves it in the cache
// and, when output is not "", also there; with --publish, also beside the
// archive.
func indexCmd(ctx context.Context, url, output string, c *config, log *slog.Logger) error {
	ao := c.ao
	ao.Rebuild = true
	a, err := archive.OpenIndexed(ctx, url, ao)
	if err != nil {
		return err
	}
	defer a.Close()
	if output != "" {
		if err := a.Index().Save(output); err != nil {
			return err
		}
		log.Info("index written", "path", output)
	}
	if c.publish {
		to, err := a.Publish(ctx)
		if err != nil {
			return fmt.Errorf("publish the index of %s: %w", a, err)
		}
		log.Info("index published", "path", to)
	}
	return nil
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

func unmount(mountpoint string, log *slog.Logger) error {
	dead := deadMount(mountpoint)
	err := tfs.Unmount(mountpoint)
	switch {
	case errors.Is(err, tfs.ErrBusy) && dead:
		log.Warn("dead mount (its server is gone) in use: detached lazily; it goes away when the last file is closed", "path", mountpoint)
		return nil
	case errors.Is(err, tfs.ErrBusy):
		log.Warn("mount busy: detached lazily; it goes away when the last file is closed", "path", mountpoint)
		return nil
	case err == nil && dead:
		log.Info("cleared a dead mount (its server was gone)", "path", mountpoint)
	}
	return err
}

// deadMount reports whether the mount at mountpoint has lost its server:
// statfs, which the kernel never answers from its caches, fails with
// ENOTCONN. A server that does not answer within a second is taken for
// alive; the statfs is then left to return on its own, as the command
// goes on to unmount and exit.
func deadMount(mountpoint string) bool {
	done := make(chan error, 1)
	go func() {
		var st unix.Statfs_t
		done <- unix.Statfs(mountpoint, &st)
	}()
	select {
	case err := <-done:
		return errors.Is(err, unix.ENOTCONN)
	case <-time.After(time.Second):
		return false
	}
}
