package tarbuild

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pierrec/lz4/v4"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/internal/xattr"
)

// Spec says how Archive builds an archive.
type Spec struct {
	// Tool is "gnutar" (GNU tar), "bsdtar" (libarchive) or "go" (Go's
	// archive/tar, walking the tree in this process).
	Tool string
	// Format is "gnu", "posix", "pax" or "ustar". "posix" and "pax" are
	// the same format (GNU tar's names); bsdtar writes "gnu" as gnutar.
	Format string
	// Codec is "none", "gzip" (gzip -6), "pigz" (pigz -6, one member with
	// pigz's block layout) or "gzip-multi" (the tar cut into MultiPieceSize
	// pieces, each gzipped, the members concatenated); "zstd" (zstd -3
	// from a pipe, as tar --zstd: one frame of unknown size), "pzstd"
	// (pzstd -p 2: frames behind skippable frames), "zstd-multi" (Go:
	// one frame per MultiPieceSize), "zstd-seekable" (Go: the seekable
	// format, a frame per 1 MiB and a seek table); "lz4" (lz4 CLI:
	// independent 4 MiB blocks), "lz4-linked" (lz4 -BD -B4), "lz4-legacy"
	// (lz4 -l), "lz4-go" (pierrec/lz4, 256 KiB blocks with checksums);
	// "bzip2" (bzip2 -9), "pbzip2" (pbzip2 -p2 -9: a stream per 900 kB),
	// "xz" (xz -6, one block) or "xz-mt" (xz -T2 --block-size=1MiB,
	// several blocks).
	Codec string
}

// MultiPieceSize is the size of the uncompressed pieces of "gzip-multi".
const MultiPieceSize = 1 << 20

// String names the spec for subtests and files: "gnutar-pax-gzip".
func (s Spec) String() string { return s.Tool + "-" + s.Format + "-" + s.Codec }

// Ext is the usual file name extension for the spec's codec.
func (s Spec) Ext() string {
	switch {
	case s.Codec == "none" || s.Codec == "":
		return ".tar"
	case strings.Contains(s.Codec, "zstd"):
		return ".tar.zst"
	case strings.HasPrefix(s.Codec, "lz4"):
		return ".tar.lz4"
	case strings.HasSuffix(s.Codec, "bzip2"):
		return ".tar.bz2"
	case strings.HasPrefix(s.Codec, "xz"):
		return ".tar.xz"
	}
	return ".tar.gz"
}

// Tools, Formats and Codecs list the values Spec accepts.
var (
	Tools   = []string{"gnutar", "bsdtar", "go"}
	Formats = []string{"gnu", "posix", "pax", "ustar"}
	Codecs  = []string{"none", "gzip", "pigz", "gzip-multi", "zstd", "pzstd", "zstd-multi", "zstd-seekable",
		"lz4", "lz4-linked", "lz4-legacy", "lz4-go", "bzip2", "pbzip2", "xz", "xz-mt"}
)

// Archive packs srcDir (a tree such as corpus.MakeTree writes) into outPath as spec says, with the entries named
// "./", "./a", "./a/b" like `tar -C srcDir -cf - .` does. It fails the test
// when the tool reports an error (for example a name too long for ustar).
// Safe to call from parallel tests.
func Archive(t testing.TB, srcDir, outPath string, spec Spec) {
	t.Helper()
	if err := Make(srcDir, outPath, spec); err != nil {
		t.Fatalf("tarbuild: archive %s as %s: %v", srcDir, spec, err)
	}
}

// Make is Archive that returns the error instead of failing a test.
func Make(srcDir, outPath string, spec Spec) error {
	tarPath := outPath
	if spec.Codec != "none" && spec.Codec != "" {
		tarPath = outPath + ".tmp.tar"
		defer os.Remove(tarPath)
	}
	if err := writeTar(srcDir, tarPath, spec); err != nil {
		return err
	}
	return Compress(tarPath, outPath, spec.Codec)
}

