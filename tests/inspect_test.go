package tests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// lsEntry is what the test reads of a line of tarmount ls --json.
type lsEntry struct {
	Path     string `json:"path"`
	Type     string `json:"type"`
	Size     int64  `json:"size"`
	Mode     string `json:"mode"`
	UID      uint32 `json:"uid"`
	GID      uint32 `json:"gid"`
	Uname    string `json:"uname"`
	Gname    string `json:"gname"`
	MTimeNs  int64  `json:"mtime_ns"`
	Link     string `json:"link"`
	Offset   *int64 `json:"offset"`
	Devmajor uint32 `json:"devmajor"`
	Devminor uint32 `json:"devminor"`
}

// tarTV is one line of GNU tar -tv: the fields tarmount ls must agree on.
type tarTV struct {
	mode, owner, size, mtime, link string
}

// tvLine matches "MODE OWNER/GROUP SIZE DATE TIME NAME[ -> T| link to T]".
var tvLine = regexp.MustCompile(`^(\S{10}) ([^/ ]+)/(\S+) +(\S+) (\S+ \S+) (.*)$`)

// tarList runs GNU tar -tv (UTC, literal names) on archive and returns its
// entries by path (without a leading "./" or trailing "/").
func tarList(t *testing.T, archive string) map[string]tarTV {
	t.Helper()
	cmd := exec.Command("tar", "--quoting-style=literal", "-tvf", archive)
	cmd.Env = append(os.Environ(), "TZ=UTC", "LC_ALL=C.UTF-8")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tar -tv: %v", err)
	}
	got := map[string]tarTV{}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		m := tvLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("tar -tv line not understood: %q", line)
		}
		e := tarTV{mode: m[1], owner: m[2] + "/" + m[3], size: m[4], mtime: m[5]}
		name := m[6]
		switch m[1][0] {
		case 'l':
			name, e.link, _ = strings.Cut(name, " -> ")
		case 'h':
			name, e.link, _ = strings.Cut(name, " link to ")
		}
		name = strings.TrimSuffix(strings.TrimPrefix(name, "./"), "/")
		e.link = strings.TrimPrefix(e.link, "./")
		if name == "" || name == "." {
			continue
		}
		got[name] = e
	}
	return got
}

