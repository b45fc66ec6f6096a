package tarscan

import (
	"archive/tar"
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// scanAll scans data to the end and returns the members and the final
// error (nil after a clean io.EOF).
func scanAll(data []byte, lim Limits) ([]*Header, error) {
	return scanReader(bytes.NewReader(data), lim)
}

func scanReader(r io.Reader, lim Limits) ([]*Header, error) {
	s := NewScanner(r, lim)
	var hs []*Header
	for {
		h, err := s.Next()
		if err == io.EOF {
			return hs, nil
		}
		if err != nil {
			return hs, err
		}
		hs = append(hs, h)
	}
}

// readerKinds wraps a stream in each kind of reader the Scanner treats
// differently: plain (read and drop), bufio (Discard int) and int64
// Discard.
var readerKinds = []struct {
	name string
	wrap func([]byte) io.Reader
}{
	{"plain", func(b []byte) io.Reader { return onlyReader{bytes.NewReader(b)} }},
	{"bufio", func(b []byte) io.Reader { return bufio.NewReaderSize(bytes.NewReader(b), 4096) }},
	{"discard64", func(b []byte) io.Reader { return &discard64Reader{r: bytes.NewReader(b)} }},
	{"onebyte", func(b []byte) io.Reader { return &oneByteReader{r: bytes.NewReader(b)} }},
}

// onlyReader hides every method but Read.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

// oneByteReader returns at most one byte per Read, with (n, io.EOF) at the
// end, to exercise short reads.
type oneByteReader struct{ r *bytes.Reader }

func (o *oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	n, err := o.r.Read(p[:1])
	if err == nil && o.r.Len() == 0 {
		err = io.EOF
	}
	return n, err
}

// discard64Reader has the int64 Discard method and counts its calls.
type discard64Reader struct {
	r        *bytes.Reader
	discards int
}

func (d *discard64Reader) Read(p []byte) (int, error) { return d.r.Read(p) }

func (d *discard64Reader) Discard(n int64) (int64, error) {
	d.discards++
	if left := int64(d.r.Len()); n > left {
		d.r.Seek(0, io.SeekEnd)
		return left, io.EOF
	}
	d.r.Seek(n, io.SeekCurrent)
	return n, nil
}

// normType maps an archive/tar type flag to ours.
func normType(tf byte, name string) byte {
	switch tf {
	case tar.TypeLink, tar.TypeSymlink, tar.TypeChar, tar.TypeBlock, tar.TypeDir, tar.TypeFifo:
		return tf
	case 'D':
		return TypeDir
	case tar.TypeReg, tar.TypeRegA:
		if strings.HasSuffix(name, "/") {
			return TypeDir
		}
	}
	return TypeReg
}

// consumedKeys are the pax keys the Scanner turns into fields.
func consumedKey(k string) bool {
	switch k {
	case "path", "linkpath", "size", "uid", "gid", "uname", "gname", "mtime", "atime", "ctime",
		"SCHILY.devmajor", "SCHILY.devminor":
		return true
	}
	return strings.HasPrefix(k, "SCHILY.xattr.") || strings.HasPrefix(k, "LIBARCHIVE.xattr.") ||
		strings.HasPrefix(k, "GNU.sparse.")
}

// logical rebuilds the content of a member from the raw stream.
func logical(data []byte, h *Header) []byte {
	stored := data[h.DataOffset : h.DataOffset+h.StoredSize]
	if h.Sparse == nil {
		return stored
	}
	out := make([]byte, h.Size)
	pos := int64(0)
	for _, c := range h.Sparse {
		copy(out[c.Offset:c.Offset+c.Length], stored[pos:pos+c.Length])
		pos += c.Length
	}
	return out
}

// compareWithStdlib scans data with the Scanner and with archive/tar and
// compares every field they both report, and the content of every regular
// file read at DataOffset from the raw stream. It returns the headers.
func compareWithStdlib(t *testing.T, data []byte) []*Header {
	t.Helper()
	hs, err := scanAll(data, Limits{})
	if err != nil {
		t.Fatalf("scan: got error %v, want nil", err)
	}
	tr := tar.NewReader(bytes.NewReader(data))
	globals := false
	i := 0
	for {
		want, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("archive/tar: %v", err)
		}
		if want.Typeflag == tar.TypeXGlobalHeader {
			globals = true
			continue
		}
		if want.Typeflag == 'V' {
			continue
		}
		if i >= len(hs) {
			t.Fatalf("got %d members, archive/tar has more (next %q)", len(hs), want.Name)
		}
		got := hs[i]
		i++
		content, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("archive/tar read %q: %v", want.Name, err)
		}
		compareHeader(t, got, want, content, data, globals)
	}
	if i != len(hs) {
		t.Fatalf("got %d members, want %d", len(hs), i)
	}
	return hs
}

