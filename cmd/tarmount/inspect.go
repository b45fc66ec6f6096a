package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tarmount/tarmount/index"
)

// Inspection without a mount: ls, stat, cat and get open the archive as a
// mount does (the saved or given index, else one pass that saves it) and
// read members through the same span reader, so that cat and get fetch
// only the spans that hold the members asked for.

// inspectFlags are the flags of ls, stat and get.
type inspectFlags struct {
	json bool   // ls, stat: JSON lines
	long bool   // ls -l
	dir  string // get -C DIR
}

func (f *inspectFlags) register(fs interface {
	BoolVar(*bool, string, bool, string)
	StringVar(*string, string, string, string)
}) {
	fs.BoolVar(&f.json, "json", false, "ls, stat: one JSON object per entry (path, type, size, mode, uid, gid, uname, gname, mtime, link, offset, ...)")
	fs.BoolVar(&f.long, "l", false, "ls: long listing, like tar -tv")
	fs.StringVar(&f.dir, "C", ".", "get: directory to write the members into")
}

// entryJSON is one line of ls --json and stat --json.
type entryJSON struct {
	Path string `json:"path"`
	Type string `json:"type"` // file, dir, symlink, hardlink, char, block, fifo
	// Size is the member's size as tar -tv shows it: the file's size for
	// the name that stores the data (a sparse file's real size), 0 for
	// its other names (hard links), symlinks, directories and devices.
	Size  int64  `json:"size"`
	Mode  string `json:"mode"` // octal permission bits with setuid/setgid/sticky, e.g. "0755"
	UID   uint32 `json:"uid"`
	GID   uint32 `json:"gid"`
	Uname string `json:"uname,omitempty"`
	Gname string `json:"gname,omitempty"`
	// MTime is RFC 3339 with nanoseconds, in UTC; MTimeNs the same in
	// nanoseconds since the epoch.
	MTime   string `json:"mtime"`
	MTimeNs int64  `json:"mtime_ns"`
	// Link is a symlink's target, or for a hard link the path of the
	// name it links to (the member stored with the data).
	Link string `json:"link,omitempty"`
	// Offset is where the member's data starts in the decoded tar stream
	// (regular files with data only).
	Offset  *int64            `json:"offset,omitempty"`
	Devmaj  uint32            `json:"devmajor,omitempty"`
	Devmin  uint32            `json:"devminor,omitempty"`
	Inode   uint32            `json:"inode"`
	Nlink   uint32            `json:"nlink"`
	Sparse  bool              `json:"sparse,omitempty"`
	Stored  *int64            `json:"stored_size,omitempty"` // bytes of data stored in the archive, when it differs from size (sparse)
	Xattrs  map[string]string `json:"xattrs,omitempty"`
	ATimeNs int64             `json:"atime_ns,omitempty"`
	CTimeNs int64             `json:"ctime_ns,omitempty"`
}

// appendJSON appends j as encoding/json would marshal it (fields in
// order, omitempty, map keys sorted, no HTML escaping), then a newline:
// ls --json of a million entries spends half its time in reflection
// otherwise.
func (j *entryJSON) appendJSON(b []byte) []byte {
	str := func(key, v string, omitEmpty bool) {
		if omitEmpty && v == "" {
			return
		}
		b = append(b, ',', '"')
		b = append(b, key...)
		b = append(b, '"', ':')
		b = appendJSONString(b, v)
	}
	num := func(key string, v int64, omitEmpty bool) {
		if omitEmpty && v == 0 {
			return
		}
		b = append(b, ',', '"')
		b = append(b, key...)
		b = append(b, '"', ':')
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, `{"path":`...)
	b = appendJSONString(b, j.Path)
	str("type", j.Type, false)
	num("size", j.Size, false)
	str("mode", j.Mode, false)
	num("uid", int64(j.UID), false)
	num("gid", int64(j.GID), false)
	str("uname", j.Uname, true)
	str("gname", j.Gname, true)
	str("mtime", j.MTime, false)
	num("mtime_ns", j.MTimeNs, false)
	str("link", j.Link, true)
	if j.Offset != nil {
		num("offset", *j.Offset, false)
	}
	num("devmajor", int64(j.Devmaj), true)
	num("devminor", int64(j.Devmin), true)
	num("inode", int64(j.Inode), false)
	num("nlink", int64(j.Nlink), false)
	if j.Sparse {
		b = append(b, `,"sparse":true`...)
	}
	if j.Stored != nil {
		num("stored_size", *j.Stored, false)
	}
	if len(j.Xattrs) > 0 {
		b = append(b, `,"xattrs":{`...)
		for i, k := range slices.Sorted(maps.Keys(j.Xattrs)) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			b = appendJSONString(b, j.Xattrs[k])
		}
		b = append(b, '}')
	}
	num("atime_ns", j.ATimeNs, true)
	num("ctime_ns", j.CTimeNs, true)
	return append(b, '}', '\n')
}

