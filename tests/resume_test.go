package tests

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// TestRemountResumesPass stops a mount during its first pass, by SIGTERM
// (as an unmount at shutdown does) and by SIGKILL (a crash), and mounts
// the archive again with the same cache: the second pass resumes where
// the first stood, says so in its log, fetches only the rest of the
// archive (and the block it resumes in), and serves the whole tree. A
// one-frame .tar.zst resumes inside its frame, from the decoded copy the
// first mount wrote (after a crash too: its pass writes mid points as it
// goes).
func TestRemountResumesPass(t *testing.T) {
	needFUSE(t)
	for _, name := range []string{"a.tar.gz", "a.tar.zst"} {
		t.Run(name, func(t *testing.T) { remountResumesPass(t, newSlowArchiveAs(t, name)) })
	}
}

func remountResumesPass(t *testing.T, s *slowArchive) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) {
			work := t.TempDir()
			cache := filepath.Join(work, "cache")
			mnt := filepath.Join(work, "mnt")
			os.Mkdir(mnt, 0o755)
			t.Cleanup(func() {
				if isMounted(mnt) {
					exec.Command("umount", "-l", mnt).Run()
				}
			})
			s.h.ResetStats()
			// Stopped at about 60% of the pass, as the reader had what
			// it needed.
			// Checkpoints every 64 KiB of tar: the archive is small.
			args := append([]string{s.url, mnt, "--mount-name", testMountName, "--cache-dir", cache, "--cache-disk", "0", "--span", "65536"},
				s.slowFlags()...)
			_, stderr := interrupt(t, args, sig, func(stderr string) bool {
				return strings.Contains(stderr, "msg=ready") && s.h.Stats().Bytes > s.size*6/10
			})
			if strings.Contains(stderr, "msg=indexed") {
				t.Fatalf("the pass ended before the signal: slow the server down\n%s", stderr)
			}
			if sig == syscall.SIGKILL {
				// What a crash leaves: a dead mount, cleared as an
				// operator would.
				if out, err := exec.Command(binary, "unmount", mnt).CombinedOutput(); err != nil {
					t.Fatalf("unmount after the crash: %v\n%s", err, out)
				}
			}
			s.h.ResetStats()
			// The same small blocks: the pass reads from the start of the
			// block it resumes in.
			m := mountAt(t, mnt, s.url, append([]string{"--cache-dir", cache, "--cache-disk", "0", "--wait-index", "--span", "65536"},
				s.slowFlags()...)...)
			checkResumed(t, s, m.stderr.String())
			treecmp.Compare(t, s.ref, m.dir, treecmp.Options{MaxErrors: 20})
		})
	}
}

// checkResumed checks that the pass whose log is log (run with
// s.slowFlags, after s.h.ResetStats) resumed one stopped past 60% of s
// and fetched only the rest.
func checkResumed(t *testing.T, s *slowArchive, log string) {
	t.Helper()
	var done int64
	if _, rest, ok := strings.Cut(log, `msg="resuming the index pass"`); !ok {
		t.Fatalf("the second pass did not resume the first; its log:\n%s", log)
	} else if _, pct, _ := strings.Cut(rest, " done="); pct != "" {
		fmt.Sscanf(pct, "%d%%", &done)
	}
	if done < 20 {
		t.Errorf("the pass resumed at %d%%, want past 20%% (stopped past 60%%)", done)
	}
	// What is left, and the block it resumes in (and, for a zstd name,
	// the last 64 KiB, which the open asks for when it looks for an
	// index tarmount pack embedded).
	fetched := s.h.Stats().Bytes
	limit := s.size*(101-done)/100 + s.size/60 + 4096
	if strings.HasSuffix(s.url, ".zst") {
		limit += 64 << 10
	}
	if fetched > limit {
		t.Errorf("the second pass fetched %d of the archive's %d bytes, resumed at %d%%: want at most %d", fetched, s.size, done, limit)
	}
}

// TestStoppedPassResumes: tarmount index, and a one-pass tarmount
// extract, stopped by SIGTERM or killed (SIGKILL) during the pass keep
// what the pass built; the next run of the same command resumes there,
// fetches only the rest, and ends with the whole tree (extracted, or from
// the index written). A one-frame .tar.zst resumes inside its frame: the
// extraction over the files the stopped one placed in DIR.
func TestStoppedPassResumes(t *testing.T) {
	for _, name := range []string{"a.tar.gz", "a.tar.zst"} {
		t.Run(name, func(t *testing.T) {
			s := newSlowArchiveAs(t, name)
			for _, cmd := range []string{"index", "extract"} {
				for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
					t.Run(cmd+"-"+sig.String(), func(t *testing.T) {
						stoppedPassResumes(t, s, cmd, sig)
					})
				}
			}
		})
	}
}

func stoppedPassResumes(t *testing.T, s *slowArchive, cmd string, sig syscall.Signal) {
	work := t.TempDir()
	cache := filepath.Join(work, "cache")
	dir := filepath.Join(work, "out")
	args := []string{cmd, s.url}
	if cmd == "extract" {
		// A small archive: resume inside a one-frame zstd anyway.
		args = append(args, dir, "--quiet", "--frame-resume-min", "0")
	}
	args = append(append(args, "--cache-dir", cache, "--span", "65536"), s.slowFlags()...)
	s.h.ResetStats()
	_, stderr := interrupt(t, args, sig, func(string) bool { return s.h.Stats().Bytes > s.size*6/10 })
	if strings.Contains(stderr, "msg=indexed") {
		t.Fatalf("the pass ended before the signal: slow the server down\n%s", stderr)
	}
	s.h.ResetStats()
	idx := filepath.Join(work, "a.idx")
	if cmd == "index" {
		args = append(args, "-o", idx)
	}
	out, err := exec.Command(binary, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s after the stopped one: %v\n%s", cmd, err, out)
	}
	checkResumed(t, s, string(out))
	if cmd == "index" {
		runExtract(t, s.url, dir, "--index", idx, "--cache-dir", filepath.Join(work, "cache2"))
	}
	treecmp.Compare(t, s.ref, dir, treecmp.Options{MaxErrors: 20})
}