func compareHeader(t *testing.T, got *Header, want *tar.Header, content, data []byte, globals bool) {
	t.Helper()
	name := want.Name
	check := func(field string, g, w any) {
		t.Helper()
		if !equalAny(g, w) {
			t.Errorf("%s: %s: got %v, want %v", name, field, g, w)
		}
	}
	wantType := normType(want.Typeflag, want.Name)
	check("Name", got.Name, want.Name)
	check("Linkname", got.Linkname, want.Linkname)
	check("Typeflag", string(got.Typeflag), string(wantType))
	check("Mode", got.Mode, want.Mode&07777)
	check("UID", got.UID, int64(want.Uid))
	check("GID", got.GID, int64(want.Gid))
	check("Uname", got.Uname, want.Uname)
	check("Gname", got.Gname, want.Gname)
	check("MTime", got.MTime, FromTime(want.ModTime))
	check("HasATime", got.HasATime, !want.AccessTime.IsZero())
	if !want.AccessTime.IsZero() {
		check("ATime", got.ATime, FromTime(want.AccessTime))
	}
	check("HasCTime", got.HasCTime, !want.ChangeTime.IsZero())
	if !want.ChangeTime.IsZero() {
		check("CTime", got.CTime, FromTime(want.ChangeTime))
	}
	if wantType == TypeChar || wantType == TypeBlock {
		check("Devmajor", got.Devmajor, want.Devmajor)
		check("Devminor", got.Devminor, want.Devminor)
	}
	wantX := map[string]string{}
	wantPAX := map[string]string{}
	for k, v := range want.PAXRecords {
		if x, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok {
			wantX[x] = v
		}
		if !consumedKey(k) {
			wantPAX[k] = v
		}
	}
	gotX := map[string]string{}
	for _, x := range got.Xattrs {
		gotX[x.Name] = x.Value
	}
	check("Xattrs", gotX, wantX)
	if !globals {
		gotPAX := got.PAX
		if gotPAX == nil {
			gotPAX = map[string]string{}
		}
		check("PAX", gotPAX, wantPAX)
	}
	if wantType != TypeReg {
		check("Size", got.Size, int64(0))
		check("StoredSize", got.StoredSize, int64(0))
		return
	}
	check("Size", got.Size, want.Size)
	if got.Sparse == nil {
		check("StoredSize", got.StoredSize, got.Size)
	}
	if got.DataOffset < 0 || got.DataOffset+got.StoredSize > int64(len(data)) {
		t.Errorf("%s: data %d+%d outside the %d-byte stream", name, got.DataOffset, got.StoredSize, len(data))
		return
	}
	if c := logical(data, got); !bytes.Equal(c, content) {
		t.Errorf("%s: content at DataOffset %d: got %d bytes %q, want %d bytes %q",
			name, got.DataOffset, len(c), clip(c), len(content), clip(content))
	}
}

func equalAny(a, b any) bool {
	switch a := a.(type) {
	case map[string]string:
		return maps.Equal(a, b.(map[string]string))
	case []SparseChunk:
		return slices.Equal(a, b.([]SparseChunk))
	}
	return a == b
}

func clip(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}

// errKind names the sentinel an error wraps, for table tests.
func errKind(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, ErrNotTar):
		return "ErrNotTar"
	case errors.Is(err, ErrCorrupt):
		return "ErrCorrupt"
	case errors.Is(err, ErrTruncated):
		return "ErrTruncated"
	}
	return fmt.Sprintf("other(%v)", err)
}

// --- A builder for hand-made archives. ---

// hb describes one raw header block, every field as it is.
type hb = tarbuild.Block

// arch assembles a raw archive.
type arch struct{ bytes.Buffer }

func (a *arch) hdr(h hb) *arch {
	if h.Mode == 0 {
		h.Mode = 0o644
	}
	a.Write(h.Bytes())
	return a
}

// file writes a header for data (size set from it) and the padded data.
func (a *arch) file(h hb, data []byte) *arch {
	h.Size = int64(len(data))
	a.hdr(h)
	return a.data(data)
}

func (a *arch) data(d []byte) *arch {
	a.Write(d)
	a.Write(make([]byte, padded(int64(len(d)))-int64(len(d))))
	return a
}

// pax writes a pax extended header of type tf ('x' or 'g') with records
// given as "key=value" strings.
func (a *arch) pax(tf byte, recs ...string) *arch {
	var d bytes.Buffer
	for _, r := range recs {
		d.WriteString(tarbuild.PAXRecord(r))
	}
	return a.file(hb{Name: "PaxHeaders/x", Typeflag: tf, Layout: tarbuild.USTAR}, d.Bytes())
}

func (a *arch) end() []byte {
	a.Write(make([]byte, 2*blockSize))
	return a.Bytes()
}
