package materialize

import (
	"archive/tar"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

func TestCreatePerm(t *testing.T) {
	root := metaOpts{chown: true, umask: 0o022}
	user := metaOpts{chown: false, umask: 0o022}
	tests := []struct {
		name      string
		m         metaOpts
		mode      uint32
		plain     bool
		wantPerm  uint32
		wantExact bool
	}{
		{"file", root, 0o644, true, 0o644, true},
		{"executable", root, 0o755, true, 0o755, true},
		{"not plain", root, 0o644, false, 0o600, false},
		{"setuid", root, 0o4755, true, 0o600, false},
		{"setgid", root, 0o2755, true, 0o600, false},
		{"sticky", root, 0o1644, true, 0o600, false},
		{"owner cannot write", root, 0o444, true, 0o600, false},
		{"umask takes bits", root, 0o666, true, 0o600, false},
		{"setuid dropped without root", user, 0o4755, true, 0o755, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			perm, mk := tt.m.createPerm(tt.mode, tt.plain)
			if perm != tt.wantPerm || mk.ok != tt.wantExact {
				t.Errorf("got %#o, exact %v; want %#o, exact %v", perm, mk.ok, tt.wantPerm, tt.wantExact)
			}
			if mk.ok && mk.mode != tt.m.modeOf(tt.mode) {
				t.Errorf("made mode %#o, want %#o", mk.mode, tt.m.modeOf(tt.mode))
			}
		})
	}
}

func TestPlainDir(t *testing.T) {
	dir := t.TempDir()
	open := func() int {
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		return fd
	}
	if !plainDir(open()) {
		testutil.Missing(t, "the test directory is not plain (setgid or a default ACL)")
	}
	if err := os.Chmod(dir, 0o755|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	if plainDir(open()) {
		t.Error("a setgid directory is plain, want not")
	}
}

// TestLinkFd names an unnamed file both ways, and reports EEXIST as it is.
func TestLinkFd(t *testing.T) {
	dir := t.TempDir()
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(dfd)
	fd, err := unix.Openat(dfd, ".", unix.O_WRONLY|unix.O_TMPFILE, 0o644)
	if err != nil {
		testutil.Missing(t, "no O_TMPFILE here: %v", err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte("data")); err != nil {
		t.Fatal(err)
	}
	if err := linkFd(fd, dfd, "a"); err != nil {
		t.Fatal(err)
	}
	if err := linkFdProc(fd, dfd, "b"); err != nil {
		t.Fatal(err)
	}
	if err := linkFd(fd, dfd, "a"); err != unix.EEXIST {
		t.Errorf("linking over a name: got %v, want EEXIST", err)
	}
	for _, n := range []string{"a", "b"} {
		if b, err := os.ReadFile(filepath.Join(dir, n)); err != nil || string(b) != "data" {
			t.Errorf("%s: got %q, %v; want %q", n, b, err, "data")
		}
	}
}

// TestSetgidDir extracts into a setgid DIR, where new files get DIR's
// group: owners must still be the archive's, though creating a file
// already gives it the job's user.
func TestSetgidDir(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "owners need root")
	}
	work := t.TempDir()
	archive := filepath.Join(work, "a.tar")
	writeTar(t, archive, []tarbuild.Entry{
		{Name: "d/", Type: tar.TypeDir},
		{Name: "d/f", Body: []byte("f")},
		{Name: "g", Body: []byte("g"), Uid: 7, Gid: 8},
	}, false)
	for _, cold := range []bool{false, true} {
		out := filepath.Join(work, map[bool]string{false: "indexed", true: "cold"}[cold])
		if err := os.Mkdir(out, 0o775); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(out, 0, 4242); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(out, 0o775|os.ModeSetgid); err != nil {
			t.Fatal(err)
		}
		if _, err := extract(t, archive, out, cold, Options{}); err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string][2]uint32{"d": {0, 0}, "d/f": {0, 0}, "g": {7, 8}} {
			fi, err := os.Lstat(filepath.Join(out, p))
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if got := [2]uint32{st.Uid, st.Gid}; got != want {
				t.Errorf("cold=%v %s: owner %v, want %v", cold, p, got, want)
			}
		}
	}
}

// TestNoTmpfile extracts as on a filesystem without O_TMPFILE: files are
// written in stage directories and linked into place.
func TestNoTmpfile(t *testing.T) {
	work := t.TempDir()
	archive := filepath.Join(work, "a.tar.gz")
	members := []tarbuild.Entry{
		{Name: "d/", Type: tar.TypeDir},
		{Name: "d/f", Body: []byte("file f"), Mode: 0o640},
		{Name: "d/x", Body: []byte("#!/bin/sh\n"), Mode: 0o755},
		{Name: "e", Body: []byte("")},
		{Name: "d/h", Link: "d/f", Type: tar.TypeLink},
	}
	writeTar(t, archive, members, true)
	for _, cold := range []bool{false, true} {
		out := filepath.Join(work, map[bool]string{false: "indexed", true: "cold"}[cold])
		_, err := extractWith(t, archive, out, cold, Options{}, func(j *Job) { j.life.noTmpfile.Store(true) })
		if err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string]string{"d/f": "file f", "d/x": "#!/bin/sh\n", "e": "", "d/h": "file f"} {
			if b, err := os.ReadFile(filepath.Join(out, p)); err != nil || string(b) != want {
				t.Errorf("cold=%v %s: got %q, %v; want %q", cold, p, b, err, want)
			}
		}
		for p, want := range map[string]os.FileMode{"d/f": 0o640, "d/x": 0o755} {
			if fi, err := os.Stat(filepath.Join(out, p)); err != nil || fi.Mode().Perm() != want {
				t.Errorf("cold=%v %s: mode %v, %v; want %v", cold, p, fi.Mode().Perm(), err, want)
			}
		}
		if _, err := os.Stat(filepath.Join(out, stateDirName)); !os.IsNotExist(err) {
			t.Errorf("cold=%v: %s left behind: %v", cold, stateDirName, err)
		}
	}
}

