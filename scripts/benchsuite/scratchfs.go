package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// scratchFS is a new ext4 filesystem for one run of the extraction
// scenario, in a sparse image on a loop device, deleted after the run.
//
// Every tool of the run writes its tree there, on a filesystem where no
// inode was ever freed. On the work directory's own filesystem each run
// would start right after the previous run's trees were deleted, and ext4
// without a journal skips every inode freed in the last minutes when it
// allocates one (recently_deleted): file creation there stays slow for
// several minutes, whichever tool comes first paying the most, and a wait
// between runs long enough to undo it would take hours over the suite.
// Deleting the image is one inode for the host filesystem.
type scratchFS struct {
	dir, img, loop string
}

// newScratchFS makes and mounts a filesystem at work/xfs with room for
// bytes of files and inodes inodes. It has a journal when the filesystem
// of work has one (as tune2fs reports it), so that the trees are written
// as they would be there.
func newScratchFS(ctx context.Context, work string, bytes, inodes int64) (*scratchFS, error) {
	f := &scratchFS{dir: filepath.Join(work, "xfs"), img: filepath.Join(work, "xfs.img")}
	os.Remove(f.img)
	img, err := os.Create(f.img)
	if err != nil {
		return nil, err
	}
	err = img.Truncate((bytes + 1<<20 - 1) &^ (1<<20 - 1)) // whole MiB: whole sectors for the loop device
	img.Close()
	if err != nil {
		f.close()
		return nil, err
	}
	features := "^has_journal"
	if hostJournal(ctx, work) {
		features = "has_journal"
	}
	// Inode tables are written now, not by a kernel thread during the
	// runs (lazy_itable_init).
	if out, err := runCmd(ctx, 5*time.Minute, nil, "", "mkfs.ext4", "-F", "-q", "-O", features,
		"-N", strconv.FormatInt(inodes, 10), "-E", "lazy_itable_init=0,lazy_journal_init=0,nodiscard", f.img); err != nil {
		f.close()
		return nil, fmt.Errorf("mkfs.ext4: %v: %s", err, lastLine(out))
	}
	// Direct I/O: the image's pages are not cached a second time by the
	// host filesystem.
	out, err := runCmd(ctx, time.Minute, nil, "", "losetup", "--find", "--show", "--direct-io=on", f.img)
	if err != nil {
		f.close()
		return nil, fmt.Errorf("losetup: %v: %s", err, lastLine(out))
	}
	// The device comes last; warnings may come before it.
	words := strings.Fields(out)
	if len(words) == 0 || !strings.HasPrefix(words[len(words)-1], "/dev/") {
		f.close()
		return nil, fmt.Errorf("losetup printed no device: %s", lastLine(out))
	}
	f.loop = words[len(words)-1]
	os.MkdirAll(f.dir, 0o755)
	if out, err := runCmd(ctx, time.Minute, nil, "", "mount", "-t", "ext4", f.loop, f.dir); err != nil {
		f.close()
		return nil, fmt.Errorf("mount %s: %v: %s", f.loop, err, lastLine(out))
	}
	return f, nil
}

// hostJournal reports whether the ext4 filesystem that holds dir has a
// journal; false when that cannot be told.
func hostJournal(ctx context.Context, dir string) bool {
	dev, err := runCmd(ctx, 10*time.Second, nil, "", "findmnt", "-n", "-o", "SOURCE", "-T", dir)
	if err != nil {
		return false
	}
	out, err := runCmd(ctx, 10*time.Second, nil, "", "bash", "-c", `tune2fs -l "$1" | grep -i '^filesystem features'`, "_", strings.TrimSpace(dev))
	return err == nil && strings.Contains(out, "has_journal")
}

// close unmounts the filesystem, frees its loop device and deletes the
// image: whatever newScratchFS got to.
func (f *scratchFS) close() {
	ctx := context.Background()
	if f.loop != "" {
		runCmd(ctx, time.Minute, nil, "", "umount", f.dir)
		runCmd(ctx, time.Minute, nil, "", "losetup", "-d", f.loop)
	}
	os.Remove(f.img)
	os.Remove(f.dir)
}
