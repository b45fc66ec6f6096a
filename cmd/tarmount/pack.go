package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/tarmount/tarmount/archive"
)

func newPackCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "pack [flags] SRC -o OUT.tar.zst",
		Short:   "Write a directory or tarball as seekable zstd with its index embedded",
		GroupID: "archive",
		Long: `Write SRC (a directory, or a tarball of any codec at a path or URL) as
seekable zstd with frames of one span and the index embedded: it mounts
with no index pass, and zstd -d still reads it.`,
		Example: `  tarmount pack ./runtime/ -o runtime.tar.zst
  tarmount pack https://example.com/old.tar.bz2 -o runtime.tar.zst --level 9`,
		Args: exactArgs(1, "SRC"),
		RunE: func(_ *cobra.Command, args []string) error { return packCmd(a.ctx, args[0], a.c.output, &a.c, a.log) },
	}
	fs := cmd.Flags()
	fs.StringVarP(&a.c.output, "output", "o", "", "the archive to write, `OUT.tar.zst` (0644 under the umask)")
	fs.IntVar(&a.c.level, "level", 3, "zstd compression level (1-22, mapped to the encoder's four speeds)")
	addSourceFlags(fs, &a.c)
	return cmd
}

// packCmd writes SRC (a directory, or a tarball in any codec we read, by
// path or URL) to out as a packed archive: seekable zstd with one frame
// per span and the index embedded, which mounts without an index pass and
// which zstd -d reads as usual.
func packCmd(ctx context.Context, src, out string, c *config, log *slog.Logger) error {
	if out == "" {
		return errors.New("pack: want -o OUT.tar.zst")
	}
	start := time.Now()
	ix, err := archive.Pack(ctx, src, out, c.level, c.ao)
	if err != nil {
		return err
	}
	st, _ := os.Stat(out)
	log.Info("packed", "path", out, "entries", ix.Len(), "tar_bytes", ix.TarSize, "bytes", st.Size(),
		"frames", len(ix.Checkpoints), "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}
