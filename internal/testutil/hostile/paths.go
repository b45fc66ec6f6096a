package hostile

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// Outside stands, in the names, links and bodies of a PathCase's members,
// for the absolute path of the sentinel directory beside DIR (Archive
// replaces it), so that an escape by an absolute name would hit the test's
// own sentinel and nothing else on the machine.
const Outside = "@OUTSIDE@"

// Sentinel names: a directory beside DIR and a file in it, which no case
// may create, change or link to.
const (
	SentinelDir  = "outside"
	SentinelFile = "victim"
	SentinelBody = "keep me"
)

// PathCase is an archive whose members try to write outside DIR when it
// is extracted into DIR, with SentinelDir beside DIR (so "../outside" from
// DIR is the sentinel).
type PathCase struct {
	Name    string
	Members []tarbuild.Member
	// Tree is what DIR holds afterwards, every entry (DescribeTree),
	// whoever extracts.
	Tree map[string]string
	// Unprivileged replaces entries of Tree when the extraction runs
	// without root ("" removes the entry).
	Unprivileged map[string]string
	// Notes are what the job reports it refused or could not do, from
	// the index alone (every mode): a substring of a line each.
	Notes []string
	// ScreenNotes are reported too when the job sees the members as
	// stored (a one-pass extraction).
	ScreenNotes []string
	// UnprivilegedNotes are reported too without root.
	UnprivilegedNotes []string
	// Skips are the reasons the index gives for members it left out or
	// renamed, as tar -x warns of them (index.Note), logged by every
	// command that opens the archive.
	Skips []string
}

// Archive returns the archive of c, uncompressed, with Outside replaced
// by outside.
func (c PathCase) Archive(outside string) []byte {
	ms := slices.Clone(c.Members)
	for i := range ms {
		m := &ms[i]
		m.Name = strings.ReplaceAll(m.Name, Outside, outside)
		m.Link = strings.ReplaceAll(m.Link, Outside, outside)
	}
	return tarbuild.Tar(ms...)
}

// WantTree returns Tree, adjusted for an extraction without root when
// privileged is false.
func (c PathCase) WantTree(privileged bool) map[string]string {
	want := map[string]string{}
	for k, v := range c.Tree {
		want[k] = v
	}
	if !privileged {
		for k, v := range c.Unprivileged {
			if v == "" {
				delete(want, k)
			} else {
				want[k] = v
			}
		}
	}
	return want
}

func file(name, body string) tarbuild.Member { return tarbuild.Member{Name: name, Body: body} }
func dir(name string) tarbuild.Member        { return tarbuild.Member{Name: name, Type: tarbuild.TypeDir} }
func symlink(name, target string) tarbuild.Member {
	return tarbuild.Member{Name: name, Type: tarbuild.TypeSymlink, Link: target}
}
func hardlink(name, target string) tarbuild.Member {
	return tarbuild.Member{Name: name, Type: tarbuild.TypeLink, Link: target}
}

// ok is a harmless member that every case ends with: the extraction goes
// on past what it refused.
var ok = file("ok", "fine")

const okTree = "file:fine"

