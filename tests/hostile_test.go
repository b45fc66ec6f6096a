package tests

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/hostile"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// hostileRSS bounds the peak resident memory of one command on a hostile
// archive of a few MiB; the race detector multiplies what a Go program
// uses.
func hostileRSS() int64 {
	if raceEnabled {
		return 1 << 30
	}
	return 300 << 20
}

// checkFailure checks that a run failed with one line that starts with
// "tarmount: " and names the problem (want, without case), as the last
// line of its output.
func checkFailure(t *testing.T, what string, r ran, want string) {
	t.Helper()
	if r.err == nil {
		t.Errorf("%s: succeeded, want an error with %q:\n%s", what, want, tail(r.stderr))
		return
	}
	ls := lines(r.stderr)
	var errLines []string
	for _, l := range ls {
		if strings.HasPrefix(l, "tarmount: ") {
			errLines = append(errLines, l)
		}
	}
	last := ls[len(ls)-1]
	if len(errLines) != 1 || errLines[0] != last || !strings.Contains(strings.ToLower(last), want) {
		t.Errorf("%s: got error lines %q, want one, last, with %q; output:\n%s", what, errLines, want, tail(r.stderr))
	}
}

// checkRSS checks the peak memory of a run.
func checkRSS(t *testing.T, what string, rss int64) {
	t.Helper()
	if rss > hostileRSS() {
		t.Errorf("%s: peak RSS %d MiB, want at most %d MiB", what, rss>>20, hostileRSS()>>20)
	}
}

// TestHostileArchives runs ls, extract and a mount on every
// hostile.ArchiveCase: a damaged archive fails each with one line naming
// the damage (and mounts nothing), a readable one gives its files' bytes,
// and no run panics, hangs or uses more than hostileRSS.
func TestHostileArchives(t *testing.T) {
	needFUSE(t)
	for _, tc := range hostile.ArchiveCases() {
		t.Run(tc.Name, func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			archive := filepath.Join(work, "archive")
			if err := os.WriteFile(archive, tc.Data, 0o644); err != nil {
				t.Fatal(err)
			}
			cache := func(name string) string { return filepath.Join(work, "cache-"+name) }

			r := runBinary(t, nil, tc.Big, "ls", archive, "--cache-dir", cache("ls"))
			checkRSS(t, "ls", r.maxRSS)
			if tc.Err != "" {
				checkFailure(t, "ls", r, tc.Err)
			} else if r.err != nil {
				t.Errorf("ls: %v\n%s", r.err, tail(r.stderr))
			} else if !tc.Big {
				listed := map[string]bool{}
				for _, l := range lines(r.stdout) {
					listed[l] = true
				}
				for p := range tc.Files {
					if !listed[p] {
						t.Errorf("ls does not list %s", p)
					}
				}
			}

			dir := filepath.Join(work, "out")
			// A tree deeper than the open-file limit (the deep rows) is
			// more than os.RemoveAll can take apart; rm removes it without
			// a descriptor per level.
			t.Cleanup(func() { exec.Command("rm", "-rf", dir).Run() })
			r = runBinary(t, nil, false, "extract", archive, dir, "--cache-dir", cache("extract"))
			checkRSS(t, "extract", r.maxRSS)
			if tc.Err != "" {
				checkFailure(t, "extract", r, tc.Err)
				// Nothing has a name in DIR but the job's state.
				ents, _ := os.ReadDir(dir)
				for _, e := range ents {
					if e.Name() != ".tarmount-partial" {
						t.Errorf("extract failed but left %s in DIR", e.Name())
					}
				}
			} else if r.err != nil && !tc.LeftOut {
				t.Errorf("extract: %v\n%s", r.err, tail(r.stderr))
			} else if tc.LeftOut && (r.err == nil || !strings.Contains(r.stderr, "archive members not extracted")) {
				t.Errorf("extract left members out: got %v, want exit 1 saying so\n%s", r.err, tail(r.stderr))
			} else {
				for p, want := range tc.Files {
					if got, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(got) != want {
						t.Errorf("extracted %s: got %d bytes (%v), want its %d", p, len(got), err, len(want))
					}
				}
				for _, p := range tc.Refused {
					if _, err := os.Lstat(filepath.Join(dir, p)); !errors.Is(err, syscall.ENAMETOOLONG) && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, syscall.EINVAL) {
						t.Errorf("extracted %.40q: got %v, want it refused", p, err)
					}
				}
			}

			if tc.Err != "" {
				mnt := t.TempDir()
				t.Cleanup(func() {
					if isMounted(mnt) {
						exec.Command("umount", "-l", mnt).Run()
					}
				})
				r = runBinary(t, nil, false, archive, mnt, "--mount-name", testMountName, "--cache-dir", cache("mount"))
				checkRSS(t, "mount", r.maxRSS)
				checkFailure(t, "mount", r, tc.Err)
				if isMounted(mnt) {
					t.Errorf("%s mounted after a failed mount", mnt)
				}
				return
			}
			m := mount(t, archive, "--cache-dir", cache("mount"))
			if _, err := os.ReadDir(m.dir); err != nil {
				t.Errorf("readdir of the mount's root: %v", err)
			}
			for p, want := range tc.Files {
				if got, err := os.ReadFile(filepath.Join(m.dir, p)); err != nil || string(got) != want {
					t.Errorf("%s through the mount: got %d bytes (%v), want its %d", p, len(got), err, len(want))
				}
			}
			checkRSS(t, "mount", peakRSS(t, m.cmd.Process.Pid))
			m.stop(t)
		})
	}
}

