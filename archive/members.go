package archive

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/tarmount/tarmount/index"
)

// Members by their paths, without a mount: what tarmount ls, stat, cat
// and get read. They need an indexed archive (OpenIndexed, Build).

// CleanMember turns a path given on the command line into one of the
// index ("" for the root).
func CleanMember(p string) string {
	p = strings.Trim(path.Clean("/"+p), "/")
	return p
}

// Lookup finds the member at path p (as CleanMember makes it) or says
// clearly that it is not there.
func (a *Archive) Lookup(p string) (index.EntryID, error) {
	id, ok := a.Index().LookupPath(CleanMember(p))
	if !ok {
		return 0, fmt.Errorf("%s: %s: %w", a, p, fs.ErrNotExist)
	}
	return id, nil
}

// Expand returns patterns with each shell-style glob (*, ?, [...], as
// path.Match reads them: * and ? do not cross a slash) replaced by the
// paths of the members it matches, in the order ls lists them. A pattern
// that names a member as it is stays itself; one that matches nothing is
// an error, as a missing file is.
func (a *Archive) Expand(patterns []string) ([]string, error) {
	ix := a.Index()
	var out []string
	for _, p := range patterns {
		clean := CleanMember(p)
		if _, ok := ix.LookupPath(clean); ok || !strings.ContainsAny(p, "*?[") {
			out = append(out, p)
			continue
		}
		if _, err := path.Match(clean, ""); err != nil {
			return nil, fmt.Errorf("%s: pattern %q: %w", a, p, err)
		}
		n := len(out)
		err := index.Walk(ix, "", index.RootID, func(name []byte, _ index.EntryID, _ *index.Entry, _ bool) error {
			if ok, _ := path.Match(clean, string(name)); ok && len(name) > 0 {
				out = append(out, string(name))
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		if len(out) == n {
			return nil, fmt.Errorf("%s: no member matches %s: %w", a, p, fs.ErrNotExist)
		}
	}
	return out, nil
}

// Cat writes the data of each path (regular files; symlinks are not
// followed) to w, fetching only the spans that hold it.
func (a *Archive) Cat(ctx context.Context, w io.Writer, paths ...string) error {
	for _, p := range paths {
		id, err := a.Lookup(p)
		if err != nil {
			return err
		}
		if t := a.ix.Entry(id).Type; t != index.TypeReg {
			return fmt.Errorf("%s: %s is a %s, not a file", a, p, t)
		}
		if err := copyMember(ctx, a.reader, id, w); err != nil {
			return fmt.Errorf("%s: %s: %w", a, p, err)
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

// Get writes the members at paths (directories with what they hold)
// under dir, by their paths in the archive, with their modes (without
// setuid and setgid) and mtimes, owned by the caller; members that are
// neither files, directories nor symlinks are skipped with a warning.
// Writes go through an os.Root, so nothing lands outside dir.
func (a *Archive) Get(ctx context.Context, dir string, paths ...string) error {
	log := a.log
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	var dirs []string // their times are set last
	for _, p := range paths {
		id, err := a.Lookup(p)
		if err != nil {
			return err
		}
		err = index.Walk(a.ix, CleanMember(p), id, func(pb []byte, id index.EntryID, e *index.Entry, _ bool) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if len(pb) == 0 {
				return nil
			}
			p := string(pb)
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
		mt := e.MTime.Std()
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
		mt := e.MTime.Std()
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
