package index

import (
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/tarmount/tarmount/fetch"
)

// arArchive returns an ar archive of the named members, as ar(1) and
// dpkg-deb write it: the global header, then per member a 60-byte header
// and its data, padded to an even length.
func arArchive(members ...string) []byte {
	var b bytes.Buffer
	b.WriteString("!<arch>\n")
	for _, name := range members {
		data := "data of " + name + "\n"
		fmt.Fprintf(&b, "%-16s%-12d%-6d%-6d%-8s%-10d`\n", name, 1700000000, 0, 0, "100644", len(data))
		b.WriteString(data)
		if len(data)%2 == 1 {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// zipArchive returns a zip archive holding the named files.
func zipArchive(t *testing.T, names ...string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := zip.NewWriter(&b)
	for _, name := range names {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, "data of "+name)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// isoImage returns the start of an ISO 9660 image: a 32 KiB system area
// that starts with boot (a hybrid image's MBR) or is all zeros, then a
// primary volume descriptor (type 1, "CD001", version 1).
func isoImage(boot []byte) []byte {
	img := make([]byte, 32768+2048)
	copy(img, boot)
	copy(img[32768:], "\x01CD001\x01")
	return img
}

// magicThenZeros returns magic followed by zeros up to n bytes.
func magicThenZeros(magic string, n int) []byte {
	b := make([]byte, n)
	copy(b, magic)
	return b
}

// TestNotTarNamed checks that an object no codec reads is named in the
// error: other archive formats and images by what they are, data by its
// kind, and only unknown bytes by their first bytes in hex.
func TestNotTarNamed(t *testing.T) {
	mbr := magicThenZeros("\x33\xed\x90\x90\x90\x90", 512)
	mbr[510], mbr[511] = 0x55, 0xaa
	rpmLead := magicThenZeros("\xed\xab\xee\xdb\x03\x00\x00\x00\x00\x01hello-1.0-1", 96)
	tests := []struct {
		name string
		obj  []byte
		want string
	}{
		{"zip", zipArchive(t, "a.txt"), "not a tar archive: a zip archive"},
		{"empty zip", zipArchive(t), "not a tar archive: a zip archive"},
		{"deb", arArchive("debian-binary", "control.tar.xz", "data.tar.xz"), "not a tar archive: a Debian package (ar)"},
		{"static library", arArchive("/", "a.o/", "b.o/"), "not a tar archive: an ar archive"},
		{"rpm", rpmLead, "not a tar archive: an RPM package"},
		{"7z", magicThenZeros("7z\xbc\xaf\x27\x1c\x00\x04", 32), "not a tar archive: a 7-Zip archive"},
		{"rar", magicThenZeros("Rar!\x1a\x07\x01\x00", 64), "not a tar archive: a RAR archive"},
		{"squashfs", magicThenZeros("hsqs", 96), "not a tar archive: a squashfs image"},
		{"cpio newc", []byte("070701" + strings.Repeat("0", 104) + "TRAILER!!!\x00"), "not a tar archive: a cpio archive"},
		{"iso 9660", isoImage(nil), "not a tar archive: an ISO 9660 image"},
		{"hybrid iso 9660", isoImage(mbr), "not a tar archive: an ISO 9660 image"},
		{"text", []byte("hello, this is not an archive\n"), "not a tar archive: text"},
		{"git lfs pointer", []byte("version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 12345\n"),
			"a Git LFS pointer, not the object it points to"},
		{"html", []byte("<html>not found</html>"), "text or HTML, not an archive"},
		{"unknown", magicThenZeros("\x01\x02\x03\x04\x05\x06\x07\x08\x09", 600),
			"not a tar archive or a known compressed format (starts with 0102030405060708)"},
		{"empty", nil, "empty object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Build(context.Background(), bytes.NewReader(tt.obj), fetch.Identity{Size: int64(len(tt.obj))}, BuildOptions{})
			want := ErrUnsupported.Error() + ": " + tt.want
			if err == nil || err.Error() != want {
				t.Errorf("Build: got %v, want %s", err, want)
			}
			if !errors.Is(err, ErrUnsupported) {
				t.Errorf("Build: got errors.Is(%v, ErrUnsupported) false, want true", err)
			}
			_, _, err = NewDecoder(bytes.NewReader(tt.obj))
			if err == nil || err.Error() != want {
				t.Errorf("NewDecoder: got %v, want %s", err, want)
			}
		})
	}
}
