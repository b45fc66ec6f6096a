package fs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil"
)

// testFSName is the fs name of every test mount (fuse.tarmount-test in
// /proc/mounts), so that leftovers can be found and detached.
const testFSName = "tarmount-test"

// childMountEnv makes the test binary serve the fixture at the mountpoint
// it names instead of running tests (see TestUnmountDeadMount).
const childMountEnv = "TARMOUNT_FS_TEST_CHILD_MOUNT"

func TestMain(m *testing.M) {
	if mp := os.Getenv(childMountEnv); mp != "" {
		os.Exit(serveChild(mp))
	}
	os.Exit(m.Run())
}

// serveChild mounts the fixture at mp, says "ready" on stdout and serves
// until stdin closes.
func serveChild(mp string) int {
	server, err := Mount(mp, testArchive(), Options{Name: testFSName, FsName: "child"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := Unmount(mp); err != nil {
		fmt.Fprintln(os.Stderr, err)
	}
	server.Wait()
	return 0
}

func requireFUSE(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "mount tests need root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testutil.Missing(t, "no FUSE: %v", err)
	}
}

// mountTest mounts a at a fresh directory and unmounts it when the test
// ends, failed or not.
func mountTest(t *testing.T, a Archive, opts Options) (string, *fuse.Server) {
	t.Helper()
	requireFUSE(t)
	mp := t.TempDir()
	opts.Name = testFSName
	if opts.FsName == "" {
		opts.FsName = "test://" + t.Name()
	}
	server, err := Mount(mp, a, opts)
	if err != nil {
		t.Fatalf("Mount: %v", err)
	}
	t.Cleanup(func() { unmountAndWait(t, mp, server) })
	return mp, server
}

// unmountAndWait unmounts mp (lazily if busy) and waits for server to stop.
func unmountAndWait(t *testing.T, mp string, server *fuse.Server) {
	t.Helper()
	if err := Unmount(mp); err != nil && !errors.Is(err, ErrNotMounted) {
		if errors.Is(err, ErrBusy) {
			t.Errorf("cleanup: %v", err)
		} else {
			t.Errorf("cleanup: Unmount: got %v, want success", err)
			return
		}
	}
	if server == nil {
		return
	}
	if !serverDone(server, 10*time.Second) {
		t.Errorf("cleanup: server still running 10s after unmount")
	}
}

// wantStat is what stat(2) must say about entry id of a, derived from the
// fixture independently of the code under test.
func wantStat(a *fakeArchive, id index.EntryID) unix.Stat_t {
	e := a.entries[id].e
	typ := map[index.Type]uint32{
		index.TypeReg: unix.S_IFREG, index.TypeDir: unix.S_IFDIR, index.TypeSymlink: unix.S_IFLNK,
		index.TypeChar: unix.S_IFCHR, index.TypeBlock: unix.S_IFBLK, index.TypeFIFO: unix.S_IFIFO,
	}[e.Type]
	ts := func(t index.Time) unix.Timespec {
		if t.IsZero() {
			t = e.MTime
		}
		return unix.Timespec{Sec: t.Sec, Nsec: int64(t.Nsec)}
	}
	st := unix.Stat_t{
		Ino:   uint64(id) + 1,
		Mode:  typ | e.Mode,
		Nlink: uint64(e.Nlink),
		Uid:   e.UID,
		Gid:   e.GID,
		Mtim:  ts(e.MTime),
		Atim:  ts(e.ATime),
		Ctim:  ts(e.CTime),
	}
	switch e.Type {
	case index.TypeReg:
		st.Size = e.Size
	case index.TypeSymlink:
		st.Size = int64(len(e.Linkname))
	case index.TypeChar, index.TypeBlock:
		st.Rdev = unix.Mkdev(e.Devmajor, e.Devminor)
	}
	return st
}

func TestMountTree(t *testing.T) {
	a := testArchive()
	mp, _ := mountTest(t, a, Options{})

	var walk func(dir index.EntryID, rel string)
	walk = func(dir index.EntryID, rel string) {
		path := filepath.Join(mp, rel)
		des, err := os.ReadDir(path)
		if err != nil {
			t.Errorf("ReadDir %s: %v", rel, err)
			return
		}
		var gotNames, wantNames []string
		for _, de := range des {
			gotNames = append(gotNames, de.Name())
		}
		for _, c := range a.Children(dir) {
			wantNames = append(wantNames, c.Name)
		}
		if !slices.Equal(gotNames, wantNames) {
			t.Errorf("ReadDir %s: got %q, want %q", rel, gotNames, wantNames)
		}
		for _, c := range a.Children(dir) {
			crel := filepath.Join(rel, c.Name)
			cpath := filepath.Join(mp, crel)
			checkEntry(t, a, c.ID, crel, cpath)
			if a.entries[c.ID].e.Type == index.TypeDir {
				walk(c.ID, crel)
			}
		}
	}
	checkEntry(t, a, index.RootID, ".", mp)
	walk(index.RootID, "")
}

// checkEntry compares what the mount says about path with entry id of a.
func checkEntry(t *testing.T, a *fakeArchive, id index.EntryID, rel, path string) {
	t.Helper()
	fe := a.entries[id]
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		t.Errorf("Lstat %s: %v", rel, err)
		return
	}
	want := wantStat(a, id)
	got := unix.Stat_t{
		Ino: st.Ino, Mode: st.Mode, Nlink: st.Nlink, Uid: st.Uid, Gid: st.Gid,
		Size: st.Size, Rdev: st.Rdev, Mtim: st.Mtim, Atim: st.Atim, Ctim: st.Ctim,
	}
	if got != want {
		t.Errorf("Lstat %s:\ngot  %+v\nwant %+v", rel, got, want)
	}
	if fe.e.Type == index.TypeReg {
		if got, want := st.Blocks, (fe.e.Size+511)/512; got != want {
			t.Errorf("Lstat %s: blocks: got %d, want %d", rel, got, want)
		}
		if got, want := st.Blksize, int64(128<<10); got != want {
			t.Errorf("Lstat %s: blksize: got %d, want %d", rel, got, want)
		}
	}

	switch {
	case fe.e.Type == index.TypeReg && fe.readErr == nil && !fe.block && int64(len(fe.data)) == fe.e.Size:
		data, err := os.ReadFile(path)
		if err != nil {
			t.Errorf("ReadFile %s: %v", rel, err)
		} else if !bytes.Equal(data, fe.data) {
			t.Errorf("ReadFile %s: got %d bytes, want %d bytes (%.20q)", rel, len(data), len(fe.data), fe.data)
		}
	case fe.e.Type == index.TypeSymlink:
		target, err := os.Readlink(path)
		if err != nil || target != fe.e.Linkname {
			t.Errorf("Readlink %s: got %q, %v, want %q", rel, target, err, fe.e.Linkname)
		}
	}

	if fe.e.Type == index.TypeReg || fe.e.Type == index.TypeDir {
		var wantNames []string
		for _, x := range fe.xattrs {
			wantNames = append(wantNames, x.Name)
		}
		buf := make([]byte, 1024)
		n, err := unix.Llistxattr(path, buf)
		if err != nil {
			t.Errorf("Llistxattr %s: %v", rel, err)
		} else {
			gotNames := strings.FieldsFunc(string(buf[:n]), func(r rune) bool { return r == 0 })
			if !slices.Equal(gotNames, wantNames) {
				t.Errorf("Llistxattr %s: got %q, want %q", rel, gotNames, wantNames)
			}
		}
		for _, x := range fe.xattrs {
			size, err := unix.Lgetxattr(path, x.Name, nil)
			if err != nil || size != len(x.Value) {
				t.Errorf("Lgetxattr %s %s size: got %d, %v, want %d", rel, x.Name, size, err, len(x.Value))
			}
			n, err := unix.Lgetxattr(path, x.Name, buf)
			if err != nil || string(buf[:n]) != x.Value {
				t.Errorf("Lgetxattr %s %s: got %q, %v, want %q", rel, x.Name, buf[:n], err, x.Value)
			}
		}
	}
}

