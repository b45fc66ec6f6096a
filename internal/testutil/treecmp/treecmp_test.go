package treecmp

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/internal/testutil"
)

// fakeTB records Errorf and Fatalf calls instead of failing the test. The
// embedded testing.TB supplies every other method.
type fakeTB struct {
	testing.TB
	mu     sync.Mutex
	errs   []string
	fatals []string
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fatals = append(f.fatals, fmt.Sprintf(format, args...))
}

var baseTime = time.Date(2021, 3, 4, 5, 6, 7, 123456789, time.UTC)

// makeBase writes a small tree with one of everything treecmp looks at.
func makeBase(t *testing.T, dir string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "d/sub"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "d/a.txt"), []byte("hello\n"), 0o644))
	must(os.WriteFile(filepath.Join(dir, "d/sub/b.bin"), []byte("0123456789"), 0o600))
	must(os.WriteFile(filepath.Join(dir, "big"), []byte(strings.Repeat("x", 5000)), 0o644))
	must(os.Link(filepath.Join(dir, "big"), filepath.Join(dir, "big.link")))
	must(os.WriteFile(filepath.Join(dir, "other"), []byte("other"), 0o644))
	must(os.Symlink("d/a.txt", filepath.Join(dir, "sym")))
	must(unix.Setxattr(filepath.Join(dir, "d/a.txt"), "user.k", []byte("v1"), 0))
	paths := []string{"d/a.txt", "d/sub/b.bin", "big", "other", "sym", "d/sub", "d", "."}
	for i, p := range paths {
		ts := baseTime.Add(time.Duration(i) * time.Second)
		must(unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, p),
			[]unix.Timespec{unix.NsecToTimespec(ts.UnixNano()), unix.NsecToTimespec(ts.UnixNano())},
			unix.AT_SYMLINK_NOFOLLOW))
	}
}

func pair(t *testing.T) (want, got string) {
	t.Helper()
	want, got = filepath.Join(t.TempDir(), "want"), filepath.Join(t.TempDir(), "got")
	makeBase(t, want)
	makeBase(t, got)
	return want, got
}

func setMTime(t *testing.T, path string, ts time.Time) {
	t.Helper()
	spec := unix.NsecToTimespec(ts.UnixNano())
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, path, []unix.Timespec{spec, spec}, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
}

func TestIdenticalTreesPass(t *testing.T) {
	want, got := pair(t)
	ft := &fakeTB{TB: t}
	Compare(ft, want, got, Options{})
	if len(ft.errs)+len(ft.fatals) != 0 {
		t.Errorf("identical trees: got errors %q, fatals %q, want none", ft.errs, ft.fatals)
	}
	// A tree compared with itself passes too.
	Compare(ft, want, want, Options{})
	if len(ft.errs) != 0 {
		t.Errorf("tree against itself: got errors %q, want none", ft.errs)
	}
}

