package tests

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
	"golang.org/x/sys/unix"
)

// goTestdataCodecs are the forms each archive of Go's testdata is served
// in (tarbuild's codecs, made by their CLIs from the plain tar), and the
// CLI each needs.
var goTestdataCodecs = []struct{ codec, tool string }{
	{"none", ""}, {"gzip", "gzip"}, {"zstd", "zstd"}, {"lz4", "lz4"}, {"bzip2", "bzip2"}, {"xz", "xz"},
}

// goTestdataTools are the tools the tests of this file run: GNU tar and
// bsdtar for the expected trees, and the CLI of each codec.
func goTestdataTools() []string {
	tools := []string{"tar", "bsdtar"}
	for _, c := range goTestdataCodecs {
		if c.tool != "" {
			tools = append(tools, c.tool)
		}
	}
	return tools
}

// TestGoTarTestdata: every archive in Go's archive/tar testdata, in every
// codec, through `tarmount extract` and through a mount, gives the tree
// that GNU tar extracts; where GNU tar fails and bsdtar succeeds, bsdtar's;
// where both fail, tarmount fails too, with a non-zero exit and one line.
// The expectations come from running both tools here, on the plain tar.
func TestGoTarTestdata(t *testing.T) {
	needFUSE(t)
	needTools(t, goTestdataTools()...)
	src := filepath.Join(runtime.GOROOT(), "src", "archive", "tar", "testdata")
	ents, err := os.ReadDir(src)
	if err != nil {
		testutil.Missing(t, "Go's archive/tar testdata: %v", err)
	}
	n := 0
	for _, e := range ents {
		name := e.Name()
		if !strings.Contains(name, ".tar") {
			continue // small.txt, small2.txt: members of other tests
		}
		n++
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			plain := filepath.Join(work, "plain.tar")
			if err := os.WriteFile(plain, goTestdataTar(t, filepath.Join(src, name)), 0o644); err != nil {
				t.Fatal(err)
			}
			checkEveryCodec(t, work, plain, goTestdataRef(t, work, plain))
		})
	}
	if n < 40 {
		t.Fatalf("found %d archives in %s, want the 40 or more of Go's testdata", n, src)
	}
}

// TestTimesBeyondNanoseconds: files dated past 2262, where int64
// nanoseconds end (ext4 keeps times up to 2446), and before 1970, archived
// by GNU tar (gnu and posix formats) and bsdtar (pax), in every codec,
// extract and mount with the times GNU tar gives them.
func TestTimesBeyondNanoseconds(t *testing.T) {
	needFUSE(t)
	needTools(t, goTestdataTools()...)
	src := t.TempDir()
	times := map[string]time.Time{
		"y2400":   time.Date(2400, 1, 1, 0, 0, 0, 5e8, time.UTC),
		"y2446":   time.Date(2446, 1, 1, 0, 0, 0, 123456789, time.UTC),
		"d/y2263": time.Date(2263, 1, 1, 0, 0, 1, 0, time.UTC),
		"y1901":   time.Unix(-1<<31, 0), // base-256 in the gnu format
		"y2001":   time.Date(2001, 9, 9, 1, 46, 40, 0, time.UTC),
	}
	for name, when := range times {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(name+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		// Not os.Chtimes: it goes through int64 nanoseconds.
		ts := unix.Timespec{Sec: when.Unix(), Nsec: int64(when.Nanosecond())}
		if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, 0); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(p); err != nil || !fi.ModTime().Equal(when) {
			t.Fatalf("the test's filesystem does not keep %s's time %v: %v, %v", name, when, fi.ModTime(), err)
		}
	}
	for _, f := range []struct {
		name string
		argv []string
	}{
		{"gnu", []string{"tar", "--format=gnu", "-cf"}},
		{"posix", []string{"tar", "--format=posix", "-cf"}},
		{"bsdtar-pax", []string{"bsdtar", "--format=pax", "-cf"}},
	} {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			plain := filepath.Join(work, "plain.tar")
			if out, err := runIn(src, append(f.argv, plain, ".")...); err != nil {
				t.Fatalf("%s: %v\n%s", strings.Join(f.argv, " "), err, out)
			}
			ref := goTestdataRef(t, work, plain)
			if ref.dir == "" {
				t.Fatal("GNU tar and bsdtar both fail to extract it")
			}
			fi, err := os.Stat(filepath.Join(ref.dir, "y2446"))
			if err != nil || fi.ModTime().Year() != 2446 {
				t.Fatalf("%s's y2446: %v, %v; want a time in 2446", ref.by, fi, err)
			}
			checkEveryCodec(t, work, plain, ref)
		})
	}
}

