package fs

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

var (
	// ErrBusy says that Unmount found the mount in use (open files, a
	// working directory) and detached it lazily instead: it is gone from
	// the tree, and the kernel releases it, ending server.Wait, when its
	// last user lets go. The unmount has succeeded; callers report the
	// message and carry on.
	ErrBusy = errors.New("fs: mount busy")
	// ErrNotMounted says that Unmount found no mount at the path.
	ErrNotMounted = errors.New("fs: not mounted")
	// ErrMounted says that Mount found a FUSE filesystem mounted at the
	// mountpoint already.
	ErrMounted = errors.New("fs: already mounted")
	// ErrNotFUSE says that the mount at the path is not a FUSE mount,
	// which Unmount refuses to touch.
	ErrNotFUSE = errors.New("fs: not a FUSE mount")
)

// Unmount unmounts the FUSE filesystem at mountpoint, live or dead (its
// server killed, every access failing with ENOTCONN).
//
// If the mount is in use, Unmount detaches it lazily and returns an error
// wrapping ErrBusy that says so; the mountpoint is free at once. It returns
// ErrNotMounted if nothing is mounted there and ErrNotFUSE, touching
// nothing, if the mount is not FUSE. As root it calls umount2(2); otherwise
// it runs fusermount3 (or fusermount) -u, and -u -z when busy.
//
// Unmount is safe for concurrent use, though two calls on one mountpoint
// race as umount(8) would.
func Unmount(mountpoint string) error {
	target, err := mountTarget(mountpoint)
	if err != nil {
		return fmt.Errorf("unmount %s: %w", mountpoint, err)
	}
	fstype, found, err := mountType(target)
	switch {
	case err != nil:
		return fmt.Errorf("unmount %s: %w", mountpoint, err)
	case !found:
		return fmt.Errorf("unmount %s: %w", mountpoint, ErrNotMounted)
	case !isFUSE(fstype):
		return fmt.Errorf("unmount %s: %w (type %s)", mountpoint, ErrNotFUSE, fstype)
	}

	err = unix.Unmount(target, 0)
	switch err {
	case nil:
		return nil
	case unix.EBUSY:
		if err := unix.Unmount(target, unix.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: busy, and lazy detach failed: %w", mountpoint, err)
		}
		return busyError(mountpoint)
	case unix.EINVAL:
		return fmt.Errorf("unmount %s: %w", mountpoint, ErrNotMounted)
	case unix.EPERM:
		return fusermountUnmount(mountpoint, target)
	default:
		return fmt.Errorf("unmount %s: %w", mountpoint, err)
	}
}

func busyError(mountpoint string) error {
	return fmt.Errorf("%w: %s is in use (open files or a working directory inside); "+
		"detached it lazily: it is gone from the tree now and is released when its last user lets go",
		ErrBusy, mountpoint)
}

// fusermountUnmount unmounts with the setuid helper, for users without
// CAP_SYS_ADMIN.
func fusermountUnmount(mountpoint, target string) error {
	bin, err := exec.LookPath("fusermount3")
	if err != nil {
		if bin, err = exec.LookPath("fusermount"); err != nil {
			return fmt.Errorf("unmount %s: not permitted, and no fusermount3 to ask: %w", mountpoint, err)
		}
	}
	out, err := exec.Command(bin, "-u", target).CombinedOutput()
	if err == nil {
		return nil
	}
	if !bytes.Contains(bytes.ToLower(out), []byte("busy")) {
		return fmt.Errorf("unmount %s: %s -u: %w: %s", mountpoint, filepath.Base(bin), err, bytes.TrimSpace(out))
	}
	out, err = exec.Command(bin, "-u", "-z", target).CombinedOutput()
	if err != nil {
		return fmt.Errorf("unmount %s: busy, and %s -u -z failed: %w: %s", mountpoint, filepath.Base(bin), err, bytes.TrimSpace(out))
	}
	return busyError(mountpoint)
}

// mountTarget returns the absolute path of mountpoint as /proc/self/mountinfo
// shows it: the parent directory with symbolic links resolved, joined with
// the last element. The mountpoint itself is never touched: on a dead mount
// that fails with ENOTCONN, and on a live one it is a request to the server.
func mountTarget(mountpoint string) (string, error) {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return "", err
	}
	if abs == "/" {
		return abs, nil
	}
	dir, err := filepath.EvalSymlinks(filepath.Dir(abs))
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, filepath.Base(abs)), nil
}

func isFUSE(fstype string) bool {
	return fstype == "fuse" || fstype == "fuseblk" || strings.HasPrefix(fstype, "fuse.")
}

// mountType returns the filesystem type of the topmost mount at target, an
// absolute clean path, from /proc/self/mountinfo.
func mountType(target string) (fstype string, found bool, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		point, typ, ok := parseMountinfoLine(sc.Text())
		if ok && point == target {
			// Later lines are mounted on top of earlier ones.
			fstype, found = typ, true
		}
	}
	return fstype, found, sc.Err()
}

// parseMountinfoLine returns the mount point and filesystem type of one
// line of /proc/self/mountinfo:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
//	               (4)  (5)                      (sep) (fstype)
func parseMountinfoLine(line string) (point, fstype string, ok bool) {
	pre, post, ok := strings.Cut(line, " - ")
	if !ok {
		return "", "", false
	}
	fields := strings.Fields(pre)
	after := strings.Fields(post)
	if len(fields) < 5 || len(after) < 1 {
		return "", "", false
	}
	return unescapeOctal(fields[4]), after[0], true
}

// unescapeOctal undoes the kernel's \ooo escapes of space, tab, newline and
// backslash in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return '0' <= c && c <= '7' }
