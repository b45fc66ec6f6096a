package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

var update = flag.Bool("update", false, "rewrite docs/cli from the commands")

// runCLI runs a command line as main does.
func runCLI(args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	code = execute(args, &out, &errOut)
	return out.String(), errOut.String(), code
}

// parseCLI parses a command line as execute does, without running it: the
// command it names, its flags (in the app's config) and its positional
// arguments, checked.
func parseCLI(args ...string) (*app, *cobra.Command, []string, error) {
	a := &app{stdout: io.Discard, stderr: io.Discard}
	root := newRoot(a)
	args = longFlags(root, args)
	c, rest, err := root.Find(args)
	if err != nil {
		return nil, nil, nil, err
	}
	c.InitDefaultHelpFlag()
	c.InitDefaultVersionFlag()
	if err := c.ParseFlags(rest); err != nil {
		return nil, nil, nil, err
	}
	pos := c.Flags().Args()
	if h := c.Flags().Lookup("help"); h != nil && h.Changed {
		return a, c, pos, nil
	}
	if err := c.ValidateArgs(pos); err != nil {
		return nil, nil, nil, err
	}
	if c.Name() == "tarmount" || c.Name() == "mount" {
		if _, err := a.c.applyMountOptions(c.Flags(), flagElsewhere(c.Root())); err != nil {
			return nil, nil, nil, err
		}
	}
	return a, c, pos, nil
}

var commands = []string{"mount", "extract", "index", "ls", "stat", "cat", "get", "pack", "unmount", "status", "cache", "version", "docs"}

// TestHelp: every command's --help goes to stdout with exit 0 and says
// its usage, examples and its own flags, not the others'.
func TestHelp(t *testing.T) {
	for _, cmd := range append([]string{""}, commands...) {
		t.Run(cmd, func(t *testing.T) {
			args := []string{cmd, "--help"}
			if cmd == "" {
				args = args[1:]
			}
			out, errOut, code := runCLI(args...)
			if code != 0 || errOut != "" {
				t.Fatalf("exit %d, stderr %q; want 0 and nothing", code, errOut)
			}
			want := []string{"Usage:", "tarmount " + cmd, "--help"}
			if cmd != "version" {
				want = append(want, "Examples:")
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("help has no %q:\n%s", w, out)
				}
			}
			_, hasSource := map[string]bool{"": true, "mount": true, "extract": true, "index": true, "ls": true,
				"stat": true, "cat": true, "get": true, "pack": true}[cmd]
			if got := strings.Contains(out, "--cache-mem"); got != hasSource {
				t.Errorf("help lists --cache-mem: got %v, want %v", got, hasSource)
			}
			if got := strings.Contains(out, "--materialize"); got != (cmd == "" || cmd == "mount") {
				t.Errorf("help lists --materialize: got %v", got)
			}
			if cmd != "pack" && strings.Contains(out, "--level") {
				t.Errorf("help lists pack's --level")
			}
			for _, c := range commands {
				if cmd == "" && !strings.Contains(out, "\n  "+c+" ") {
					t.Errorf("tarmount --help does not list %s", c)
				}
			}
		})
	}
}

// TestHelpCommand: `tarmount help CMD` is `tarmount CMD --help`, and
// `tarmount help` is not taken for a URL.
func TestHelpCommand(t *testing.T) {
	for _, cmd := range append(commands, "cache prune", "completion bash") {
		got, _, code := runCLI(append([]string{"help"}, strings.Fields(cmd)...)...)
		want, _, _ := runCLI(append(strings.Fields(cmd), "--help")...)
		if code != 0 || got != want {
			t.Errorf("help %s: exit %d, output differs from %s --help", cmd, code, cmd)
		}
	}
	out, errOut, code := runCLI("help")
	if code != 0 || !strings.Contains(out, "Available Commands") && !strings.Contains(out, "Commands that read an archive") || errOut != "" {
		t.Errorf("help: exit %d, stderr %q:\n%s", code, errOut, out)
	}
	// A command that groups others shows its help when given none.
	for _, cmd := range []string{"cache", "completion"} {
		out, errOut, code := runCLI(cmd)
		if code != 0 || errOut != "" || !strings.Contains(out, "tarmount "+cmd+" [command]") {
			t.Errorf("%s: exit %d, stderr %q, stdout %q; want its help", cmd, code, errOut, out)
		}
	}
}