func TestMountOptions(t *testing.T) {
	mp, _ := mountTest(t, testArchive(), Options{FsName: "https://example.com/a b.tar"})
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var line string
	for sc.Scan() {
		if point, _, ok := parseMountinfoLine(sc.Text()); ok && point == mp {
			line = sc.Text()
		}
	}
	if line == "" {
		t.Fatalf("no line for %s in /proc/self/mountinfo", mp)
	}
	pre, post, _ := strings.Cut(line, " - ")
	mountOpts := strings.Split(strings.Fields(pre)[5], ",")
	after := strings.Fields(post)
	if got, want := after[0], "fuse."+testFSName; got != want {
		t.Errorf("fs type: got %q, want %q", got, want)
	}
	if got, want := unescapeOctal(after[1]), "https://example.com/a b.tar"; got != want {
		t.Errorf("source: got %q, want %q", got, want)
	}
	for _, o := range []string{"ro", "nosuid", "nodev"} {
		if !slices.Contains(mountOpts, o) {
			t.Errorf("mount options: got %q, want %q among them", mountOpts, o)
		}
	}
	superOpts := strings.Split(after[2], ",")
	for _, o := range []string{"ro", "default_permissions"} {
		if !slices.Contains(superOpts, o) {
			t.Errorf("super options: got %q, want %q among them", superOpts, o)
		}
	}
	if slices.Contains(superOpts, "allow_other") {
		t.Errorf("super options: got %q, want no allow_other", superOpts)
	}

	var sfs unix.Statfs_t
	if err := unix.Statfs(mp, &sfs); err != nil {
		t.Fatalf("Statfs: %v", err)
	}
	if sfs.Flags&unix.ST_RDONLY == 0 {
		t.Errorf("statfs flags: got %#x, want ST_RDONLY", sfs.Flags)
	}
	if sfs.Bsize != 4096 || sfs.Blocks == 0 || sfs.Files != uint64(testArchive().Len()) || sfs.Bfree != 0 {
		t.Errorf("statfs: got bsize %d blocks %d files %d bfree %d, want 4096, >0, %d, 0",
			sfs.Bsize, sfs.Blocks, sfs.Files, sfs.Bfree, testArchive().Len())
	}
}

