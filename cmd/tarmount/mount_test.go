package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOutsideMountpoint: a --materialize DIR is refused when it is the
// mountpoint or under it, through symbolic links and names not made yet,
// and accepted beside it (a sibling whose name starts alike included).
func TestOutsideMountpoint(t *testing.T) {
	work := t.TempDir()
	mnt := filepath.Join(work, "mnt")
	os.MkdirAll(filepath.Join(mnt, "sub"), 0o755)
	os.Mkdir(filepath.Join(work, "other"), 0o755)
	os.Symlink(mnt, filepath.Join(work, "link"))
	os.Symlink(filepath.Join(work, "other"), filepath.Join(work, "link-other"))
	cases := []struct {
		dir    string
		inside bool
	}{
		{mnt, true},
		{filepath.Join(mnt, "sub"), true},
		{filepath.Join(mnt, "new", "deeper"), true},
		{filepath.Join(work, "link"), true},
		{filepath.Join(work, "link", "new"), true},
		{filepath.Join(work, "other", "..", "mnt", "x"), true},
		{filepath.Join(work, "mnt2"), false},
		{filepath.Join(work, "mnt..x"), false},
		{filepath.Join(work, "other"), false},
		{filepath.Join(work, "link-other", "new"), false},
		{work, false},
	}
	for _, tc := range cases {
		err := outsideMountpoint(tc.dir, mnt)
		if got := err != nil; got != tc.inside {
			t.Errorf("%s: got refused %v (%v), want %v", tc.dir, got, err, tc.inside)
		}
	}
}
