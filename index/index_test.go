package index

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index/inflate"
	"github.com/tarmount/tarmount/index/tarscan"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"

	"github.com/tarmount/tarmount/internal/testutil/memsrc"
)

var update = flag.Bool("update", false, "rewrite golden files")

// member describes one tar member for tarBytes: the fields the tests of
// this package read back.
type member struct {
	name, link string
	typ        byte
	data       []byte
	mode       int64
	xattrs     map[string]string
}

// tarBytes writes members with tarbuild in PAX format, owned by
// user:users (1000:100), with a sub-second mtime.
func tarBytes(t testing.TB, members []member) []byte {
	t.Helper()
	entries := make([]tarbuild.Entry, len(members))
	for i, m := range members {
		entries[i] = tarbuild.Entry{Name: m.name, Link: m.link, Type: m.typ, Body: m.data, Mode: m.mode, Xattrs: m.xattrs,
			Uid: 1000, Gid: 100, Uname: "user", Gname: "users", ModTime: time.Unix(1700000000, 123456789)}
	}
	return tarbuild.Go(t, tar.FormatPAX, entries...)
}

// scaled returns n, or an eighth of it under the race detector.
func scaled(n int) int {
	if raceEnabled {
		return max(n/8, 1)
	}
	return n
}

// memSource serves an in-memory object and counts what it serves.
type memSource = memsrc.Source[fetch.Identity]

func newMemSource(data []byte) *memSource {
	return memsrc.New(data, fetch.Identity{Size: int64(len(data))})
}

func build(t testing.TB, obj []byte, span int64) *Index {
	t.Helper()
	ix, err := Build(context.Background(), bytes.NewReader(obj), fetch.Identity{Size: int64(len(obj)), ETag: `"x"`}, BuildOptions{Span: span})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	return ix
}

func randomData(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	b := make([]byte, n)
	// Compressible but not trivially: random bytes from a small alphabet.
	for i := range b {
		b[i] = "abcdefghijklmnopqrstuvwxyz \n0123"[r.IntN(32)]
	}
	return b
}

func sampleMembers() []member {
	return []member{
		{name: "dir/", typ: tar.TypeDir, mode: 0o755},
		{name: "dir/a.txt", data: []byte("hello\n"), xattrs: map[string]string{"user.k": "v"}},
		{name: "dir/big.bin", data: randomData(1, 3<<20)},
		{name: "dir/link", link: "a.txt", typ: tar.TypeSymlink},
		{name: "dir/hard", link: "dir/a.txt", typ: tar.TypeLink},
		{name: "implied/deep/file", data: []byte("implied parents")},
		{name: "./dot/x", data: []byte("dot")},
		{name: "/abs/y", data: []byte("absolute")},
		{name: "../evil", data: []byte("never")},
		{name: "dup", data: []byte("first")},
		{name: "dup", data: []byte("second")},
		{name: "empty", data: nil},
		{name: "setuid", data: []byte("x"), mode: 0o4755},
		{name: "fifo", typ: tar.TypeFifo},
		{name: "other.bin", data: randomData(2, 2<<20)},
	}
}

func readAll(t testing.TB, r *Reader, id EntryID) []byte {
	t.Helper()
	e := r.Entry(id)
	buf := make([]byte, e.Size)
	n, err := r.ReadAt(context.Background(), id, buf, 0)
	if err != nil && err != io.EOF {
		t.Fatalf("read %s: %v", r.ix.Path(id), err)
	}
	return buf[:n]
}