// Compress writes the tar at tarPath to outPath in codec, one of Codecs
// ("none" and "" leave tarPath alone: it is the archive).
func Compress(tarPath, outPath, codec string) error {
	switch codec {
	case "none", "":
		return nil
	case "gzip":
		return compressCLI(tarPath, outPath, "gzip", "-6", "-n", "-c")
	case "pigz":
		return compressCLI(tarPath, outPath, "pigz", "-6", "-n", "-c")
	case "gzip-multi":
		return compressGo(tarPath, outPath, func(b []byte) []byte { return GzipMembers(b, MultiPieceSize, 6) })
	case "zstd":
		return compressCLI(tarPath, outPath, "zstd", "-3", "-q", "-c")
	case "pzstd":
		return compressCLI(tarPath, outPath, "pzstd", "-p", "2", "-3", "-q", "-c")
	case "zstd-multi":
		return compressGo(tarPath, outPath, func(b []byte) []byte { z, _ := ZstdFrames(b, MultiPieceSize); return z })
	case "zstd-seekable":
		return compressGo(tarPath, outPath, func(b []byte) []byte { return ZstdSeekable(b, MultiPieceSize) })
	case "lz4":
		return compressCLI(tarPath, outPath, "lz4", "-q", "-c")
	case "lz4-linked":
		return compressCLI(tarPath, outPath, "lz4", "-BD", "-B4", "-q", "-c")
	case "lz4-legacy":
		return compressCLI(tarPath, outPath, "lz4", "-l", "-q", "-c")
	case "lz4-go":
		return compressGo(tarPath, outPath, func(b []byte) []byte { return LZ4Blocks(b, lz4.Block256Kb, true) })
	case "bzip2":
		return compressCLI(tarPath, outPath, "bzip2", "-9", "-c")
	case "pbzip2":
		return compressCLI(tarPath, outPath, "pbzip2", "-p2", "-9", "-c")
	case "xz":
		return compressCLI(tarPath, outPath, "xz", "-6", "-c")
	case "xz-mt":
		return compressCLI(tarPath, outPath, "xz", "-T2", "--block-size=1MiB", "-c")
	}
	return fmt.Errorf("unknown codec %q", codec)
}

func writeTar(srcDir, tarPath string, spec Spec) error {
	switch spec.Tool {
	case "gnutar":
		format := spec.Format
		if format == "pax" {
			format = "posix"
		}
		args := []string{"--format=" + format, "--sort=name"}
		if format != "ustar" {
			// GNU tar refuses --sparse with ustar ("GNU features wanted
			// on incompatible archive format").
			args = append(args, "--sparse")
		}
		if format == "posix" {
			// GNU tar writes xattrs only in pax headers: --xattrs silently
			// turns --format=gnu or ustar into posix.
			args = append(args, "--xattrs", "--xattrs-include=*")
		}
		return run(tarPath, "tar", append(args, "-C", srcDir, "-cf", "-", ".")...)
	case "bsdtar":
		format := spec.Format
		switch format {
		case "gnu":
			format = "gnutar"
		case "posix":
			format = "pax"
		}
		return run(tarPath, "bsdtar", "--format", format, "--xattrs", "--read-sparse", "-C", srcDir, "-cf", "-", ".")
	case "go":
		var f tar.Format
		switch spec.Format {
		case "gnu":
			f = tar.FormatGNU
		case "posix", "pax":
			f = tar.FormatPAX
		case "ustar":
			f = tar.FormatUSTAR
		default:
			return fmt.Errorf("unknown format %q", spec.Format)
		}
		out, err := os.Create(tarPath)
		if err != nil {
			return err
		}
		if err := GoTree(out, srcDir, f); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	}
	return fmt.Errorf("unknown tool %q", spec.Tool)
}

// run runs a command with its standard output in outPath. Anything on
// standard error or a non-zero exit is an error: tar's warnings (a file it
// could not store whole) matter here.
func run(outPath, name string, args ...string) error {
	return runCmd("", outPath, true, name, args...)
}

// compressCLI runs a compressor from inPath to outPath.
func compressCLI(inPath, outPath, name string, args ...string) error {
	return runCmd(inPath, outPath, false, name, args...)
}

// runCmd runs name with standard input from inPath (none if empty) and
// standard output to outPath. A non-zero exit is an error, and so is
// anything on standard error when warnings is set.
func runCmd(inPath, outPath string, warnings bool, name string, args ...string) error {
	cmd := exec.Command(name, args...)
	if inPath != "" {
		in, err := os.Open(inPath)
		if err != nil {
			return err
		}
		defer in.Close()
		cmd.Stdin = in
	}
	out, err := os.Create(outPath)
	if err != nil {
		return err
	}
	var stderr bytes.Buffer
	cmd.Stdout = out
	cmd.Stderr = &stderr
	err = cmd.Run()
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	if warnings && stderr.Len() > 0 {
		return fmt.Errorf("%s %s: warnings: %s", name, strings.Join(args, " "), strings.TrimSpace(stderr.String()))
	}
	return nil
}

// compressGo compresses inPath into outPath with fn.
func compressGo(inPath, outPath string, fn func([]byte) []byte) error {
	data, err := os.ReadFile(inPath)
	if err != nil {
		return err
	}
	return os.WriteFile(outPath, fn(data), 0o644)
}