// TestBadCommandLine: a bad flag or argument count gives one line naming
// it, then where the help is, on stderr, and exit 1.
func TestBadCommandLine(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"extract", "--bogus", "u", "d"}, "tarmount: unknown flag: --bogus\nsee 'tarmount extract --help'\n"},
		{[]string{"extract", "-cache-mme", "1G", "u", "d"}, "tarmount: unknown flag: -cache-mme\nsee 'tarmount extract --help'\n"},
		{[]string{"extract", "-cache-mme=1G", "u", "d"}, "tarmount: unknown flag: -cache-mme\nsee 'tarmount extract --help'\n"},
		{[]string{"ls", "-lzqr", "u"}, "tarmount: unknown shorthand flag: 'z' in -zqr\nsee 'tarmount ls --help'\n"},
		{[]string{"extract", "u"}, "tarmount: want URL and DIR, got 1 arguments\nsee 'tarmount extract --help'\n"},
		{[]string{"u", "m", "x"}, "tarmount: want URL and MOUNTPOINT, got 3 arguments\nsee 'tarmount --help'\n"},
		{[]string{"extrct", "u", "d"}, "tarmount: unknown command \"extrct\" for \"tarmount\"; did you mean \"extract\"?\nsee 'tarmount --help'\n"},
		{[]string{"cache", "prnue"}, "tarmount: unknown command \"prnue\" for \"tarmount cache\"; did you mean \"prune\"?\nsee 'tarmount cache --help'\n"},
		{[]string{"completion", "nushell"}, "tarmount: unknown command \"nushell\" for \"tarmount completion\"\nsee 'tarmount completion --help'\n"},
		{[]string{"help", "nosuch"}, "tarmount: unknown command \"nosuch\" for \"tarmount\"\nsee 'tarmount --help'\n"},
		{[]string{"help", "cache", "bogus"}, "tarmount: unknown command \"bogus\" for \"tarmount cache\"\nsee 'tarmount cache --help'\n"},
		{[]string{"ls", "--cache-mem", "lots", "u"}, "tarmount: invalid argument \"lots\" for \"--cache-mem\" flag: want a size such as 65536, 64MiB or 1G, got \"lots\"\nsee 'tarmount ls --help'\n"},
		{[]string{"unmount", "--cache-mem", "1G", "m"}, "tarmount: unknown flag: --cache-mem\nsee 'tarmount unmount --help'\n"},
		{[]string{"u", "m", "-o", "no_such_option"}, "tarmount: unknown mount option \"no_such_option\" (known: allow_other, debug, ro, and every flag as name=value, e.g. materialize=/dir)\nsee 'tarmount --help'\n"},
	} {
		out, errOut, code := runCLI(tc.args...)
		if code != 1 || out != "" || errOut != tc.want {
			t.Errorf("%q: got exit %d, stdout %q, stderr %q; want 1, nothing, %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

// TestCompletion: tarmount completion SHELL writes a script for it.
func TestCompletion(t *testing.T) {
	for _, sh := range []string{"bash", "zsh", "fish"} {
		out, errOut, code := runCLI("completion", sh)
		if code != 0 || errOut != "" || !strings.Contains(out, "tarmount") || len(out) < 1000 {
			t.Errorf("completion %s: exit %d, stderr %q, %d bytes", sh, code, errOut, len(out))
		}
	}
}

// TestVersion: --version, -version and version say the same: the
// version, and the Go version that built it.
func TestVersion(t *testing.T) {
	var outs []string
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		out, errOut, code := runCLI(args...)
		if code != 0 || errOut != "" || !regexp.MustCompile(`^tarmount \S+.*, go1\.\d+`).MatchString(out) {
			t.Errorf("%q: exit %d, stderr %q, stdout %q; want tarmount VERSION ..., goVERSION", args, code, errOut, out)
		}
		outs = append(outs, out)
	}
	if len(slices.Compact(slices.Clone(outs))) != 1 {
		t.Errorf("the forms differ: %q", outs)
	}
}

// sizeFlags are the flags that count bytes, wherever they appear.
var sizeFlags = []string{"span", "block-size", "cache-mem", "cache-disk", "cache-decoded", "frame-resume-min", "min-speed", "max-size"}

// sizeCommandLines are the positional arguments of each command that
// takes a size flag.
var sizeCommandLines = map[string][]string{
	"tarmount": {"u", "m"}, "tarmount mount": {"u", "m"}, "tarmount extract": {"u", "d"}, "tarmount index": {"u"},
	"tarmount ls": {"u"}, "tarmount stat": {"u", "p"}, "tarmount cat": {"u", "p"}, "tarmount get": {"u", "p"},
	"tarmount pack": {"s"}, "tarmount cache prune": nil,
}

// TestSizes: every size flag of every command takes plain bytes and
// units, in both forms of a flag and as a mount option, and the default
// its help prints reads back as the default.
func TestSizes(t *testing.T) {
	root := newRoot(&app{stdout: io.Discard, stderr: io.Discard})
	found := map[string]bool{}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		for _, name := range sizeFlags {
			f := c.LocalNonPersistentFlags().Lookup(name)
			if f == nil {
				continue
			}
			found[name] = true
			path := c.CommandPath()
			pos, ok := sizeCommandLines[path]
			if !ok {
				t.Errorf("%s --%s: no command line to try it in sizeCommandLines", path, name)
				continue
			}
			if _, ok := f.Value.(sizeValue); !ok {
				t.Errorf("%s --%s: a %s flag, want a size", path, name, f.Value.Type())
				continue
			}
			var def int64
			if err := (sizeValue{p: &def}).Set(f.DefValue); err != nil && f.DefValue != "" {
				t.Errorf("%s --%s: the default the help prints, %q, does not read back: %v", path, name, f.DefValue, err)
			}
			for _, tc := range []struct {
				arg  string
				want int64
			}{{"65536", 65536}, {"64MiB", 64 << 20}, {"64MB", 64e6}, {"1G", 1e9}, {"1GiB", 1 << 30}, {"512KiB", 512 << 10}, {"1.5MiB", 3 << 19}} {
				lines := [][]string{{"--" + name, tc.arg}, {"--" + name + "=" + tc.arg}, {"-" + name, tc.arg}}
				if path == "tarmount" || path == "tarmount mount" {
					lines = append(lines, []string{"-o", strings.ReplaceAll(name, "-", "_") + "=" + tc.arg})
				}
				for _, flagArgs := range lines {
					line := append(append(strings.Fields(strings.TrimPrefix(path, "tarmount")), pos...), flagArgs...)
					_, c, _, err := parseCLI(line...)
					if err != nil {
						t.Errorf("%q: %v", line, err)
						continue
					}
					if got := *c.Flags().Lookup(name).Value.(sizeValue).p; got != tc.want {
						t.Errorf("%q: got %d, want %d", line, got, tc.want)
					}
				}
			}
		}
	}
	walk(root)
	for _, name := range sizeFlags {
		if !found[name] {
			t.Errorf("no command has --%s", name)
		}
	}
}

// The flags of the command line before cobra. It had one flag set that
// every command took; these are the flags each command used.
var (
	oldGlobal = []string{"v", "cpuprofile"}
	oldSource = []string{"cache-dir", "index", "no-sidecar", "span", "fetch-workers", "block-size", "cache-mem", "H",
		"header", "http1", "readahead", "cache-disk", "cache-decoded", "region", "endpoint-url", "profile",
		"no-sign-request", "read-timeout", "retries", "min-speed"}
	oldFlags = map[string][]string{
		"mount": slices.Concat(oldGlobal, oldSource, []string{"o", "mount-name", "daemon", "foreground", "log-file",
			"metrics-addr", "allow-other", "wait-index", "partial-listings", "materialize", "write-workers",
			"decode-workers", "overwrite", "fsync", "uid", "gid"}),
		"extract": slices.Concat(oldGlobal, oldSource, []string{"write-workers", "decode-workers", "overwrite", "fsync", "quiet"}),
		"index":   slices.Concat(oldGlobal, oldSource, []string{"o", "publish"}),
		"pack":    slices.Concat(oldGlobal, oldSource, []string{"o", "level"}),
		"ls":      slices.Concat(oldGlobal, oldSource, []string{"json", "l"}),
		"stat":    slices.Concat(oldGlobal, oldSource, []string{"json"}),
		"cat":     slices.Concat(oldGlobal, oldSource),
		"get":     slices.Concat(oldGlobal, oldSource, []string{"C"}),
		"status":  slices.Concat(oldGlobal, []string{"json"}),
		"unmount": oldGlobal,
	}
)

// oldValue is a value for an old flag; nil for a boolean.
func oldValue(name string) []string {
	switch name {
	case "v", "no-sidecar", "http1", "no-sign-request", "daemon", "foreground", "allow-other", "wait-index",
		"partial-listings", "overwrite", "fsync", "quiet", "json", "l", "publish":
		return nil
	case "span", "block-size", "cache-mem", "cache-disk", "cache-decoded", "min-speed":
		return []string{"1048576"}
	case "fetch-workers", "readahead", "retries", "write-workers", "decode-workers", "level", "uid", "gid":
		return []string{"3"}
	case "read-timeout":
		return []string{"30s"}
	case "H", "header":
		return []string{"X-Token: t"}
	case "o":
		return []string{"allow_other"}
	}
	return []string{"/x"}
}

// TestOldForms: every flag of the old command line parses as the flag
// package took it, on each command that used it: -name value, --name
// value, -name=value and --name=value (a boolean alone or =true), before
// and after the arguments; and every mount flag is also a mount option
// name=value, as fstab lines in the wild write them.
func TestOldForms(t *testing.T) {
	pos := map[string][]string{"mount": {"u", "m"}, "extract": {"u", "d"}, "index": {"u"}, "pack": {"s"}, "ls": {"u"},
		"stat": {"u", "p"}, "cat": {"u", "p"}, "get": {"u", "p"}, "status": {"m"}, "unmount": {"m"}}
	for cmd, names := range oldFlags {
		for _, name := range names {
			v := oldValue(name)
			var forms [][]string
			for _, dash := range []string{"-", "--"} {
				forms = append(forms, append([]string{dash + name}, v...))
				if v == nil {
					forms = append(forms, []string{dash + name + "=true"})
				} else {
					forms = append(forms, []string{dash + name + "=" + v[0]})
				}
			}
			for _, flagArgs := range forms {
				lines := [][]string{
					slices.Concat([]string{cmd}, flagArgs, pos[cmd]),
					slices.Concat([]string{cmd}, pos[cmd], flagArgs),
				}
				if cmd == "mount" {
					lines = append(lines, slices.Concat(pos[cmd], flagArgs))
				}
				for _, line := range lines {
					if _, _, _, err := parseCLI(line...); err != nil {
						t.Errorf("%q: %v", line, err)
					}
				}
			}
		}
	}
	for _, name := range oldFlags["mount"] {
		if name == "o" {
			continue
		}
		opt := strings.ReplaceAll(name, "-", "_")
		if v := oldValue(name); v != nil {
			opt += "=" + v[0]
		}
		if _, _, _, err := parseCLI("u", "m", "-o", opt); err != nil {
			t.Errorf("-o %s: %v", opt, err)
		}
	}
}

// TestMountOptions: what -o sets, and what it refuses.
func TestMountOptions(t *testing.T) {
	for _, tc := range []struct {
		opts    string
		check   func(c *config) bool
		wantErr string
	}{
		{"ro,allow_other,dev,suid,nofail,_netdev,x-systemd.automount,comment=boot", func(c *config) bool { return c.allowOther && !c.debugFUSE }, ""},
		{"debug", func(c *config) bool { return c.debugFUSE }, ""},
		{"materialize=/var/lib/rt,cache_dir=/var/cache/tm,fetch-workers=16,cache_mem=64MiB", func(c *config) bool {
			return c.mat.dir == "/var/lib/rt" && c.ao.CacheDir == "/var/cache/tm" && c.ao.FetchWorkers == 16 && c.ao.CacheMem == 64<<20
		}, ""},
		{"no_sign_request,foreground", func(c *config) bool { return c.ao.NoSignRequest && c.foreground }, ""},
		{"header=Authorization: Bearer x", func(c *config) bool { return c.ao.Header.Get("Authorization") == "Bearer x" }, ""},
		{"no_such_option", nil, `unknown mount option "no_such_option"`},
		// Flags of other commands, which the command line before cobra
		// took here and ignored: still taken, and ignored.
		{"quiet,json,publish,level=9,l,C=/x,materialize=/m", func(c *config) bool { return c.mat.dir == "/m" }, ""},
		{"materialize", nil, "needs a value"},
		{"fetch_workers=many", nil, "mount option fetch_workers=many"},
		{"o=x", nil, "unknown mount option"},
		{"options=x", nil, "unknown mount option"},
	} {
		t.Run(tc.opts, func(t *testing.T) {
			a, _, _, err := parseCLI("URL", "MNT", "-o", tc.opts)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(&a.c) {
				t.Errorf("options %q not applied: %+v", tc.opts, a.c)
			}
		})
	}
	a, _, _, err := parseCLI("-o", "allow_other", "URL", "MNT", "-o", "debug")
	if err != nil || !a.c.allowOther || !a.c.debugFUSE {
		t.Errorf("-o allow_other -o debug: got %v, want both set", err)
	}
}

// TestHelpS3Environment checks that each command's help says which
// variables the S3 flags fall back on.
func TestHelpS3Environment(t *testing.T) {
	for _, cmd := range []string{"mount", "index", "extract", "ls", "cat", "get", "pack"} {
		out, _, _ := runCLI(cmd, "--help")
		for _, v := range []string{"$AWS_REGION", "$AWS_DEFAULT_REGION", "$AWS_PROFILE", "$AWS_DEFAULT_PROFILE",
			"$AWS_ENDPOINT_URL_S3", "$AWS_ENDPOINT_URL or", "no environment variable"} {
			if !strings.Contains(out, v) {
				t.Errorf("help of %s does not name %s", cmd, v)
			}
		}
	}
}

// TestDocsCurrent: docs/cli, the command reference, is what the commands
// say of themselves (go test ./cmd/tarmount -run TestDocsCurrent -update
// rewrites it).
func TestDocsCurrent(t *testing.T) {
	dir := filepath.Join("..", "..", "docs", "cli")
	if *update {
		os.RemoveAll(dir)
		if _, errOut, code := runCLI("docs", "--markdown", dir); code != 0 {
			t.Fatal(errOut)
		}
	}
	tmp := t.TempDir()
	if _, errOut, code := runCLI("docs", "--markdown", tmp, "--man", filepath.Join(tmp, "man")); code != 0 {
		t.Fatal(errOut)
	}
	want, _ := filepath.Glob(filepath.Join(tmp, "*.md"))
	got, _ := filepath.Glob(filepath.Join(dir, "*.md"))
	if len(got) != len(want) || len(want) < len(commands) {
		t.Fatalf("docs/cli has %d pages, the commands make %d (run with -update)", len(got), len(want))
	}
	for _, w := range want {
		wb, _ := os.ReadFile(w)
		gb, err := os.ReadFile(filepath.Join(dir, filepath.Base(w)))
		if err != nil || !bytes.Equal(gb, wb) {
			t.Errorf("docs/cli/%s is not what the commands say (run with -update): %v", filepath.Base(w), err)
		}
	}
	man, _ := filepath.Glob(filepath.Join(tmp, "man", "*.1"))
	if len(man) < len(commands) {
		t.Errorf("got %d man pages, want one per command", len(man))
	}
}

// TestDocumentedCommandLines: every tarmount command line in the code
// blocks of README.md and docs/ parses: no documented flag is refused.
// Lines of mount(8) and fstab are taken as the mount they make.
func TestDocumentedCommandLines(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	more, _ := filepath.Glob(filepath.Join("..", "..", "docs", "*", "*.md"))
	files = append(append([]string{filepath.Join("..", "..", "README.md")}, files...), more...)
	n := 0
	for _, f := range files {
		if strings.Contains(f, filepath.Join("docs", "cli")) {
			continue // generated from the commands
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		in := false
		for i, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				in = !in
				continue
			}
			if !in {
				continue
			}
			args, ok := documentedLine(line)
			if !ok {
				continue
			}
			n++
			if _, _, _, err := parseCLI(args...); err != nil {
				t.Errorf("%s:%d: %q: %v", f, i+1, strings.TrimSpace(line), err)
			}
		}
	}
	if n < 20 {
		t.Errorf("found %d command lines in the docs, want the 20 or more README.md has", n)
	}
	// The example systemd units run tarmount too.
	units, _ := filepath.Glob(filepath.Join("..", "..", "scripts", "systemd", "*.service"))
	n = 0
	for _, u := range units {
		for _, line := range unitCommandLines(t, u) {
			args, ok := documentedLine(line)
			if !ok {
				continue
			}
			n++
			if _, _, _, err := parseCLI(args...); err != nil {
				t.Errorf("%s: %q: %v", u, line, err)
			}
		}
	}
	if n < 2 {
		t.Errorf("found %d tarmount command lines in scripts/systemd, want the unit's ExecStart and ExecStopPost", n)
	}
}

