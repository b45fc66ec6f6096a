package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

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

func newLsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "ls [flags] URL [PATH...]",
		Short:   "List the archive (-l like tar -tv; --json: one object per line)",
		GroupID: "archive",
		Long: `List the archive without mounting it (the saved index if there is one, else
one pass that saves it): names, -l like tar -tv, --json one object per line.`,
		Example: `  tarmount ls https://example.com/runtime.tar.gz go/bin
  tarmount ls -l s3://bucket/runtime.tar.gz
  tarmount ls --json https://example.com/runtime.tar.gz | jq -r 'select(.size > 1e6) | .path'`,
		Args: minArgs(1, "URL [PATH...]"),
		RunE: a.inspect("ls"),
	}
	cmd.Flags().BoolVarP(&a.c.inspect.long, "long", "l", false, "long listing, like tar -tv")
	cmd.Flags().BoolVar(&a.c.inspect.json, "json", false, "one JSON object per entry (path, type, size, mode, uid, gid, uname, gname, mtime, link, offset, ...)")
	addSourceFlags(cmd.Flags(), &a.c)
	return cmd
}

func newStatCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "stat [flags] URL PATH...",
		Short:   "What the archive says of PATH",
		GroupID: "archive",
		Long: `What the archive says of each PATH (type, size, mode, owner, times, link,
xattrs), without mounting it.`,
		Example: "  tarmount stat --json https://example.com/runtime.tar.gz go/VERSION",
		Args:    minArgs(2, "URL and PATH..."),
		RunE:    a.inspect("stat"),
	}
	cmd.Flags().BoolVar(&a.c.inspect.json, "json", false, "one JSON object per PATH, as ls --json writes it")
	addSourceFlags(cmd.Flags(), &a.c)
	return cmd
}

func newCatCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "cat [flags] URL PATH...",
		Short:   "Write members to stdout (fetches only their spans)",
		GroupID: "archive",
		Long:    "Write members to standard output, fetching only the spans that hold them.",
		Example: "  tarmount cat https://example.com/runtime.tar.gz go/VERSION",
		Args:    minArgs(2, "URL and PATH..."),
		RunE:    a.inspect("cat"),
	}
	addSourceFlags(cmd.Flags(), &a.c)
	return cmd
}

func newGetCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "get [flags] URL PATH... -C DIR",
		Short:   "Write members (directories with their contents) under DIR",
		GroupID: "archive",
		Long: `Write members (directories with what they hold) under DIR, fetching only
their spans; never outside DIR.`,
		Example: "  tarmount get https://example.com/runtime.tar.gz go/bin go/VERSION -C ./out",
		Args:    minArgs(2, "URL and PATH..."),
		RunE:    a.inspect("get"),
	}
	cmd.Flags().StringVarP(&a.c.inspect.dir, "directory", "C", ".", "directory to write the members into")
	addSourceFlags(cmd.Flags(), &a.c)
	return cmd
}

// inspect runs ls, stat, cat or get.
func (a *app) inspect(name string) func(*cobra.Command, []string) error {
	return func(_ *cobra.Command, args []string) error {
		return inspectCmd(a.ctx, name, args, &a.c, a.log, a.stdout)
	}
}

// inspectCmd runs ls, stat, cat or get (cmd) with the positional
// arguments pos: URL, then paths in the archive.
func inspectCmd(ctx context.Context, cmd string, pos []string, c *config, log *slog.Logger, stdout io.Writer) error {
	// Only what the command needs stays behind: the index, which is
	// small; a stream-only archive's decoded copy only when it is fetched
	// (a local one's is a temporary file), and none for ls and stat.
	ao := c.ao
	ao.IndexOnly = cmd == "ls" || cmd == "stat"
	ao.LocalDecodedTemp = true
	a, err := archive.OpenIndexed(ctx, pos[0], ao)
	if err != nil {
		return err
	}
	defer a.Close()
	paths, err := a.Expand(pos[1:])
	if err != nil {
		return err
	}
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
