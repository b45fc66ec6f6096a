package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// app is one run of the command line: its streams, the flags of the
// command that runs, and what the root sets up for every command
// (logging, signals, a CPU profile).
type app struct {
	stdout, stderr io.Writer
	// args are the arguments as given, for a --daemon server, which runs
	// them again.
	args []string
	c    config
	log  *slog.Logger
	// ctx is done on SIGINT or SIGTERM; stop releases it; got says which
	// signal came.
	ctx  context.Context
	stop context.CancelFunc
	got  func() os.Signal
	// name and pos are the command that ran and its positional
	// arguments, for the "CMD URL: interrupted" error.
	name string
	pos  []string
	// stopProfile ends a --cpuprofile.
	stopProfile func()
}

const rootLong = `tarmount mounts a tarball behind https://, s3:// or a local path as a
read-only FUSE filesystem at once, and fetches only the parts that are read.
Without an index the mount serves while its first pass indexes the archive;
the index is saved, and found again by every later command.

URL is http://..., https://..., s3://bucket/key, file:///path or a path.
Archives: .tar, .tar.gz (gzip, pigz, multi-member), .tar.zst (seekable,
multi-frame, single-frame), .tar.lz4 (frames, legacy), .tar.bz2 and .tar.xz,
recognised by their content. Single-frame zstd and xz of one block (xz
without -T) are stream-only: the first mount decodes them to
CACHE-DIR/decoded.

s3:// reads what the AWS CLI reads: the standard credential chain
(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, the shared files, web
identity, SSO, instance role); --profile, else AWS_PROFILE or
AWS_DEFAULT_PROFILE; --region, else the bucket's region as the server names
it, else AWS_REGION, AWS_DEFAULT_REGION or the profile's; --endpoint-url,
else AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL or the profile's endpoint_url.
--no-sign-request has no variable.

Sizes take units: 65536, 64KiB, 64MiB, 1G (10^9), 1GiB (2^30).

Exit status: 0 on success, and when a signal unmounts a mount whose first
pass had ended; 1 on an error, named in one line "tarmount: ..."; 130 after
SIGINT (Ctrl-C), 143 after SIGTERM that interrupted extract, index, pack or
a mount's first pass ("tarmount: CMD URL: interrupted"; a rerun resumes).`

// newRoot returns the command tree of a, the mount being the root's own
// job: tarmount URL MOUNTPOINT.
func newRoot(a *app) *cobra.Command {
	root := &cobra.Command{
		Use:   "tarmount [flags] URL MOUNTPOINT",
		Short: "Mount a remote tarball read-only, at once, fetching only what is read",
		Long:  rootLong + "\n\n" + mountLong,
		Example: `  tarmount https://example.com/runtime.tar.gz /mnt/runtime
  tarmount s3://bucket/runtime.tar.gz /mnt/runtime --materialize /local/runtime
  tarmount extract https://example.com/runtime.tar.gz /local/runtime
  tarmount ls --json https://example.com/runtime.tar.gz | jq -r 'select(.size > 1e6) | .path'`,
		Args:              rootArgs,
		Version:           version(),
		SilenceErrors:     true,
		SilenceUsage:      true,
		CompletionOptions: cobra.CompletionOptions{HiddenDefaultCmd: false},
		PersistentPreRunE: a.setup,
		RunE:              a.runMount,
	}
	root.SetVersionTemplate("{{.Version}}\n")
	root.SuggestionsMinimumDistance = 2
	root.SetOut(a.stdout)
	root.SetErr(a.stderr)
	root.SetFlagErrorFunc(a.flagError)
	pf := root.PersistentFlags()
	pf.BoolVarP(&a.c.verbose, "verbose", "v", false, "log every step at debug level")
	pf.StringVar(&a.c.cpuProfile, "cpuprofile", "", "write a CPU profile (go tool pprof) of this run to `FILE`")
	addSourceFlags(root.Flags(), &a.c)
	addMountFlags(root.Flags(), &a.c)
	root.AddGroup(&cobra.Group{ID: "archive", Title: "Commands that read an archive:"},
		&cobra.Group{ID: "mount", Title: "Commands about a mount:"})
	root.AddCommand(newMountCmd(a), newExtractCmd(a), newIndexCmd(a), newLsCmd(a), newStatCmd(a),
		newCatCmd(a), newGetCmd(a), newPackCmd(a), newUnmountCmd(a), newStatusCmd(a),
		newCacheCmd(a), newVersionCmd(a), newDocsCmd(a))
	oldNames(root.PersistentFlags())
	for _, c := range append(root.Commands(), root) {
		oldNames(c.Flags())
	}
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		switch {
		case c.Name() == "help":
			c.RunE = helpTopic
		case c.HasSubCommands() && !c.Runnable():
			c.Args, c.RunE, c.DisableFlagsInUseLine = nil, subcommand, true
		}
	}
	return root
}

