// Package atomicfile creates the temporary files that tarmount writes a
// file under before renaming it over its real name, so that a reader
// never sees half of it.
package atomicfile

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CreateTemp creates a new file in dir, named by pattern as os.CreateTemp
// names them (the last "*" replaced by a random string), with mode 0644
// less the process's umask: the mode of files tarmount writes, which
// os.CreateTemp's 0600 is not (an index published through a web server
// must be readable by it).
func CreateTemp(dir, pattern string) (*os.File, error) {
	prefix, suffix := pattern, ""
	if i := strings.LastIndexByte(pattern, '*'); i >= 0 {
		prefix, suffix = pattern[:i], pattern[i+1:]
	}
	for range 10000 {
		name := filepath.Join(dir, prefix+strconv.FormatUint(rand.Uint64(), 36)+suffix)
		f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, &os.PathError{Op: "createtemp", Path: filepath.Join(dir, pattern), Err: os.ErrExist}
}
