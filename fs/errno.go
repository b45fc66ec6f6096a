package fs

import (
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"strings"
	"syscall"

	"github.com/tarmount/tarmount/index"
)

// toErrno maps an error from the archive to the errno a FUSE request
// answers:
//
//	nil                                    0
//	context.Canceled (request interrupted) EINTR
//	a syscall.Errno                        that errno
//	fs.ErrNotExist                         ENOENT
//	index.ErrChanged (the source changed)  ESTALE, as NFS answers for a
//	                                       file replaced on the server
//	anything else, deadlines included      EIO
//
// It does not log; see tree.fail.
func toErrno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if errors.Is(err, context.Canceled) {
		return syscall.EINTR
	}
	var e syscall.Errno
	if errors.As(err, &e) && e != 0 {
		return e
	}
	if errors.Is(err, fs.ErrNotExist) {
		return syscall.ENOENT
	}
	if errors.Is(err, index.ErrChanged) {
		return syscall.ESTALE
	}
	return syscall.EIO
}

// fail turns err from operation op on entry id at offset off into an errno.
// Errors other than "not found" and "interrupted" are logged at Error level
// once per entry (later ones at Debug): this is the boundary where an error
// reaches a user, and a dead source must not flood the log.
func (t *tree) fail(op string, id index.EntryID, off int64, err error) syscall.Errno {
	errno := toErrno(err)
	if errno == syscall.ENOENT || errno == syscall.EINTR {
		t.log.Debug("request failed", "op", op, "ino", inodeNumber(id), "off", off, "err", err)
		return errno
	}
	level := slog.LevelDebug
	t.mu.Lock()
	if _, seen := t.logged[id]; !seen {
		level = slog.LevelError
		if len(t.logged) < maxLoggedEntries {
			t.logged[id] = struct{}{}
		}
	}
	t.mu.Unlock()
	if t.log.Enabled(context.Background(), level) {
		t.log.Log(context.Background(), level, "request failed",
			"op", op, "path", t.path(id), "ino", inodeNumber(id), "off", off, "errno", errno.Error(), "err", err)
	}
	return errno
}

// path names id for logs: its first name, from the root.
func (t *tree) path(id index.EntryID) string {
	var parts []string
	for i := 0; id != index.RootID && i < maxPathDepth; i++ {
		e := t.a.Entry(id)
		if e == nil {
			parts = append(parts, "?")
			break
		}
		parts = append(parts, e.Name)
		id = e.Parent
	}
	var b strings.Builder
	for i := len(parts) - 1; i >= 0; i-- {
		b.WriteByte('/')
		b.WriteString(parts[i])
	}
	if b.Len() == 0 {
		return "/"
	}
	return b.String()
}