// unitCommandLines returns the command lines of a systemd unit's Exec*=
// settings, continuation lines joined and systemd's prefixes (-, @, +, !)
// cut.
func unitCommandLines(t *testing.T, path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	text := strings.ReplaceAll(string(data), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		key, value, ok := strings.Cut(line, "=")
		if ok && strings.HasPrefix(key, "Exec") {
			out = append(out, strings.TrimLeft(value, "-@+!:"))
		}
	}
	return out
}

// TestExamplesParse: every line of every command's examples is a
// tarmount command line that parses.
func TestExamplesParse(t *testing.T) {
	root := newRoot(&app{stdout: io.Discard, stderr: io.Discard})
	n := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		for _, line := range strings.Split(c.Example, "\n") {
			if strings.TrimSpace(line) == "" {
				continue
			}
			args, ok := documentedLine(line)
			if !ok {
				t.Errorf("%s: example %q is not a tarmount command line", c.CommandPath(), line)
				continue
			}
			n++
			if _, _, _, err := parseCLI(args...); err != nil {
				t.Errorf("%s: example %q: %v", c.CommandPath(), strings.TrimSpace(line), err)
			}
		}
	}
	walk(root)
	if n < len(commands) {
		t.Errorf("found %d examples, want one or more per command", n)
	}
}

