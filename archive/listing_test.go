package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestAppendJSON checks that EntryView.AppendJSON writes what
// encoding/json writes of EntryView.JSON() (without HTML escaping), and
// appendLong what the fmt-based reference writes, for names with control
// characters, quotes, invalid UTF-8 and line separators, extreme times,
// ids and modes, and with every optional field set or not.
func TestAppendJSON(t *testing.T) {
	all := make([]byte, 0, 128)
	for c := range 128 {
		all = append(all, byte(c))
	}
	for i, v := range []EntryView{
		{path: []byte("a/b.txt"), id: 2, typ: "file", size: 10, offset: 1536, hasOffset: true,
			e: &index.Entry{Mode: 0o644, MTime: index.Time{Sec: 1577934245, Nsec: 123000000}, Nlink: 1}},
		{path: all, typ: "symlink", link: "../x\"y\\z",
			e: &index.Entry{Mode: 0o777, Uname: "ü", Gname: "<&>", UID: 4000000000, GID: 1}},
		{path: []byte("bad\xff\xfe utf8 \u2028 \u2029 \U0001F600 \xe2\x80"), typ: "char",
			e: &index.Entry{Mode: 0o600, Devmajor: 1, Devminor: 3, ATime: index.Time{Sec: -1, Nsec: 999999995}, CTime: index.Time{Nsec: 9}}},
		{path: []byte("block"), typ: "block", e: &index.Entry{Mode: 0o660, Devmajor: 4294967295, Devminor: 4294967295}},
		{path: []byte("s"), id: math.MaxUint32 - 1, typ: "file", size: 1 << 40, stored: 7, hasStored: true, offset: 0, hasOffset: true,
			e: &index.Entry{Mode: 0o4755, Sparse: true, MTime: index.Time{Sec: math.MaxInt64 / 1_000_000_000, Nsec: 854775807}, Nlink: math.MaxUint32,
				CTime: index.Time{Sec: 15023750400, Nsec: 1}, ATime: index.Time{Sec: -15023750400, Nsec: 1}},
			xattrs: []index.Xattr{{Name: "user.a", Value: "\x00\x01\"\\"}, {Name: "user.b", Value: "2"}, {Name: "user.\xff", Value: "v"}}},
		{path: []byte("d"), typ: "dir", e: &index.Entry{Mode: 0o3775, MTime: index.Time{Sec: math.MinInt64/1_000_000_000 - 1, Nsec: 145224192}, Uname: "x y", GID: 7}},
		{path: []byte("h"), typ: "hardlink", link: "a/b \"c\"", e: &index.Entry{Mode: 0o7000, MTime: index.Time{Sec: -1, Nsec: 999999999}, Nlink: 2}},
		{path: []byte("f"), typ: "fifo", e: &index.Entry{Mode: 0o170777, MTime: index.Time{Nsec: 1}}},
		{path: []byte("big"), typ: "file", size: 123456789012, e: &index.Entry{Mode: 0o1644}},
		{path: []byte{}, typ: "unknown", e: &index.Entry{}},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			var want bytes.Buffer
			enc := json.NewEncoder(&want)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(v.JSON()); err != nil {
				t.Fatal(err)
			}
			if got := v.AppendJSON(nil); !bytes.Equal(got, want.Bytes()) {
				t.Errorf("AppendJSON:\n got %s\nwant %s", got, want.Bytes())
			}
			if got, want := v.AppendLong(nil), refLongLine(v.JSON())+"\n"; string(got) != want {
				t.Errorf("appendLong:\n got %q\nwant %q", got, want)
			}
		})
	}
}