// TestEarlyPlacementConflicts extracts archives whose members clash by
// name in both modes: the one-pass mode places files while it stages
// them, the indexed mode only from the index; both trees must be the same.
func TestEarlyPlacementConflicts(t *testing.T) {
	tests := []struct {
		name    string
		members []tarbuild.Entry
	}{
		{"duplicate file", []tarbuild.Entry{
			{Name: "x", Body: []byte("first")}, {Name: "x", Body: []byte("second")},
		}},
		{"same name spelled twice", []tarbuild.Entry{
			{Name: "./f", Body: []byte("dot")}, {Name: "f", Body: []byte("plain")}, {Name: "/g", Body: []byte("abs")},
		}},
		{"file then directory", []tarbuild.Entry{
			{Name: "d", Body: []byte("file")}, {Name: "d/", Type: tar.TypeDir}, {Name: "d/f", Body: []byte("in d")},
		}},
		{"directory then file", []tarbuild.Entry{
			{Name: "d/", Type: tar.TypeDir}, {Name: "d/f", Body: []byte("in d")}, {Name: "d", Body: []byte("file over dir")},
		}},
		{"symlink then file below it", []tarbuild.Entry{
			{Name: "t/", Type: tar.TypeDir}, {Name: "a", Link: "t", Type: tar.TypeSymlink}, {Name: "a/b", Body: []byte("through a")},
		}},
		{"hard link then its target again", []tarbuild.Entry{
			{Name: "x", Body: []byte("one")}, {Name: "y", Link: "x", Type: tar.TypeLink}, {Name: "x", Body: []byte("two")},
		}},
		{"implicit directories", []tarbuild.Entry{
			{Name: "p/q/r/s/f", Body: []byte("deep")}, {Name: "p/q/", Type: tar.TypeDir, Mode: 0o750},
		}},
		{"reserved name", []tarbuild.Entry{
			{Name: stateDirName + "/journal", Body: []byte("not ours")}, {Name: "ok", Body: []byte("ok")},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			work := t.TempDir()
			archive := filepath.Join(work, "a.tar")
			writeTar(t, archive, tt.members, false)
			indexed, cold := filepath.Join(work, "indexed"), filepath.Join(work, "cold")
			if _, err := extract(t, archive, indexed, false, Options{}); err != nil {
				t.Fatal(err)
			}
			if _, err := extract(t, archive, cold, true, Options{}); err != nil {
				t.Fatal(err)
			}
			// DIR itself is no member: its mtime is the job's.
			now := time.Now()
			for _, d := range []string{indexed, cold} {
				if err := os.Chtimes(d, now, now); err != nil {
					t.Fatal(err)
				}
			}
			treecmp.Compare(t, indexed, cold, treecmp.Options{})
		})
	}
}

func TestBufList(t *testing.T) {
	l := bufList{max: 2}
	if b := l.get(); b != nil {
		t.Fatalf("empty list gave a buffer of %d bytes", cap(b))
	}
	a, b, c := make([]byte, 1), make([]byte, 2), make([]byte, 3)
	l.put(a)
	l.put(b)
	l.put(c) // over max: dropped
	l.put(nil)
	if got := l.get(); cap(got) != 2 {
		t.Errorf("got a buffer of cap %d, want the last kept (2)", cap(got))
	}
	if got := l.get(); cap(got) != 1 {
		t.Errorf("got a buffer of cap %d, want 1", cap(got))
	}
	if got := l.get(); got != nil {
		t.Errorf("got a buffer of cap %d from an emptied list, want none", cap(got))
	}
}

// TestStageSlabs extracts in one pass members that share slabs and one
// that spans several, with memory budgets of a few slabs and of less than
// one: every file holds its bytes, written slabs are kept for reuse, and
// the whole budget is free again at the end.
func TestStageSlabs(t *testing.T) {
	var members []tarbuild.Entry
	for i := range 300 {
		body := strings.Repeat(fmt.Sprintf("member %d\n", i), 300+i)
		members = append(members, tarbuild.Entry{Name: fmt.Sprintf("d%d/f%d", i%7, i), Body: []byte(body)})
	}
	members = append(members, tarbuild.Entry{Name: "big", Body: []byte(strings.Repeat("0123456789abcdef", 160<<10))})
	tests := []struct {
		name   string
		memory int64
	}{
		{"four slabs", 4 * stageChunkBytes},
		{"less than a slab", 64 << 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			archive := filepath.Join(dir, "a.tar")
			writeTar(t, archive, members, false)
			out := filepath.Join(dir, "out")
			j, err := extract(t, archive, out, true, Options{Writers: 3, MemoryBytes: tt.memory})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range members {
				got, err := os.ReadFile(filepath.Join(out, m.Name))
				if err != nil {
					t.Fatal(err)
				}
				if string(got) != string(m.Body) {
					t.Fatalf("%s: got %d bytes, want %d", m.Name, len(got), len(m.Body))
				}
			}
			if len(j.stage.slabFree.free) == 0 {
				t.Error("no written slab was kept for reuse")
			}
			if !j.sem.TryAcquire(tt.memory) {
				t.Error("the memory budget is not free again after the job")
			}
		})
	}
}
