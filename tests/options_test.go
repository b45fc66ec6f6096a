package tests

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestOwnerAndAllowOther mounts with --uid, --gid and --allow-other: every
// entry reports the given owner, and the kernel mount has allow_other.
func TestOwnerAndAllowOther(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{NoBigFiles: true}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	m := mount(t, f.url, "--cache-dir", filepath.Join(f.work, "cache"), "--uid", "1234", "--gid", "4321", "--allow-other")
	for _, p := range []string{"owners/user1000.txt", "owners/nobody.txt", "owners/dir1000", "owners/link1000"} {
		var st syscall.Stat_t
		if err := syscall.Lstat(filepath.Join(m.dir, p), &st); err != nil {
			t.Fatal(err)
		}
		if st.Uid != 1234 || st.Gid != 4321 {
			t.Errorf("%s: got owner %d:%d, want 1234:4321", p, st.Uid, st.Gid)
		}
	}
	mounts, err := os.ReadFile("/proc/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(mounts), "\n") {
		if fields := strings.Fields(l); len(fields) > 3 && fields[1] == m.dir {
			if !strings.Contains(fields[3], "allow_other") {
				t.Errorf("mount options %q: want allow_other", fields[3])
			}
			return
		}
	}
	t.Errorf("%s not in /proc/mounts", m.dir)
}