// appendJSONString appends s as a JSON string, as encoding/json writes
// it without HTML escaping: invalid UTF-8 becomes U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// describeEntry says what name p (of entry id) is.
func describeEntry(ix *index.Index, p string, id index.EntryID) entryJSON {
	e := ix.Entry(id)
	j := entryJSON{
		Path: p, Type: e.Type.String(), Size: e.Size, Mode: fmt.Sprintf("%04o", e.Mode),
		UID: e.UID, GID: e.GID, Uname: e.Uname, Gname: e.Gname,
		MTime: time.Unix(0, e.MTime).UTC().Format(time.RFC3339Nano), MTimeNs: e.MTime,
		Devmaj: e.Devmajor, Devmin: e.Devminor, Inode: uint32(id) + 1, Nlink: e.Nlink, Sparse: e.Sparse,
		ATimeNs: e.ATime, CTimeNs: e.CTime,
	}
	switch {
	case e.Type == index.TypeSymlink:
		j.Link, j.Size = e.Linkname, 0
	case e.Type == index.TypeReg && ix.Path(id) != p:
		j.Type, j.Link, j.Size = "hardlink", ix.Path(id), 0
	case e.Type != index.TypeReg:
		j.Size = 0
	}
	if e.Type == index.TypeReg && e.Size > 0 {
		off := int64(e.DataOffset)
		j.Offset = &off
		if e.Sparse {
			st := ix.StoredSize(id)
			j.Stored = &st
		}
	}
	if xs := ix.Xattrs(id); len(xs) > 0 {
		j.Xattrs = make(map[string]string, len(xs))
		for _, x := range xs {
			j.Xattrs[x.Name] = x.Value
		}
	}
	return j
}

// walk calls fn for every name under dir (whose path is p), depth first in
// name order, dir itself first. The path of a name is built in one buffer
// shared by the levels: a path held per level costs a deep tree its depth
// squared.
func walk(ix *index.Index, p string, dir index.EntryID, fn func(p string, id index.EntryID) error) error {
	buf := []byte(p)
	var rec func(dir index.EntryID) error
	rec = func(dir index.EntryID) error {
		base := len(buf)
		for _, d := range ix.Children(dir) {
			buf = buf[:base]
			if base > 0 {
				buf = append(buf, '/')
			}
			buf = append(buf, d.Name...) // names in the index are single clean components
			// A directory's own name, not a path: a path per directory
			// costs a deep tree its depth squared.
			if e := ix.Entry(d.ID); e.Type == index.TypeDir && e.Parent == dir && e.Name == d.Name {
				if err := fn(string(buf), d.ID); err != nil {
					return err
				}
				if err := rec(d.ID); err != nil {
					return err
				}
				continue
			}
			if err := fn(string(buf), d.ID); err != nil {
				return err
			}
		}
		buf = buf[:base]
		return nil
	}
	if err := fn(p, dir); err != nil {
		return err
	}
	return rec(dir)
}

// cleanMember turns a path given on the command line into one of the
// index ("" for the root).
func cleanMember(p string) string {
	p = strings.Trim(path.Clean("/"+p), "/")
	return p
}

// lookupMember finds p in the archive or says clearly that it is not there.
func lookupMember(ix *index.Index, src, p string) (index.EntryID, error) {
	id, ok := ix.LookupPath(cleanMember(p))
	if !ok {
		return 0, fmt.Errorf("%s: %s: %w", src, p, fs.ErrNotExist)
	}
	return id, nil
}

// inspectUsage is the usage of each inspection command.
var inspectUsage = map[string]string{
	"ls":   "usage: tarmount ls [-l] [--json] URL [PATH...]",
	"stat": "usage: tarmount stat [--json] URL PATH...",
	"cat":  "usage: tarmount cat URL PATH...",
	"get":  "usage: tarmount get URL PATH... [-C DIR]",
}

// inspectCmd runs ls, stat, cat or get (cmd) with the positional
// arguments pos: URL, then paths in the archive.
func inspectCmd(ctx context.Context, cmd string, pos []string, c *config, log *slog.Logger, stdout io.Writer) error {
	if len(pos) < 1 || (cmd != "ls" && len(pos) < 2) {
		return errors.New(inspectUsage[cmd])
	}
	a, err := openArchive(ctx, pos[0], c, log, false)
	if err != nil {
		return err
	}
	defer a.Close(log)
	paths := pos[1:]
	switch cmd {
	case "ls":
		return lsArchive(ctx, a, paths, c, stdout)
	case "stat":
		return statArchive(a, paths, c, stdout)
	case "cat":
		return catArchive(ctx, a, paths, stdout)
	default:
		return getArchive(ctx, a, paths, c, log)
	}
}