// TestInspect lists archives made by GNU tar, bsdtar and Go with
// tarmount ls --json over HTTP and compares every entry with GNU tar -tv
// of the same archive; checks ls -l, stat --json and get against the tree
// tar extracts; and checks that cat of a small file with a saved index
// fetches about one span, not the archive.
func TestInspect(t *testing.T) {
	for _, spec := range []tarbuild.Spec{
		{Tool: "gnutar", Format: "posix", Codec: "gzip"},
		{Tool: "bsdtar", Format: "pax", Codec: "none"},
		{Tool: "go", Format: "gnu", Codec: "zstd-multi"},
		{Tool: "gnutar", Format: "gnu", Codec: "lz4"},
	} {
		t.Run(spec.String(), func(t *testing.T) {
			t.Parallel()
			opts := corpus.TreeOptionsFor(spec)
			opts.Many = 300
			f := newFixture(t, opts, spec, "a"+spec.Ext())
			cache := filepath.Join(f.work, "cache")
			run := func(args ...string) []byte {
				t.Helper()
				cmd := exec.Command(binary, args...)
				var stderr bytes.Buffer
				cmd.Stderr = &stderr
				out, err := cmd.Output()
				if err != nil {
					t.Fatalf("tarmount %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
				}
				return out
			}

			// ls --json agrees with tar -tv, entry by entry.
			want := tarList(t, tarInput(t, f.archive, spec))
			out := run("ls", "--json", f.url, "--cache-dir", cache)
			got := map[string]lsEntry{}
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(nil, 1<<20)
			for sc.Scan() {
				var e lsEntry
				if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
					t.Fatalf("ls --json line %q: %v", sc.Text(), err)
				}
				if _, dup := got[e.Path]; dup {
					t.Errorf("ls --json lists %q twice", e.Path)
				}
				got[e.Path] = e
			}
			if len(got) != len(want) {
				t.Errorf("ls --json: got %d entries, want %d (tar -tv)", len(got), len(want))
			}
			errs := 0
			for p, w := range want {
				g, ok := got[p]
				if !ok {
					t.Errorf("ls --json: %q missing", p)
					errs++
					continue
				}
				owner, group := g.Uname, g.Gname
				if owner == "" {
					owner = fmt.Sprint(g.UID)
				}
				if group == "" {
					group = fmt.Sprint(g.GID)
				}
				owner += "/" + group
				size := fmt.Sprint(g.Size)
				if g.Type == "char" || g.Type == "block" {
					size = fmt.Sprintf("%d,%d", g.Devmajor, g.Devminor)
				}
				gv := tarTV{mode: testutil.ModeLetters(g.Type, g.Mode), owner: owner, size: size,
					mtime: time.Unix(0, g.MTimeNs).UTC().Format("2006-01-02 15:04"), link: g.Link}
				if gv != w {
					t.Errorf("%s: ls --json says %+v, tar -tv %+v", p, gv, w)
					errs++
				}
				if g.Type == "file" && g.Size > 0 && g.Offset == nil {
					t.Errorf("%s: no data offset", p)
				}
				if errs > 20 {
					t.Fatal("too many differences")
				}
			}

			// ls -l prints what tar -tv prints, for the same names.
			for _, p := range []string{corpus.PathHardLink, corpus.PathSymlinkRel, "hard/second.txt"} {
				line := strings.TrimSpace(string(run("ls", "-l", f.url, p, "--cache-dir", cache)))
				m := tvLine.FindStringSubmatch(line)
				w := want[p]
				if m == nil || m[1] != w.mode || m[2]+"/"+m[3] != w.owner || m[4] != w.size || m[5] != w.mtime {
					t.Errorf("ls -l %s: %q, want it as tar -tv prints %+v", p, line, w)
				}
			}

			// stat --json of one file.
			var st lsEntry
			if err := json.Unmarshal(run("stat", "--json", f.url, corpus.PathReadme, "--cache-dir", cache), &st); err != nil {
				t.Fatal(err)
			}
			if st.Path != corpus.PathReadme || st.Type != "file" || st.Size != got[corpus.PathReadme].Size {
				t.Errorf("stat --json: %+v, want %+v", st, got[corpus.PathReadme])
			}

			// get writes the subtree as tar -x does (modes, mtimes, data).
			ref := filepath.Join(f.work, "ref")
			tarbuild.Extract(t, f.archive, ref)
			dst := filepath.Join(f.work, "get")
			run("get", f.url, corpus.PathMany, corpus.PathReadme, "-C", dst, "--cache-dir", cache)
			treecmp.Compare(t, filepath.Join(ref, corpus.PathMany), filepath.Join(dst, corpus.PathMany),
				treecmp.Options{MaxErrors: 10, SkipOwner: true, SkipXattrs: true})
			a, _ := os.ReadFile(filepath.Join(ref, corpus.PathReadme))
			b, err := os.ReadFile(filepath.Join(dst, corpus.PathReadme))
			if err != nil || !bytes.Equal(a, b) {
				t.Errorf("get %s: %v, bytes equal %v", corpus.PathReadme, err, bytes.Equal(a, b))
			}

			// cat, with the saved index, of a small file deep in the
			// archive: its bytes, and about one span fetched.
			var small string
			var smallSize int64
			for p, e := range got {
				if strings.HasPrefix(p, corpus.PathMany+"/") && e.Type == "file" && e.Size > 0 && (small == "" || p > small) {
					small, smallSize = p, e.Size
				}
			}
			f.server.ResetStats()
			data := run("cat", f.url, small, "--cache-dir", cache, "--cache-disk", "0")
			wantData, _ := os.ReadFile(filepath.Join(ref, small))
			if !bytes.Equal(data, wantData) || int64(len(data)) != smallSize {
				t.Errorf("cat %s: got %d bytes, want the %d of tar -x", small, len(data), len(wantData))
			}
			st2, _ := os.Stat(f.archive)
			fetched := f.server.Stats().Bytes
			// At most one span (4 MiB of tar, which compresses to far
			// less here; a plain tar reads a block), and never a good
			// part of the archive.
			if limit := min(int64(4<<20)+64<<10, st2.Size()/4); fetched > limit {
				t.Errorf("cat %s fetched %d bytes of a %d-byte archive, want at most %d", small, fetched, st2.Size(), limit)
			}
			t.Logf("cat of %s (%d bytes) fetched %d of %d bytes", small, smallSize, fetched, st2.Size())

			// A missing path is a clear error.
			cmd := exec.Command(binary, "cat", f.url, "no/such/file", "--cache-dir", cache)
			if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "no/such/file") {
				t.Errorf("cat of a missing path: err %v, output %q; want an error naming it", err, out)
			}
		})
	}
}

