package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Mount options: `tarmount URL MNT -o ro,allow_other,materialize=/dir`,
// and the same through mount(8) and /etc/fstab:
//
//	mount -t fuse.tarmount URL MNT -o ro,allow_other,materialize=/dir
//	URL  MNT  fuse.tarmount  ro,allow_other,materialize=/dir,nofail  0  0
//
// mount(8) hands the line to fuse3's helper mount.fuse3, which runs
// `/bin/sh -c 'tarmount' URL MNT -o OPTIONS` with a fixed PATH
// (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin) and waits
// for it: tarmount must be on that PATH, and it serves from the
// background once the mount answers (launchedByMount).

// optionsFlag collects -o values; a repeated -o adds to the list.
type optionsFlag string

func (o *optionsFlag) String() string { return string(*o) }

func (o *optionsFlag) Type() string { return "options" }

func (o *optionsFlag) Set(v string) error {
	if *o != "" && v != "" {
		v = string(*o) + "," + v
	}
	*o = optionsFlag(v)
	return nil
}

// ignoredMountOptions are what mount(8), fstab and mount.fuse3 add that
// mean nothing here: the mount is always read-only, nosuid and nodev.
var ignoredMountOptions = map[string]bool{
	"ro": true, "rw": true, "defaults": true, "auto": true, "noauto": true, "user": true, "nouser": true,
	"users": true, "dev": true, "nodev": true, "suid": true, "nosuid": true, "exec": true, "noexec": true,
	"atime": true, "noatime": true, "relatime": true, "nodiratime": true, "async": true, "_netdev": true,
	"nofail": true, "default_permissions": true,
}

// applyMountOptions applies the mount options in c.options: FUSE options,
// options that mount(8) passes along (ignored), and any flag of fs as
// name or name=value, with '_' or '-' between words. A flag of another
// command (elsewhere), which the command line before cobra accepted here
// and ignored, is returned in ignored rather than refused: fstab lines
// that hold one must not stop mounting.
func (c *config) applyMountOptions(fs *pflag.FlagSet, elsewhere func(name string) bool) (ignored []string, err error) {
	for _, o := range strings.Split(c.options, ",") {
		o = strings.TrimSpace(o)
		name, value, hasValue := strings.Cut(o, "=")
		switch {
		case o == "":
		case o == "allow_other":
			c.allowOther = true
		case o == "debug":
			c.debugFUSE = true
		case ignoredMountOptions[o], strings.HasPrefix(o, "x-"), strings.HasPrefix(o, "comment="):
		default:
			flag := strings.ReplaceAll(name, "_", "-")
			f := fs.Lookup(flag)
			if f == nil && elsewhere != nil && elsewhere(flag) {
				ignored = append(ignored, o)
				continue
			}
			if f == nil || f.Value.Type() == "options" {
				return ignored, fmt.Errorf("unknown mount option %q (known: allow_other, debug, ro, and every flag as name=value, e.g. materialize=/dir)", o)
			}
			if !hasValue {
				if f.Value.Type() != "bool" {
					return ignored, fmt.Errorf("mount option %q needs a value: %s=...", name, name)
				}
				value = "true"
			}
			if err := fs.Set(f.Name, value); err != nil {
				return ignored, fmt.Errorf("mount option %s: %w", o, err)
			}
		}
	}
	return ignored, nil
}

// flagElsewhere returns whether name (or its one-letter form) is a flag
// of some command under root.
func flagElsewhere(root *cobra.Command) func(name string) bool {
	return func(name string) bool {
		var found bool
		var walk func(c *cobra.Command)
		walk = func(c *cobra.Command) {
			fs := c.Flags()
			if fs.Lookup(name) != nil || len(name) == 1 && fs.ShorthandLookup(name) != nil {
				found = true
			}
			for _, sub := range c.Commands() {
				walk(sub)
			}
		}
		walk(root)
		return found
	}
}

// launchedByMount reports whether mount(8) started this process, through
// mount.fuse3's shell: then nothing else will put the server in the
// background, and mount(8) returns only when its helper exits.
func launchedByMount() bool {
	pid := os.Getppid()
	for range 3 {
		if pid <= 1 {
			return false
		}
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			return false
		}
		name := strings.TrimSpace(string(comm))
		if name == "mount" || strings.HasPrefix(name, "mount.fuse") {
			return true
		}
		pid = parentOf(pid)
	}
	return false
}

// parentOf returns the parent pid of pid, or 0.
func parentOf(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses.
	i := strings.LastIndexByte(string(stat), ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}