// TestDamagedAfterIndex damages archives of every codec with checkpoints
// after their index was saved (same size and mtime): reading through a
// mount gives EIO on the damaged file only and the right bytes for the
// others; ls still lists (it reads only the index); extract and cat of
// the damaged file fail with one line naming the damage.
func TestDamagedAfterIndex(t *testing.T) {
	needFUSE(t)
	tarData, _ := hostile.Sample()
	zst, _ := tarbuild.ZstdFrames(tarData, 64<<10)
	for _, codec := range []struct {
		name string
		data []byte
	}{
		{"gzip", tarbuild.Gzip(tarData)},
		{"zstd", zst},
		{"lz4", tarbuild.LZ4(tarData, false)},
		{"tar", tarData},
	} {
		t.Run(codec.name, func(t *testing.T) {
			t.Parallel()
			work := t.TempDir()
			archive := filepath.Join(work, "archive")
			if err := os.WriteFile(archive, codec.data, 0o644); err != nil {
				t.Fatal(err)
			}
			cache := filepath.Join(work, "cache")
			if r := runBinary(t, nil, false, "index", archive, "--cache-dir", cache, "--span", "65536"); r.err != nil {
				t.Fatalf("index: %v\n%s", r.err, r.stderr)
			}
			st, err := os.Stat(archive)
			if err != nil {
				t.Fatal(err)
			}
			// The middle of every form of the sample lies in dir/big.
			damaged := bytes.Clone(codec.data)
			damaged[len(damaged)/2] ^= 0xff
			if err := os.WriteFile(archive, damaged, 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(archive, st.ModTime(), st.ModTime()); err != nil {
				t.Fatal(err)
			}

			m := mount(t, archive, "--cache-dir", cache, "--cache-disk", "0")
			if strings.Contains(m.stderr.String(), "msg=indexing") {
				t.Fatal("the mount indexed the damaged archive instead of loading the saved index")
			}
			for p, want := range hostile.SampleFiles() {
				got, err := os.ReadFile(filepath.Join(m.dir, p))
				switch {
				case p == "dir/big" && codec.name == "tar":
					// Plain tar has no digests to check: the
					// damaged byte reads as it is stored.
					if err != nil || len(got) != len(want) {
						t.Errorf("%s: got %d bytes (%v), want its %d", p, len(got), err, len(want))
					}
				case p == "dir/big":
					if !errors.Is(err, syscall.EIO) {
						t.Errorf("%s: got %d bytes (%v), want EIO", p, len(got), err)
					}
				case err != nil || string(got) != want:
					t.Errorf("%s: got %d bytes (%v), want its %d", p, len(got), err, len(want))
				}
			}
			checkRSS(t, "mount", peakRSS(t, m.cmd.Process.Pid))
			m.stop(t)

			r := runBinary(t, nil, false, "ls", archive, "--cache-dir", cache)
			if r.err != nil || !strings.Contains(r.stdout, "dir/big") {
				t.Errorf("ls with the saved index: %v\n%s%s", r.err, r.stdout, r.stderr)
			}
			if codec.name == "tar" {
				return
			}
			r = runBinary(t, nil, true, "cat", archive, "dir/big", "--cache-dir", cache)
			checkFailure(t, "cat", r, "corrupt")
			r = runBinary(t, nil, false, "extract", archive, filepath.Join(work, "out"), "--cache-dir", cache)
			checkRSS(t, "extract", r.maxRSS)
			checkFailure(t, "extract", r, "corrupt")
		})
	}
}
