package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"sync"
)

// fileSource reads a local regular file. Files are trusted to stay
// immutable while mounted: reads check nothing but the pinned size.
type fileSource struct {
	// set once
	f    *os.File
	path string
	id   Identity

	closeOnce sync.Once
	closeErr  error
}

var _ Source = (*fileSource)(nil)

func openFile(ctx context.Context, path string, log *slog.Logger) (Source, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	// Stat before open: opening a FIFO would block.
	fi, err := os.Stat(path)
	if err == nil {
		err = checkRegular(fi)
	}
	if err != nil {
		return nil, fileOpenError(path, err)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fileOpenError(path, err)
	}
	// Pin what was opened, not what the name pointed to a moment earlier.
	fi, err = f.Stat()
	if err == nil {
		err = checkRegular(fi)
	}
	if err != nil {
		f.Close()
		return nil, fileOpenError(path, err)
	}
	s := &fileSource{
		f:    f,
		path: path,
		id:   Identity{Size: fi.Size(), LastModified: fi.ModTime()},
	}
	log.Debug("open", "src", path, "len", s.id.Size)
	return s, nil
}

func checkRegular(fi fs.FileInfo) error {
	switch {
	case fi.IsDir():
		return errors.New("is a directory")
	case !fi.Mode().IsRegular():
		return fmt.Errorf("not a regular file (mode %s)", fi.Mode().Type())
	}
	return nil
}

func fileOpenError(path string, err error) error {
	err = unwrapPathError(err)
	if errors.Is(err, fs.ErrNotExist) {
		err = &notExistError{err: err}
	}
	return fmt.Errorf("open %s: %w", path, err)
}

// notExistError is a missing local file. It reads as the system words it
// ("no such file or directory"), unwraps to the system's error (so
// errors.Is(err, fs.ErrNotExist) holds) and is ErrNotFound.
type notExistError struct{ err error }

func (e *notExistError) Error() string        { return e.err.Error() }
func (e *notExistError) Unwrap() error        { return e.err }
func (e *notExistError) Is(target error) bool { return target == ErrNotFound }

// unwrapPathError drops the operation and path that *fs.PathError repeats.
func unwrapPathError(err error) error {
	if pe, ok := errors.AsType[*fs.PathError](err); ok {
		return pe.Err
	}
	return err
}

func (s *fileSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("read %s at %d: %w", s.path, off, err)
	}
	if off < 0 {
		return 0, fmt.Errorf("read %s at %d: negative offset", s.path, off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= s.id.Size {
		return 0, io.EOF
	}
	want := int(min(int64(len(p)), s.id.Size-off))
	n, err := s.f.ReadAt(p[:want], off)
	if n == want {
		if want < len(p) {
			return n, io.EOF
		}
		return n, nil
	}
	if err == io.EOF {
		err = fmt.Errorf("%w: file is shorter than %d bytes", ErrChanged, s.id.Size)
	}
	return n, fmt.Errorf("read %s at %d: %w", s.path, off, unwrapPathError(err))
}

func (s *fileSource) Identity() Identity { return s.id }

func (s *fileSource) String() string { return s.path }

func (s *fileSource) Local() bool { return true }

// Close closes the file. It is idempotent.
func (s *fileSource) Close() error {
	s.closeOnce.Do(func() { s.closeErr = s.f.Close() })
	return s.closeErr
}

// FirstByte reads the file's first byte (FirstByter).
func (s *fileSource) FirstByte() (byte, bool) {
	var b [1]byte
	n, _ := s.f.ReadAt(b[:], 0)
	return b[0], n == 1
}