func TestBuildEntries(t *testing.T) {
	raw := tarBytes(t, sampleMembers())
	for _, tc := range []struct {
		name string
		obj  []byte
	}{
		{"tar", raw},
		{"gzip", tarbuild.GzipLevel(raw, 6)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix := build(t, tc.obj, 1<<20)
			src := newMemSource(tc.obj)
			r := NewReader(ix, src, ReaderOptions{})
			defer r.Close()
			files := map[string]string{
				"dir/a.txt": "hello\n", "implied/deep/file": "implied parents", "dot/x": "dot",
				"abs/y": "absolute", "dup": "second", "empty": "", "dir/hard": "hello\n",
			}
			for p, want := range files {
				id, ok := ix.LookupPath(p)
				if !ok {
					t.Fatalf("%s: not found", p)
				}
				if got := string(readAll(t, r, id)); got != want {
					t.Errorf("%s: got %q, want %q", p, got, want)
				}
			}
			for _, m := range sampleMembers() {
				if m.name == "dir/big.bin" || m.name == "other.bin" {
					id, _ := ix.LookupPath(m.name)
					if got := readAll(t, r, id); !bytes.Equal(got, m.data) {
						t.Errorf("%s: content differs", m.name)
					}
				}
			}
			if _, ok := ix.LookupPath("../evil"); ok {
				t.Error("../evil was indexed")
			}
			if _, ok := ix.LookupPath("evil"); ok {
				t.Error("evil was indexed")
			}
			a, _ := ix.LookupPath("dir/a.txt")
			h, _ := ix.LookupPath("dir/hard")
			if a != h || ix.Entry(a).Nlink != 2 {
				t.Errorf("hard link: ids %d and %d, nlink %d; want one id with nlink 2", a, h, ix.Entry(a).Nlink)
			}
			if x := ix.Xattrs(a); len(x) != 1 || x[0] != (Xattr{"user.k", "v"}) {
				t.Errorf("xattrs: got %v", x)
			}
			l, _ := ix.LookupPath("dir/link")
			if e := ix.Entry(l); e.Type != TypeSymlink || e.Linkname != "a.txt" || e.Size != 5 {
				t.Errorf("symlink: got %+v", e)
			}
			d, _ := ix.LookupPath("implied/deep")
			if e := ix.Entry(d); e.Type != TypeDir || e.Mode != 0o755 {
				t.Errorf("implied dir: got %+v", e)
			}
			s, _ := ix.LookupPath("setuid")
			if e := ix.Entry(s); e.Mode != 0o4755 || e.UID != 1000 || e.GID != 100 || e.Uname != "user" || e.MTime != (Time{Sec: 1700000000, Nsec: 123456789}) {
				t.Errorf("setuid: got %+v", e)
			}
			f, _ := ix.LookupPath("fifo")
			if ix.Entry(f).Type != TypeFIFO {
				t.Errorf("fifo: got type %v", ix.Entry(f).Type)
			}
			root := ix.Children(RootID)
			var names []string
			for _, c := range root {
				names = append(names, c.Name)
			}
			want := []string{"abs", "dir", "dot", "dup", "empty", "fifo", "implied", "other.bin", "setuid"}
			if fmt.Sprint(names) != fmt.Sprint(want) {
				t.Errorf("root: got %v, want %v", names, want)
			}
			if ix.Entry(RootID).Nlink != 2+4 {
				t.Errorf("root nlink: got %d, want 6", ix.Entry(RootID).Nlink)
			}
			// Every entry is reachable and names its first parent.
			for id := 0; id < ix.Len(); id++ {
				p := ix.Path(EntryID(id))
				got, ok := ix.LookupPath(p)
				if !ok || got != EntryID(id) {
					t.Errorf("entry %d: path %q resolves to %d, %v", id, p, got, ok)
				}
			}
		})
	}
}

// TestRandomAccess compares random reads through checkpoints with a
// sequential decode, including reads that start or end right at
// checkpoints and gzip member boundaries.
func TestRandomAccess(t *testing.T) {
	big := randomData(3, scaled(7<<20))
	raw := tarBytes(t, []member{{name: "big", data: big}, {name: "small", data: []byte("tail")}})
	// Multi-member: 1 MiB pieces compressed separately.
	multi := tarbuild.GzipMembers(raw, 1<<20, 6)
	for _, tc := range []struct {
		name string
		obj  []byte
	}{{"single", tarbuild.GzipLevel(raw, 6)}, {"multi", multi}, {"fast", tarbuild.GzipLevel(raw, 1)}} {
		t.Run(tc.name, func(t *testing.T) {
			ix := build(t, tc.obj, int64(scaled(512<<10)))
			if len(ix.Checkpoints) < 5 {
				t.Fatalf("got %d checkpoints, want at least 5", len(ix.Checkpoints))
			}
			r := NewReader(ix, newMemSource(tc.obj), ReaderOptions{CacheBytes: 1 << 20})
			defer r.Close()
			id, _ := ix.LookupPath("big")
			base := int64(ix.Entry(id).DataOffset)
			var offsets []int64
			for _, cp := range ix.Checkpoints {
				for _, d := range []int64{-3, -1, 0, 1, 2} {
					if o := int64(cp.Out) - base + d; o >= 0 && o < int64(len(big)) {
						offsets = append(offsets, o)
					}
				}
			}
			rng := rand.New(rand.NewPCG(9, 9))
			for i := 0; i < scaled(200); i++ {
				offsets = append(offsets, rng.Int64N(int64(len(big))))
			}
			for _, off := range offsets {
				n := 1 + rng.IntN(scaled(1<<20))
				buf := make([]byte, n)
				got, err := r.ReadAt(context.Background(), id, buf, off)
				want := big[off:min(off+int64(n), int64(len(big)))]
				if err != nil && !(err == io.EOF && got == len(want)) {
					t.Fatalf("read at %d+%d: %v", off, n, err)
				}
				if !bytes.Equal(buf[:got], want) {
					t.Fatalf("read at %d+%d: bytes differ", off, n)
				}
			}
		})
	}
}

