package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// newDocsCmd writes the command reference, generated from the commands
// themselves: markdown (docs/cli, kept current by TestDocsCurrent) and man
// pages.
func newDocsCmd(a *app) *cobra.Command {
	var markdown, man string
	cmd := &cobra.Command{
		Use:   "docs [--markdown DIR] [--man DIR]",
		Short: "Write the command reference as man pages or markdown",
		Long: `Write the command reference, generated from the commands themselves:
one man page per command (section 1, tarmount.1, tarmount-extract.1, ...)
and one markdown page per command (docs/cli in the repository).`,
		Example: `  tarmount docs --man /usr/local/share/man/man1
  tarmount docs --markdown docs/cli`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if markdown == "" && man == "" {
				return &usageError{cmd: cmd, err: fmt.Errorf("want --markdown DIR or --man DIR")}
			}
			root := cmd.Root()
			root.DisableAutoGenTag = true
			if markdown != "" {
				if err := os.MkdirAll(markdown, 0o755); err != nil {
					return err
				}
				if err := doc.GenMarkdownTree(root, markdown); err != nil {
					return fmt.Errorf("markdown reference: %w", err)
				}
			}
			if man != "" {
				if err := os.MkdirAll(man, 0o755); err != nil {
					return err
				}
				h := &doc.GenManHeader{Title: "TARMOUNT", Section: "1", Source: "tarmount", Manual: "tarmount manual"}
				if err := doc.GenManTree(root, h, man); err != nil {
					return fmt.Errorf("man pages: %w", err)
				}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&markdown, "markdown", "", "write one markdown page per command into `DIR`")
	cmd.Flags().StringVar(&man, "man", "", "write one man page per command into `DIR`")
	return cmd
}
