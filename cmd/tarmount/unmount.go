package main

import (
	"errors"
	"log/slog"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	tfs "github.com/tarmount/tarmount/fs"
)

func newUnmountCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:     "unmount MOUNTPOINT",
		Aliases: []string{"umount"},
		Short:   "Unmount: lazily when busy; clears a dead mount",
		GroupID: "mount",
		Long: `Unmount a tarmount mount: lazily (detached now, gone when the last file is
closed) when it is busy, and also when its server died (a dead mount).`,
		Example: "  tarmount unmount /mnt/runtime",
		Args:    exactArgs(1, "MOUNTPOINT"),
		RunE:    func(_ *cobra.Command, args []string) error { return unmount(args[0], a.log) },
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