// TestGNUHardLinkTargets: hard link targets lose what leads up to their
// last ".." and their leading slashes, as GNU tar takes them, and link to
// the member left; the tree is GNU tar's, in every codec.
func TestGNUHardLinkTargets(t *testing.T) {
	needFUSE(t)
	needTools(t, goTestdataTools()...)
	link := func(name, target string) tarbuild.Member {
		return tarbuild.Member{Name: name, Type: tarbuild.TypeLink, Link: target}
	}
	work := t.TempDir()
	plain := filepath.Join(work, "plain.tar")
	data := tarbuild.Tar(tarbuild.Member{Name: "ok.txt", Body: "ok\n"}, tarbuild.Member{Name: "d/f.txt", Body: "f\n"},
		link("up", "../ok.txt"), link("updown", "a/../../ok.txt"), link("abs", "/d/f.txt"),
		link("inner", "d/../ok.txt"), link("dot", "./ok.txt"), link("d/deep", "x/y/../../../d/f.txt"))
	if err := os.WriteFile(plain, data, 0o644); err != nil {
		t.Fatal(err)
	}
	ref := goTestdataRef(t, work, plain)
	if ref.by != "GNU tar" {
		t.Fatalf("GNU tar fails on it (the tree to expect comes from %q)", ref.by)
	}
	fi, err := os.Stat(filepath.Join(ref.dir, "updown"))
	if err != nil || fi.Sys().(*syscall.Stat_t).Nlink != 5 {
		t.Fatalf("GNU tar's updown: %v, %v; want one of the five names of ok.txt", fi, err)
	}
	checkEveryCodec(t, work, plain, ref)
}

// goTestdataTar returns the plain tar of a testdata file: decoded from
// base64 (.base64) or bzip2 (.bz2) as the file's name says.
func goTestdataTar(t *testing.T, path string) []byte {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".base64") {
		if data, err = base64.StdEncoding.DecodeString(string(data)); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
	}
	if strings.HasSuffix(path, ".bz2") {
		cmd := exec.Command("bzip2", "-dc")
		cmd.Stdin = bytes.NewReader(data)
		if data, err = cmd.Output(); err != nil {
			t.Fatalf("bzip2 -dc %s: %v", path, err)
		}
	}
	return data
}

// tarRef is what GNU tar and bsdtar make of an archive: the tree to
// expect (dir, "" when both fail), which tool made it, and, when GNU tar
// made it, its warnings in tarmount's words (gnuWarnings).
type tarRef struct {
	dir, by  string
	warnings []string
	// clamped: the filesystem under dir clamped times of the archive
	// that it cannot hold, which the mount says as they are.
	clamped bool
}

// goTestdataRef extracts plain with GNU tar and with bsdtar, as root with
// owners, modes and xattrs, and returns what to expect of tarmount.
func goTestdataRef(t *testing.T, work, plain string) tarRef {
	t.Helper()
	gnu := filepath.Join(work, "gnu")
	bsd := filepath.Join(work, "bsd")
	gnuOut, gnuErr := runIn(gnu, "tar", "-x", "--xattrs", "--xattrs-include=*", "--same-owner", "-p", "--numeric-owner",
		"--delay-directory-restore", "-f", plain)
	bsdOut, bsdErr := runIn(bsd, "bsdtar", "-x", "--xattrs", "-p", "--numeric-owner", "-f", plain)
	switch {
	case gnuErr == nil:
		ws, unknown := gnuWarnings(gnuOut)
		if len(unknown) > 0 {
			t.Errorf("GNU tar says what this test does not know how to expect of tarmount: %q", unknown)
		}
		return tarRef{dir: gnu, by: "GNU tar", warnings: ws}
	case bsdErr == nil:
		t.Logf("GNU tar fails (%v: %s); bsdtar succeeds", gnuErr, gnuOut)
		return tarRef{dir: bsd, by: "bsdtar"}
	}
	t.Logf("GNU tar and bsdtar fail: %s; %s", gnuOut, bsdOut)
	return tarRef{}
}