// GoTree writes srcDir to w as a tar stream in the given format with Go's
// archive/tar: entries in lexical order named "./", "./dir/", "./file";
// the second and later names of an inode as TypeLink; symlinks, fifos and
// devices; uid/gid without names; user.* xattrs as SCHILY.xattr PAX records
// (an error for formats other than PAX, as is anything else the format
// cannot hold, such as a long name in ustar). Sparse files are written with
// their holes as data. Whole-second formats get truncated mtimes. It does
// not close w.
func GoTree(w io.Writer, srcDir string, format tar.Format) error {
	tw := tar.NewWriter(w)
	type inode struct{ dev, ino uint64 }
	seen := map[inode]string{}
	err := filepath.WalkDir(srcDir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(srcDir, p)
		if err != nil {
			return err
		}
		name := "./"
		if rel != "." {
			name = "./" + filepath.ToSlash(rel)
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return &os.PathError{Op: "lstat", Path: p, Err: err}
		}
		mtime := time.Unix(st.Mtim.Sec, st.Mtim.Nsec)
		if format != tar.FormatPAX {
			mtime = mtime.Truncate(time.Second)
		}
		hdr := &tar.Header{
			Name:    name,
			Mode:    int64(st.Mode & 0o7777),
			Uid:     int(st.Uid),
			Gid:     int(st.Gid),
			ModTime: mtime,
			Format:  format,
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			hdr.Typeflag = tar.TypeDir
			if !strings.HasSuffix(hdr.Name, "/") {
				hdr.Name += "/"
			}
		case unix.S_IFREG:
			key := inode{st.Dev, st.Ino}
			if first, ok := seen[key]; ok && st.Nlink > 1 {
				hdr.Typeflag = tar.TypeLink
				hdr.Linkname = first
			} else {
				hdr.Typeflag = tar.TypeReg
				hdr.Size = st.Size
				if st.Nlink > 1 {
					seen[key] = name
				}
			}
		case unix.S_IFLNK:
			hdr.Typeflag = tar.TypeSymlink
			if hdr.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case unix.S_IFIFO:
			hdr.Typeflag = tar.TypeFifo
		case unix.S_IFCHR, unix.S_IFBLK:
			hdr.Typeflag = tar.TypeChar
			if st.Mode&unix.S_IFMT == unix.S_IFBLK {
				hdr.Typeflag = tar.TypeBlock
			}
			hdr.Devmajor = int64(unix.Major(st.Rdev))
			hdr.Devminor = int64(unix.Minor(st.Rdev))
		default:
			return fmt.Errorf("%s: cannot archive file type %#o", p, st.Mode&unix.S_IFMT)
		}
		xattrs, err := xattr.User(p)
		if err != nil {
			return err
		}
		if len(xattrs) > 0 {
			if format != tar.FormatPAX {
				return fmt.Errorf("%s: has xattrs, which %v cannot store", p, format)
			}
			hdr.PAXRecords = map[string]string{}
			for k, v := range xattrs {
				hdr.PAXRecords["SCHILY.xattr."+k] = v
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		if hdr.Typeflag == tar.TypeReg && hdr.Size > 0 {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// Extract unpacks archive into dir (created if missing) with GNU tar,
// restoring owners, modes, xattrs and times: the reference tree. GNU tar
// detects the compression itself. It fails the test on any error.
func Extract(t testing.TB, archive, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("tarbuild: %v", err)
	}
	var stderr bytes.Buffer
	// --delay-directory-restore: bsdtar writes a directory's subdirectory
	// entries before their contents (breadth first), and GNU tar would
	// otherwise set a directory's mtime before it is done writing into it.
	// --warning=no-unknown-keyword: bsdtar writes each xattr twice, as
	// SCHILY.xattr (which GNU tar restores) and LIBARCHIVE.xattr.
	args := []string{"-x"}
	// GNU tar recognises gzip, bzip2, xz and plain zstd, but neither lz4
	// nor zstd that starts with a skippable frame (pzstd, seekable).
	if head := readHead(archive); bytes.HasPrefix(head, []byte{0x04, 0x22, 0x4d, 0x18}) || bytes.HasPrefix(head, []byte{0x02, 0x21, 0x4c, 0x18}) {
		args = append(args, "-I", "lz4 -d")
	} else if len(head) == 4 && head[1] == 0x2a && head[2] == 0x4d && head[3] == 0x18 || bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}) {
		args = append(args, "-I", "zstd -d")
	}
	cmd := exec.Command("tar", append(args, "--xattrs", "--xattrs-include=*", "--same-owner", "-p", "--numeric-owner",
		"--delay-directory-restore", "--warning=no-unknown-keyword", "-f", archive, "-C", dir)...)
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("tarbuild: extract %s: %v: %s", archive, err, strings.TrimSpace(stderr.String()))
	}
	if stderr.Len() > 0 {
		t.Fatalf("tarbuild: extract %s: warnings: %s", archive, strings.TrimSpace(stderr.String()))
	}
}

// readHead returns the first 4 bytes of a file (fewer if it is shorter).
func readHead(path string) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	b := make([]byte, 4)
	n, _ := io.ReadFull(f, b)
	return b[:n]
}