// tarInput returns a file GNU tar -tv can read: archive itself, or for
// codecs GNU tar does not sniff, a decompressed copy.
func tarInput(t *testing.T, archive string, spec tarbuild.Spec) string {
	t.Helper()
	var dec []string
	switch {
	case strings.Contains(spec.Codec, "zstd"):
		dec = []string{"zstd", "-dc"}
	case strings.HasPrefix(spec.Codec, "lz4"):
		dec = []string{"lz4", "-dc"}
	default:
		return archive
	}
	out := filepath.Join(t.TempDir(), "plain.tar")
	cmd := exec.Command(dec[0], append(dec[1:], archive)...)
	fh, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	cmd.Stdout = fh
	if err := cmd.Run(); err != nil {
		t.Fatalf("%s: %v", strings.Join(dec, " "), err)
	}
	return out
}

// TestInspectGlobs: ls, stat, cat and get take shell-style globs (* and ?
// within one component), expanded in the order ls lists names; a name
// with a '*' of its own is still found as it is; a glob that matches
// nothing fails as a missing file does.
func TestInspectGlobs(t *testing.T) {
	work := t.TempDir()
	archive := filepath.Join(work, "a.tar.gz")
	body := func(n string) tarbuild.Member { return tarbuild.Member{Name: n, Body: "<" + n + ">"} }
	data := tarbuild.Tar(body("pkg/b.md"), body("pkg/a.md"), body("pkg/c.txt"), body("pkg/sub/d.md"), body("star*name"))
	if err := os.WriteFile(archive, tarbuild.Gzip(data), 0o644); err != nil {
		t.Fatal(err)
	}
	cache := []string{"--cache-dir", filepath.Join(work, "cache")}
	run := func(args ...string) ran { return runBinary(t, nil, false, append(args, cache...)...) }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cat", archive, "pkg/*.md"}, "<pkg/a.md><pkg/b.md>"},
		{[]string{"cat", archive, "pkg/?.txt", "pkg/*/*.md"}, "<pkg/c.txt><pkg/sub/d.md>"},
		{[]string{"cat", archive, "star*name"}, "<star*name>"},
		{[]string{"ls", archive, "pkg/*.md"}, "pkg/a.md\npkg/b.md\n"},
		{[]string{"ls", archive, "p*"}, "pkg/\npkg/a.md\npkg/b.md\npkg/c.txt\npkg/sub/\npkg/sub/d.md\n"},
	} {
		r := run(tc.args...)
		if r.err != nil || r.stdout != tc.want {
			t.Errorf("%q: got %q, %v, want %q\n%s", tc.args[:1], r.stdout, r.err, tc.want, r.stderr)
		}
	}
	r := run("stat", "--json", archive, "pkg/[ab].md")
	if r.err != nil || strings.Count(r.stdout, `"path":"pkg/`) != 2 {
		t.Errorf("stat --json pkg/[ab].md: got %q, %v, want two objects", r.stdout, r.err)
	}
	out := filepath.Join(work, "out")
	if r := run("get", archive, "pkg/*.md", "-C", out); r.err != nil {
		t.Fatalf("get: %v\n%s", r.err, r.stderr)
	}
	for _, n := range []string{"pkg/a.md", "pkg/b.md"} {
		if b, err := os.ReadFile(filepath.Join(out, n)); err != nil || string(b) != "<"+n+">" {
			t.Errorf("get: %s: got %q, %v", n, b, err)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "pkg", "c.txt")); err == nil {
		t.Errorf("get pkg/*.md wrote pkg/c.txt")
	}
	r = run("cat", archive, "nothing/*")
	if r.err == nil || !strings.Contains(r.stderr, "no member matches nothing/*") {
		t.Errorf("cat nothing/*: got %v, stderr %q; want a failure naming the pattern", r.err, r.stderr)
	}
}

