package tests

import (
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestGNUWarnings: what GNU tar 1.34 warns of when it extracts an archive
// (unknown pax keywords, leading prefixes removed from names and hard
// link targets, names with "..", time stamps before 1970 or in the
// future) tarmount says too, one line each, and
// nothing GNU tar does not: in a one-pass extraction, in ls from the
// saved index, and in a mount. GNU tar's words come from running it here.
func TestGNUWarnings(t *testing.T) {
	needFUSE(t)
	needTools(t, "tar")
	file := func(name string, pax ...string) tarbuild.Member {
		return tarbuild.Member{Name: name, Body: name + "\n", PAX: pax}
	}
	link := func(name, target string) tarbuild.Member {
		return tarbuild.Member{Name: name, Type: tarbuild.TypeLink, Link: target}
	}
	for _, tc := range []struct {
		name    string
		members []tarbuild.Member
	}{
		{"pax keywords", []tarbuild.Member{file("a", "GOLANG.pkg=tar", "comment=hi"), file("b", "hdrcharset=BINARY"),
			file("c", "LIBARCHIVE.creationtime=1", "SCHILY.fflags=x", "SCHILY.acl.access=user::rw-"), file("d", "GOLANG.pkg=again")}},
		{"leading prefixes", []tarbuild.Member{file("/abs"), file("//twice"), file("ok"), link("l1", "/ok"),
			link("l2", "x/../../ok"), link("l3", "../ok")}},
		{"dotdot names", []tarbuild.Member{file("ok"), file("../up"), file("a/../b"), file("c/..")}},
		{"time stamps", []tarbuild.Member{{Name: "future", Body: "f", Mtime: 15023750400}, {Name: "old", Body: "o", Mtime: -1 << 31},
			{Name: "also-future", Body: "f", Mtime: 13569465600}, file("now"),
			file("atime-only", "atime=15023750400"), file("atime-old", "atime=-5")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			plain := writeTar(t, filepath.Join(work, "a.tar"), tc.members...)
			gnuOut, _ := runIn(filepath.Join(work, "gnu"), "tar", "-xf", plain)
			want, _ := gnuWarnings(gnuOut)
			if len(want) == 0 {
				t.Fatalf("GNU tar warns of nothing:\n%s", gnuOut)
			}
			cache := filepath.Join(work, "cache")
			r := runBinary(t, nil, false, "extract", plain, filepath.Join(work, "x"), "--cache-dir", cache, "--quiet")
			checkWarnings(t, "extract", r.stderr, want)
			r = runBinary(t, nil, false, "ls", plain, "--cache-dir", cache)
			if strings.Contains(r.stderr, "msg=indexing") {
				t.Errorf("ls did not use the saved index:\n%s", r.stderr)
			}
			checkWarnings(t, "ls from the saved index", r.stderr, want)
			m := startMount(t, nil, t.TempDir(), plain, "--cache-dir", filepath.Join(work, "mcache"), "--wait-index")
			if err := m.waitReady(time.Minute); err != nil {
				t.Fatal(err)
			}
			checkWarnings(t, "mount", m.stderr.String(), want)
		})
	}
}

var (
	gnuKeyword = regexp.MustCompile("^tar: Ignoring unknown extended header keyword '(.*)'$")
	gnuPrefix  = regexp.MustCompile("^tar: Removing leading `(.*)' from (member names|hard link targets)$")
	gnuDotDot  = regexp.MustCompile("^tar: .*: Member name contains '..'$")
	gnuFuture  = regexp.MustCompile(`^tar: .*: time stamp .* is [0-9.]+ s in the future$`)
	gnuOld     = regexp.MustCompile("^tar: .*: implausibly old time stamp .*$")
)

// gnuWarnings returns GNU tar's warnings in tarmount's words, and the
// lines of out it does not know: a "Removing leading" line for a name
// with ".." goes with its "Member name contains '..'" line, which
// tarmount says as one skipped member; tarmount says each kind of time
// stamp once, with the number of members GNU tar names.
func gnuWarnings(out string) (ws, unknown []string) {
	dotdot, future, old := 0, 0, 0
	for l := range strings.SplitSeq(out, "\n") {
		switch {
		case l == "":
		case gnuKeyword.MatchString(l):
			ws = append(ws, "ignoring unknown extended header keyword `"+gnuKeyword.FindStringSubmatch(l)[1]+"'")
		case gnuPrefix.MatchString(l):
			m := gnuPrefix.FindStringSubmatch(l)
			if m[2] == "member names" && strings.Contains(m[1], "..") {
				continue
			}
			ws = append(ws, "removing leading `"+m[1]+"' from "+m[2])
		case gnuDotDot.MatchString(l):
			dotdot++
		case gnuFuture.MatchString(l):
			future++
		case gnuOld.MatchString(l):
			old++
		default:
			unknown = append(unknown, l)
		}
	}
	for _, c := range []struct {
		reason string
		n      int
	}{{"name contains ..", dotdot}, {"time stamp in the future", future}, {"implausibly old time stamp", old}} {
		if c.n > 0 {
			ws = append(ws, `reason="`+c.reason+`" count=`+strconv.Itoa(c.n)+" ")
		}
	}
	slices.Sort(ws)
	return slices.Compact(ws), unknown
}

// checkWarnings checks that stderr has a line for each of want, and no
// warning of a member beyond them.
func checkWarnings(t *testing.T, what, stderr string, want []string) {
	t.Helper()
	var notes []string
	for l := range strings.SplitSeq(stderr, "\n") {
		if strings.Contains(l, "level=WARN") && (strings.Contains(l, "archive members") || strings.Contains(l, "archive records")) {
			notes = append(notes, l)
		}
	}
	for _, w := range want {
		n := 0
		for _, l := range notes {
			if strings.Contains(l, w) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%s: %d lines say %q, want 1; its warnings:\n%s", what, n, w, strings.Join(notes, "\n"))
		}
	}
	if len(notes) != len(want) {
		t.Errorf("%s: got %d warnings of members, want %d (GNU tar's):\n%s\nwant %q", what, len(notes), len(want), strings.Join(notes, "\n"), want)
	}
}