// PathCases returns the malicious-path cases.
func PathCases() []PathCase {
	const outsideNote = "symlinks pointing outside DIR"
	return []PathCase{
		{
			Name:    "dotdot leading",
			Members: []tarbuild.Member{file("../escaped", "x"), dir("../outside/"), file("../outside/new", "x"), ok},
			Tree:    map[string]string{"ok": okTree},
			Skips:   []string{"name contains .."},
		},
		{
			Name:    "dotdot middle",
			Members: []tarbuild.Member{file("a/../../escaped", "x"), file("a/../b", "inside but refused"), ok},
			Tree:    map[string]string{"ok": okTree},
			Skips:   []string{"name contains .."},
		},
		{
			Name:    "dotdot trailing",
			Members: []tarbuild.Member{dir("a/.."), file("a/b/..", "x"), dir("c/../"), ok},
			Tree:    map[string]string{"ok": okTree},
			Skips:   []string{"name contains .."},
		},
		{
			Name: "absolute names",
			Members: []tarbuild.Member{file("/abs/file", "absolute"), file("//twice/file", "twice"), file("/../x", "x"),
				file(Outside+"/victim", "rooted in DIR"), ok},
			Tree: map[string]string{"abs": "dir", "abs/file": "file:absolute", "twice": "dir", "twice/file": "file:twice",
				// The sentinel's absolute path, made relative: under DIR.
				"@ABS@": "dir", "@ABS@/victim": "file:rooted in DIR", "ok": okTree},
			Skips: []string{"removing leading `/' from member names", "name contains .."},
		},
		{
			Name: "symlink chain",
			Members: []tarbuild.Member{symlink("d/a", "b"), symlink("d/b", "../../outside"), file("d/a/x", "through a and b"),
				file("d/b/victim", "through b"), ok},
			Tree:  map[string]string{"d": "dir", "d/a": "symlink:b", "d/b": "symlink:../../outside", "ok": okTree},
			Notes: []string{outsideNote + " (made as they are, never followed while writing): 1"},
			Skips: []string{"a parent is not a directory"},
		},
		{
			Name: "absolute symlink",
			Members: []tarbuild.Member{symlink("abs", Outside), file("abs/victim", "through abs"), file("abs/new", "x"),
				symlink("absfile", Outside+"/victim"), ok},
			Tree:  map[string]string{"abs": "symlink:" + Outside, "absfile": "symlink:" + Outside + "/victim", "ok": okTree},
			Notes: []string{outsideNote + " (made as they are, never followed while writing): 2"},
			Skips: []string{"a parent is not a directory"},
		},
		{
			Name:    "symlink replaced by a directory",
			Members: []tarbuild.Member{symlink("s", "../outside"), dir("s/"), file("s/victim", "in a real directory"), ok},
			Tree:    map[string]string{"s": "dir", "s/victim": "file:in a real directory", "ok": okTree},
		},
		{
			Name: "symlink replaced by a file",
			Members: []tarbuild.Member{symlink("f", "../outside/victim"), file("f", "replaces the symlink, not its target"),
				symlink("g", Outside+"/victim"), file("g", "same"), ok},
			Tree: map[string]string{"f": "file:replaces the symlink, not its target", "g": "file:same", "ok": okTree},
		},
		{
			Name:    "empty directory replaced by a symlink",
			Members: []tarbuild.Member{dir("e/"), symlink("e", "../outside"), file("e/victim", "through e"), ok},
			Tree:    map[string]string{"e": "symlink:../outside", "ok": okTree},
			Notes:   []string{outsideNote},
			Skips:   []string{"a parent is not a directory"},
		},
		{
			Name: "directory with members replaced by a symlink",
			Members: []tarbuild.Member{dir("d/"), file("d/f", "kept"), symlink("d", "../outside"),
				file("d/victim", "in the real directory"), ok},
			Tree:  map[string]string{"d": "dir", "d/f": "file:kept", "d/victim": "file:in the real directory", "ok": okTree},
			Skips: []string{"non-directory member over a non-empty directory"},
		},
		{
			Name: "hard links out",
			Members: []tarbuild.Member{hardlink("dotdot", "../outside/victim"), hardlink("passwd", "/etc/passwd"),
				hardlink("abs", Outside+"/victim"), file("abs", "a new file, not the victim"),
				symlink("sl", "../outside"), hardlink("through", "sl/victim"), ok},
			Tree:  map[string]string{"abs": "file:a new file, not the victim", "sl": "symlink:../outside", "ok": okTree},
			Notes: []string{outsideNote},
			Skips: []string{"removing leading `../' from hard link targets", "removing leading `/' from hard link targets",
				"hard link to a missing member"},
		},
		{
			Name: "hard link to a symlink pointing outside",
			Members: []tarbuild.Member{symlink("sd", "../outside"), hardlink("hd", "sd"), file("hd/victim", "through the link"),
				symlink("sv", "../outside/victim"), hardlink("hv", "sv"), file("hv", "replaces the link"), ok},
			Tree: map[string]string{"sd": "symlink:../outside", "hd": "symlink:../outside",
				"sv": "symlink:../outside/victim", "hv": "file:replaces the link", "ok": okTree},
			Notes: []string{outsideNote + " (made as they are, never followed while writing): 2"},
			Skips: []string{"a parent is not a directory"},
		},
		{
			Name: "file then a directory of the same name",
			Members: []tarbuild.Member{file("f", "first a file"), dir("f/"), file("f/g", "then a directory"),
				file("h", "a file"), file("h/g", "under the file"), ok},
			Tree:  map[string]string{"f": "dir", "f/g": "file:then a directory", "h": "file:a file", "ok": okTree},
			Skips: []string{"a parent is not a directory"},
		},
		{
			Name: "reserved state directory",
			Members: []tarbuild.Member{file(".tarmount-partial/journal", "0\n"), dir("./.tarmount-partial/tmp/"),
				file("/.tarmount-partial/tmp/x", "x"), file("sub/.tarmount-partial", "allowed below the top"), ok},
			Tree:        map[string]string{"sub": "dir", "sub/.tarmount-partial": "file:allowed below the top", "ok": okTree},
			Notes:       []string{"names that are not one path component or are reserved (refused): 1"},
			ScreenNotes: []string{"members named .tarmount-partial (reserved, refused): 3"},
		},
		{
			Name: "component longer than 255 bytes",
			Members: []tarbuild.Member{file(strings.Repeat("n", 256), "x"), file(strings.Repeat("d", 300)+"/f", "x"),
				symlink(strings.Repeat("s", 256), "ok"), ok},
			Tree:  map[string]string{"ok": okTree},
			Notes: []string{"names that are not one path component or are reserved (refused): 3"},
		},
		{
			Name:    "dot and empty components",
			Members: []tarbuild.Member{file("./a/./b//c", "normalized"), dir("./"), file(".//d", "d"), ok},
			Tree:    map[string]string{"a": "dir", "a/b": "dir", "a/b/c": "file:normalized", "d": "file:d", "ok": okTree},
		},
		{
			Name: "devices, fifos and setuid",
			Members: []tarbuild.Member{{Name: "null", Type: tarbuild.TypeChar, Devmajor: 1, Devminor: 3}, {Name: "loop", Type: tarbuild.TypeBlock, Devmajor: 7},
				{Name: "fifo", Type: tarbuild.TypeFIFO}, {Name: "suid", Body: "#!/bin/sh\n", Mode: 0o4755}, ok},
			Tree: map[string]string{"null": "char:1,3", "loop": "block:7,0", "fifo": "fifo", "suid": "file:#!/bin/sh\n mode 4755",
				"ok": okTree},
			Unprivileged:      map[string]string{"null": "", "loop": "", "suid": "file:#!/bin/sh\n mode 755"},
			UnprivilegedNotes: []string{"devices skipped (need root): 2"},
		},
	}
}