func TestMountAllowOther(t *testing.T) {
	mp, _ := mountTest(t, testArchive(), Options{AllowOther: true})
	_, err := os.Stat(mp)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if point, _, ok := parseMountinfoLine(line); ok && point == mp {
			if !strings.Contains(line, "allow_other") {
				t.Errorf("mountinfo: got %q, want allow_other", line)
			}
			return
		}
	}
	t.Errorf("no line for %s in /proc/self/mountinfo", mp)
}

func TestMountErrors(t *testing.T) {
	a := testArchive()
	mp, _ := mountTest(t, a, Options{})
	tests := []struct {
		path string
		want syscall.Errno
	}{
		{"eio.bin", syscall.EIO},
		{"stale.bin", syscall.ESTALE},
		{"short.bin", syscall.EIO},
		{"missing", syscall.ENOENT},
		{"dir/missing", syscall.ENOENT},
		{"dir/file.txt/x", syscall.ENOTDIR},
	}
	for _, tc := range tests {
		t.Run(tc.path, func(t *testing.T) {
			_, err := os.ReadFile(filepath.Join(mp, tc.path))
			if !errors.Is(err, tc.want) {
				t.Errorf("ReadFile: got %v, want %v", err, tc.want)
			}
		})
	}
	// A negative lookup is cached, and so is the answer.
	for range 2 {
		if _, err := os.Lstat(filepath.Join(mp, "missing")); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("Lstat missing: got %v, want ENOENT", err)
		}
	}
}