// documentedLine returns the arguments of a tarmount command line in a
// code block (its comment, pipes and redirections cut), a mount(8) line
// or an fstab line.
func documentedLine(line string) ([]string, bool) {
	words := shellWords(line)
	for i, w := range words {
		if w == "|" || w == ">" || w == "&&" || w == ";" || w == "2>&1" || strings.HasPrefix(w, "#") {
			words = words[:i]
			break
		}
	}
	for len(words) > 0 && (words[0] == "sudo" || words[0] == "$" || strings.Contains(words[0], "=") && !strings.Contains(words[0], "://")) {
		words = words[1:]
	}
	switch {
	case len(words) > 0 && (words[0] == "tarmount" || strings.HasSuffix(words[0], "/tarmount")):
		return words[1:], true
	case len(words) >= 4 && words[0] == "mount" && words[1] == "-t" && words[2] == "fuse.tarmount":
		return words[3:], true
	case len(words) == 6 && words[2] == "fuse.tarmount":
		return []string{words[0], words[1], "-o", words[3]}, true
	}
	return nil, false
}

// shellWords splits a line as sh would, for the quoting the docs use.
func shellWords(line string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote byte
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			} else {
				cur.WriteByte(c)
			}
		case c == '\'' || c == '"':
			quote, inWord = c, true
		case c == ' ' || c == '\t':
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words
}

