package main

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"time"

	"github.com/tarmount/tarmount/archive"
)

// packCmd writes SRC (a directory, or a tarball in any codec we read, by
// path or URL) to out as a packed archive: seekable zstd with one frame
// per span and the index embedded, which mounts without an index pass and
// which zstd -d reads as usual.
func packCmd(ctx context.Context, src, out string, c *config, log *slog.Logger) error {
	if out == "" {
		return errors.New("usage: tarmount pack SRC -o OUT.tar.zst")
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
