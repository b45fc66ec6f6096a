package tarbuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// Entry is one member for Go.
type Entry struct {
	Name, Link string
	Type       byte   // tar.TypeReg when 0
	Body       []byte // the data of a regular file; ignored for other types
	// Mode is the permission bits; 0 means 0644, or 0755 for a directory.
	Mode         int64
	Uid, Gid     int
	Uname, Gname string
	// ModTime zero means Unix time 1700000000.
	ModTime            time.Time
	Devmajor, Devminor int64
	// Xattrs go in SCHILY.xattr. PAX records; PAX holds any other records.
	Xattrs, PAX map[string]string
	// Hdr, when set, is the header as it is, but for a Size of 0 (the
	// length of Body) and Format (format when it has none); the fields
	// above but Body are then ignored.
	Hdr *tar.Header
	// Tweak edits the header after the defaults are applied: for what the
	// fields above do not say (a mode of 0, sparse or format details).
	Tweak func(*tar.Header)
	// Raw, when set, is written as it is (after flushing the writer)
	// instead of the member: a crafted member amid Go's.
	Raw []byte
}

// DefaultModTime is the mtime of members that give none.
var DefaultModTime = time.Unix(1700000000, 0)

// Header returns the archive/tar header Go writes for e in format.
func (e Entry) Header(format tar.Format) *tar.Header {
	if e.Hdr != nil {
		h := *e.Hdr
		if h.Format == tar.FormatUnknown {
			h.Format = format
		}
		if h.Size == 0 {
			h.Size = int64(len(e.Body))
		}
		if e.Tweak != nil {
			e.Tweak(&h)
		}
		return &h
	}
	h := &tar.Header{Name: e.Name, Linkname: e.Link, Typeflag: e.Type, Mode: e.Mode, Uid: e.Uid, Gid: e.Gid,
		Uname: e.Uname, Gname: e.Gname, ModTime: e.ModTime, Devmajor: e.Devmajor, Devminor: e.Devminor, Format: format}
	if h.Typeflag == 0 {
		h.Typeflag = tar.TypeReg
	}
	if h.Mode == 0 {
		h.Mode = 0o644
		if h.Typeflag == tar.TypeDir {
			h.Mode = 0o755
		}
	}
	if h.ModTime.IsZero() {
		h.ModTime = DefaultModTime
	}
	if h.Typeflag == tar.TypeReg {
		h.Size = int64(len(e.Body))
	}
	if len(e.Xattrs)+len(e.PAX) > 0 {
		h.PAXRecords = maps.Clone(e.PAX)
		if h.PAXRecords == nil {
			h.PAXRecords = map[string]string{}
		}
		for k, v := range e.Xattrs {
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
	}
	if e.Tweak != nil {
		e.Tweak(h)
	}
	return h
}

// Go writes entries with Go's archive/tar in format (tar.FormatUnknown
// lets archive/tar choose per header), then the end-of-archive marker. It
// fails the test if archive/tar refuses a header.
func Go(t testing.TB, format tar.Format, entries ...Entry) []byte {
	t.Helper()
	b, err := GoErr(format, entries...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// GoErr is Go that returns the error instead of failing a test.
func GoErr(format tar.Format, entries ...Entry) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		if e.Raw != nil {
			if err := tw.Flush(); err != nil {
				return nil, err
			}
			buf.Write(e.Raw)
			continue
		}
		h := e.Header(format)
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("tarbuild: %s: %w", e.Name, err)
		}
		if h.Size > 0 {
			if _, err := tw.Write(e.Body); err != nil {
				return nil, fmt.Errorf("tarbuild: %s: %w", e.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// FilesOf archives the regular files below root with archive/tar, named by
// their paths and in walk order, until the archive passes maxBytes: a
// realistic input for benchmarks (the Go installation, say).
func FilesOf(root string, maxBytes int) ([]byte, error) {
	var raw bytes.Buffer
	tw := tar.NewWriter(&raw)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || raw.Len() > maxBytes {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Name: path, Mode: 0o644, Size: int64(len(data))}); err != nil {
			return err
		}
		_, err = tw.Write(data)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return raw.Bytes(), nil
}