func TestShellWords(t *testing.T) {
	got := fmt.Sprint(shellWords(`tarmount ls --json u | jq -r 'select(.size > 1e6) | .path'  # x`))
	want := "[tarmount ls --json u | jq -r select(.size > 1e6) | .path # x]"
	if got != want {
		t.Errorf("got %s, want %s", got, want)
	}
}

func TestParseID(t *testing.T) {
	var id *uint32
	if err := parseID("1000", &id); err != nil || id == nil || *id != 1000 {
		t.Errorf("parseID(1000): got %v, %v", id, err)
	}
	for _, bad := range []string{"", "-1", "root", "4294967296"} {
		var id *uint32
		if err := parseID(bad, &id); err == nil {
			t.Errorf("parseID(%q): got %d, want an error", bad, *id)
		}
	}
}

// TestCacheCommands: cache ls of an empty cache, and what cache prune and
// rm refuse (the cache's contents: archive.TestCacheVersions).
func TestCacheCommands(t *testing.T) {
	dir := t.TempDir()
	out, errOut, code := runCLI("cache", "ls", "--cache-dir", dir)
	if code != 0 || !strings.HasPrefix(out, "LAST USED") || strings.Count(out, "\n") != 1 {
		t.Errorf("cache ls of an empty cache: exit %d, %q, %q", code, out, errOut)
	}
	if out, _, code := runCLI("cache", "ls", "--json", "--cache-dir", dir); code != 0 || out != "" {
		t.Errorf("cache ls --json of an empty cache: exit %d, %q", code, out)
	}
	if _, errOut, code := runCLI("cache", "prune", "--cache-dir", dir); code != 1 || !strings.Contains(errOut, "want --older-than or --max-size") {
		t.Errorf("cache prune: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLI("cache", "rm", "https://example.com/a.tar", "--cache-dir", dir); code != 1 || !strings.Contains(errOut, "nothing cached") {
		t.Errorf("cache rm of an archive not cached: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLI("cache", "prune", "--max-size", "1GiB", "--older-than", "720h", "--cache-dir", dir); code != 0 || !strings.Contains(errOut, "removed 0 versions") {
		t.Errorf("cache prune of an empty cache: exit %d, %q", code, errOut)
	}
}
