// Package xattr reads the user.* extended attributes of a file, without
// following a symlink: what tarmount pack archives, and what the tests'
// tar writer and tree comparison read. It imports no tarmount package.
package xattr

import (
	"errors"
	"os"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// State is the extended attribute in which tarmount keeps the state of a
// directory it extracts into (materialize's state.go): tarmount's, not
// the tree's, so User leaves it out.
const State = "user.tarmount.state"

// User returns the user.* extended attributes of path, without
// following a symlink, but State. A filesystem without xattr support has
// none.
func User(path string) (map[string]string, error) {
	names, err := listXattrs(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, name := range names {
		if !strings.HasPrefix(name, "user.") || name == State {
			continue
		}
		v, err := getXattr(path, name)
		if errors.Is(err, unix.ENODATA) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		out[name] = v
	}
	return out, nil
}

func isNoXattrSupport(err error) bool {
	return errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, syscall.ENOSYS)
}

func listXattrs(path string) ([]string, error) {
	buf := make([]byte, 1024)
	for {
		n, err := unix.Llistxattr(path, buf)
		if isNoXattrSupport(err) {
			return nil, nil
		}
		if errors.Is(err, unix.ERANGE) {
			sz, err := unix.Llistxattr(path, nil)
			if err != nil {
				return nil, &os.PathError{Op: "llistxattr", Path: path, Err: err}
			}
			buf = make([]byte, sz+1024)
			continue
		}
		if err != nil {
			return nil, &os.PathError{Op: "llistxattr", Path: path, Err: err}
		}
		var names []string
		for _, s := range strings.Split(string(buf[:n]), "\x00") {
			if s != "" {
				names = append(names, s)
			}
		}
		return names, nil
	}
}

func getXattr(path, name string) (string, error) {
	buf := make([]byte, 256)
	for {
		n, err := unix.Lgetxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			sz, err := unix.Lgetxattr(path, name, nil)
			if err != nil {
				return "", &os.PathError{Op: "lgetxattr " + name, Path: path, Err: err}
			}
			buf = make([]byte, sz+256)
			continue
		}
		if err != nil {
			return "", &os.PathError{Op: "lgetxattr " + name, Path: path, Err: err}
		}
		return string(buf[:n]), nil
	}
}
