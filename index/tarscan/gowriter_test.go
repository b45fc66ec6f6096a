package tarscan

import (
	"archive/tar"
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// goEntry is one member to write with archive/tar, and the formats that
// can hold it.
type goEntry struct {
	hdr     tar.Header
	content []byte
	formats []tar.Format
}

var (
	allFormats = []tar.Format{tar.FormatUSTAR, tar.FormatPAX, tar.FormatGNU}
	paxGNU     = []tar.Format{tar.FormatPAX, tar.FormatGNU}
	paxOnly    = []tar.Format{tar.FormatPAX}
)

func goEntries() []goEntry {
	rng := rand.New(rand.NewPCG(1, 2))
	big := make([]byte, 100_000)
	for i := range big {
		big[i] = byte(rng.Uint32())
	}
	base := time.Unix(1_700_000_000, 0)
	long := "long/" + strings.Repeat("d", 120) + "/" + strings.Repeat("n", 180) + ".txt" // 300+ bytes
	ustarSplit := strings.Repeat("p", 120) + "/" + strings.Repeat("q", 90)               // needs the prefix
	reg := func(name string, content string) goEntry {
		return goEntry{hdr: tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content)),
			ModTime: base, Uid: 1000, Gid: 1000, Uname: "alice", Gname: "staff"}, content: []byte(content), formats: allFormats}
	}
	es := []goEntry{
		{hdr: tar.Header{Name: "dir/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: base, Uname: "root", Gname: "root"}, formats: allFormats},
		reg("dir/file.txt", "hello, world\n"),
		reg("dir/empty", ""),
		{hdr: tar.Header{Name: "dir/big.bin", Typeflag: tar.TypeReg, Mode: 0o600, Size: int64(len(big)), ModTime: base}, content: big, formats: allFormats},
		{hdr: tar.Header{Name: "dir/ünïcødé-文件.txt", Typeflag: tar.TypeReg, Mode: 0o644, Size: 8, ModTime: base},
			content: []byte("unicode\n"), formats: paxGNU},
		reg(ustarSplit, "split by the ustar prefix\n"),
		{hdr: tar.Header{Name: "dir/setuid", Typeflag: tar.TypeReg, Mode: 0o4755 | 0o2000 | 0o1000, ModTime: base}, formats: allFormats},
		{hdr: tar.Header{Name: "dir/link", Typeflag: tar.TypeSymlink, Linkname: "file.txt", Mode: 0o777, ModTime: base}, formats: allFormats},
		{hdr: tar.Header{Name: "dir/hard", Typeflag: tar.TypeLink, Linkname: "dir/file.txt", ModTime: base}, formats: allFormats},
		{hdr: tar.Header{Name: "dev/null", Typeflag: tar.TypeChar, Mode: 0o666, Devmajor: 1, Devminor: 3, ModTime: base}, formats: allFormats},
		{hdr: tar.Header{Name: "dev/sda", Typeflag: tar.TypeBlock, Mode: 0o660, Devmajor: 8, Devminor: 0, ModTime: base}, formats: allFormats},
		{hdr: tar.Header{Name: "fifo", Typeflag: tar.TypeFifo, Mode: 0o644, ModTime: base}, formats: allFormats},
		{hdr: tar.Header{Name: long, Typeflag: tar.TypeReg, Mode: 0o644, Size: 5, ModTime: base}, content: []byte("long\n"), formats: paxGNU},
		{hdr: tar.Header{Name: "dir/longlink", Typeflag: tar.TypeSymlink, Linkname: long, ModTime: base}, formats: paxGNU},
		{hdr: tar.Header{Name: "dir/bigids", Typeflag: tar.TypeReg, Uid: 1 << 30, Gid: 3_000_000_000, ModTime: base}, formats: paxGNU},
		{hdr: tar.Header{Name: "dir/bigdev", Typeflag: tar.TypeBlock, Devmajor: 1 << 22, Devminor: 1 << 21, ModTime: base}, formats: []tar.Format{tar.FormatGNU}},
		{hdr: tar.Header{Name: "dir/times", Typeflag: tar.TypeReg, ModTime: base,
			AccessTime: base.Add(time.Hour), ChangeTime: base.Add(2 * time.Hour)}, formats: paxGNU},
		{hdr: tar.Header{Name: "dir/subsec", Typeflag: tar.TypeReg, ModTime: time.Unix(1_700_000_000, 123_456_789),
			AccessTime: time.Unix(1_700_000_001, 5), ChangeTime: time.Unix(1_700_000_002, 999_999_999)}, formats: paxOnly},
		{hdr: tar.Header{Name: "dir/old", Typeflag: tar.TypeReg, ModTime: time.Unix(-1, -500_000_000)}, formats: paxOnly},
		{hdr: tar.Header{Name: "dir/pre1970", Typeflag: tar.TypeReg, ModTime: time.Unix(-86400*365, 0)}, formats: []tar.Format{tar.FormatGNU}},
		{hdr: tar.Header{Name: "dir/xattrs", Typeflag: tar.TypeReg, Mode: 0o644, ModTime: base, Size: 3,
			PAXRecords: map[string]string{
				"SCHILY.xattr.user.mime": "text/plain",
				"SCHILY.xattr.user.bin":  "a\x00b\xff=\n",
				"comment":                "kept for diagnostics",
			}}, content: []byte("abc"), formats: paxOnly},
		{hdr: tar.Header{Name: "dir/longuname", Typeflag: tar.TypeReg, Uname: strings.Repeat("u", 40), ModTime: base}, formats: paxOnly},
	}
	return es
}

// TestGoWriter checks archives written by archive/tar in each format
// against archive/tar's reader and against what was written.
func TestGoWriter(t *testing.T) {
	for _, f := range allFormats {
		t.Run(f.String(), func(t *testing.T) {
			data, written := goArchive(t, f, 0)
			hs := compareWithStdlib(t, data)
			if len(hs) != len(written) {
				t.Fatalf("got %d members, want %d", len(hs), len(written))
			}
			for i, e := range written {
				got, want := hs[i], e.hdr
				if got.Name != want.Name {
					t.Errorf("member %d: Name: got %q, want %q", i, got.Name, want.Name)
				}
				if got.Typeflag != want.Typeflag {
					t.Errorf("%s: Typeflag: got %q, want %q", want.Name, got.Typeflag, want.Typeflag)
				}
				if got.Linkname != want.Linkname {
					t.Errorf("%s: Linkname: got %q, want %q", want.Name, got.Linkname, want.Linkname)
				}
				if got.UID != int64(want.Uid) || got.GID != int64(want.Gid) {
					t.Errorf("%s: ids: got %d:%d, want %d:%d", want.Name, got.UID, got.GID, want.Uid, want.Gid)
				}
				if got.Typeflag == TypeReg {
					if c := data[got.DataOffset : got.DataOffset+got.StoredSize]; !bytes.Equal(c, e.content) {
						t.Errorf("%s: content: got %q, want %q", want.Name, clip(c), clip(e.content))
					}
				}
				wantMTime := FromTime(want.ModTime)
				if f != tar.FormatPAX {
					wantMTime = Time{Sec: want.ModTime.Unix()}
				}
				if got.MTime != wantMTime {
					t.Errorf("%s: MTime: got %v, want %v", want.Name, got.MTime, wantMTime)
				}
			}
			checkTiling(t, hs, data)
			if f == tar.FormatPAX {
				checkXattrOrder(t, hs)
			}
		})
	}
}

// goArchive writes the goEntries that format f can hold and whose content
// is at most maxContent bytes (0: any) with tarbuild, and returns them.
func goArchive(t testing.TB, f tar.Format, maxContent int) ([]byte, []goEntry) {
	t.Helper()
	var written []goEntry
	var entries []tarbuild.Entry
	for _, e := range goEntries() {
		if !containsFormat(e.formats, f) || maxContent > 0 && len(e.content) > maxContent {
			continue
		}
		h := e.hdr
		h.Format = f
		entries = append(entries, tarbuild.Entry{Hdr: &h, Body: e.content})
		written = append(written, e)
	}
	return tarbuild.Go(t, f, entries...), written
}

func containsFormat(fs []tar.Format, f tar.Format) bool {
	for _, g := range fs {
		if g == f {
			return true
		}
	}
	return false
}

// checkTiling checks that members tile the stream: each starts where the
// previous one's padded data ended (or later, after a member that is not a
// regular file and may carry data that is not reported).
func checkTiling(t *testing.T, hs []*Header, data []byte) {
	t.Helper()
	var end int64
	exact := true
	for _, h := range hs {
		if h.HeaderOffset != end && (exact || h.HeaderOffset < end) {
			t.Errorf("%s: HeaderOffset: got %d, want %d", h.Name, h.HeaderOffset, end)
		}
		exact = h.Typeflag == TypeReg
		if h.DataOffset < h.HeaderOffset+blockSize {
			t.Errorf("%s: DataOffset %d before the end of the header at %d", h.Name, h.DataOffset, h.HeaderOffset)
		}
		end = h.DataOffset + padded(h.StoredSize)
	}
	if end > int64(len(data)) {
		t.Errorf("members end at %d past the %d-byte stream", end, len(data))
	}
}

// checkXattrOrder checks that xattrs come in the order of the records.
func checkXattrOrder(t *testing.T, hs []*Header) {
	t.Helper()
	for _, h := range hs {
		if h.Name != "dir/xattrs" {
			continue
		}
		// archive/tar writes records sorted by key.
		want := []Xattr{{"user.bin", "a\x00b\xff=\n"}, {"user.mime", "text/plain"}}
		if len(h.Xattrs) != len(want) {
			t.Fatalf("Xattrs: got %q, want %q", h.Xattrs, want)
		}
		for i := range want {
			if h.Xattrs[i] != want[i] {
				t.Errorf("Xattrs[%d]: got %q, want %q", i, h.Xattrs[i], want[i])
			}
		}
		return
	}
	t.Errorf("no member dir/xattrs")
}
