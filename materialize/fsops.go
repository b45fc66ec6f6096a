package materialize

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
)

// Every write below DIR goes through a directory file descriptor and a
// single path component: directories are opened with openat2 and
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS from their parent's descriptor, files
// are made in the state directory and renamed into their directory with
// renameat, and metadata is set on descriptors or with *at calls that do
// not follow symbolic links. A symlink that the archive (or anybody) made
// under DIR is therefore never followed while writing, whatever it points
// at. Component names are also checked (validName) before any call.

// validName reports whether name is one path component that stays in its
// directory.
func validName(name string) bool {
	return name != "" && name != "." && name != ".." && !strings.ContainsAny(name, "/\x00") && len(name) <= 255
}

// openDirBeneath opens directory name in dirfd without following any
// symbolic link and without leaving dirfd.
func openDirBeneath(dirfd int, name string) (int, error) {
	if !validName(name) {
		return -1, fmt.Errorf("%w: %q", errBadName, name)
	}
	for {
		fd, err := unix.Openat2(dirfd, name, &unix.OpenHow{
			Flags:   unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err == unix.EINTR || err == unix.EAGAIN {
			continue
		}
		if err == unix.ENOSYS {
			// Kernels before 5.6: one validated component with
			// O_NOFOLLOW cannot leave dirfd either.
			fd, err = unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		}
		return fd, err
	}
}

// mkdirBeneath makes directory name in dirfd (or keeps the one there)
// and opens it. Anything else in the way is removed.
func mkdirBeneath(dirfd int, name string) (int, error) {
	if !validName(name) {
		return -1, fmt.Errorf("%w: %q", errBadName, name)
	}
	for attempt := 0; ; attempt++ {
		err := unix.Mkdirat(dirfd, name, 0o700)
		if err != nil && err != unix.EEXIST {
			return -1, fmt.Errorf("mkdir %s: %w", name, err)
		}
		fd, err := openDirBeneath(dirfd, name)
		if err == nil {
			return fd, nil
		}
		if attempt > 0 || (err != unix.ENOTDIR && err != unix.ELOOP && err != unix.EXDEV) {
			return -1, fmt.Errorf("open directory %s: %w", name, err)
		}
		// A file or a symlink where the directory goes: replace it,
		// as tar -x does.
		if err := unix.Unlinkat(dirfd, name, 0); err != nil {
			return -1, fmt.Errorf("replace %s with a directory: %w", name, err)
		}
	}
}

// removeTree removes name in dirfd, recursively when it is a directory,
// without following symbolic links.
func removeTree(dirfd int, name string) error {
	err := unix.Unlinkat(dirfd, name, 0)
	if err == nil || err == unix.ENOENT {
		return nil
	}
	if err != unix.EISDIR && err != unix.EPERM {
		return err
	}
	fd, err := openDirBeneath(dirfd, name)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(fd), name)
	for {
		ents, rerr := d.ReadDir(1024)
		for _, e := range ents {
			if err := removeTree(fd, e.Name()); err != nil {
				d.Close()
				return err
			}
		}
		if rerr != nil || len(ents) == 0 {
			break
		}
	}
	d.Close()
	if err := unix.Unlinkat(dirfd, name, unix.AT_REMOVEDIR); err != nil && err != unix.ENOENT {
		return err
	}
	return nil
}

// renameInto moves tmp (in tmpfd) to name in dirfd, replacing what is
// there; a directory in the way is removed first.
func renameInto(tmpfd int, tmp string, dirfd int, name string) error {
	if !validName(name) {
		return fmt.Errorf("%w: %q", errBadName, name)
	}
	err := unix.Renameat(tmpfd, tmp, dirfd, name)
	if err == unix.EISDIR || err == unix.ENOTEMPTY || err == unix.EEXIST || err == unix.ENOTDIR {
		if err := removeTree(dirfd, name); err != nil {
			return fmt.Errorf("remove %s: %w", name, err)
		}
		err = unix.Renameat(tmpfd, tmp, dirfd, name)
	}
	if err != nil {
		return fmt.Errorf("rename into %s: %w", name, err)
	}
	return nil
}

// linkInto makes name in dirfd a hard link to oldname in olddirfd,
// replacing what is there (through a temporary name in tmpfd).
func linkInto(olddirfd int, oldname string, dirfd int, name string, tmpfd int, tmp string) error {
	if !validName(name) || !validName(oldname) {
		return fmt.Errorf("%w: %q", errBadName, name)
	}
	err := unix.Linkat(olddirfd, oldname, dirfd, name, 0)
	if err == nil {
		return nil
	}
	if err != unix.EEXIST {
		return fmt.Errorf("link %s: %w", name, err)
	}
	unix.Unlinkat(tmpfd, tmp, 0)
	if err := unix.Linkat(olddirfd, oldname, tmpfd, tmp, 0); err != nil {
		return fmt.Errorf("link %s: %w", name, err)
	}
	return renameInto(tmpfd, tmp, dirfd, name)
}

// timespecs returns atime and mtime of e for utimensat: atime is the
// archive's when it has one, else mtime.
func timespecs(e *index.Entry) [2]unix.Timespec {
	at := e.ATime
	if at == 0 {
		at = e.MTime
	}
	return [2]unix.Timespec{unix.NsecToTimespec(at), unix.NsecToTimespec(e.MTime)}
}

// futimens sets the times of the file open at fd (utimensat with a NULL
// path, which x/sys/unix does not wrap).
func futimens(fd int, ts *[2]unix.Timespec) error {
	_, _, errno := syscall.Syscall6(syscall.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(ts)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// metaOpts says which metadata can be applied.
type metaOpts struct {
	chown bool // running as root: owners (numeric), and with them setuid/setgid bits
}

// setMetaFd applies owner, mode, xattrs and times of e to the file or
// directory open at fd, in the order tar -x uses (chown clears setuid
// bits, so it goes before chmod). Xattr failures go to warn.
func setMetaFd(fd int, e *index.Entry, xattrs []index.Xattr, m metaOpts, warn func(kind string, path string, err error), path string) error {
	if m.chown {
		if err := unix.Fchown(fd, int(e.UID), int(e.GID)); err != nil {
			return fmt.Errorf("chown %s: %w", path, err)
		}
	}
	mode := e.Mode & 0o7777
	if !m.chown {
		mode &^= unix.S_ISUID | unix.S_ISGID
	}
	if err := unix.Fchmod(fd, mode); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	for _, x := range xattrs {
		if err := unix.Fsetxattr(fd, x.Name, []byte(x.Value), 0); err != nil {
			warn("xattr not set", path, err)
		}
	}
	ts := timespecs(e)
	if err := futimens(fd, &ts); err != nil {
		return fmt.Errorf("set times of %s: %w", path, err)
	}
	return nil
}

// setMetaAt applies owner, mode, xattrs and times of e to name in dirfd
// without following it (symlinks, devices, fifos, which cannot be opened
// for this).
func setMetaAt(dirfd int, name string, e *index.Entry, xattrs []index.Xattr, m metaOpts, warn func(kind string, path string, err error), path string) error {
	if m.chown {
		if err := unix.Fchownat(dirfd, name, int(e.UID), int(e.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return fmt.Errorf("chown %s: %w", path, err)
		}
	}
	if e.Type != index.TypeSymlink {
		mode := e.Mode & 0o7777
		if !m.chown {
			mode &^= unix.S_ISUID | unix.S_ISGID
		}
		// The name is the device or fifo just made in the state
		// directory: nothing to follow.
		if err := unix.Fchmodat(dirfd, name, mode, 0); err != nil {
			return fmt.Errorf("chmod %s: %w", path, err)
		}
	}
	if len(xattrs) > 0 {
		// lsetxattr through the directory descriptor's /proc link: the
		// final component is not followed.
		p := fmt.Sprintf("/proc/self/fd/%d/%s", dirfd, name)
		for _, x := range xattrs {
			if err := unix.Lsetxattr(p, x.Name, []byte(x.Value), 0); err != nil {
				warn("xattr not set", path, err)
			}
		}
	}
	ts := timespecs(e)
	if err := unix.UtimesNanoAt(dirfd, name, ts[:], unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("set times of %s: %w", path, err)
	}
	return nil
}

// errBadName is a name that is not one path component.
var errBadName = errors.New("materialize: not a single path component")