// lsArchive lists the archive (or the subtrees at paths): names, or with
// -l a listing like tar -tv, or with --json one object per line.
func lsArchive(ctx context.Context, a *archive, paths []string, c *config, stdout io.Writer) error {
	w := bufio.NewWriterSize(stdout, 64<<10)
	var buf []byte
	if len(paths) == 0 {
		paths = []string{""}
	}
	for _, p := range paths {
		root, err := lookupMember(a.ix, a.src.String(), p)
		if err != nil {
			return err
		}
		start := cleanMember(p)
		err = walk(a.ix, start, root, func(p string, id index.EntryID) error {
			if p == "" {
				return nil // the root has no name of its own
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if !c.inspect.json && !c.inspect.long {
				// Names only: no need to describe the entry.
				w.WriteString(p)
				if a.ix.Entry(id).Type == index.TypeDir {
					w.WriteByte('/')
				}
				return w.WriteByte('\n')
			}
			j := describeEntry(a.ix, p, id)
			switch {
			case c.inspect.json:
				buf = j.appendJSON(buf[:0])
				_, err := w.Write(buf)
				return err
			default:
				_, err := fmt.Fprintln(w, longLine(j))
				return err
			}
		})
		if err != nil {
			return err
		}
	}
	return w.Flush()
}

// longLine formats j as tar -tv does: mode, owner/group, size, mtime,
// name, and where it points.
func longLine(j entryJSON) string {
	mode := parseMode(j.Mode)
	owner := j.Uname
	if owner == "" {
		owner = fmt.Sprint(j.UID)
	}
	group := j.Gname
	if group == "" {
		group = fmt.Sprint(j.GID)
	}
	size := fmt.Sprint(j.Size)
	if j.Type == "char" || j.Type == "block" {
		size = fmt.Sprintf("%d,%d", j.Devmaj, j.Devmin)
	}
	name := j.Path
	switch j.Type {
	case "dir":
		name += "/"
	case "symlink":
		name += " -> " + j.Link
	case "hardlink":
		name += " link to " + j.Link
	}
	mt := time.Unix(0, j.MTimeNs).UTC().Format("2006-01-02 15:04")
	return fmt.Sprintf("%s %s/%s %9s %s %s", modeString(j.Type, mode), owner, group, size, mt, name)
}

// modeString is the ls/tar letter form of a type and mode: drwxr-sr-x.
func modeString(typ string, mode uint32) string {
	b := []byte("-rwxrwxrwx")
	switch typ {
	case "dir":
		b[0] = 'd'
	case "symlink":
		b[0] = 'l'
	case "hardlink":
		b[0] = 'h'
	case "char":
		b[0] = 'c'
	case "block":
		b[0] = 'b'
	case "fifo":
		b[0] = 'p'
	}
	for i := 0; i < 9; i++ {
		if mode&(1<<(8-i)) == 0 {
			b[i+1] = '-'
		}
	}
	special := func(bit uint32, at int, set, unset byte) {
		if mode&bit != 0 {
			if b[at] == '-' {
				b[at] = unset
			} else {
				b[at] = set
			}
		}
	}
	special(0o4000, 3, 's', 'S')
	special(0o2000, 6, 's', 'S')
	special(0o1000, 9, 't', 'T')
	return string(b)
}

// statArchive prints what the archive says of each path.
func statArchive(a *archive, paths []string, c *config, stdout io.Writer) error {
	w := bufio.NewWriter(stdout)
	for _, p := range paths {
		id, err := lookupMember(a.ix, a.src.String(), p)
		if err != nil {
			w.Flush()
			return err
		}
		j := describeEntry(a.ix, cleanMember(p), id)
		if c.inspect.json {
			w.Write(j.appendJSON(nil))
			continue
		}
		fmt.Fprintf(w, "  File: %s\n  Type: %s\n  Size: %d", j.Path, j.Type, a.ix.Entry(id).Size)
		if j.Stored != nil {
			fmt.Fprintf(w, " (%d stored)", *j.Stored)
		}
		fmt.Fprintf(w, "\n  Mode: %s (%s)  Uid: %d (%s)  Gid: %d (%s)\n  Links: %d  Inode: %d\n",
			j.Mode, modeString(j.Type, parseMode(j.Mode)), j.UID, j.Uname, j.GID, j.Gname, j.Nlink, j.Inode)
		if j.Link != "" {
			fmt.Fprintf(w, "  Link: %s\n", j.Link)
		}
		fmt.Fprintf(w, "Modify: %s\n", j.MTime)
		if j.Offset != nil {
			fmt.Fprintf(w, "  Data: at %d in the decoded tar stream\n", *j.Offset)
		}
		for k, v := range j.Xattrs {
			fmt.Fprintf(w, " Xattr: %s=%q\n", k, v)
		}
	}
	return w.Flush()
}

func parseMode(s string) uint32 {
	var m uint32
	fmt.Sscanf(s, "%o", &m)
	return m
}

// catArchive writes the data of each path (regular files; symlinks are
// not followed) to stdout, fetching only the spans that hold it.
func catArchive(ctx context.Context, a *archive, paths []string, stdout io.Writer) error {
	for _, p := range paths {
		id, err := lookupMember(a.ix, a.src.String(), p)
		if err != nil {
			return err
		}
		if t := a.ix.Entry(id).Type; t != index.TypeReg {
			return fmt.Errorf("%s: %s is a %s, not a file", a.src, p, t)
		}
		if err := copyMember(ctx, a.reader, id, stdout); err != nil {
			return fmt.Errorf("%s: %s: %w", a.src, p, err)
		}
	}
	return nil
}

// copyMember writes the data of file id to w.
func copyMember(ctx context.Context, r *index.Reader, id index.EntryID, w io.Writer) error {
	size := r.Entry(id).Size
	buf := make([]byte, 1<<20)
	for off := int64(0); off < size; {
		n := int(min(int64(len(buf)), size-off))
		got, err := r.ReadAt(ctx, id, buf[:n], off)
		if got > 0 {
			if _, werr := w.Write(buf[:got]); werr != nil {
				return werr
			}
			off += int64(got)
		}
		if err != nil && !(errors.Is(err, io.EOF) && off == size) {
			return err
		}
		if got == 0 && err == nil {
			return io.ErrUnexpectedEOF
		}
	}
	return nil
}

// getArchive writes the members at paths (directories with what they
// hold) under -C DIR, by their paths in the archive, with their modes and
// mtimes. Writes go through an os.Root, so nothing lands outside DIR.
func getArchive(ctx context.Context, a *archive, paths []string, c *config, log *slog.Logger) error {
	if err := os.MkdirAll(c.inspect.dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(c.inspect.dir)
	if err != nil {
		return err
	}
	defer root.Close()
	var dirs []string // their times are set last
	for _, p := range paths {
		id, err := lookupMember(a.ix, a.src.String(), p)
		if err != nil {
			return err
		}
		err = walk(a.ix, cleanMember(p), id, func(p string, id index.EntryID) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if p == "" {
				return nil
			}
			e := a.ix.Entry(id)
			if err := root.MkdirAll(path.Dir(p), 0o755); err != nil && path.Dir(p) != "." {
				return err
			}
			switch e.Type {
			case index.TypeDir:
				if err := root.MkdirAll(p, 0o700); err != nil {
					return err
				}
				dirs = append(dirs, p)
				return nil
			case index.TypeSymlink:
				root.Remove(p)
				return root.Symlink(e.Linkname, p)
			case index.TypeReg:
				return getFile(ctx, a.reader, root, p, id, e)
			default:
				log.Warn("get: skipped, not a file, directory or symlink", "path", p, "type", e.Type.String())
				return nil
			}
		})
		if err != nil {
			return err
		}
	}
	for i := len(dirs) - 1; i >= 0; i-- {
		e := a.ix.Entry(mustLookup(a.ix, dirs[i]))
		root.Chmod(dirs[i], fs.FileMode(e.Mode&0o777))
		mt := time.Unix(0, e.MTime)
		root.Chtimes(dirs[i], mt, mt)
	}
	return nil
}

func mustLookup(ix *index.Index, p string) index.EntryID {
	id, _ := ix.LookupPath(p)
	return id
}

// getFile writes file id as p under root: to a temporary name first, then
// renamed, so an interrupted get leaves no partial file under its name.
func getFile(ctx context.Context, r *index.Reader, root *os.Root, p string, id index.EntryID, e *index.Entry) error {
	tmp := path.Join(path.Dir(p), ".tarmount-get-"+path.Base(p))
	f, err := root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	err = copyMember(ctx, r, id, w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = root.Chmod(tmp, fs.FileMode(e.Mode&0o777))
	}
	if err == nil {
		mt := time.Unix(0, e.MTime)
		err = root.Chtimes(tmp, mt, mt)
	}
	if err == nil {
		err = root.Rename(tmp, p)
	}
	if err != nil {
		root.Remove(tmp)
		return fmt.Errorf("get %s: %w", filepath.FromSlash(p), err)
	}
	return nil
}
