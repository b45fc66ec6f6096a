package archive

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/atomicfile"
	"github.com/tarmount/tarmount/internal/xattr"
)

// Pack writes src (a directory, or a tarball in any codec we read, by
// path or URL, opened with opts) to out as a packed archive: seekable
// zstd at the zstd level given, with one frame per span (opts.Span) and
// the index embedded, which mounts without an index pass and which
// zstd -d reads as usual. out is written under a temporary name first.
// It returns the index of what it wrote.
func Pack(ctx context.Context, src, out string, level int, opts Options) (*index.Index, error) {
	opts = opts.withDefaults()
	log := opts.Logger
	var tarStream io.Reader
	var closeSrc func()
	if st, err := os.Stat(src); err == nil && st.IsDir() {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(writeDirTar(pw, src)) }()
		tarStream, closeSrc = pr, func() { pr.Close() }
	} else {
		st, err := opts.openStored(ctx, src)
		if err != nil {
			return nil, err
		}
		dec, codec, err := index.NewDecoder(st)
		if err != nil {
			st.close()
			return nil, fmt.Errorf("pack %s: %w", src, err)
		}
		// The decoder may read the stream on a goroutine of its own:
		// it stops before the stream is closed.
		closeSrc = func() {
			dec.Close()
			st.close()
		}
		log.Info("packing", "src", st.src.String(), "codec", codec.String())
		tarStream = dec
	}
	defer closeSrc()
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, err
	}
	f, err := atomicfile.CreateTemp(filepath.Dir(out), ".tmp-*.tar.zst")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	span := opts.Span
	if span <= 0 {
		span = index.DefaultSpan
	}
	ix, err := index.Pack(ctx, f, tarStream, index.PackOptions{Span: span, Level: zstd.EncoderLevelFromZstd(level), Logger: log})
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, fmt.Errorf("pack %s: %w", src, err)
	}
	if err := os.Rename(f.Name(), out); err != nil {
		return nil, err
	}
	return ix, nil
}

// writeDirTar writes the tree at root to w as a PAX tar stream, as
// `tar -C root -cf - .` would: entries in lexical order named "./...",
// hard links as links to the first name, symlinks, devices and fifos,
// owners and names, nanosecond times and user.* extended attributes.
// Holes of sparse files are written as zeros.
func writeDirTar(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := "./"
		if rel != "." {
			name = "./" + filepath.ToSlash(rel)
		}
		var link string
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		h.Name = name
		if info.IsDir() && !strings.HasSuffix(h.Name, "/") {
			h.Name += "/"
		}
		h.Format = tar.FormatPAX
		if st, ok := info.Sys().(*syscall.Stat_t); ok {
			h.AccessTime = time.Unix(st.Atim.Sec, st.Atim.Nsec)
			h.ChangeTime = time.Unix(st.Ctim.Sec, st.Ctim.Nsec)
			if info.Mode().IsRegular() && st.Nlink > 1 {
				key := inode{uint64(st.Dev), st.Ino}
				if first, ok := seen[key]; ok {
					h.Typeflag, h.Linkname, h.Size = tar.TypeLink, first, 0
				} else {
					seen[key] = name
				}
			}
		}
		if x, err := xattr.User(p); err != nil {
			return err
		} else if len(x) > 0 {
			h.PAXRecords = map[string]string{}
			for k, v := range x {
				h.PAXRecords["SCHILY.xattr."+k] = v
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		if h.Typeflag == tar.TypeReg && h.Size > 0 {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", p, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