// TestColdReadFetchesOneSpan checks that a small read fetches one request
// of at most one span of compressed data.
func TestColdReadFetchesOneSpan(t *testing.T) {
	var members []member
	for i := 0; i < 40; i++ {
		members = append(members, member{name: fmt.Sprintf("f%02d", i), data: randomData(uint64(i), 500<<10)})
	}
	obj := tarbuild.GzipLevel(tarBytes(t, members), 6)
	ix := build(t, obj, 1<<20)
	src := newMemSource(obj)
	r := NewReader(ix, src, ReaderOptions{})
	defer r.Close()
	id, _ := ix.LookupPath("f27")
	buf := make([]byte, 100)
	if _, err := r.ReadAt(context.Background(), id, buf, 1000); err != nil {
		t.Fatal(err)
	}
	var maxSpan int64
	for i := range ix.Checkpoints {
		end := ix.Source.Size
		if i+1 < len(ix.Checkpoints) {
			end = int64(ix.Checkpoints[i+1].In) + 1
		}
		maxSpan = max(maxSpan, end-int64(ix.Checkpoints[i].In))
	}
	if src.Requests() != 1 || src.Bytes() > maxSpan {
		t.Errorf("got %d requests and %d bytes, want 1 request of at most %d bytes", src.Requests(), src.Bytes(), maxSpan)
	}
}

func TestCorruptSpan(t *testing.T) {
	obj := tarbuild.GzipLevel(tarBytes(t, []member{{name: "f", data: randomData(5, 3<<20)}}), 6)
	ix := build(t, obj, 512<<10)
	id, _ := ix.LookupPath("f")
	for _, flip := range []int64{int64(ix.Checkpoints[2].In) + 100, int64(ix.Checkpoints[3].In) + 5000} {
		bad := bytes.Clone(obj)
		bad[flip] ^= 0x55
		r := NewReader(ix, newMemSource(bad), ReaderOptions{})
		var sawErr bool
		for off := int64(0); off < ix.Entry(id).Size; off += 256 << 10 {
			buf := make([]byte, 256<<10)
			n, err := r.ReadAt(context.Background(), id, buf, off)
			if err != nil && err != io.EOF {
				if !errors.Is(err, ErrCorrupt) {
					t.Errorf("flip at %d: got %v, want ErrCorrupt", flip, err)
				}
				sawErr = true
				continue
			}
			want := randomData(5, 3<<20)[off : off+int64(n)]
			if !bytes.Equal(buf[:n], want) {
				t.Fatalf("flip at %d: wrong bytes at %d", flip, off)
			}
		}
		if !sawErr {
			t.Errorf("flip at %d: no read failed", flip)
		}
		r.Close()
	}
}