// subcommand runs a command that only groups others (cache,
// completion): without arguments it shows its help; a word that names
// none of its commands is an error, not the help with exit 0, so that
// `tarmount cache prnue` does not pass for done.
func subcommand(c *cobra.Command, args []string) error {
	if len(args) == 0 {
		return c.Help()
	}
	return &usageError{cmd: c, err: unknownCommand(c, args[0])}
}

// helpTopic is `tarmount help [CMD...]`: the help of CMD on stdout, or an
// error for a topic that names no command (cobra's own would print the
// root's help and exit 0).
func helpTopic(h *cobra.Command, args []string) error {
	c, rest, err := h.Root().Find(args)
	switch {
	case err != nil:
		return &usageError{cmd: h.Root(), err: unknownCommand(h.Root(), args[0])}
	case len(rest) > 0:
		return &usageError{cmd: c, err: unknownCommand(c, rest[0])}
	}
	c.InitDefaultHelpFlag() // listed in the help, as with --help
	c.InitDefaultVersionFlag()
	return c.Help()
}

// unknownCommand says that word names no command of c, with the nearest
// one when there is one.
func unknownCommand(c *cobra.Command, word string) error {
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2
	}
	if s := c.SuggestionsFor(word); len(s) > 0 {
		return fmt.Errorf("unknown command %q for %q; did you mean %q?", word, c.CommandPath(), s[0])
	}
	return fmt.Errorf("unknown command %q for %q", word, c.CommandPath())
}

// rootArgs accepts URL MOUNTPOINT, or nothing (the help); a first
// argument that looks like a mistyped command is said to be one.
func rootArgs(c *cobra.Command, args []string) error {
	switch len(args) {
	case 0, 2:
		return nil
	}
	if s := c.SuggestionsFor(args[0]); len(s) > 0 && len(args[0]) >= 3 && !strings.ContainsAny(args[0], "/:.") {
		if _, err := os.Stat(args[0]); err != nil {
			return &usageError{cmd: c, err: unknownCommand(c, args[0])}
		}
	}
	return &usageError{cmd: c, err: fmt.Errorf("want URL and MOUNTPOINT, got %d arguments", len(args))}
}

// exactArgs wants n positional arguments, named in want.
func exactArgs(n int, want string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return &usageError{cmd: c, err: fmt.Errorf("want %s, got %d arguments", want, len(args))}
		}
		return nil
	}
}

// minArgs wants at least n positional arguments, named in want.
func minArgs(n int, want string) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) < n {
			return &usageError{cmd: c, err: fmt.Errorf("want %s, got %d arguments", want, len(args))}
		}
		return nil
	}
}

// shorthandError is pflag's error for a single-dash word whose letter
// LETTER names no flag: "unknown shorthand flag: 'LETTER' in -WORD".
var shorthandError = regexp.MustCompile(`^unknown shorthand flag: '(.)' in -(.+)$`)