// ReplaceAbs returns want with "@ABS@" in its keys replaced by the
// sentinel directory's absolute path made relative (as an absolute member
// name is extracted), and Outside in its values by outside.
func ReplaceAbs(want map[string]string, outside string) map[string]string {
	rel := strings.TrimLeft(outside, "/")
	out := map[string]string{}
	for k, v := range want {
		if strings.HasPrefix(k, "@ABS@") {
			// Every directory on the way is made too.
			parts := strings.Split(rel, "/")
			for i := 1; i < len(parts); i++ {
				out[strings.Join(parts[:i], "/")] = "dir"
			}
			k = rel + strings.TrimPrefix(k, "@ABS@")
		}
		out[k] = strings.ReplaceAll(v, Outside, outside)
	}
	return out
}

// DescribeTree lists every entry under dir without following symlinks:
// slash-separated relative path -> "dir", "file:CONTENT" (with " mode
// NNN" when the mode is not 0644), "symlink:TARGET", "fifo",
// "char:MAJ,MIN", "block:MAJ,MIN" or "socket".
func DescribeTree(t testing.TB, dir string) map[string]string {
	t.Helper()
	got := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		sys := st.Sys().(*syscall.Stat_t)
		switch m := st.Mode(); {
		case m.IsDir():
			got[rel] = "dir"
		case m.IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := "file:" + string(b)
			if perm := sys.Mode & 0o7777; perm != 0o644 {
				s += fmt.Sprintf(" mode %o", perm)
			}
			got[rel] = s
		case m&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			got[rel] = "symlink:" + target
		case m&fs.ModeNamedPipe != 0:
			got[rel] = "fifo"
		case m&fs.ModeDevice != 0:
			kind := "block"
			if m&fs.ModeCharDevice != 0 {
				kind = "char"
			}
			got[rel] = fmt.Sprintf("%s:%d,%d", kind, unixMajor(sys.Rdev), unixMinor(sys.Rdev))
		default:
			got[rel] = "other " + m.String()
		}
		return nil
	})
	if err != nil {
		t.Fatalf("describe %s: %v", dir, err)
	}
	return got
}