// TestInspectLocalKeepsNoCopy: ls, stat and cat of a local stream-only
// archive (one zstd frame of many spans) keep its index in the cache and
// nothing else: ls and stat write no decoded copy, cat one in a temporary
// directory that is gone when it exits.
func TestInspectLocalKeepsNoCopy(t *testing.T) {
	needTools(t, "zstd")
	work := t.TempDir()
	body := strings.Repeat("stream only, many spans\n", 1<<16)
	plain, archive := filepath.Join(work, "a.tar"), filepath.Join(work, "a.tar.zst")
	if err := os.WriteFile(plain, tarbuild.Tar(tarbuild.Member{Name: "f", Body: body}), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := tarbuild.Compress(plain, archive, "zstd"); err != nil {
		t.Fatal(err)
	}
	cache, tmp := filepath.Join(work, "cache"), filepath.Join(work, "tmp")
	os.Mkdir(tmp, 0o755)
	t.Setenv("TMPDIR", tmp)
	for _, args := range [][]string{{"ls"}, {"stat"}, {"cat"}} {
		r := runBinary(t, nil, false, append(args, archive, "f", "--cache-dir", cache, "--span", "64KiB")...)
		if r.err != nil {
			t.Fatalf("%s: %v\n%s", args[0], r.err, r.stderr)
		}
		if args[0] == "cat" && r.stdout != body {
			t.Errorf("cat: got %d bytes, want the member's %d", len(r.stdout), len(body))
		}
		var kept []string
		filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && filepath.Base(filepath.Dir(p)) != "indexes" {
				kept = append(kept, p)
			}
			return nil
		})
		if len(kept) > 0 {
			t.Errorf("%s: the cache keeps %q, want only indexes", args[0], kept)
		}
		if ents, _ := os.ReadDir(tmp); len(ents) > 0 {
			t.Errorf("%s: left %s in TMPDIR", args[0], ents[0].Name())
		}
	}
}

// TestVersionFromBuildInfo: a tarmount built in a git checkout says its
// version, the commit and its date, and the Go version, from the build
// information the Go toolchain records (not "(devel)").
func TestVersionFromBuildInfo(t *testing.T) {
	needTools(t, "git")
	head, err := exec.Command("git", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Fatalf("not in a git checkout: %v", err)
	}
	bin := filepath.Join(t.TempDir(), "tarmount")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, "./cmd/tarmount")
	build.Dir = checkout(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("--version: %s", out)
	want := regexp.MustCompile(`^tarmount v\S+ \(commit ` + string(head[:12]) + `(, modified)?, \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\), go1\.\d+`)
	if !want.Match(out) || strings.Contains(string(out), "(devel)") {
		t.Errorf("--version: got %q, want the version, commit %.12s, its date and the Go version", out, head)
	}
}

// checkout returns the root of a git checkout of this tree, as the go
// command needs it to stamp the commit: the repository itself when its
// .git is a directory; else (a worktree or a submodule, whose .git is a
// file that the go command does not follow) a clone that shares its
// objects, at HEAD, with the files of the working tree copied over it.
func checkout(t *testing.T) string {
	t.Helper()
	git := func(dir string, args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", dir}, args...)...).Output()
		if err != nil {
			t.Fatalf("git %s: %v", strings.Join(args, " "), err)
		}
		return strings.TrimSpace(string(out))
	}
	top := git(".", "rev-parse", "--show-toplevel")
	if fi, err := os.Stat(filepath.Join(top, ".git")); err == nil && fi.IsDir() {
		return top
	}
	clone := filepath.Join(t.TempDir(), "src")
	git(".", "clone", "--quiet", "--shared", "--no-checkout", top, clone)
	git(clone, "checkout", "--quiet", "--detach", git(top, "rev-parse", "HEAD"))
	for _, name := range strings.Split(git(top, "ls-files", "--cached", "--others", "--exclude-standard"), "\n") {
		data, err := os.ReadFile(filepath.Join(top, name))
		if errors.Is(err, fs.ErrNotExist) {
			os.Remove(filepath.Join(clone, name)) // deleted in the working tree
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(filepath.Join(clone, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(clone, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return clone
}
