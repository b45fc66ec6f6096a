package materialize

import (
	"archive/tar"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// manyDirsArchive writes a .tar.gz with more directories than the tests
// let a job keep open: a wide tree (directories first, then its files in
// a shuffled order, so that writers keep coming back to directories
// closed long ago), a chain 300 deep with a file at every level, hard
// links and symlinks across directories, and directories whose modes
// take search and write away.
func manyDirsArchive(t *testing.T, path string) {
	t.Helper()
	var entries []tarbuild.Entry
	add := func(e tarbuild.Entry, body string) {
		e.Body = []byte(body)
		entries = append(entries, e)
	}
	dir := func(name string, mode int64) {
		// Mode 0 is the default 0755 for tarbuild: set it on the header.
		entries = append(entries, tarbuild.Entry{Type: tar.TypeDir, Name: name + "/", Uid: 1000, Gid: 1000,
			Tweak: func(h *tar.Header) { h.Mode = mode }})
	}
	var files []string
	for a := range 20 {
		dir(fmt.Sprintf("w%02d", a), 0o755)
		for b := range 20 {
			d := fmt.Sprintf("w%02d/d%02d", a, b)
			dir(d, 0o750)
			for c := range 3 {
				files = append(files, fmt.Sprintf("%s/f%d", d, c))
			}
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	rng.Shuffle(len(files), func(i, k int) { files[i], files[k] = files[k], files[i] })
	for i, name := range files {
		add(tarbuild.Entry{Type: tar.TypeReg, Name: name, Mode: 0o644, Uid: 1000, Gid: 1000},
			strings.Repeat(name+"\n", 1+i%50))
		if i%97 == 0 {
			add(tarbuild.Entry{Type: tar.TypeLink, Name: files[(i+500)%len(files)] + ".link", Link: name}, "")
			add(tarbuild.Entry{Type: tar.TypeSymlink, Name: files[(i+900)%len(files)] + ".sym", Link: "../../" + name}, "")
		}
	}
	deep := "deep"
	for i := range 300 {
		dir(deep, 0o755)
		add(tarbuild.Entry{Type: tar.TypeReg, Name: deep + "/level", Mode: 0o600}, fmt.Sprintf("level %d\n", i))
		deep += fmt.Sprintf("/l%d", i)
	}
	// No search for anyone but root, then no write either: their
	// children are written and given their metadata first.
	dir("locked", 0o700)
	dir("locked/inner", 0o755)
	add(tarbuild.Entry{Type: tar.TypeReg, Name: "locked/inner/f", Mode: 0o644}, "locked in\n")
	dir("locked/inner", 0o000)
	dir("locked", 0o500)
	if err := os.WriteFile(path, tarbuild.Gzip(tarbuild.Go(t, tar.FormatPAX, entries...)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestManyDirectories extracts an archive with far more directories than
// the job may keep open (dirLimit 8), in both modes: the tree equals what
// GNU tar extracts, closed directories were opened again, and no more
// were open at once than the limit plus those in use by the writers.
func TestManyDirectories(t *testing.T) {
	if os.Geteuid() != 0 {
		testutil.Missing(t, "owners need root")
	}
	work := t.TempDir()
	archive := filepath.Join(work, "many-dirs.tar.gz")
	manyDirsArchive(t, archive)
	ref := filepath.Join(work, "ref")
	tarbuild.Extract(t, archive, ref)
	const limit, writers = 8, 4
	for _, cold := range []bool{false, true} {
		t.Run(fmt.Sprintf("cold=%v", cold), func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out")
			var jb *Job
			_, err := extractWith(t, archive, out, cold, Options{Writers: writers, Decoders: 2},
				func(j *Job) { j.tree.limit, jb = limit, j })
			if err != nil {
				t.Fatal(err)
			}
			// The archive has no member for its top directory.
			treecmp.Compare(t, ref, out, treecmp.Options{SkipRoot: true, MaxErrors: 20})
			d := jb.tree.table
			d.mu.Lock()
			maxOpen, reopened, open := d.maxOpen, d.reopened, d.open
			d.mu.Unlock()
			t.Logf("%d directories opened again, at most %d open at once", reopened, maxOpen)
			// In use at once: one per writer and the directory maker,
			// plus the ancestors a reopening holds for a moment, and
			// a hard link's two directories.
			if bound := limit + 2*(writers+1) + 1; maxOpen > bound {
				t.Errorf("at most %d directories open at once, want at most %d", maxOpen, bound)
			}
			if reopened == 0 {
				t.Errorf("no directory was opened again: the limit of %d was never reached", limit)
			}
			if open != 0 {
				t.Errorf("%d directories still open once DIR is complete, want 0", open)
			}
		})
	}
}