// TestAppendTime checks the dates and times that ls writes by hand
// against the time package's, at the ends of int64 nanoseconds, around
// the epoch, leap days and centuries, and at random.
func TestAppendTime(t *testing.T) {
	ns := []int64{math.MinInt64, math.MinInt64 + 1, math.MaxInt64, math.MaxInt64 - 1, 0, 1, -1, 999999999,
		-999999999, 1e9, -1e9, 100, -100, 10, 1000000}
	for _, d := range []time.Time{
		time.Date(1700, 2, 28, 23, 59, 59, 0, time.UTC), time.Date(1700, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1800, 12, 31, 23, 59, 59, 500, time.UTC), time.Date(1900, 2, 28, 12, 0, 0, 0, time.UTC),
		time.Date(1900, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(1969, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(2000, 2, 29, 0, 0, 0, 0, time.UTC), time.Date(2000, 3, 1, 0, 0, 0, 0, time.UTC),
		time.Date(2024, 2, 29, 23, 59, 59, 0, time.UTC), time.Date(2100, 2, 28, 0, 0, 0, 0, time.UTC),
		time.Date(2100, 3, 1, 0, 0, 0, 0, time.UTC), time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		for _, delta := range []int64{-1, 0, 1, 1e9, -86400e9} {
			ns = append(ns, d.UnixNano()+delta)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		ns = append(ns, int64(r.Uint64()), r.Int64N(4e18)-2e18, r.Int64N(1e9)*1e9)
	}
	ts := make([]index.Time, 0, len(ns)+40000)
	for _, n := range ns {
		ts = append(ts, index.Time{Sec: n / 1e9, Nsec: int32(n % 1e9)})
		if n%1e9 < 0 {
			ts[len(ts)-1] = index.Time{Sec: n/1e9 - 1, Nsec: int32(n%1e9 + 1e9)}
		}
	}
	// Past int64 nanoseconds: 2262 to 2446 (ext4's end) and far beyond,
	// and as far before 1678, to a million years.
	const year = 31556952
	for _, sec := range []int64{9223372037, 15023750400, 253402300799, 253402300800, -9223372037, -62135596800, -62135596801} {
		ts = append(ts, index.Time{Sec: sec}, index.Time{Sec: sec, Nsec: 999999999})
	}
	for range 20000 {
		ts = append(ts, index.Time{Sec: r.Int64N(2e6*year) - 1e6*year, Nsec: int32(r.Int64N(1e9))},
			index.Time{Sec: 9223372037 + r.Int64N(200*year), Nsec: int32(r.Int64N(1e9))})
	}
	for _, tt := range ts {
		tm := time.Unix(tt.Sec, int64(tt.Nsec)).UTC()
		if got, want := string(appendRFC3339Nano(nil, tt)), tm.Format(time.RFC3339Nano); got != want {
			t.Fatalf("appendRFC3339Nano(%v): got %s, want %s", tt, got, want)
		}
		if got, want := string(appendUnixNano(nil, tt)), refNanos(tt).String(); got != want {
			t.Fatalf("appendUnixNano(%v): got %s, want %s", tt, got, want)
		}
		v := EntryView{typ: "file", e: &index.Entry{MTime: tt}}
		if got, want := string(v.AppendLong(nil)), refLongLine(v.JSON())+"\n"; got != want {
			t.Fatalf("appendLong of mtime %v: got %q, want %q", tt, got, want)
		}
	}
}

// refNanos is t in nanoseconds since the epoch, computed with big numbers.
func refNanos(t index.Time) json.Number {
	n := new(big.Int).Mul(big.NewInt(t.Sec), big.NewInt(1e9))
	return json.Number(n.Add(n, big.NewInt(int64(t.Nsec))).String())
}

// refTime is the time of an exact nanosecond count from ls --json.
func refTime(ns json.Number) time.Time {
	n, ok := new(big.Int).SetString(string(ns), 10)
	if !ok {
		panic("bad nanoseconds " + ns)
	}
	sec, nsec := new(big.Int).DivMod(n, big.NewInt(1e9), new(big.Int)) // Euclidean: nsec >= 0
	return time.Unix(sec.Int64(), nsec.Int64()).UTC()
}

// TestListOutput lists an archive of awkward members with ls, ls -l and
// ls --json, whole and from a few paths, and checks that each output
// equals, byte for byte, what the reference (the listing code as it was
// before it wrote from entryView: string paths, ix.Path to tell hard
// links, fmt, time.Format and encoding/json) prints, and that every
// --json line decodes.
func TestListOutput(t *testing.T) {
	dir := t.TempDir()
	tarPath := filepath.Join(dir, "a.tar")
	if err := os.WriteFile(tarPath, awkwardTar(t), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := DefaultOptions()
	opts.CacheDir = filepath.Join(dir, "cache")
	ctx := context.Background()
	a, err := OpenIndexed(ctx, tarPath, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	for _, paths := range [][]string{
		nil,
		{"dir"},
		{"dir/hard link", "z/target"},
		{"z", "dir/sub/", "/links/to-dir"},
	} {
		for _, mode := range []string{"names", "long", "json"} {
			t.Run(mode+"/"+strings.Join(paths, ","), func(t *testing.T) {
				format := map[string]ListFormat{"names": ListNames, "long": ListLong, "json": ListJSON}[mode]
				var got bytes.Buffer
				if err := a.List(ctx, &got, format, paths...); err != nil {
					t.Fatal(err)
				}
				want := refList(t, a.Index(), paths, mode)
				if !bytes.Equal(got.Bytes(), want) {
					gl, wl := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
					for i := range min(len(gl), len(wl)) {
						if gl[i] != wl[i] {
							t.Fatalf("line %d:\n got %q\nwant %q", i+1, gl[i], wl[i])
						}
					}
					t.Fatalf("got %d lines, want %d", len(gl), len(wl))
				}
				if mode != "json" {
					return
				}
				if paths == nil {
					// The archive has what the comparison is for.
					for _, w := range []string{`"sparse":true,"stored_size":15`, `"xattrs":{"user.a":"\u0001\"\\\n",`,
						`bad\ufffd\ufffdutf8\ufffd`, `\u2028\u2029`, `"atime_ns":1999999999,"ctime_ns":-999999999}`, `"devmajor":8`,
						`"type":"hardlink","size":0,"mode":"0640"`, `"mtime":"2021-07-04T23:59:58.123456789Z"`} {
						if !strings.Contains(got.String(), w) {
							t.Errorf("ls --json of the whole archive has no %s", w)
						}
					}
				}
				for _, line := range bytes.SplitAfter(got.Bytes(), []byte("\n")) {
					if len(line) == 0 {
						continue
					}
					var j EntryJSON
					if err := json.Unmarshal(line, &j); err != nil {
						t.Errorf("line %q: %v", line, err)
					}
				}
			})
		}
	}
}

// awkwardTar returns a tar with names that need escaping in JSON (quotes,
// backslashes, control characters, invalid UTF-8, line separators,
// non-ASCII), every member type, hard links listed before and after the
// name that stores their data, setuid/setgid/sticky modes, numeric-only
// owners, times before 1970 and with nanoseconds, access and change
// times, xattrs, a sparse file, and 12,000 names of 99 bytes (over a
// megabyte of names).
func awkwardTar(t *testing.T) []byte {
	var entries []tarbuild.Entry
	mt := time.Date(2021, 7, 4, 23, 59, 58, 123456789, time.UTC)
	add := func(h *tar.Header, data string) {
		t.Helper()
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.ModTime.IsZero() {
			h.ModTime = mt
		}
		if h.Uname == "" && h.Uid == 0 {
			h.Uname, h.Gname, h.Uid, h.Gid = "ann", "staff", 1000, 50
		}
		entries = append(entries, tarbuild.Entry{Hdr: h, Body: []byte(data)})
	}
	pax := tar.FormatPAX
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "dir/", Mode: 0o2775}, "")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "dir/q\"uote", Mode: 0o4755}, "x")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "dir/back\\slash"}, "")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "dir/ctl\x01\x1f\x7f\ttab\nnewline\rcr", Format: tar.FormatGNU}, "ctl")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "dir/bad\xff\xfeutf8\xe2\x80", Format: tar.FormatGNU}, "bad")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "dir/é-ü-日本-\U0001F600-\u2028\u2029", Format: pax}, "utf8")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "dir/<html>&amp;"}, "")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "dir/xattrs", Format: pax, PAXRecords: map[string]string{
		"SCHILY.xattr.user.b": "2", "SCHILY.xattr.user.a": "\x01\"\\\n", "SCHILY.xattr.user.é": "ü\xff",
	}}, "xa")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "dir/times", Format: pax, ModTime: time.Unix(-86400*365, 5),
		AccessTime: time.Unix(1, 999999999), ChangeTime: time.Unix(-1, 1)}, "t")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "dir/numeric", Uid: 4000000, Gid: 3000000, Format: pax}, "n")
	add(&tar.Header{Typeflag: tar.TypeDir, Name: "dir/sub/", Mode: 0o1777}, "")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "dir/sub/empty"}, "")
	add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "dir/sub/sym \"q\"", Linkname: "../q\"uote\x01"}, "")
	add(&tar.Header{Typeflag: tar.TypeChar, Name: "dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}, "")
	add(&tar.Header{Typeflag: tar.TypeBlock, Name: "dev/sda", Mode: 0o660, Devmajor: 8, Devminor: 0}, "")
	add(&tar.Header{Typeflag: tar.TypeFifo, Name: "dev/fifo", Mode: 0o600}, "")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "z/target", Mode: 0o640}, "the data")
	add(&tar.Header{Typeflag: tar.TypeLink, Name: "dir/hard link", Linkname: "z/target"}, "")
	add(&tar.Header{Typeflag: tar.TypeLink, Name: "z/zz-hard", Linkname: "z/target"}, "")
	add(&tar.Header{Typeflag: tar.TypeSymlink, Name: "links/to-dir", Linkname: "../dir"}, "")
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "z/\"\\"}, "")
	// Enough names that every listing is written out in several pieces.
	for i := range 12000 {
		add(&tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("many/%05d-%s", i, strings.Repeat("x", 88))}, "")
	}
	// A sparse file in pax format 0.1, which archive/tar does not write:
	// 3000 bytes with data at 0 (10 bytes) and 2048 (5 bytes).
	entries = append(entries, tarbuild.Entry{Raw: tarbuild.Members(tarbuild.Member{
		Name: "z/sparse", Body: "0123456789abcde", Uid: 1000, Gid: 50, Mtime: 1625443198,
		PAX: []string{"GNU.sparse.size=3000", "GNU.sparse.numblocks=2", "GNU.sparse.map=0,10,2048,5"},
	})})
	return tarbuild.Go(t, tar.FormatUnknown, entries...)
}