func TestMountHardLinks(t *testing.T) {
	mp, _ := mountTest(t, testArchive(), Options{})
	a, err := os.Lstat(filepath.Join(mp, "hl1"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.Lstat(filepath.Join(mp, "dir/hl2"))
	if err != nil {
		t.Fatal(err)
	}
	if !os.SameFile(a, b) {
		t.Errorf("SameFile(hl1, dir/hl2): got false, want true")
	}
	for _, fi := range []os.FileInfo{a, b} {
		if got := fi.Sys().(*syscall.Stat_t).Nlink; got != 2 {
			t.Errorf("%s nlink: got %d, want 2", fi.Name(), got)
		}
	}
	data, err := os.ReadFile(filepath.Join(mp, "dir/hl2"))
	if err != nil || string(data) != "hard link\n" {
		t.Errorf("ReadFile dir/hl2: got %q, %v, want %q", data, err, "hard link\n")
	}
}

func TestMountWritesEROFS(t *testing.T) {
	mp, _ := mountTest(t, testArchive(), Options{})
	p := func(name string) string { return filepath.Join(mp, name) }
	tests := []struct {
		op string
		fn func() error
	}{
		{"open-wronly", func() error { f, err := os.OpenFile(p("dir/file.txt"), os.O_WRONLY, 0); closeIf(f); return err }},
		{"open-rdwr", func() error { f, err := os.OpenFile(p("dir/file.txt"), os.O_RDWR, 0); closeIf(f); return err }},
		{"open-trunc", func() error {
			f, err := os.OpenFile(p("dir/file.txt"), os.O_RDONLY|os.O_TRUNC, 0)
			closeIf(f)
			return err
		}},
		{"create", func() error { f, err := os.Create(p("new")); closeIf(f); return err }},
		{"create-excl", func() error {
			f, err := os.OpenFile(p("dir/new"), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			closeIf(f)
			return err
		}},
		{"tmpfile", func() error {
			fd, err := unix.Open(p("dir"), unix.O_TMPFILE|unix.O_WRONLY, 0o600)
			if err == nil {
				unix.Close(fd)
			}
			return err
		}},
		{"mkdir", func() error { return os.Mkdir(p("newdir"), 0o755) }},
		{"mknod-fifo", func() error { return unix.Mkfifo(p("newfifo"), 0o644) }},
		{"symlink", func() error { return os.Symlink("x", p("newlink")) }},
		{"link", func() error { return os.Link(p("hl1"), p("hl3")) }},
		{"rename", func() error { return os.Rename(p("empty"), p("empty2")) }},
		{"unlink", func() error { return os.Remove(p("empty")) }},
		{"rmdir", func() error { return unix.Rmdir(p("dir/sub")) }},
		{"chmod", func() error { return os.Chmod(p("dir/file.txt"), 0o600) }},
		{"chown", func() error { return os.Lchown(p("dir/file.txt"), 1, 1) }},
		{"truncate", func() error { return os.Truncate(p("dir/file.txt"), 0) }},
		{"utimes", func() error { return os.Chtimes(p("dir/file.txt"), time.Now(), time.Now()) }},
		{"setxattr", func() error { return unix.Lsetxattr(p("dir/file.txt"), "user.new", []byte("x"), 0) }},
		{"removexattr", func() error { return unix.Lremovexattr(p("dir/file.txt"), "user.comment") }},
	}
	for _, tc := range tests {
		t.Run(tc.op, func(t *testing.T) {
			if err := tc.fn(); !errors.Is(err, syscall.EROFS) {
				t.Errorf("got %v, want EROFS", err)
			}
		})
	}
	// Nothing changed.
	data, err := os.ReadFile(p("dir/file.txt"))
	if err != nil || string(data) != helloText {
		t.Errorf("dir/file.txt after writes: got %q, %v, want %q", data, err, helloText)
	}
}

func closeIf(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// TestMountParallelReads reads random ranges with 64 readers at once. Half
// of them use O_DIRECT, so that their reads reach the server instead of the
// page cache.
func TestMountParallelReads(t *testing.T) {
	a := testArchive()
	mp, _ := mountTest(t, a, Options{})
	files := []string{"big.bin", "sparse.img", "dir/file.txt"}
	const readers, readsEach = 64, 40
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 7))
			name := files[r%len(files)]
			direct := r%2 == 1
			id, _ := a.id(name)
			want := a.entries[id].data
			flags := unix.O_RDONLY | unix.O_CLOEXEC
			if direct {
				flags |= unix.O_DIRECT
			}
			fd, err := unix.Open(filepath.Join(mp, name), flags, 0)
			if err != nil {
				errs <- err
				return
			}
			defer unix.Close(fd)
			buf := make([]byte, 300<<10)
			for range readsEach {
				off := rng.Int64N(int64(len(want)) + 10)
				n := rng.IntN(len(buf)) + 1
				got, err := preadFull(fd, buf[:n], off)
				if err != nil {
					errs <- fmt.Errorf("%s (direct %v): pread(%d, %d): %w", name, direct, n, off, err)
					return
				}
				lo := min(off, int64(len(want)))
				hi := min(off+int64(n), int64(len(want)))
				if !bytes.Equal(buf[:got], want[lo:hi]) {
					errs <- fmt.Errorf("%s (direct %v): pread(%d, %d): got %d bytes, want %d, or different bytes", name, direct, n, off, got, hi-lo)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if a.reads.Load() == 0 {
		t.Errorf("archive reads: got 0, want some")
	}
}

// preadFull reads until p is full or the file ends, retrying EINTR (the Go
// runtime's preemption signals interrupt FUSE requests).
func preadFull(fd int, p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		n, err := unix.Pread(fd, p[done:], off+int64(done))
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return done, err
		}
		if n == 0 {
			break
		}
		done += n
	}
	return done, nil
}

func TestMountInterruptedRead(t *testing.T) {
	a := testArchive()
	mp, _ := mountTest(t, a, Options{})
	// O_DIRECT: the read is a synchronous READ request, which a signal
	// interrupts. A buffered read goes through readahead, whose requests
	// the kernel sends in the background and does not interrupt: there,
	// only a fatal signal frees the reader, and the archive's own time
	// limit frees the server.
	fd, err := unix.Open(filepath.Join(mp, "slow.bin"), unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)

	tids := make(chan int, 1)
	result := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tids <- unix.Gettid()
		// A raw pread: os.File would retry on EINTR.
		_, err := unix.Pread(fd, make([]byte, 10), 0)
		result <- err
	}()
	tid := <-tids
	select {
	case <-a.blocked:
	case <-time.After(10 * time.Second):
		t.Fatal("the read never reached the archive")
	}
	// Any caught signal makes the kernel send FUSE_INTERRUPT; SIGURG is
	// the one the Go runtime ignores.
	if err := unix.Tgkill(os.Getpid(), tid, unix.SIGURG); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	select {
	case err := <-result:
		if !errors.Is(err, syscall.EINTR) {
			t.Errorf("pread: got %v, want EINTR", err)
		}
		if d := time.Since(start); d > blockLimit/2 {
			t.Errorf("pread returned %v after the signal, want at once", d)
		}
	case <-time.After(blockLimit + 5*time.Second):
		t.Fatal("pread still blocked after the signal")
	}
}

func TestUnmountBusy(t *testing.T) {
	a := testArchive()
	mp, server := mountTest(t, a, Options{})
	f, err := os.Open(filepath.Join(mp, "dir/file.txt"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()

	err = Unmount(mp)
	if !errors.Is(err, ErrBusy) {
		t.Fatalf("Unmount with an open file: got %v, want ErrBusy", err)
	}
	if msg := err.Error(); !strings.Contains(msg, mp) || !strings.Contains(msg, "lazily") {
		t.Errorf("message: got %q, want the mountpoint and \"lazily\" in it", msg)
	}
	if _, found, err := mountType(mp); err != nil || found {
		t.Errorf("after lazy detach: mounted %v (err %v), want gone from mountinfo", found, err)
	}
	// The open file still reads.
	buf := make([]byte, 64)
	n, err := f.ReadAt(buf, 0)
	if err != nil && err != io.EOF || string(buf[:n]) != helloText {
		t.Errorf("read after detach: got %q, %v, want %q", buf[:n], err, helloText)
	}
	// Closing the last file releases the mount and ends the server.
	f.Close()
	if !serverDone(server, 10*time.Second) {
		t.Fatal("server still running 10s after the last file was closed")
	}
	if err := Unmount(mp); !errors.Is(err, ErrNotMounted) {
		t.Errorf("second Unmount: got %v, want ErrNotMounted", err)
	}
}

func TestUnmountClean(t *testing.T) {
	mp, server := mountTest(t, testArchive(), Options{})
	if _, err := os.ReadFile(filepath.Join(mp, "dir/file.txt")); err != nil {
		t.Fatal(err)
	}
	if err := Unmount(mp); err != nil {
		t.Fatalf("Unmount: got %v, want success", err)
	}
	if !serverDone(server, 10*time.Second) {
		t.Fatal("server still running 10s after Unmount")
	}
	if des, err := os.ReadDir(mp); err != nil || len(des) != 0 {
		t.Errorf("mountpoint after Unmount: got %d entries, %v, want an empty dir", len(des), err)
	}
}

func TestUnmountDeadMount(t *testing.T) {
	requireFUSE(t)
	mp := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childMountEnv+"="+mp)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if err := Unmount(mp); err != nil && !errors.Is(err, ErrNotMounted) {
			t.Errorf("cleanup: %v", err)
		}
	})
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
	}()
	select {
	case line := <-ready:
		if line != "ready\n" {
			t.Fatalf("child: got %q, want \"ready\"", line)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("child did not mount within 30s")
	}
	data, err := os.ReadFile(filepath.Join(mp, "dir/file.txt"))
	if err != nil || string(data) != helloText {
		t.Fatalf("read through the child's mount: got %q, %v, want %q", data, err, helloText)
	}

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	var sfs unix.Statfs_t
	if err := unix.Statfs(mp, &sfs); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("Statfs of the dead mount: got %v, want ENOTCONN", err)
	}
	if _, err := os.ReadDir(mp); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("ReadDir of the dead mount: got %v, want ENOTCONN", err)
	}
	if server, err := Mount(mp, testArchive(), Options{Name: testFSName}); !errors.Is(err, syscall.ENOTCONN) || !strings.Contains(err.Error(), "dead") {
		t.Errorf("Mount on the dead mount: got %v, want an ENOTCONN error that says the mount is dead", err)
		if err == nil {
			unmountAndWait(t, mp, server)
		}
	}
	if err := Unmount(mp); err != nil {
		t.Fatalf("Unmount of the dead mount: got %v, want success", err)
	}
	if _, found, err := mountType(mp); err != nil || found {
		t.Errorf("after Unmount: mounted %v (err %v), want gone", found, err)
	}
	if des, err := os.ReadDir(mp); err != nil || len(des) != 0 {
		t.Errorf("mountpoint after Unmount: got %d entries, %v, want an empty dir", len(des), err)
	}
}