// flagError is the error of a flag that does not parse. A single-dash
// argument of three or more letters that is refused at its first letter
// was meant for a long flag, as tarmount's flags were once written
// (-cache-mem): it is named as one, "unknown flag: -cache-mme", not by its
// first letter.
func (a *app) flagError(c *cobra.Command, err error) error {
	if m := shorthandError.FindStringSubmatch(err.Error()); m != nil && len(m[2]) > 2 && m[2][:1] == m[1] {
		word, _, _ := strings.Cut(m[2], "=")
		if slices.ContainsFunc(a.args, func(arg string) bool { return arg == "-"+m[2] || strings.HasPrefix(arg, "-"+word+"=") }) {
			err = fmt.Errorf("unknown flag: -%s", word)
		}
	}
	return &usageError{cmd: c, err: err}
}

// usageError is a command line that does not parse: one line, and where
// the help is.
type usageError struct {
	cmd *cobra.Command
	err error
}

func (e *usageError) Error() string {
	return fmt.Sprintf("%v\nsee '%s --help'", e.err, e.cmd.CommandPath())
}

func (e *usageError) Unwrap() error { return e.err }

// setup runs before every command: logging, the signal context and the
// CPU profile.
func (a *app) setup(cmd *cobra.Command, args []string) error {
	a.name, a.pos = cmd.Name(), args
	if cmd == cmd.Root() {
		a.name = "mount"
	}
	level := slog.LevelInfo
	if a.c.verbose {
		level = slog.LevelDebug
	}
	a.log = slog.New(slog.NewTextHandler(serverLog(a.stderr, &a.c), &slog.HandlerOptions{Level: level}))
	slog.SetDefault(a.log)
	a.c.ao.Logger = a.log
	if err := checkSourceFlags(&a.c); err != nil {
		return &usageError{cmd: cmd, err: err}
	}
	if a.c.cpuProfile != "" {
		f, err := os.Create(a.c.cpuProfile)
		if err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			f.Close()
			return fmt.Errorf("cpu profile: %w", err)
		}
		a.stopProfile = func() {
			pprof.StopCPUProfile()
			f.Close()
		}
	}
	a.ctx, a.stop, a.got = signalContext(context.Background())
	return nil
}

// execute runs the command line args and returns the exit status; errors
// go to stderr as one line, "tarmount: ...".
func execute(args []string, stdout, stderr io.Writer) int {
	a := &app{stdout: stdout, stderr: stderr, args: args}
	root := newRoot(a)
	root.SetArgs(longFlags(root, args))
	err := root.Execute()
	if a.stopProfile != nil {
		a.stopProfile()
	}
	if a.stop != nil {
		err = interrupted(err, a.name, a.pos, a.got)
		a.stop()
	}
	if err == nil {
		return 0
	}
	var ue *usageError
	if !errors.As(err, &ue) {
		if c, _, ferr := root.Find(args); ferr == nil && strings.HasPrefix(err.Error(), "unknown ") && c != nil {
			err = &usageError{cmd: c, err: err}
		}
	}
	fmt.Fprintf(stderr, "tarmount: %v\n", err)
	var ie *interruptedError
	if errors.As(err, &ie) {
		return ie.exitCode()
	}
	return 1
}

// longFlags rewrites the single-dash long flags of the flag package that
// tarmount used before (-cache-dir, -json=false) as pflag's --cache-dir,
// so that command lines and fstab entries written then keep working. A
// single-dash word names a long flag only when one has that name; -o, -v,
// -l, -C and -H stay shorthands.
func longFlags(root *cobra.Command, args []string) []string {
	names := map[string]bool{"help": true, "version": true} // cobra adds them as it runs
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { names[f.Name] = true })
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	out := make([]string, 0, len(args))
	for i, arg := range args {
		if arg == "--" {
			return append(out, args[i:]...)
		}
		if len(arg) > 2 && arg[0] == '-' && arg[1] != '-' {
			name, _, _ := strings.Cut(arg[1:], "=")
			if len(name) > 1 && names[name] {
				arg = "-" + arg
			}
		}
		out = append(out, arg)
	}
	return out
}

// newVersionCmd is `tarmount version`, the same as --version.
func newVersionCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version, the commit and date it was built from, and the Go version",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintln(a.stdout, version())
			return err
		},
	}
}
