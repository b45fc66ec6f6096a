package main

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/tarmount/tarmount/archive"
)

func newIndexCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "index [flags] URL",
		Short:   "Build the index of an archive and save it (-o FILE, --publish beside the archive)",
		GroupID: "archive",
		Long: `Build the index of the archive at URL in one streamed pass and save it in
the cache directory (keyed by the archive's identity); -o also writes it to
FILE. --publish writes it beside the archive as URL` + archive.SidecarSuffix + ` (a local
path, or s3:// with PutObject), where every later mount, extract or ls of
the archive, on any machine, finds it by itself (--no-sidecar: they do not
look). For an http(s) archive, copy FILE there as URL` + archive.SidecarSuffix + `.
Ctrl-C (SIGINT) or SIGTERM stops it with "tarmount: index URL: interrupted",
exit 130 or 143, and saves no index; the next index, mount or extract of
the same archive resumes its pass where it stopped (so does one after a
crash), fetching only the rest.`,
		Example: `  tarmount index s3://bucket/runtime.tar.gz --publish
  tarmount index https://example.com/runtime.tar.gz -o runtime.tar.gz` + archive.SidecarSuffix + `
  tarmount https://example.com/runtime.tar.gz /mnt/runtime --index runtime.tar.gz` + archive.SidecarSuffix + `
  tarmount https://example.com/runtime.tar.gz /mnt/runtime --index https://example.com/idx/runtime.idx`,
		Args: exactArgs(1, "URL"),
		RunE: func(_ *cobra.Command, args []string) error {
			return indexCmd(a.ctx, args[0], a.c.output, &a.c, a.log)
		},
	}
	fs := cmd.Flags()
	fs.StringVarP(&a.c.output, "output", "o", "", "also write the index to `FILE` (0644 under the umask)")
	fs.BoolVar(&a.c.publish, "publish", false, "also write the index beside the archive as ARCHIVE"+archive.SidecarSuffix+" (a local path, or s3:// with PutObject), which every later mount, extract or ls of the archive finds")
	addSourceFlags(fs, &a.c)
	return cmd
}

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
		if err := a.SaveIndex(output); err != nil {
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