func TestBuildErrors(t *testing.T) {
	raw := tarBytes(t, sampleMembers())
	gz := tarbuild.GzipLevel(raw, 6)
	for _, tc := range []struct {
		name string
		obj  []byte
		want error
	}{
		{"empty", nil, ErrUnsupported},
		{"text", []byte("<html>not found</html>"), ErrUnsupported},
		{"zstd cut short", []byte{0x28, 0xb5, 0x2f, 0xfd, 0, 0, 0, 0}, ErrCorrupt},
		{"zip", []byte("PK\x03\x04 and more"), ErrUnsupported},
		{"bzip2 header only", []byte("BZh9 not really"), ErrUnsupported},
		{"gzip of text", tarbuild.GzipLevel(bytes.Repeat([]byte("not a tar "), 100), 6), ErrUnsupported},
		{"truncated gzip", gz[:len(gz)/2], nil},
		{"truncated tar", raw[:len(raw)/2+100], nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Build(context.Background(), bytes.NewReader(tc.obj), fetch.Identity{Size: int64(len(tc.obj))}, BuildOptions{})
			if err == nil {
				t.Fatal("got no error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestEmptyArchive checks that an archive without members (its
// end-of-archive marker alone, as archive/tar and GNU tar write it) is
// an empty tree, plain as well as compressed.
func TestEmptyArchive(t *testing.T) {
	raw := tarBytes(t, nil)
	for name, obj := range map[string][]byte{"tar": raw, "gnu tar": make([]byte, 10240), "gzip": tarbuild.GzipLevel(raw, 6)} {
		t.Run(name, func(t *testing.T) {
			ix := build(t, obj, 0)
			if ix.Len() != 1 || len(ix.Children(RootID)) != 0 {
				t.Errorf("got %d entries, want the root alone", ix.Len())
			}
		})
	}
}

func TestFormatRoundTrip(t *testing.T) {
	obj := tarbuild.GzipLevel(tarBytes(t, sampleMembers()), 6)
	ix := build(t, obj, 1<<20)
	ix.Source.LastModified = time.Unix(1700000000, 0)
	data, err := ix.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	got, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Source.LastModified.Equal(ix.Source.LastModified) || got.Source.ETag != ix.Source.ETag || got.Source.Size != ix.Source.Size {
		t.Errorf("identity: got %+v, want %+v", got.Source, ix.Source)
	}
	got.Source.LastModified = ix.Source.LastModified
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", ix) {
		t.Errorf("round trip differs:\n got %+v\nwant %+v", got, ix)
	}
	// Reads through the loaded index work.
	r := NewReader(got, newMemSource(obj), ReaderOptions{})
	defer r.Close()
	id, _ := got.LookupPath("dir/big.bin")
	if !bytes.Equal(readAll(t, r, id), sampleMembers()[2].data) {
		t.Error("read through loaded index differs")
	}
	// Every corruption is refused.
	for i := 0; i < len(data); i += 1 + len(data)/300 {
		bad := bytes.Clone(data)
		bad[i] ^= 1
		if _, err := Unmarshal(bad); err == nil {
			t.Fatalf("flip at %d accepted", i)
		}
	}
	for _, n := range []int{0, 10, 40, len(data) - 1} {
		if _, err := Unmarshal(data[:n]); !errors.Is(err, ErrBadIndex) {
			t.Errorf("truncated to %d: got %v, want ErrBadIndex", n, err)
		}
	}
}

// goldenIndex is a small index built by hand, independent of compressors.
func goldenIndex() *Index {
	b := newBuilder(nil)
	ix := b.ix
	ix.Source = fetch.Identity{Size: 12345, ETag: `"abc"`, LastModified: time.Unix(1600000000, 0)}
	ix.Codec = CodecGzip
	ix.Span = 1 << 20
	ix.TarSize = 1 << 21
	ix.End = 12000
	w, _ := compressWindow(bytes.Repeat([]byte("window"), 100))
	ix.Checkpoints = []Checkpoint{{Kind: 1, In: 0, Out: 0}, {Kind: 2, In: 4000, Bit: 3, Out: 1 << 20, window: w}}
	ix.Digests = []uint64{0x1122334455667788, 0x99aabbccddeeff00}
	mtime := Time{Sec: 1600000000, Nsec: 123456789}
	b.add(headerFor("d/", '5', 0o755, mtime, nil))
	b.add(headerFor("d/f", '0', 0o644, mtime, map[string]string{"user.a": "1"}))
	b.add(headerFor("d/l", '2', 0o777, Time{Sec: 15023750400, Nsec: 5}, nil)) // 2446, past int64 nanoseconds
	b.add(headerFor("d/h", '1', 0o644, mtime, nil))
	b.add(headerFor("../escape", '0', 0o644, mtime, nil))
	b.finish()
	b.report(true)
	ix.memberDigests = make([]uint64, ix.Len())
	if id, ok := ix.LookupPath("d/f"); ok {
		ix.memberDigests[id] = 0x0102030405060708
	}
	return ix
}

func TestGolden(t *testing.T) {
	data, err := goldenIndex().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", fmt.Sprintf("golden-v%d.idx", formatVersion))
	if *update {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	golden, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	// The payload must not change without a version bump; the
	// compressed bytes may differ between zstd versions.
	want, err := Unmarshal(golden)
	if err != nil {
		t.Fatalf("golden file no longer loads: %v", err)
	}
	got, _ := Unmarshal(data)
	if !bytes.Equal(got.payload(), want.payload()) {
		t.Errorf("index payload changed: bump formatVersion and run go test -update")
	}
	if fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
		t.Errorf("golden index decodes differently:\n got %+v\nwant %+v", got, want)
	}
}

// BenchmarkLoad loads an index of one million entries.
func BenchmarkLoad(b *testing.B) {
	bl := newBuilder(nil)
	for d := 0; d < 1000; d++ {
		for f := 0; f < 1000; f++ {
			bl.add(headerFor(fmt.Sprintf("dir%04d/file%04d.txt", d, f), '0', 0o644, Time{Sec: int64(d * f)}, nil))
		}
	}
	bl.finish()
	ix := bl.ix
	ix.Codec = CodecNone
	ix.TarSize = 1 << 40
	data, err := ix.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		got, err := Unmarshal(data)
		if err != nil || got.Len() != ix.Len() {
			b.Fatalf("%v, %d entries", err, got.Len())
		}
	}
	b.ReportMetric(float64(ix.Len()), "entries")
}

func TestLookupSorted(t *testing.T) {
	b := newBuilder(nil)
	names := []string{"b", "a", "c", "aa", "B", "é", "z"}
	for _, n := range names {
		b.add(headerFor(n, '0', 0o644, Time{}, nil))
	}
	b.finish()
	sort.Strings(names)
	for i, c := range b.ix.Children(RootID) {
		if c.Name != names[i] {
			t.Errorf("child %d: got %q, want %q", i, c.Name, names[i])
		}
		if id, ok := b.ix.Lookup(RootID, c.Name); !ok || id != c.ID {
			t.Errorf("lookup %q: got %d, %v", c.Name, id, ok)
		}
	}
}

// TestFillEntry checks that FillEntry gives what Entry gives, without an
// allocation, and says when there is no such entry.
func TestFillEntry(t *testing.T) {
	ix := build(t, tarBytes(t, sampleMembers()), 1<<20)
	var e Entry
	for id := range EntryID(ix.Len()) {
		if !ix.FillEntry(id, &e) || e != *ix.Entry(id) {
			t.Errorf("entry %d: FillEntry gives %+v, Entry %+v", id, e, ix.Entry(id))
		}
	}
	if ix.FillEntry(EntryID(ix.Len()), &e) || ix.Entry(EntryID(ix.Len())) != nil {
		t.Errorf("entry %d of %d: FillEntry or Entry found one", ix.Len(), ix.Len())
	}
	if n := testing.AllocsPerRun(100, func() { ix.FillEntry(1, &e) }); n != 0 {
		t.Errorf("FillEntry: got %v allocations, want 0", n)
	}
}

func headerFor(name string, flag byte, mode int64, mtime Time, xattrs map[string]string) *tarscan.Header {
	h := &tarscan.Header{Name: name, Typeflag: flag, Mode: mode, MTime: mtime, UID: 1, GID: 2, Uname: "u", Gname: "g"}
	switch flag {
	case '2':
		h.Linkname = "f"
	case '1':
		h.Linkname = "d/f"
	}
	keys := make([]string, 0, len(xattrs))
	for k := range xattrs {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		h.Xattrs = append(h.Xattrs, tarscan.Xattr{Name: k, Value: xattrs[k]})
	}
	return h
}

// readaheadArchive returns a .tar.gz of one 3 MiB file "f" of random
// data, its index with spans of 128 KiB (at least spans of them), the
// file's id and where its data starts in the tar stream.
func readaheadArchive(t *testing.T, spans int) (data, obj []byte, ix *Index, id EntryID, base int64) {
	t.Helper()
	data = randomData(12, 3<<20)
	obj = tarbuild.GzipLevel(tarBytes(t, []member{{name: "f", data: data}}), 6)
	ix = build(t, obj, 128<<10)
	if len(ix.Checkpoints) < spans {
		t.Fatalf("got %d checkpoints, want at least %d", len(ix.Checkpoints), spans)
	}
	id, _ = ix.LookupPath("f")
	return data, obj, ix, id, int64(ix.Entry(id).DataOffset)
}

// TestReadahead checks that reading two spans in order starts decoding the
// next ones, and that a random read does not.
func TestReadahead(t *testing.T) {
	data, obj, ix, id, base := readaheadArchive(t, 10)
	started := func(r *Reader) []int {
		r.mu.Lock()
		defer r.mu.Unlock()
		var s []int
		for i := range ix.Checkpoints {
			if _, ok := r.spans[i]; ok {
				s = append(s, i)
			}
		}
		return s
	}
	// read reads in span, then waits for the decodes it started, so that
	// every decode slot is free for the next step's readahead.
	read := func(r *Reader, span int) {
		off := int64(ix.Checkpoints[span].Out) - base + 10
		if _, err := r.ReadAt(context.Background(), id, make([]byte, 100), off); err != nil {
			t.Fatal(err)
		}
		for _, j := range started(r) {
			r.mu.Lock()
			c := r.spans[j]
			r.mu.Unlock()
			if c != nil {
				<-c.done
			}
		}
	}

	// The window grows while reads stay sequential: 0, 1, 2, 4 spans
	// (slots to spare, whatever the number of cores).
	r := NewReader(ix, newMemSource(obj), ReaderOptions{Readahead: 4})
	r.slots = make(chan struct{}, 16)
	defer r.Close()
	for _, step := range []struct {
		span int
		want string
	}{
		{5, "[5]"},
		{6, "[5 6 7]"},
		{7, "[5 6 7 8 9]"},
		{8, "[5 6 7 8 9 10 11 12]"},
		{2, "[2 5 6 7 8 9 10 11 12]"}, // a seek: no readahead
		{3, "[2 3 4 5 6 7 8 9 10 11 12]"},
	} {
		read(r, step.span)
		if got := fmt.Sprint(started(r)); got != step.want {
			t.Errorf("after a read in span %d: spans %s, want %s", step.span, got, step.want)
		}
	}

	// A read at the start of a file reads ahead at once, the whole
	// window.
	fresh := NewReader(ix, newMemSource(obj), ReaderOptions{Readahead: 6})
	fresh.slots = make(chan struct{}, 16)
	defer fresh.Close()
	if _, err := fresh.ReadAt(context.Background(), id, make([]byte, 100), 0); err != nil {
		t.Fatal(err)
	}
	if got := started(fresh); fmt.Sprint(got) != "[0 1 2 3 4 5 6]" {
		t.Errorf("after a read at the start of the file: spans %v, want [0 1 2 3 4 5 6]", got)
	}

	// A small file inside one span does not read ahead.
	small := tarbuild.GzipLevel(tarBytes(t, []member{{name: "s", data: randomData(13, 5000)}, {name: "big", data: data}}), 6)
	six := build(t, small, 128<<10)
	sr := NewReader(six, newMemSource(small), ReaderOptions{Readahead: 2})
	defer sr.Close()
	sid, _ := six.LookupPath("s")
	if _, err := sr.ReadAt(context.Background(), sid, make([]byte, 4096), 0); err != nil {
		t.Fatal(err)
	}
	sr.mu.Lock()
	if len(sr.spans) != 1 {
		t.Errorf("after reading the start of a small file: %d spans started, want 1", len(sr.spans))
	}
	sr.mu.Unlock()

	off := NewReader(ix, newMemSource(obj), ReaderOptions{Readahead: -1})
	defer off.Close()
	read(off, 5)
	read(off, 6)
	if got := started(off); fmt.Sprint(got) != "[5 6]" {
		t.Errorf("readahead off: spans %v, want [5 6]", got)
	}
}

// TestReadaheadStopsAtFileEnd checks that a reader of one file reads
// ahead no further than its end, and that a reader that goes on from one
// file to the next in archive order reads ahead past them.
func TestReadaheadStopsAtFileEnd(t *testing.T) {
	obj := tarbuild.GzipLevel(tarBytes(t, []member{
		{name: "a", data: randomData(21, 1<<20)},
		{name: "b", data: randomData(22, 1<<20)},
		{name: "c", data: randomData(23, 1<<20)},
	}), 6)
	ix := build(t, obj, 128<<10)
	r := NewReader(ix, newMemSource(obj), ReaderOptions{Readahead: 8})
	r.slots = make(chan struct{}, 32)
	defer r.Close()
	// maxStarted waits for every decode started and returns the highest
	// span started.
	maxStarted := func() int {
		r.mu.Lock()
		var calls []*spanCall
		hi := -1
		for i, c := range r.spans {
			calls = append(calls, c)
			hi = max(hi, i)
		}
		r.mu.Unlock()
		for _, c := range calls {
			<-c.done
		}
		return hi
	}
	readAll := func(name string) (first, last int) {
		id, ok := ix.LookupPath(name)
		if !ok {
			t.Fatalf("no %s", name)
		}
		e := ix.Entry(id)
		start, size := int64(e.DataOffset), e.Size
		for off := int64(0); off < size; off += 64 << 10 {
			if _, err := r.ReadAt(context.Background(), id, make([]byte, min(64<<10, size-off)), off); err != nil {
				t.Fatal(err)
			}
			maxStarted()
		}
		return ix.span(start), ix.span(start + size - 1)
	}
	_, aLast := readAll("a")
	if hi := maxStarted(); hi != aLast {
		t.Errorf("after reading a (spans to %d): spans started up to %d, want none past a", aLast, hi)
	}
	_, bLast := readAll("b")
	if hi := maxStarted(); hi <= bLast {
		t.Errorf("after reading a then b (b's spans end at %d): spans started up to %d, want readahead into c", bLast, hi)
	}
}

// gatedSource serves data, but holds a read whose offset allow refuses
// until open is closed.
type gatedSource struct {
	data  []byte
	allow func(off int64) bool
	open  chan struct{}
}

func (g *gatedSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	if !g.allow(off) {
		select {
		case <-g.open:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
	return (newMemSource(g.data)).ReadAt(ctx, p, off)
}

// TestReadaheadLeavesASlot checks that readahead never takes the last free
// decode slot: with every readahead fetch stalled, a sequential read and a
// seek elsewhere still get their spans, instead of queueing behind them.
func TestReadaheadLeavesASlot(t *testing.T) {
	_, obj, ix, id, base := readaheadArchive(t, 21)
	// Spans 0-4 and 20 are served; the ones readahead wants stall.
	spanOf := func(off int64) int {
		for i := len(ix.Checkpoints) - 1; i >= 0; i-- {
			if int64(ix.Checkpoints[i].In) <= off {
				return i
			}
		}
		return 0
	}
	src := &gatedSource{data: obj, open: make(chan struct{}),
		allow: func(off int64) bool { s := spanOf(off); return s <= 4 || s == 20 }}
	defer close(src.open)
	r := NewReader(ix, src, ReaderOptions{Readahead: 8})
	r.slots = make(chan struct{}, 4)
	defer r.Close()
	read := func(span int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		off := max(int64(ix.Checkpoints[span].Out)-base+10, 0)
		_, err := r.ReadAt(ctx, id, make([]byte, 100), off)
		return err
	}
	// Sequential reads grow the window past the slots, and readahead
	// fetches of spans after 4 stall, holding their slots. Each step
	// waits for the spans that are served, so that the next readahead
	// finds every other slot free.
	for _, span := range []int{0, 1, 2, 3, 4, 4} {
		if err := read(span); err != nil {
			t.Fatalf("sequential read in span %d, readahead stalled: %v", span, err)
		}
		for k := 0; k <= 4; k++ {
			r.mu.Lock()
			c := r.spans[k]
			r.mu.Unlock()
			if c != nil {
				<-c.done
			}
		}
	}
	if err := read(20); err != nil {
		t.Fatalf("a read elsewhere, readahead stalled: %v", err)
	}
	if n := len(r.slots); n > cap(r.slots)-1 {
		t.Errorf("%d of %d slots held by readahead, want at most %d", n, cap(r.slots), cap(r.slots)-1)
	}
}

// TestBuildOnMember checks that one pass hands every member's data to
// OnMember while it indexes, plain and compressed, reading some members
// only in part.
func TestBuildOnMember(t *testing.T) {
	members := sampleMembers()
	raw := tarBytes(t, members)
	for _, tc := range []struct {
		name string
		obj  []byte
	}{{"tar", raw}, {"gzip", tarbuild.GzipLevel(raw, 6)}} {
		t.Run(tc.name, func(t *testing.T) {
			var names []string
			got := map[string][]byte{}
			_, err := Build(context.Background(), bytes.NewReader(tc.obj), fetch.Identity{Size: int64(len(tc.obj))}, BuildOptions{
				Span: 1 << 20,
				OnMember: func(h *tarscan.Header, data io.Reader) error {
					names = append(names, h.Name)
					if h.Name == "other.bin" {
						// Read a part only: the rest must be skipped.
						b := make([]byte, 100)
						_, err := io.ReadFull(data, b)
						got[h.Name] = b
						return err
					}
					b, err := io.ReadAll(data)
					got[h.Name] = b
					return err
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if len(names) != len(members) {
				t.Fatalf("got %d members, want %d", len(names), len(members))
			}
			for i, m := range members {
				want := m.data
				if m.name == "other.bin" {
					want = m.data[:100]
				}
				if names[i] != m.name || !bytes.Equal(got[m.name], want) && m.name != "dup" {
					t.Fatalf("member %d: got %q (%d bytes), want %q (%d bytes)", i, names[i], len(got[m.name]), m.name, len(want))
				}
			}
			if string(got["dup"]) != "second" {
				t.Fatalf("dup: got %q, want the last member's data", got["dup"])
			}
		})
	}
	t.Run("error", func(t *testing.T) {
		stop := errors.New("stop")
		_, err := Build(context.Background(), bytes.NewReader(raw), fetch.Identity{Size: int64(len(raw))}, BuildOptions{
			OnMember: func(*tarscan.Header, io.Reader) error { return stop },
		})
		if !errors.Is(err, stop) {
			t.Fatalf("got %v, want the callback's error", err)
		}
	})
}

// TestOldVersionRefused checks that an index of an older format is
// refused with ErrVersion and a hint to rebuild it.
func TestOldVersionRefused(t *testing.T) {
	for v := 1; v < formatVersion; v++ {
		data, err := os.ReadFile(filepath.Join("testdata", fmt.Sprintf("golden-v%d.idx", v)))
		if err != nil {
			t.Fatal(err)
		}
		_, err = Unmarshal(data)
		if !errors.Is(err, ErrVersion) || !strings.Contains(err.Error(), "tarmount index") {
			t.Fatalf("version %d: got %v, want ErrVersion naming tarmount index", v, err)
		}
	}
}

// TestReaderStats checks the span counters: a cold read misses and decodes
// one span, the same read again hits the cache.
func TestReaderStats(t *testing.T) {
	var members []member
	for i := 0; i < 8; i++ {
		members = append(members, member{name: fmt.Sprintf("f%02d", i), data: randomData(uint64(i), 300<<10)})
	}
	obj := tarbuild.GzipLevel(tarBytes(t, members), 6)
	ix := build(t, obj, 1<<20)
	r := NewReader(ix, newMemSource(obj), ReaderOptions{Readahead: -1})
	defer r.Close()
	id, _ := ix.LookupPath("f05")
	buf := make([]byte, 100)
	for range 2 {
		if _, err := r.ReadAt(context.Background(), id, buf, 1000); err != nil {
			t.Fatal(err)
		}
	}
	st := r.Stats()
	want := ReaderStats{SpanHits: 1, SpanMisses: 1, SpanDecodes: 1, CachedBytes: st.CachedBytes}
	if st != want || st.CachedBytes <= 0 {
		t.Errorf("got %+v, want %+v with CachedBytes > 0", st, want)
	}
}

// TestDecodeSpanIntoReuses checks that a gzip span decoded into the
// buffer of an earlier one shares its memory and still gives the bytes
// of a fresh decode.
func TestDecodeSpanIntoReuses(t *testing.T) {
	obj := tarbuild.GzipLevel(tarBytes(t, sampleMembers()), 6)
	ix := build(t, obj, 4096)
	if len(ix.Checkpoints) < 3 {
		t.Fatalf("got %d checkpoints, want at least 3", len(ix.Checkpoints))
	}
	r := NewReader(ix, newMemSource(obj), ReaderOptions{})
	defer r.Close()
	ctx := context.Background()
	buf, err := r.DecodeSpan(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	reused := 0
	for i := 1; i < len(ix.Checkpoints); i++ {
		want, err := r.DecodeSpan(ctx, i)
		if err != nil {
			t.Fatal(err)
		}
		got, err := r.DecodeSpanInto(ctx, i, buf)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("span %d: decoded into a reused buffer differs", i)
		}
		roomy := cap(buf) >= len(got)+inflate.Margin
		if same := &got[:1][0] == &buf[:1][0]; same != roomy {
			t.Errorf("span %d: reused %v, want %v (cap %d for %d bytes)", i, same, roomy, cap(buf), len(got))
		}
		if roomy {
			reused++
		}
		buf = got
	}
	if reused == 0 {
		t.Error("no span was decoded into a reused buffer")
	}
}