// runIn runs a command in a new directory dir and returns its output.
func runIn(dir string, argv ...string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// checkEveryCodec runs checkGoTestdata on plain in every codec, each
// compressed into work.
func checkEveryCodec(t *testing.T, work, plain string, ref tarRef) {
	for _, c := range goTestdataCodecs {
		ext := tarbuild.Spec{Codec: c.codec}.Ext()
		t.Run(strings.TrimPrefix(ext, "."), func(t *testing.T) {
			obj := plain
			if c.tool != "" {
				obj = filepath.Join(work, "a"+ext)
				if err := tarbuild.Compress(plain, obj, c.codec); err != nil {
					t.Fatal(err)
				}
			}
			checkGoTestdata(t, plain, obj, ref)
		})
	}
}

// checkGoTestdata extracts obj (plain in its codec), inspects it with ls,
// stat and cat, and mounts it. With a ref, the trees are ref's, and each
// command says GNU tar's warnings when GNU tar made ref. Without one,
// each fails with one line, and the extraction leaves nothing
// half-written under a real name.
func checkGoTestdata(t *testing.T, plain, obj string, ref tarRef) {
	t.Helper()
	work := t.TempDir()
	cache := filepath.Join(work, "cache")
	parent := filepath.Join(work, "out")
	if err := os.Mkdir(parent, 0o755); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(parent, "x")
	cmd := exec.Command(binary, "extract", obj, dest, "--cache-dir", cache, "--quiet")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	r := ran{stderr: stderr.String(), err: err}
	// Directories the archive does not list and symlinks get the time
	// of extraction from GNU tar; the root is the tool's.
	opts := treecmp.Options{MaxErrors: 20, SkipRoot: true, SkipDirMTime: true, SkipSymlinkMTime: true}
	// Where both fail, tarmount's extraction fails; when it fails
	// because the archive is damaged (not because it leaves members
	// out, as both do), ls and the mount fail too.
	damaged := false
	if ref.dir == "" {
		checkFailure(t, "extract", r, "")
		checkNothingHalfWritten(t, plain, dest)
		damaged = !strings.Contains(r.stderr, "archive members not extracted")
	} else {
		// Where GNU tar extracts with a failure status (it skipped a
		// damaged header) and bsdtar without one, tarmount may fail as
		// GNU tar does, for the members it left out, once it has
		// written bsdtar's tree.
		leftOut := ref.by == "bsdtar" && strings.Contains(r.stderr, "archive members not extracted")
		if err != nil && !leftOut {
			t.Fatalf("tarmount extract failed where %s succeeds: %v\n%s", ref.by, err, r.stderr)
		}
		treecmp.Compare(t, ref.dir, dest, opts)
	}
	// Nothing is written beside DIR, as tar -x writes nothing beside
	// its target.
	if ents, err := os.ReadDir(parent); err != nil || len(ents) > 1 || len(ents) == 1 && ents[0].Name() != "x" {
		t.Errorf("beside DIR after the extraction: %v, %v; want DIR alone", ents, err)
	}
	checkSaid(t, "extract", r.stderr, ref)
	if !checkInspection(t, obj, cache, ref, damaged) {
		return
	}

	// The mount: ready only once its pass has read the whole archive, so
	// that a damaged one fails at start.
	mnt := t.TempDir()
	m := startMount(t, nil, mnt, obj, "--cache-dir", filepath.Join(work, "mcache"), "--wait-index")
	err = m.waitReady(time.Minute)
	if damaged {
		if err == nil {
			t.Fatalf("the mount is ready where GNU tar and bsdtar fail:\n%s", m.stderr)
		}
		<-m.exited
		checkFailure(t, "mount", ran{stderr: m.stderr.String(), err: m.err}, "")
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if ref.dir == "" {
		return // no tree to compare: both tools fail
	}
	checkSaid(t, "mount", m.stderr.String(), ref)
	opts.SkipMTime = ref.clamped
	// Files over 1 GiB (two sparse files of 60 GB) are compared in DIR
	// only: the mount answers no SEEK_DATA, so their holes would be read.
	opts.Ignore = func(p string) bool {
		fi, err := os.Lstat(filepath.Join(ref.dir, p))
		return err == nil && fi.Mode().IsRegular() && fi.Size() > 1<<30
	}
	treecmp.Compare(t, ref.dir, mnt, opts)
}

// checkSaid checks that a command said GNU tar's warnings, one line
// each, when GNU tar made ref.
func checkSaid(t *testing.T, what, stderr string, ref tarRef) {
	t.Helper()
	if ref.by == "GNU tar" {
		checkWarnings(t, what, stderr, ref.warnings)
	}
}

// checkInspection runs ls, then stat of its first regular file and cat
// of its first of at most 1 MiB, on obj with the index the extraction
// saved in cache: each says GNU tar's warnings, and cat gives the file of
// ref's tree. On a damaged archive, ls fails with one line, and
// checkInspection returns false.
func checkInspection(t *testing.T, obj, cache string, ref tarRef, damaged bool) bool {
	t.Helper()
	r := runBinary(t, nil, false, "ls", obj, "--json", "--cache-dir", cache)
	if damaged {
		checkFailure(t, "ls", r, "")
		return false
	}
	if r.err != nil {
		t.Fatalf("ls: %v\n%s", r.err, r.stderr)
	}
	checkSaid(t, "ls", r.stderr, ref)
	stated, catted := false, false
	for l := range strings.SplitSeq(r.stdout, "\n") {
		if l == "" {
			continue
		}
		var e struct {
			Path, Type string
			Size       int64
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil {
			t.Fatalf("ls --json: %q: %v", l, err)
		}
		if e.Type != "file" || strings.ContainsRune(e.Path, utf8.RuneError) {
			continue // JSON cannot carry a name that is not UTF-8
		}
		if !stated {
			stated = true
			r := runBinary(t, nil, false, "stat", obj, e.Path, "--cache-dir", cache)
			if r.err != nil {
				t.Errorf("stat %s: %v\n%s", e.Path, r.err, r.stderr)
			}
			checkSaid(t, "stat", r.stderr, ref)
		}
		if !catted && e.Size <= 1<<20 {
			catted = true
			r := runBinary(t, nil, false, "cat", obj, e.Path, "--cache-dir", cache)
			if r.err != nil {
				t.Errorf("cat %s: %v\n%s", e.Path, r.err, r.stderr)
			}
			checkSaid(t, "cat", r.stderr, ref)
			if want, err := os.ReadFile(filepath.Join(ref.dir, e.Path)); ref.dir != "" && (err != nil || r.stdout != string(want)) {
				t.Errorf("cat %s: got %d bytes, want the %d of %s's file (%v)", e.Path, len(r.stdout), len(want), ref.by, err)
			}
		}
		if stated && catted {
			break
		}
	}
	return true
}

// checkNothingHalfWritten checks that each regular file in dir, after a
// failed extraction, is a member of plain whole: the size and bytes that
// Go's archive/tar reads of it before it stops. The job's state
// directory is left out.
func checkNothingHalfWritten(t *testing.T, plain, dir string) {
	t.Helper()
	f, err := os.Open(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	whole := map[string]string{} // name -> sha256 of the member's bytes
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			break
		}
		if h.Typeflag != tar.TypeReg || h.Size > 64<<20 {
			continue // a larger member is never whole in a failed run here
		}
		sum := sha256.New()
		if n, err := io.Copy(sum, tr); err != nil || n != h.Size {
			break
		}
		whole[path.Clean(strings.TrimLeft(h.Name, "/"))] = string(sum.Sum(nil))
	}
	var names []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == ".tarmount-partial" {
			return filepath.SkipDir
		}
		names = append(names, rel)
		if !d.Type().IsRegular() {
			return nil
		}
		want, ok := whole[rel]
		var b []byte
		if ok {
			b, err = os.ReadFile(p)
		}
		if sum := sha256.Sum256(b); !ok || err != nil || want != string(sum[:]) {
			t.Errorf("a failed extraction left %s, not a whole member of the archive", rel)
		}
		return nil
	})
	t.Logf("DIR after the failed extraction: %q", names)
}
