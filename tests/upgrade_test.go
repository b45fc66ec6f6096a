package tests

import (
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/tarmount/tarmount/archive"
	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/hostile"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
	"github.com/tarmount/tarmount/internal/testutil/versions"
)

// upgradePair is two versions of one tree (versions.V1 and V2), each
// archived by a tool as spec says, served over loopback HTTP.
type upgradePair struct {
	work, served    string
	outside         string // the directory V1's symlink "esc" points at
	url1, url2      string
	archive2, cache string
	v1Path, v2Path  string
	base            string
	refV2           string // tar -x of V2's archive
	spec            tarbuild.Spec
	v1Tree, v2Tree  string
}

// newUpgradePair writes V1 and V2 as trees (GNU tar extracting Go's
// archives of them), archives each as spec says under names v1 and v2,
// serves them and extracts V2's with GNU tar for reference.
func newUpgradePair(t *testing.T, spec tarbuild.Spec) *upgradePair {
	t.Helper()
	p := &upgradePair{work: t.TempDir(), spec: spec}
	p.outside = hostile.MakeSentinel(t, p.work)
	p.served = filepath.Join(p.work, "served")
	p.cache = filepath.Join(p.work, "cache")
	os.Mkdir(p.served, 0o755)
	for i, members := range [][]tarbuild.Entry{versions.V1(p.outside), versions.V2()} {
		data, err := versions.Tar(members)
		if err != nil {
			t.Fatal(err)
		}
		goTar := filepath.Join(p.work, "go.tar")
		if err := os.WriteFile(goTar, data, 0o644); err != nil {
			t.Fatal(err)
		}
		tree := filepath.Join(p.work, []string{"tree1", "tree2"}[i])
		tarbuild.Extract(t, goTar, tree)
		out := filepath.Join(p.served, []string{"v1", "v2"}[i]+spec.Ext())
		tarbuild.Archive(t, tree, out, spec)
		if i == 0 {
			p.v1Path, p.v1Tree = out, tree
		} else {
			p.v2Path, p.v2Tree = out, tree
		}
	}
	p.base, _ = serve(t, p.served)
	p.url1 = p.base + "/" + filepath.Base(p.v1Path)
	p.url2 = p.base + "/" + filepath.Base(p.v2Path)
	p.refV2 = filepath.Join(p.work, "ref")
	tarbuild.Extract(t, p.v2Path, p.refV2)
	return p
}

// inodes returns the inode of each path under dir (not followed).
func inodes(t *testing.T, dir string, paths []string) map[string]uint64 {
	t.Helper()
	out := map[string]uint64{}
	for _, p := range paths {
		st, err := os.Lstat(filepath.Join(dir, p))
		if err != nil {
			t.Fatal(err)
		}
		out[p] = st.Sys().(*syscall.Stat_t).Ino
	}
	return out
}

// unchanged are the paths an upgrade from V1 to V2 keeps in place.
func unchanged() []string {
	out := append([]string{}, versions.Kept...)
	out = append(out, versions.Relinked...)
	for p := range versions.Retouched {
		out = append(out, p)
	}
	return out
}

// checkUpgradedDir compares dir with tar -x of V2 and checks that what
// V1 and V2 share kept its inode, and that nothing outside dir changed.
func (p *upgradePair) checkUpgradedDir(t *testing.T, dir string, before map[string]uint64, snap map[string]string) {
	t.Helper()
	treecmp.Compare(t, p.refV2, dir, treecmp.Options{SkipRoot: true, MaxErrors: 20})
	for path, ino := range inodes(t, dir, unchanged()) {
		if before[path] != ino {
			t.Errorf("%s: got inode %d, want %d (kept in place)", path, ino, before[path])
		}
	}
	for _, g := range versions.Gone {
		if _, err := os.Lstat(filepath.Join(dir, g)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: got %v, want it removed", g, err)
		}
	}
	for _, d := range hostile.DiffTrees(hostile.Snapshot(t, p.work, "out", "cache", "served"), snap) {
		t.Errorf("outside DIR: %s", d)
	}
}

