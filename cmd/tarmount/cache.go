package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/tarmount/tarmount/archive"
)

func newCacheCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "cache",
		Short:   "List, prune or remove what the cache directory holds",
		GroupID: "archive",
		Long: `The cache directory holds, for each version of each archive opened, its
saved index, fetched blocks (--cache-disk), the decoded copy of a
stream-only archive (--cache-decoded) and the partial index of a pass that
stopped. These commands list it, prune it by age or size, and remove an
archive from it. Running mounts fetch again what they need.`,
		Example: `  tarmount cache ls
  tarmount cache prune --older-than 720h --max-size 20GiB
  tarmount cache rm https://example.com/runtime.tar.gz`,
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&a.c.ao.CacheDir, "cache-dir", archive.DefaultCacheDir(), "the cache directory")
	pf.Lookup("cache-dir").DefValue = "$XDG_CACHE_HOME/tarmount, else ~/.cache/tarmount"

	var asJSON bool
	ls := &cobra.Command{
		Use:     "ls [--json]",
		Short:   "List the versions of archives in the cache, least recently used first",
		Example: "  tarmount cache ls --json | jq -r 'select(.total_bytes > 1e9) | .archive'",
		Args:    exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			vs, err := archive.CachedVersions(a.c.ao.CacheDir)
			if err != nil {
				return err
			}
			return printCached(a.stdout, vs, asJSON)
		},
	}
	ls.Flags().BoolVar(&asJSON, "json", false, "one JSON object per version")

	var olderThan time.Duration
	var maxSize int64
	prune := &cobra.Command{
		Use:   "prune [--older-than DURATION] [--max-size SIZE]",
		Short: "Remove versions not used for a while, then the least recently used beyond a size",
		Example: `  tarmount cache prune --older-than 720h
  tarmount cache prune --max-size 20GiB`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			if olderThan <= 0 && maxSize <= 0 {
				return &usageError{cmd: c, err: fmt.Errorf("want --older-than or --max-size")}
			}
			removed, err := archive.PruneCache(a.c.ao.CacheDir, olderThan, maxSize, time.Now())
			reportRemoved(a.stderr, removed)
			return err
		},
	}
	prune.Flags().DurationVar(&olderThan, "older-than", 0, "remove what was not used for this long (e.g. 720h)")
	sizeVar(prune.Flags(), &maxSize, "max-size", "then remove the least recently used until the cache holds at most this")

	rm := &cobra.Command{
		Use:     "rm URL...",
		Short:   "Remove every version of an archive from the cache",
		Example: "  tarmount cache rm https://example.com/runtime.tar.gz",
		Args:    minArgs(1, "URL..."),
		RunE: func(_ *cobra.Command, urls []string) error {
			for _, u := range urls {
				removed, err := archive.RemoveCached(a.c.ao.CacheDir, u)
				reportRemoved(a.stderr, removed)
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	cmd.AddCommand(ls, prune, rm)
	return cmd
}

// printCached writes the versions as a table, or as JSON lines.
func printCached(w io.Writer, vs []archive.CachedVersion, asJSON bool) error {
	bw := bufio.NewWriter(w)
	if asJSON {
		enc := json.NewEncoder(bw)
		enc.SetEscapeHTML(false)
		for _, v := range vs {
			if err := enc.Encode(v); err != nil {
				return err
			}
		}
		return bw.Flush()
	}
	tw := tabwriter.NewWriter(bw, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "LAST USED\tTOTAL\tINDEX\tBLOCKS\tDECODED\tARCHIVE\tVERSION")
	for _, v := range vs {
		name := v.Name
		switch {
		case v.IndexBytes == 0 && v.PartialBytes == 0 && v.DecodedBytes == 0:
			name = "(blocks that no index names)"
		case name == "":
			name = "(name not kept)"
		}
		version := v.Key[:12]
		if v.Identity != nil {
			version = v.Identity.String()
		}
		if v.PartialBytes > 0 {
			version += " (partial index)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.LastUsed.UTC().Format("2006-01-02 15:04"),
			formatSize(v.TotalBytes), formatSize(v.IndexBytes), formatSize(v.BlockBytes), formatSize(v.DecodedBytes), name, version)
	}
	tw.Flush()
	return bw.Flush()
}

// reportRemoved says what a prune or rm removed.
func reportRemoved(w io.Writer, removed []archive.CachedVersion) {
	var freed int64
	for _, v := range removed {
		freed += v.TotalBytes
		name := v.Name
		if name == "" {
			name = "blocks " + v.Key
		}
		fmt.Fprintf(w, "tarmount: removed %s (%s, last used %s)\n", name, formatSize(v.TotalBytes), v.LastUsed.UTC().Format(time.RFC3339))
	}
	fmt.Fprintf(w, "tarmount: removed %d versions, %s freed\n", len(removed), formatSize(freed))
}
