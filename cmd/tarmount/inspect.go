package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/tarmount/tarmount/archive"
)

// Inspection without a mount: ls, stat, cat and get open the archive as a
// mount does (the saved or given index, else one pass that saves it) and
// read members through the same span reader, so that cat and get fetch
// only the spans that hold the members asked for.

// inspectFlags are the flags of ls, stat and get.
type inspectFlags struct {
	json bool   // ls, stat: JSON lines
	long bool   // ls -l
	dir  string // get -C DIR
}

func (f *inspectFlags) register(fs interface {
	BoolVar(*bool, string, bool, string)
	StringVar(*string, string, string, string)
}) {
	fs.BoolVar(&f.json, "json", false, "ls, stat: one JSON object per entry (path, type, size, mode, uid, gid, uname, gname, mtime, link, offset, ...)")
	fs.BoolVar(&f.long, "l", false, "ls: long listing, like tar -tv")
	fs.StringVar(&f.dir, "C", ".", "get: directory to write the members into")
}

// listFormat is the ls format the flags ask for.
func (f *inspectFlags) listFormat() archive.ListFormat {
	switch {
	case f.json:
		return archive.ListJSON
	case f.long:
		return archive.ListLong
	}
	return archive.ListNames
}

// inspectUsage is the usage of each inspection command.
var inspectUsage = map[string]string{
	"ls":   "usage: tarmount ls [-l] [--json] URL [PATH...]",
	"stat": "usage: tarmount stat [--json] URL PATH...",
	"cat":  "usage: tarmount cat URL PATH...",
	"get":  "usage: tarmount get URL PATH... [-C DIR]",
}

// inspectCmd runs ls, stat, cat or get (cmd) with the positional
// arguments pos: URL, then paths in the archive.
func inspectCmd(ctx context.Context, cmd string, pos []string, c *config, log *slog.Logger, stdout io.Writer) error {
	if len(pos) < 1 || (cmd != "ls" && len(pos) < 2) {
		return errors.New(inspectUsage[cmd])
	}
	a, err := archive.OpenIndexed(ctx, pos[0], c.ao)
	if err != nil {
		return err
	}
	defer a.Close()
	paths := pos[1:]
	switch cmd {
	case "ls":
		return a.List(ctx, stdout, c.inspect.listFormat(), paths...)
	case "stat":
		return statArchive(a, paths, c, stdout)
	case "cat":
		return a.Cat(ctx, stdout, paths...)
	default:
		return a.Get(ctx, c.inspect.dir, paths...)
	}
}

// statArchive prints what the archive says of each path.
func statArchive(a *archive.Archive, paths []string, c *config, stdout io.Writer) error {
	w := bufio.NewWriter(stdout)
	for _, p := range paths {
		id, err := a.Lookup(p)
		if err != nil {
			w.Flush()
			return err
		}
		v := archive.DescribeEntry(a.Index(), archive.CleanMember(p), id)
		if c.inspect.json {
			w.Write(v.AppendJSON(nil))
			continue
		}
		j := v.JSON()
		fmt.Fprintf(w, "  File: %s\n  Type: %s\n  Size: %d", j.Path, j.Type, a.Index().Entry(id).Size)
		if j.Stored != nil {
			fmt.Fprintf(w, " (%d stored)", *j.Stored)
		}
		fmt.Fprintf(w, "\n  Mode: %s (%s)  Uid: %d (%s)  Gid: %d (%s)\n  Links: %d  Inode: %d\n",
			j.Mode, archive.ModeString(j.Type, parseMode(j.Mode)), j.UID, j.Uname, j.GID, j.Gname, j.Nlink, j.Inode)
		if j.Link != "" {
			fmt.Fprintf(w, "  Link: %s\n", j.Link)
		}
		fmt.Fprintf(w, "Modify: %s\n", j.MTime)
		if j.Offset != nil {
			fmt.Fprintf(w, "  Data: at %d in the decoded tar stream\n", *j.Offset)
		}
		for k, v := range j.Xattrs {
			fmt.Fprintf(w, " Xattr: %s=%q\n", k, v)
		}
	}
	return w.Flush()
}

func parseMode(s string) uint32 {
	var m uint32
	fmt.Sscanf(s, "%o", &m)
	return m
}
