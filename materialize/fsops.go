package materialize

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
)

// Every write below DIR goes through a directory file descriptor and a
// single path component: directories are opened with openat2 and
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS from their parent's descriptor,
// files are made unnamed (O_TMPFILE) in their directory, or named in the
// state directory, and linked or renamed under their name with *at calls,
// and metadata is set on descriptors or with *at calls that do not follow
// symbolic links. A symlink that the archive (or anybody) made
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
	fd, _, err := makeDirBeneath(dirfd, name)
	return fd, err
}

// makeDirBeneath is mkdirBeneath that also reports whether it made the
// directory (rather than keeping one that was there).
func makeDirBeneath(dirfd int, name string) (fd int, made bool, err error) {
	if !validName(name) {
		return -1, false, fmt.Errorf("%w: %q", errBadName, name)
	}
	for attempt := 0; ; attempt++ {
		err := unix.Mkdirat(dirfd, name, 0o700)
		if err != nil && err != unix.EEXIST {
			return -1, false, fmt.Errorf("mkdir %s: %w", name, err)
		}
		made = err == nil
		fd, err := openDirBeneath(dirfd, name)
		if err == nil {
			return fd, made, nil
		}
		if attempt > 0 || (err != unix.ENOTDIR && err != unix.ELOOP && err != unix.EXDEV) {
			return -1, false, fmt.Errorf("open directory %s: %w", name, err)
		}
		// A file or a symlink where the directory goes: replace it,
		// as tar -x does.
		if err := unix.Unlinkat(dirfd, name, 0); err != nil {
			return -1, false, fmt.Errorf("replace %s with a directory: %w", name, err)
		}
	}
}

// plainDir reports whether files made in the directory open at fd get the
// creator's group and exactly the mode asked for less the umask: it is not
// setgid and has no default ACL. Directories made in a plain one by this
// job are plain too.
func plainDir(fd int) bool {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_ISGID != 0 {
		return false
	}
	_, err := unix.Fgetxattr(fd, "system.posix_acl_default", nil)
	return err == unix.ENODATA || err == unix.EOPNOTSUPP
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

// linkFd gives the unnamed file (O_TMPFILE) open at fd the name name in
// dirfd. Linking a descriptor needs CAP_DAC_READ_SEARCH; without it, the
// file is linked through its /proc/self/fd link.
func linkFd(fd, dirfd int, name string) error {
	if !validName(name) {
		return fmt.Errorf("%w: %q", errBadName, name)
	}
	err := unix.Linkat(fd, "", dirfd, name, unix.AT_EMPTY_PATH)
	if err == unix.ENOENT || err == unix.EPERM {
		err = linkFdProc(fd, dirfd, name)
	}
	if err != nil && err != unix.EEXIST {
		return fmt.Errorf("link %s: %w", name, err)
	}
	return err
}

// linkFdProc is linkFd without CAP_DAC_READ_SEARCH.
func linkFdProc(fd, dirfd int, name string) error {
	return unix.Linkat(unix.AT_FDCWD, fmt.Sprintf("/proc/self/fd/%d", fd), dirfd, name, unix.AT_SYMLINK_FOLLOW)
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
	if at.IsZero() {
		at = e.MTime
	}
	return [2]unix.Timespec{timespec(at), timespec(e.MTime)}
}

// timespec returns t for the kernel.
func timespec(t index.Time) unix.Timespec { return unix.Timespec{Sec: t.Sec, Nsec: int64(t.Nsec)} }

// statTime returns a time from a stat.
func statTime(ts unix.Timespec) index.Time { return index.Time{Sec: ts.Sec, Nsec: int32(ts.Nsec)} }

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
	chown    bool // running as root: owners (numeric), and with them setuid/setgid bits
	uid, gid int  // the owner of the files the job creates
	umask    uint32
}

// made is what creating a file already set: when ok, its owner is the
// job's (metaOpts.uid, gid) and its mode is mode, so setMetaFd skips the
// calls that would change nothing.
type made struct {
	ok   bool
	mode uint32
}

// mode returns the mode bits e gets in DIR.
func (m metaOpts) mode(e *index.Entry) uint32 { return m.modeOf(e.Mode) }

// modeOf returns the mode bits a member with the archive's mode bits gets
// in DIR.
func (m metaOpts) modeOf(archived uint32) uint32 {
	mode := archived & 0o7777
	if !m.chown {
		mode &^= unix.S_ISUID | unix.S_ISGID
	}
	return mode
}

// createPerm returns the mode to create a file with (in a plain
// directory) and what that creation sets: the final mode when the umask
// leaves it whole, it lets the owner read and write (a staged file is
// opened again), and it has no setuid, setgid or sticky bit (chown would
// clear the first two, and a file must not be setuid while its owner is
// still ours); otherwise 0600, changed once the file is written.
func (m metaOpts) createPerm(archived uint32, plain bool) (uint32, made) {
	mode := m.modeOf(archived)
	if !plain || mode&^0o777 != 0 || mode&0o600 != 0o600 || mode&m.umask != 0 {
		return 0o600, made{}
	}
	return mode, made{ok: true, mode: mode}
}

// processUmask returns the umask, from /proc/self/status: setting it to
// read it back would race with other goroutines creating files. Where
// that fails it returns 0o777, which makes createPerm always fall back.
func processUmask() uint32 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0o777
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			if u, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32); err == nil {
				return uint32(u)
			}
		}
	}
	return 0o777
}

// setMetaFd applies owner, mode, xattrs and times of e to the file or
// directory open at fd, in the order tar -x uses (chown clears setuid
// bits, so it goes before chmod), skipping what mk says is already so.
// Xattr failures go to warn. path names the file in messages; it is
// called only for one (a path is as long as the directory is deep).
func setMetaFd(fd int, e *index.Entry, xattrs []index.Xattr, m metaOpts, mk made, warn func(kind string, path string, err error), path func() string) error {
	if m.chown && !(mk.ok && int(e.UID) == m.uid && int(e.GID) == m.gid) {
		if err := unix.Fchown(fd, int(e.UID), int(e.GID)); err != nil {
			return fmt.Errorf("chown %s: %w", path(), err)
		}
	}
	if mode := m.mode(e); !(mk.ok && mk.mode == mode) {
		if err := unix.Fchmod(fd, mode); err != nil {
			return fmt.Errorf("chmod %s: %w", path(), err)
		}
	}
	for _, x := range xattrs {
		if err := unix.Fsetxattr(fd, x.Name, []byte(x.Value), 0); err != nil {
			warn("xattr not set", path(), err)
		}
	}
	ts := timespecs(e)
	if err := futimens(fd, &ts); err != nil {
		return fmt.Errorf("set times of %s: %w", path(), err)
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
		mode := m.mode(e)
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

// constPath is a path for setMetaFd that is already known.
func constPath(p string) func() string { return func() string { return p } }

// errBadName is a name that is not one path component.
var errBadName = errors.New("materialize: not a single path component")