func TestMountTwice(t *testing.T) {
	mp, _ := mountTest(t, testArchive(), Options{})
	server, err := Mount(mp, testArchive(), Options{Name: testFSName})
	if !errors.Is(err, ErrMounted) {
		t.Errorf("second Mount: got %v, want ErrMounted", err)
		if err == nil {
			unmountAndWait(t, mp, server)
		}
	}
}

// TestMountErrorsSayItOnce checks that the errors of Mount and Unmount
// name the operation and the mountpoint once, with the cause after them.
func TestMountErrorsSayItOnce(t *testing.T) {
	mp, _ := mountTest(t, testArchive(), Options{})
	idle := t.TempDir()
	tests := []struct {
		name string
		run  func() error
		want string
	}{
		{"mount over a mount", func() error {
			server, err := Mount(mp, testArchive(), Options{Name: testFSName})
			if err == nil {
				unmountAndWait(t, mp, server)
			}
			return err
		}, "mount " + mp + ": fs: already mounted (a fuse." + testFSName + " filesystem)"},
		{"unmount what is not mounted", func() error { return Unmount(idle) },
			"unmount " + idle + ": fs: not mounted"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.run(); err == nil || err.Error() != tt.want {
				t.Errorf("got %v, want %s", err, tt.want)
			}
		})
	}
}

// lockedBuffer is a bytes.Buffer safe for concurrent writers.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestMountDebugLog(t *testing.T) {
	var out lockedBuffer
	logger := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	mp, _ := mountTest(t, testArchive(), Options{Debug: true, Logger: logger})
	if _, err := os.Lstat(filepath.Join(mp, "dir")); err != nil {
		t.Fatal(err)
	}
	log := out.String()
	for _, want := range []string{`level=INFO msg=mounted`, `level=DEBUG msg="rx `, `LOOKUP`, `component=go-fuse`} {
		if !strings.Contains(log, want) {
			t.Errorf("log: got %q, want %q in it", log, want)
		}
	}
}

// serverDone waits up to d for server to stop serving and reports whether
// it did.
func serverDone(server *fuse.Server, d time.Duration) bool {
	done := make(chan struct{})
	go func() {
		server.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