// TestUpgradeExtract runs tarmount extract of V1, then of V2 (a new URL,
// and the same URL with the object replaced) into the same DIR, for
// archives GNU tar and bsdtar made, compressed and plain: DIR ends as
// tar -x of V2, what both share is kept in place, and nothing outside DIR
// is written though V1 has a symlink out where V2 has a directory.
func TestUpgradeExtract(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "owners need root")
	}
	for _, spec := range []tarbuild.Spec{
		{Tool: "gnutar", Format: "posix", Codec: "gzip"},
		{Tool: "bsdtar", Format: "pax", Codec: "none"},
		{Tool: "gnutar", Format: "posix", Codec: "zstd-multi"},
	} {
		for _, replaced := range []bool{false, true} {
			name := spec.String() + map[bool]string{false: "/new-url", true: "/replaced-object"}[replaced]
			t.Run(name, func(t *testing.T) {
				p := newUpgradePair(t, spec)
				out := filepath.Join(p.work, "out")
				cache := "--cache-dir=" + p.cache
				runExtract(t, p.url1, out, cache, "--quiet")
				before := inodes(t, out, unchanged())
				snap := hostile.Snapshot(t, p.work, "out", "cache", "served")
				url := p.url2
				if replaced {
					if err := os.Rename(p.v2Path, p.v1Path); err != nil {
						t.Fatal(err)
					}
					url = p.url1
				}
				runExtract(t, url, out, cache, "--quiet")
				snap2 := hostile.Snapshot(t, p.work, "out", "cache", "served")
				for _, d := range hostile.DiffTrees(snap2, snap) {
					t.Errorf("outside DIR: %s", d)
				}
				p.checkUpgradedDir(t, out, before, snap2)
				// Again: DIR is complete, nothing to do.
				runExtract(t, url, out, cache, "--quiet")
				treecmp.Compare(t, p.refV2, out, treecmp.Options{SkipRoot: true, MaxErrors: 20})
			})
		}
	}
}

// TestUpgradeMaterialize mounts V2 with --materialize over a DIR that
// extract made from V1, reading every file through the mount while DIR
// is upgraded: every read gives V2's bytes, the files both share are
// served from DIR from the start, and DIR ends as tar -x of V2.
func TestUpgradeMaterialize(t *testing.T) {
	needFUSE(t)
	if os.Geteuid() != 0 {
		testutil.Missing(t, "owners need root")
	}
	for _, withIndex := range []bool{true, false} {
		t.Run(map[bool]string{true: "saved-index", false: "first-pass"}[withIndex], func(t *testing.T) {
			p := newUpgradePair(t, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"})
			out := filepath.Join(p.work, "out")
			opts := libOptions(p.cache)
			libExtract(t, p.url1, out, opts, archive.MaterializeOptions{})
			before := inodes(t, out, unchanged())
			snap := hostile.Snapshot(t, p.work, "out", "cache", "served")
			if withIndex {
				libIndex(t, p.url2, opts)
			}
			m := libMountWith(t, p.url2, opts, libMountOptions{materialize: out})
			// Reads while the upgrade runs: V2's bytes, whichever
			// copy serves them.
			treecmp.Compare(t, p.v2Tree, m.dir, treecmp.Options{SkipRoot: true, SkipHardLinks: true, MaxErrors: 20})
			m.waitMaterialized(t)
			treecmp.Compare(t, p.v2Tree, m.dir, treecmp.Options{SkipRoot: true, SkipHardLinks: true, MaxErrors: 20})
			p.checkUpgradedDir(t, out, before, snap)
			if k := m.bg.Progress().Kept.Load(); k < int64(versions.Files-versions.Written) {
				t.Errorf("kept %d files, want at least %d", k, versions.Files-versions.Written)
			}
			if w := m.bg.Progress().Files.Load(); w != int64(versions.Written) {
				t.Errorf("wrote %d files, want %d (only the changed ones)", w, versions.Written)
			}
		})
	}
}

// TestOverwriteForeignDir checks that tarmount extract refuses a
// non-empty DIR that tarmount did not make, and that --overwrite makes it
// hold exactly the archive's tree, removing what the archive lacks.
func TestOverwriteForeignDir(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "owners need root")
	}
	p := newUpgradePair(t, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"})
	out := filepath.Join(p.work, "out")
	if err := os.CopyFS(out, os.DirFS(p.v1Tree)); err != nil {
		// CopyFS refuses symlinks: copy with cp instead.
		os.RemoveAll(out)
		if b, err := exec.Command("cp", "-a", p.v1Tree, out).CombinedOutput(); err != nil {
			t.Fatalf("cp: %v\n%s", err, b)
		}
	}
	os.WriteFile(filepath.Join(out, "mine.txt"), []byte("not the archive's"), 0o644)
	cmd := exec.Command(binary, "extract", p.url2, out, "--cache-dir="+p.cache, "--quiet")
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(b), "--overwrite") {
		t.Fatalf("got %v (%s), want a refusal naming --overwrite", err, b)
	}
	runExtract(t, p.url2, out, "--cache-dir="+p.cache, "--quiet", "--overwrite")
	treecmp.Compare(t, p.refV2, out, treecmp.Options{SkipRoot: true, MaxErrors: 20})
}