// refList is what ls printed before it wrote from entryView.
func refList(t *testing.T, ix *index.Index, paths []string, mode string) []byte {
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	line := func(p string, id index.EntryID) {
		switch {
		case p == "":
		case mode == "json":
			if err := enc.Encode(refDescribe(ix, p, id)); err != nil {
				t.Fatal(err)
			}
		case mode == "long":
			fmt.Fprintln(&out, refLongLine(refDescribe(ix, p, id)))
		default:
			out.WriteString(p)
			if ix.Entry(id).Type == index.TypeDir {
				out.WriteByte('/')
			}
			out.WriteByte('\n')
		}
	}
	var walk func(p string, dir index.EntryID)
	walk = func(p string, dir index.EntryID) {
		line(p, dir)
		for _, d := range ix.Children(dir) {
			cp := d.Name
			if p != "" {
				cp = p + "/" + d.Name
			}
			if ix.Entry(d.ID).Type == index.TypeDir && ix.Path(d.ID) == cp {
				walk(cp, d.ID)
				continue
			}
			line(cp, d.ID)
		}
	}
	if len(paths) == 0 {
		paths = []string{""}
	}
	for _, p := range paths {
		id, ok := ix.LookupPath(CleanMember(p))
		if !ok {
			t.Fatalf("%s: not in the archive", p)
		}
		walk(CleanMember(p), id)
	}
	return out.Bytes()
}

// refDescribe is describeEntry as it was before entryView.
func refDescribe(ix *index.Index, p string, id index.EntryID) EntryJSON {
	e := ix.Entry(id)
	j := EntryJSON{
		Path: p, Type: e.Type.String(), Size: e.Size, Mode: fmt.Sprintf("%04o", e.Mode),
		UID: e.UID, GID: e.GID, Uname: e.Uname, Gname: e.Gname,
		MTime: e.MTime.Std().Format(time.RFC3339Nano), MTimeNs: refNanos(e.MTime),
		Devmaj: e.Devmajor, Devmin: e.Devminor, Inode: uint32(id) + 1, Nlink: e.Nlink, Sparse: e.Sparse,
	}
	if !e.ATime.IsZero() {
		j.ATimeNs = refNanos(e.ATime)
	}
	if !e.CTime.IsZero() {
		j.CTimeNs = refNanos(e.CTime)
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

// refLongLine is the line of ls -l as it was made with fmt.
func refLongLine(j EntryJSON) string {
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
	mt := refTime(j.MTimeNs).Format("2006-01-02 15:04")
	b := testutil.ModeLetters(j.Type, j.Mode)
	return fmt.Sprintf("%s %s/%s %9s %s %s", b, owner, group, size, mt, name)
}