func TestEachDifferenceReported(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Log("not root: the uid/gid case is skipped")
	}
	tests := []struct {
		name   string
		change func(t *testing.T, got string)
		opts   Options
		want   []string // substrings; each must appear in some error
		none   bool     // expect no errors at all
	}{
		{
			name:   "missing in got",
			change: func(t *testing.T, got string) { os.Remove(filepath.Join(got, "other")) },
			want:   []string{"other: presence got missing, want file"},
		},
		{
			name: "extra in got",
			change: func(t *testing.T, got string) {
				os.WriteFile(filepath.Join(got, "d/extra"), nil, 0o644)
				setMTime(t, filepath.Join(got, "d"), baseTime.Add(6*time.Second))
			},
			want: []string{"d/extra: presence got file, want absent"},
		},
		{
			name: "type",
			change: func(t *testing.T, got string) {
				p := filepath.Join(got, "other")
				os.Remove(p)
				os.Mkdir(p, 0o644)
				setMTime(t, got, baseTime.Add(7*time.Second))
			},
			want: []string{"other: type got dir, want file"},
		},
		{
			name:   "size and content",
			change: func(t *testing.T, got string) { os.WriteFile(filepath.Join(got, "other"), []byte("other!"), 0o644) },
			opts:   Options{MTimeResolution: time.Hour},
			want:   []string{"other: size got 6, want 5"},
		},
		{
			name: "content same size",
			change: func(t *testing.T, got string) {
				p := filepath.Join(got, "d/sub/b.bin")
				os.WriteFile(p, []byte("0123456780"), 0o600)
				setMTime(t, p, baseTime.Add(1*time.Second))
			},
			want: []string{"d/sub/b.bin: content got sha256 "},
		},
		{
			name:   "perm",
			change: func(t *testing.T, got string) { os.Chmod(filepath.Join(got, "other"), 0o640) },
			want:   []string{"other: mode got 0640, want 0644"},
		},
		{
			name:   "setuid",
			change: func(t *testing.T, got string) { os.Chmod(filepath.Join(got, "other"), 0o644|os.ModeSetuid) },
			want:   []string{"other: mode got 4644, want 0644"},
		},
		{
			name:   "setgid",
			change: func(t *testing.T, got string) { os.Chmod(filepath.Join(got, "d/sub"), 0o755|os.ModeSetgid) },
			want:   []string{"d/sub: mode got 2755, want 0755"},
		},
		{
			name:   "sticky",
			change: func(t *testing.T, got string) { os.Chmod(filepath.Join(got, "d"), 0o755|os.ModeSticky) },
			want:   []string{"d: mode got 1755, want 0755"},
		},
		{
			name: "uid gid",
			change: func(t *testing.T, got string) {
				if os.Geteuid() != 0 {
					testutil.Missing(t, "chown needs root")
				}
				os.Lchown(filepath.Join(got, "sym"), 1234, 5678)
			},
			want: []string{"sym: uid got 1234, want 0", "sym: gid got 5678, want 0"},
		},
		{
			name:   "owner skipped",
			change: func(t *testing.T, got string) { os.Lchown(filepath.Join(got, "sym"), 1234, 5678) },
			opts:   Options{SkipOwner: true},
			none:   true,
		},
		{
			name: "mtime ns",
			change: func(t *testing.T, got string) {
				setMTime(t, filepath.Join(got, "other"), baseTime.Add(3*time.Second+time.Nanosecond))
			},
			want: []string{"other: mtime got 2021-03-04T05:06:10.123456790Z, want 2021-03-04T05:06:10.123456789Z"},
		},
		{
			name: "mtime within resolution",
			change: func(t *testing.T, got string) {
				setMTime(t, filepath.Join(got, "other"), baseTime.Add(3*time.Second).Truncate(time.Second))
			},
			opts: Options{MTimeResolution: time.Second},
			none: true,
		},
		{
			name:   "dir mtime",
			change: func(t *testing.T, got string) { setMTime(t, filepath.Join(got, "d/sub"), baseTime) },
			want:   []string{"d/sub: mtime got"},
		},
		{
			name:   "dir mtime skipped",
			change: func(t *testing.T, got string) { setMTime(t, filepath.Join(got, "d/sub"), baseTime) },
			opts:   Options{SkipDirMTime: true},
			none:   true,
		},
		{
			name:   "symlink mtime",
			change: func(t *testing.T, got string) { setMTime(t, filepath.Join(got, "sym"), baseTime) },
			want:   []string{"sym: mtime got"},
		},
		{
			name: "symlink target",
			change: func(t *testing.T, got string) {
				p := filepath.Join(got, "sym")
				os.Remove(p)
				os.Symlink("d/sub", p)
				setMTime(t, p, baseTime.Add(4*time.Second))
				setMTime(t, got, baseTime.Add(7*time.Second))
			},
			want: []string{`sym: target got "d/sub", want "d/a.txt"`},
		},
		{
			name: "xattr value",
			change: func(t *testing.T, got string) {
				unix.Setxattr(filepath.Join(got, "d/a.txt"), "user.k", []byte("v2"), 0)
			},
			want: []string{`d/a.txt: xattr user.k got "v2", want "v1"`},
		},
		{
			name: "xattr missing and extra",
			change: func(t *testing.T, got string) {
				unix.Removexattr(filepath.Join(got, "d/a.txt"), "user.k")
				unix.Setxattr(filepath.Join(got, "d"), "user.new", []byte("n"), 0)
			},
			want: []string{`d/a.txt: xattr user.k got absent, want "v1"`, `d: xattr user.new got "n", want absent`},
		},
		{
			name: "hard link split",
			change: func(t *testing.T, got string) {
				p := filepath.Join(got, "big.link")
				os.Remove(p)
				os.WriteFile(p, []byte(strings.Repeat("x", 5000)), 0o644)
				setMTime(t, p, baseTime.Add(2*time.Second))
				setMTime(t, got, baseTime.Add(7*time.Second))
			},
			want: []string{"big: hard links got [big], want [big big.link]", "big: nlink got 1, want 2"},
		},
		{
			name: "hard link added",
			change: func(t *testing.T, got string) {
				p := filepath.Join(got, "other")
				os.Remove(p)
				os.Link(filepath.Join(got, "big"), p)
				setMTime(t, got, baseTime.Add(7*time.Second))
			},
			opts: Options{MTimeResolution: time.Hour},
			want: []string{"big: hard links got [big big.link other], want [big big.link]"},
		},
		{
			name: "ignored path",
			change: func(t *testing.T, got string) {
				os.RemoveAll(filepath.Join(got, "d/sub"))
				setMTime(t, filepath.Join(got, "d"), baseTime.Add(6*time.Second))
			},
			opts: Options{Ignore: func(p string) bool { return p == "d/sub" }},
			none: true,
		},
		{
			name:   "root skipped",
			change: func(t *testing.T, got string) { os.Chmod(got, 0o700) },
			opts:   Options{SkipRoot: true},
			none:   true,
		},
		{
			name:   "root compared",
			change: func(t *testing.T, got string) { os.Chmod(got, 0o700) },
			want:   []string{".: mode got 0700, want 0755"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want, got := pair(t)
			tt.change(t, got)
			ft := &fakeTB{TB: t}
			Compare(ft, want, got, tt.opts)
			if len(ft.fatals) != 0 {
				t.Fatalf("got fatals %q, want none", ft.fatals)
			}
			if tt.none {
				if len(ft.errs) != 0 {
					t.Errorf("got errors %q, want none", ft.errs)
				}
				return
			}
			for _, w := range tt.want {
				found := false
				for _, e := range ft.errs {
					if strings.Contains(e, w) {
						found = true
					}
				}
				if !found {
					t.Errorf("got errors %q, want one containing %q", ft.errs, w)
				}
			}
		})
	}
}

func TestMaxErrors(t *testing.T) {
	want, got := pair(t)
	for _, n := range []string{"x1", "x2", "x3", "x4"} {
		os.WriteFile(filepath.Join(got, n), nil, 0o644)
	}
	ft := &fakeTB{TB: t}
	Compare(ft, want, got, Options{MaxErrors: 2, SkipRoot: true})
	if len(ft.errs) != 3 || !strings.Contains(ft.errs[2], "2 more differences") {
		t.Errorf("got errors %q, want 2 differences and a count of 2 more", ft.errs)
	}
}

func TestMissingRootIsFatal(t *testing.T) {
	want, _ := pair(t)
	ft := &fakeTB{TB: t}
	Compare(ft, want, filepath.Join(t.TempDir(), "nope"), Options{})
	if len(ft.fatals) != 1 {
		t.Errorf("got fatals %q, want 1", ft.fatals)
	}
}