func unixMajor(dev uint64) uint64 { return (dev>>8)&0xfff | (dev>>32)&^0xfff }
func unixMinor(dev uint64) uint64 { return dev&0xff | (dev>>12)&^0xff }

// DiffTrees returns one line per difference of got from want, sorted.
func DiffTrees(got, want map[string]string) []string {
	var out []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			out = append(out, fmt.Sprintf("%s: missing, want %q", k, w))
		} else if g != w {
			out = append(out, fmt.Sprintf("%s: got %q, want %q", k, g, w))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: got %q, want nothing", k, g))
		}
	}
	sort.Strings(out)
	return out
}

// Snapshot describes everything under root but skip (relative names at
// the top of root): type, mode, owner, size, link count, times (mtime and
// ctime), link target and content digest, so that any change made to an
// entry, even through a hard link or a chmod, shows.
func Snapshot(t testing.TB, root string, skip ...string) map[string]string {
	t.Helper()
	snap := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if slices.Contains(skip, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		sys := st.Sys().(*syscall.Stat_t)
		s := fmt.Sprintf("%v uid=%d gid=%d size=%d nlink=%d mtime=%d.%09d", st.Mode(), sys.Uid, sys.Gid, st.Size(),
			sys.Nlink, sys.Mtim.Sec, sys.Mtim.Nsec)
		if rel != "." {
			// The root gets DIR and its marker: its own times change.
			s += fmt.Sprintf(" ctime=%d.%09d", sys.Ctim.Sec, sys.Ctim.Nsec)
		} else {
			s = st.Mode().String()
		}
		switch {
		case st.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			h := sha256.Sum256(b)
			s += " sha256=" + hex.EncodeToString(h[:8])
		case st.Mode()&fs.ModeSymlink != 0:
			target, _ := os.Readlink(p)
			s += " -> " + target
		}
		snap[rel] = s
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", root, err)
	}
	return snap
}

// MakeSentinel makes SentinelDir with SentinelFile in parent and returns
// the directory's path.
func MakeSentinel(t testing.TB, parent string) string {
	t.Helper()
	d := filepath.Join(parent, SentinelDir)
	if err := os.Mkdir(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, SentinelFile), []byte(SentinelBody), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// CheckNotes checks that every want is a substring of some line of got.
func CheckNotes(t testing.TB, what string, got []string, want ...string) {
	t.Helper()
	for _, w := range want {
		found := false
		for _, g := range got {
			if strings.Contains(g, w) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("%s do not report %q; got:\n%s", what, w, strings.Join(got, "\n"))
		}
	}
}
