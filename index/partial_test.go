package index

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index/inflate"
	"github.com/tarmount/tarmount/index/tarscan"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// resumeMembers is an archive of many small and some large members, with
// a pax global header, so that passes stop between and inside members.
func resumeMembers() []member {
	var ms []member
	for i := range 300 {
		size := 3000 + i*37
		if i%50 == 7 {
			size = 1 << 20
		}
		ms = append(ms, member{name: fmt.Sprintf("d%d/f%03d.txt", i%7, i), data: randomData(uint64(i), size), mode: 0o644})
	}
	ms = append(ms, member{name: "d1/link", link: "d1/f001.txt", typ: tarscan.TypeSymlink})
	ms = append(ms, member{name: "d2/hard", link: "d2/f002.txt", typ: tarscan.TypeLink})
	return ms
}

// resumeCases are the archives that resume, besides codecCases: gzip
// members of 300 KiB of tar, and a plain tar.
func resumeCases() []codecCase {
	return []codecCase{
		{"gzip-members", CodecGzip, true, func(_ testing.TB, raw []byte) []byte { return tarbuild.GzipMembers(raw, 300<<10, 6) }},
		{"plain", CodecNone, true, func(_ testing.TB, raw []byte) []byte { return raw }},
	}
}

// TestResumePass: a pass that ctx stops keeps a partial index; the next
// pass resumes from it, reads the object only from its latest checkpoint
// (the next member, for a plain tar) on, and ends with the same index as
// a pass that never stopped. A pass that ends removes the partial index.
func TestResumePass(t *testing.T) {
	raw := tarBytes(t, resumeMembers())
	for _, c := range append(resumeCases(), codecCases()...) {
		t.Run(c.name, func(t *testing.T) {
			obj := c.make(t, raw)
			c := struct{ obj []byte }{obj}
			id := fetch.Identity{Size: int64(len(c.obj)), ETag: `"v1"`}
			const span = 256 << 10
			full, err := Build(context.Background(), bytes.NewReader(c.obj), id, BuildOptions{Span: span})
			if err != nil {
				t.Fatal(err)
			}
			if !passResumes(full) {
				// No pass to resume, or spans only the decoded copy
				// serves, which a stopped pass does not keep.
				checkNoPartial(t, obj)
				return
			}
			want, _ := full.Marshal()
			path := filepath.Join(t.TempDir(), "p.partial")
			for _, stopAt := range []int{150, 260} {
				opts := BuildOptions{Span: span, Partial: path}
				p, err := LoadPartial(path, id)
				if err == nil {
					opts.Resume = p
				} else if !errors.Is(err, ErrNoPartial) {
					t.Fatal(err)
				}
				if err := buildStopped(c.obj, id, opts, stopAt); !errors.Is(err, context.Canceled) {
					t.Fatalf("a pass stopped at member %d: got %v, want it cancelled", stopAt, err)
				}
			}
			p, err := LoadPartial(path, id)
			if err != nil {
				t.Fatal(err)
			}
			if p.Members() < 200 || p.In() <= 0 || p.In() >= int64(len(c.obj)) {
				t.Fatalf("partial index after two stopped passes: %d members, resumes at %d of %d", p.Members(), p.In(), len(c.obj))
			}
			if _, err := LoadPartial(path, fetch.Identity{Size: id.Size, ETag: `"v2"`}); !errors.Is(err, ErrNoPartial) {
				t.Errorf("partial index for another version: got %v, want ErrNoPartial", err)
			}
			got, err := Build(context.Background(), bytes.NewReader(c.obj[p.In():]), id, BuildOptions{Span: span, Partial: path, Resume: p})
			if err != nil {
				t.Fatalf("resumed pass: %v", err)
			}
			// It was given only the bytes after its resume point, which
			// must lie past half the object: the second stop came after
			// 260 of 302 members.
			if p.In() < int64(len(c.obj))/2 {
				t.Errorf("the resumed pass read from %d of %d bytes, want past half", p.In(), len(c.obj))
			}
			if b, _ := got.Marshal(); !bytes.Equal(b, want) {
				t.Errorf("the resumed pass gave another index than a whole pass (%d entries, %d checkpoints; want %d, %d)",
					got.Len(), len(got.Checkpoints), full.Len(), len(full.Checkpoints))
			}
			if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("partial index after the pass ended: %v, want it removed", err)
			}
		})
	}
}

// TestResumeChecksTrailer: a pass resumed in the middle of a gzip member,
// an lz4 frame, a bzip2 stream, an xz stream or a zstd frame still checks
// what the end of it says of all its data: the member's CRC-32, the
// frame's content checksum, the stream's combined CRC, the records of the
// xz index.
func TestResumeChecksTrailer(t *testing.T) {
	raw := tarBytes(t, resumeMembers())
	// flip damages the bit at off of obj, counted from its end.
	flip := func(back int) func([]byte) {
		return func(b []byte) { b[len(b)-back] ^= 1 }
	}
	for _, c := range []struct {
		name   string
		obj    []byte
		damage func([]byte)
		bad    error
		want   string
	}{
		{"gzip", tarbuild.GzipLevel(raw, 6), flip(8), inflate.ErrCorrupt, "checksum"},
		{"lz4", tarbuild.LZ4(raw, false), flip(4), ErrCorrupt, "checksum"},
		// The combined CRC ends at most 7 bits before the end.
		{"bzip2", cli("bzip2", "-9")(t, raw), flip(2), ErrCorrupt, "stream checksum mismatch"},
		{"xz", cli("xz", "-T2", "--block-size=64KiB")(t, raw), xzBreakIndex, ErrCorrupt, "stream index records do not match"},
		// One frame: resumed at a block boundary inside it.
		{"zstd", cli("zstd", "-3")(t, raw), flip(2), ErrCorrupt, "checksum"},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := c.obj
			id := fetch.Identity{Size: int64(len(obj))}
			path := filepath.Join(t.TempDir(), "p.partial")
			buildStopped(obj, id, BuildOptions{Span: 256 << 10, Partial: path}, 200)
			p, err := LoadPartial(path, id)
			if err != nil {
				t.Fatal(err)
			}
			cp := p.checkpoints[len(p.checkpoints)-1]
			if p.mid != nil {
				cp = *p.mid
			}
			if len(cp.pass) == 0 {
				t.Fatalf("resume checkpoint %+v has no pass state", cp)
			}
			bad := bytes.Clone(obj)
			c.damage(bad)
			_, err = Build(context.Background(), bytes.NewReader(bad[p.In():]), id, BuildOptions{Span: 256 << 10, Resume: p})
			if !errors.Is(err, c.bad) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("resumed pass over a damaged end: got %v, want %q", err, c.want)
			}
		})
	}
}

// xzBreakIndex changes the first record of the index of the last stream
// of the xz file b, and mends the index's CRC-32, so that only a
// comparison with the blocks decoded finds it.
func xzBreakIndex(b []byte) {
	foot := b[len(b)-xzFooterLen:]
	size := (int(binary.LittleEndian.Uint32(foot[4:8])) + 1) * 4
	ix := b[len(b)-xzFooterLen-size : len(b)-xzFooterLen]
	_, n := xzVarint(ix[1:]) // the record count
	ix[1+n] ^= 1             // the low bit of the first unpadded size
	binary.LittleEndian.PutUint32(ix[len(ix)-4:], crc32.ChecksumIEEE(ix[:len(ix)-4]))
}

// buildStopped runs a pass over obj (from where it fetches on resuming, with
// opts.Resume) that is stopped, as its source would be, once it has read
// member number stopAt; it returns the pass's error.
func buildStopped(obj []byte, id fetch.Identity, opts BuildOptions, stopAt int) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	seen := 0
	var r io.Reader = bytes.NewReader(obj)
	if p := opts.Resume; p != nil {
		seen, r = p.Members(), bytes.NewReader(obj[p.From():])
	}
	opts.OnMember = func(*tarscan.Header, io.Reader) error {
		if seen++; seen == stopAt {
			cancel()
			return ctx.Err()
		}
		return nil
	}
	_, err := Build(ctx, r, id, opts)
	return err
}

// TestPartialTorn: a partial index cut anywhere (a crash while it was
// written) resumes from its latest whole resume point, or not at all,
// and the pass then ends with the index of a whole pass.
func TestPartialTorn(t *testing.T) {
	obj := tarbuild.GzipLevel(tarBytes(t, resumeMembers()), 6)
	id := fetch.Identity{Size: int64(len(obj))}
	full, err := Build(context.Background(), bytes.NewReader(obj), id, BuildOptions{Span: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := full.Marshal()
	dir := t.TempDir()
	path := filepath.Join(dir, "p.partial")
	buildStopped(obj, id, BuildOptions{Span: 256 << 10, Partial: path}, 250)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	resumed := 0
	for cut := 0; cut <= len(data); cut += max(len(data)/40, 1) {
		torn := filepath.Join(dir, fmt.Sprintf("torn-%d", cut))
		if err := os.WriteFile(torn, data[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		p, err := LoadPartial(torn, id)
		if errors.Is(err, ErrNoPartial) {
			continue
		}
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		resumed++
		got, err := Build(context.Background(), bytes.NewReader(obj[p.In():]), id, BuildOptions{Span: 256 << 10, Resume: p})
		if err != nil {
			t.Fatalf("cut at %d: resumed pass: %v", cut, err)
		}
		if b, _ := got.Marshal(); !bytes.Equal(b, want) {
			t.Fatalf("cut at %d: the resumed pass gave another index than a whole pass", cut)
		}
	}
	if resumed < 10 {
		t.Errorf("%d of 41 cuts resumed, want most", resumed)
	}
}

// checkNoPartial checks that a stopped pass over obj, whose codec's pass
// cannot resume, keeps no partial index.
func checkNoPartial(t *testing.T, obj []byte) {
	t.Helper()
	id := fetch.Identity{Size: int64(len(obj))}
	path := filepath.Join(t.TempDir(), "p.partial")
	buildStopped(obj, id, BuildOptions{Span: 256 << 10, Partial: path}, 200)
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a stopped pass that cannot resume left a partial index (%v)", err)
	}
}

// passResumes reports whether a stopped pass over the archive of ix keeps
// a partial index: its codec's pass resumes, and no span before the end
// is served from the decoded copy.
func passResumes(ix *Index) bool {
	if !ix.Codec.resumable() {
		return false
	}
	for _, cp := range ix.Checkpoints {
		if cp.Kind == kindLocal && ix.Codec.def().midKind == 0 {
			return false
		}
	}
	return true
}

// cachedOf is a BuildOptions.Cached over obj that has every byte at hand.
func cachedOf(obj []byte) func(p []byte, off int64) bool {
	return func(p []byte, off int64) bool {
		if off < 0 || off+int64(len(p)) > int64(len(obj)) {
			return false
		}
		copy(p, obj[off:])
		return true
	}
}

// TestPartialTail: a pass that ctx stops keeps in its partial index the
// bytes from its latest resume point to where it had read (its tail),
// when Cached has them; the next pass reads them first and is given the
// object only from there on (Partial.From), and ends with the index of a
// whole pass. A pass resumed with a tail that stops again before a new
// resume point keeps that tail, though Cached has nothing.
func TestPartialTail(t *testing.T) {
	raw := tarBytes(t, resumeMembers())
	cases := resumeCases()
	for _, c := range codecCases() {
		switch c.name {
		case "gzip", "zstd-go-frames", "zstd-cli", "lz4-go", "bzip2-cli", "xz-cli-blocks":
			cases = append(cases, c)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			obj := c.make(t, raw)
			id := fetch.Identity{Size: int64(len(obj)), ETag: `"v1"`}
			const span = 256 << 10
			full, err := Build(context.Background(), bytes.NewReader(obj), id, BuildOptions{Span: span})
			if err != nil {
				t.Fatal(err)
			}
			if !passResumes(full) {
				t.Fatalf("a pass over %s does not resume", c.name)
			}
			want, _ := full.Marshal()
			path := filepath.Join(t.TempDir(), "p.partial")
			buildStopped(obj, id, BuildOptions{Span: span, Partial: path, Cached: cachedOf(obj)}, 200)
			p, err := LoadPartial(path, id)
			if err != nil {
				t.Fatal(err)
			}
			if p.From() <= p.In() || !bytes.Equal(p.tail, obj[p.In():p.From()]) {
				t.Fatalf("got a tail of %d bytes from %d (equal to the archive's: %v), want the archive's bytes from there on",
					p.From()-p.In(), p.In(), bytes.Equal(p.tail, obj[p.In():p.From()]))
			}
			// Stopped again at once, with nothing cached: the tail it
			// resumed with stays, unless a resume point came since.
			buildStopped(obj, id, BuildOptions{Span: span, Partial: path, Resume: p}, p.Members()+2)
			q, err := LoadPartial(path, id)
			if err != nil {
				t.Fatal(err)
			}
			if q.In() == p.In() && q.From() < p.From() {
				t.Errorf("stopped again at the same resume point: got a tail to %d, want the one it resumed with, to %d", q.From(), p.From())
			}
			got, err := Build(context.Background(), bytes.NewReader(obj[q.From():]), id, BuildOptions{Span: span, Partial: path, Resume: q})
			if err != nil {
				t.Fatalf("resumed pass: %v", err)
			}
			if b, _ := got.Marshal(); !bytes.Equal(b, want) {
				t.Error("the pass resumed with a tail gave another index than a whole pass")
			}
		})
	}
}

// tailRecord is a tail record for resume point number point, at in.
func tailRecord(point int, in int64, tail []byte) []byte {
	e := &encoder{}
	e.uvarint(uint64(point))
	e.uvarint(uint64(in))
	e.buf = append(e.buf, tail...)
	rec := binary.AppendUvarint([]byte{recTail}, uint64(len(e.buf)))
	rec = append(rec, e.buf...)
	return binary.LittleEndian.AppendUint32(rec, crc32.Checksum(e.buf, crcTable))
}

// TestPartialTailChecked: a tail is used only whole, undamaged, and for
// the latest resume point in the file, at its offset; else the pass
// fetches those bytes again (From is In). One whose bytes are wrong but
// whose CRC matches fails the resumed pass, which checks what it decodes.
func TestPartialTailChecked(t *testing.T) {
	obj := tarbuild.GzipMembers(tarBytes(t, resumeMembers()), 300<<10, 6)
	id := fetch.Identity{Size: int64(len(obj))}
	const span = 256 << 10
	full, err := Build(context.Background(), bytes.NewReader(obj), id, BuildOptions{Span: span})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := full.Marshal()
	dir := t.TempDir()
	path := filepath.Join(dir, "p.partial")
	buildStopped(obj, id, BuildOptions{Span: span, Partial: path, Cached: cachedOf(obj)}, 250)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := LoadPartial(path, id)
	if err != nil {
		t.Fatal(err)
	}
	if p.From() <= p.In() || int(p.end) >= len(data) {
		t.Fatalf("got a tail from %d to %d ending the file at %d of %d, want one", p.In(), p.From(), p.end, len(data))
	}
	// The file's resume points, and the partial index that each ends.
	var ends []int
	for pos := len(partialMagic) + 4; pos < int(p.end); {
		typ, _, next, ok := nextRecord(data, pos)
		if !ok {
			t.Fatalf("record at %d unreadable", pos)
		}
		if pos = next; typ == recResume {
			ends = append(ends, pos)
		}
	}
	if len(ends) < 2 {
		t.Fatalf("%d resume points, want two or more", len(ends))
	}
	prev := filepath.Join(dir, "prev")
	os.WriteFile(prev, data[:ends[len(ends)-2]], 0o644)
	older, err := LoadPartial(prev, id)
	if err != nil {
		t.Fatal(err)
	}
	olderTail := tailRecord(len(ends)-1, older.In(), obj[older.In():older.In()+1000])
	wrong := bytes.Clone(p.tail)
	wrong[len(wrong)/2] ^= 1
	for _, c := range []struct {
		name string
		file []byte
		from int64 // want From
	}{
		{"whole", data, p.From()},
		{"torn", data[:len(data)-5], p.In()},
		{"torn-head", data[:int(p.end)+2], p.In()},
		{"damaged", func() []byte { b := bytes.Clone(data); b[len(b)-10] ^= 1; return b }(), p.In()},
		// The same records, with the tail of the resume point before
		// the latest: it is used there, and not once a resume point
		// follows it.
		{"older-alone", append(bytes.Clone(data[:ends[len(ends)-2]]), olderTail...), older.In() + 1000},
		{"older", slices.Concat(data[:ends[len(ends)-2]], olderTail, data[ends[len(ends)-2]:p.end]), p.In()},
		{"other-point", append(bytes.Clone(data[:p.end]), tailRecord(len(ends)-1, p.In(), p.tail)...), p.In()},
		{"other-offset", append(bytes.Clone(data[:p.end]), tailRecord(len(ends), p.In()+1, p.tail)...), p.In()},
		{"past-end", append(bytes.Clone(data[:p.end]), tailRecord(len(ends), p.In(), make([]byte, int64(len(obj))-p.In()+1))...), p.In()},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := filepath.Join(dir, c.name)
			os.WriteFile(f, c.file, 0o644)
			q, err := LoadPartial(f, id)
			if err != nil {
				t.Fatal(err)
			}
			if q.From() != c.from {
				t.Fatalf("got a pass that fetches from %d (resumes at %d), want from %d", q.From(), q.In(), c.from)
			}
			got, err := Build(context.Background(), bytes.NewReader(obj[q.From():]), id, BuildOptions{Span: span, Resume: q})
			if err != nil {
				t.Fatalf("resumed pass: %v", err)
			}
			if b, _ := got.Marshal(); !bytes.Equal(b, want) {
				t.Error("the resumed pass gave another index than a whole pass")
			}
		})
	}
	// Wrong bytes behind a right CRC: the pass finds them.
	f := filepath.Join(dir, "wrong")
	os.WriteFile(f, append(bytes.Clone(data[:p.end]), tailRecord(len(ends), p.In(), wrong)...), 0o644)
	q, err := LoadPartial(f, id)
	if err != nil || q.From() != p.From() {
		t.Fatalf("got %v, a pass that fetches from %d, want one with the wrong tail", err, q.From())
	}
	if _, err := Build(context.Background(), bytes.NewReader(obj[q.From():]), id, BuildOptions{Span: span, Resume: q}); err == nil {
		t.Error("a pass resumed with a wrong tail succeeded, want it to fail")
	}
}

// TestNoMidPoints: a stopped pass over a single-frame zstd archive keeps
// a resume point inside its frame (Partial.LocalBefore), unless its
// caller says no pass could resume there (BuildOptions.NoMidPoints): then
// the frame's state is not followed, and the next pass starts over.
func TestNoMidPoints(t *testing.T) {
	raw := tarBytes(t, resumeMembers())
	obj := cli("zstd", "-q", "-3")(t, raw)
	id := fetch.Identity{Size: int64(len(obj)), ETag: `"v1"`}
	for _, no := range []bool{false, true} {
		path := filepath.Join(t.TempDir(), "p.partial")
		opts := BuildOptions{Span: 256 << 10, Partial: path, NoMidPoints: no}
		if err := buildStopped(obj, id, opts, 260); !errors.Is(err, context.Canceled) {
			t.Fatalf("NoMidPoints %v: a stopped pass: got %v, want it cancelled", no, err)
		}
		p, err := LoadPartial(path, id)
		switch {
		case no && err == nil && p.LocalBefore() > 0:
			t.Errorf("NoMidPoints: the stopped pass kept a resume point inside the frame (local before %d)", p.LocalBefore())
		case !no && (err != nil || p.LocalBefore() == 0):
			t.Errorf("a stopped pass kept no resume point inside the frame: %v", err)
		}
	}
}

// TestPartialCrash: a pass over a one-frame zstd archive writes mid
// points as it goes, so that a crash (which writes nothing at the end)
// leaves a partial index that resumes inside the frame. The partial index
// and the decoded copy are taken as a crash would leave them, at several
// members; each resumes, reads the object only from its mid point on, and
// ends with the index of a whole pass and the whole decoded copy.
func TestPartialCrash(t *testing.T) {
	raw := tarBytes(t, resumeMembers())
	for _, c := range []struct {
		name string
		make func(testing.TB, []byte) []byte
	}{
		{"klauspost", klauspostZstd(zstd.WithWindowSize(128 << 10))},
		{"zstd-cli", cli("zstd", "-q", "-3", "--zstd=wlog=17")},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := c.make(t, raw)
			id := fetch.Identity{Size: int64(len(obj)), ETag: `"v1"`}
			const span = 16 << 10 // mid points every 32 windows: 4 MiB
			full, err := Build(context.Background(), bytes.NewReader(obj), id, BuildOptions{Span: span, Local: &memFile{}})
			if err != nil {
				t.Fatal(err)
			}
			want, _ := full.Marshal()
			dir := t.TempDir()
			path := filepath.Join(dir, "p.partial")
			var crashes []struct {
				partial []byte
				local   []byte
				at      int
			}
			local := &memFile{}
			seen := 0
			errCrash := errors.New("crash")
			opts := BuildOptions{Span: span, Partial: path, Local: local}
			opts.OnMember = func(*tarscan.Header, io.Reader) error {
				seen++
				if seen%40 == 0 || seen == 295 {
					data, err := os.ReadFile(path)
					if err != nil {
						return err
					}
					crashes = append(crashes, struct {
						partial []byte
						local   []byte
						at      int
					}{data, bytes.Clone(local.data), seen})
				}
				if seen == 295 {
					return errCrash
				}
				return nil
			}
			if _, err := Build(context.Background(), bytes.NewReader(obj), id, opts); !errors.Is(err, errCrash) {
				t.Fatalf("the crashed pass: got %v, want %v", err, errCrash)
			}
			resumed := 0
			var latest int64
			for _, cr := range crashes {
				snap := filepath.Join(dir, fmt.Sprintf("crash-%d.partial", cr.at))
				if err := os.WriteFile(snap, cr.partial, 0o644); err != nil {
					t.Fatal(err)
				}
				p, err := LoadPartial(snap, id)
				if errors.Is(err, ErrNoPartial) {
					continue
				}
				if err != nil {
					t.Fatalf("crash at member %d: %v", cr.at, err)
				}
				if p.LocalBefore() == 0 {
					t.Fatalf("crash at member %d: the partial index resumes at a checkpoint, want inside the frame", cr.at)
				}
				if int64(len(cr.local)) < p.LocalBefore() {
					t.Fatalf("crash at member %d: the copy holds %d bytes, the partial index needs %d", cr.at, len(cr.local), p.LocalBefore())
				}
				resumed++
				latest = p.In()
				copyAt := &memFile{data: cr.local}
				copyAt.truncate(p.LocalBefore())
				got, err := Build(context.Background(), bytes.NewReader(obj[p.From():]), id,
					BuildOptions{Span: span, Partial: snap, Resume: p, Local: copyAt})
				if err != nil {
					t.Fatalf("crash at member %d: the resumed pass: %v", cr.at, err)
				}
				if b, _ := got.Marshal(); !bytes.Equal(b, want) {
					t.Errorf("crash at member %d: the resumed pass gave another index than a whole pass", cr.at)
				}
				if !bytes.Equal(copyAt.data[:len(raw)], raw) {
					t.Errorf("crash at member %d: the decoded copy differs from the tar", cr.at)
				}
			}
			// The tar is about 8.6 MB: mid points near 4 and 8 MiB.
			if resumed < 2 || latest < int64(len(obj))/2 {
				t.Errorf("%d of %d crashes resumed, the latest reading from %d of %d bytes: want 2 or more, past half",
					resumed, len(crashes), latest, len(obj))
			}
		})
	}
}

// TestPartialInMember: a one-frame zstd pass stopped, or crashed, deep
// inside a member's data (far more than the window past its header)
// keeps a resume point at a block boundary there: the next pass scans
// the member again from its header, reading the bytes up to the boundary
// from the decoded copy, decodes on from the boundary, reads the object
// only from there, and ends with the index of a whole pass and the whole
// copy. A caller without the copy cannot resume there (ReadsLocal).
func TestPartialInMember(t *testing.T) {
	var ms []member
	for i := range 40 {
		ms = append(ms, member{name: fmt.Sprintf("a/f%02d", i), data: randomData(uint64(i), 5000+i*300), mode: 0o644})
	}
	const bigSize = 48 << 20
	ms = append(ms, member{name: "big.bin", data: zstdResumeData(3, bigSize), mode: 0o644})
	for i := range 40 {
		ms = append(ms, member{name: fmt.Sprintf("b/f%02d", i), data: randomData(uint64(100+i), 7000), mode: 0o644})
	}
	raw := tarBytes(t, ms)
	obj := klauspostZstd(zstd.WithWindowSize(256<<10))(t, raw)
	id := fetch.Identity{Size: int64(len(obj)), ETag: `"v1"`}
	const span = 64 << 10
	full, err := Build(context.Background(), bytes.NewReader(obj), id, BuildOptions{Span: span, Local: &memFile{}})
	if err != nil {
		t.Fatal(err)
	}
	want, _ := full.Marshal()
	errCrash := errors.New("crash")
	for _, crash := range []bool{false, true} {
		t.Run(fmt.Sprintf("crash=%v", crash), func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, "p.partial")
			local := &memFile{}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var snap []byte
			opts := BuildOptions{Span: span, Partial: path, Local: local}
			opts.OnMember = func(h *tarscan.Header, data io.Reader) error {
				if h.Name != "big.bin" {
					return nil
				}
				// Into the member, 40 MiB past its header: 16 MiB
				// windows' worth beyond what is held from its start.
				if _, err := io.CopyN(io.Discard, data, 40<<20); err != nil {
					return err
				}
				if !crash {
					cancel()
					return ctx.Err()
				}
				var err error
				if snap, err = os.ReadFile(path); err != nil {
					return err
				}
				return errCrash
			}
			_, err := Build(ctx, bytes.NewReader(obj), id, opts)
			if crash {
				if !errors.Is(err, errCrash) {
					t.Fatalf("the crashed pass: got %v, want %v", err, errCrash)
				}
				path = filepath.Join(dir, "crash.partial")
				if err := os.WriteFile(path, snap, 0o644); err != nil {
					t.Fatal(err)
				}
			} else if !errors.Is(err, context.Canceled) {
				t.Fatalf("the stopped pass: got %v, want it cancelled", err)
			}
			p, err := LoadPartial(path, id)
			if err != nil {
				t.Fatal(err)
			}
			if p.Members() != 40 || !p.ReadsLocal() {
				t.Fatalf("the partial index resumes after %d members, reading the copy %v; want 40 and true", p.Members(), p.ReadsLocal())
			}
			// Past most of what the member had read: 40 MiB of its
			// 48, mid points every 8 MiB (32 windows) as it went.
			minOut := int64(len(raw)) / 2
			if !crash {
				minOut = int64(len(raw)) * 3 / 4
			}
			if p.LocalBefore() < minOut {
				t.Errorf("the pass resumes at tar offset %d of %d, want past %d", p.LocalBefore(), len(raw), minOut)
			}
			if _, err := Build(context.Background(), bytes.NewReader(obj[p.From():]), id, BuildOptions{Span: span, Resume: p}); !errors.Is(err, ErrUnsupported) {
				t.Errorf("a resumed pass without the copy: got %v, want ErrUnsupported", err)
			}
			copyAt := &memFile{data: bytes.Clone(local.data)}
			copyAt.truncate(p.LocalBefore())
			got, err := Build(context.Background(), bytes.NewReader(obj[p.From():]), id, BuildOptions{Span: span, Partial: path, Resume: p, Local: copyAt})
			if err != nil {
				t.Fatalf("the resumed pass: %v", err)
			}
			if b, _ := got.Marshal(); !bytes.Equal(b, want) {
				t.Errorf("the resumed pass gave another index than a whole pass")
			}
			if !bytes.Equal(copyAt.data[:len(raw)], raw) {
				t.Errorf("the decoded copy differs from the tar")
			}
		})
	}
}

// TestPartialHolds: with BuildOptions.Holds, a resume point is written
// only once the caller holds what comes before it (here, every member
// 40 members back), inside a zstd frame too: neither what a crash leaves
// (the partial index as the pass wrote it, taken mid-pass) nor what a
// stop leaves lies past what the caller held, and a caller that never
// holds anything gets none. A pass resumed from what was written ends
// with the index of a whole pass.
func TestPartialHolds(t *testing.T) {
	raw := tarBytes(t, resumeMembers())
	for _, c := range []struct {
		name string
		make func(testing.TB, []byte) []byte
		// A gzip pass has a resume point at every span, a zstd frame
		// one as the pass goes every 32 windows (4 MiB here).
		minMembers int
	}{
		{"gzip", func(_ testing.TB, raw []byte) []byte { return tarbuild.GzipLevel(raw, 6) }, 200},
		{"zstd-one-frame", klauspostZstd(zstd.WithWindowSize(128 << 10)), 100},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := c.make(t, raw)
			id := fetch.Identity{Size: int64(len(obj)), ETag: `"v1"`}
			const span = 16 << 10
			full, err := Build(context.Background(), bytes.NewReader(obj), id, BuildOptions{Span: span})
			if err != nil {
				t.Fatal(err)
			}
			want, _ := full.Marshal()
			for _, never := range []bool{true, false} {
				dir := t.TempDir()
				path, crashed := filepath.Join(dir, "p.partial"), filepath.Join(dir, "crash.partial")
				var starts []int64 // member starts seen
				held := int64(-1)  // everything before it is held
				asked := 0
				ctx, cancel := context.WithCancel(context.Background())
				opts := BuildOptions{Span: span, Partial: path, Holds: func(need int64) bool {
					asked++
					return !never && need <= held
				}}
				opts.OnMember = func(h *tarscan.Header, _ io.Reader) error {
					starts = append(starts, h.HeaderOffset)
					if n := len(starts); n > 40 {
						held = starts[n-40]
					}
					if len(starts) == 280 {
						// What a crash here would leave, then a stop.
						if data, err := os.ReadFile(path); err == nil {
							os.WriteFile(crashed, data, 0o644)
						}
						cancel()
						return ctx.Err()
					}
					return nil
				}
				if _, err := Build(ctx, bytes.NewReader(obj), id, opts); !errors.Is(err, context.Canceled) {
					t.Fatalf("the stopped pass: got %v, want it cancelled", err)
				}
				if asked == 0 {
					t.Fatal("Holds was never asked")
				}
				if never {
					for _, f := range []string{crashed, path} {
						if p, err := LoadPartial(f, id); err == nil {
							t.Errorf("Holds never true: %s resumes at %d, want no resume point", filepath.Base(f), p.Next())
						}
					}
					continue
				}
				if p, err := LoadPartial(crashed, id); err != nil || p.Next() > held {
					t.Errorf("what a crash leaves: %v, want a resume point at most at %d", err, held)
				}
				p, err := LoadPartial(path, id)
				if err != nil {
					t.Fatalf("no resume point: %v", err)
				}
				if p.Next() > held || p.Members() < c.minMembers {
					t.Errorf("the resume point is at %d after %d members, want at most %d (what the caller held), after %d or more", p.Next(), p.Members(), held, c.minMembers)
				}
				got, err := Build(context.Background(), bytes.NewReader(obj[p.From():]), id, BuildOptions{Span: span, Resume: p})
				if err != nil {
					t.Fatalf("the resumed pass: %v", err)
				}
				if b, _ := got.Marshal(); !bytes.Equal(b, want) {
					t.Errorf("the resumed pass gave another index than a whole pass")
				}
			}
		})
	}
}

// TestPartialHeldWhileStalled: a resume point held back for the caller
// (Holds) is written once the caller holds what comes before it, also
// while the source stalls and the pass reads nothing: a boot whose
// server hangs, stopped later, resumes from there.
func TestPartialHeldWhileStalled(t *testing.T) {
	raw := tarBytes(t, resumeMembers())
	for _, c := range []struct {
		name string
		make func(testing.TB, []byte) []byte
	}{
		{"gzip", func(_ testing.TB, raw []byte) []byte { return tarbuild.GzipLevel(raw, 6) }},
		{"zstd-one-frame", klauspostZstd(zstd.WithWindowSize(128 << 10))},
	} {
		t.Run(c.name, func(t *testing.T) {
			obj := c.make(t, raw)
			id := fetch.Identity{Size: int64(len(obj)), ETag: `"v1"`}
			path := filepath.Join(t.TempDir(), "p.partial")
			gate := newGatedReader(obj, len(obj)*7/10)
			var holds atomic.Bool // the caller (writers catching up) holds all the pass read
			opts := BuildOptions{Span: 16 << 10, Partial: path, Holds: func(int64) bool { return holds.Load() }}
			done := make(chan error, 1)
			go func() {
				_, err := Build(context.Background(), gate, id, opts)
				done <- err
			}()
			defer func() {
				gate.allow(len(obj))
				if err := <-done; err != nil {
					t.Errorf("the pass: %v", err)
				}
			}()
			for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				gate.mu.Lock()
				at := gate.off
				gate.mu.Unlock()
				if at == gate.limit {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the pass read %d bytes, never %d", at, gate.limit)
				}
			}
			time.Sleep(50 * time.Millisecond) // the pass takes what it read, then waits
			if p, err := LoadPartial(path, id); err == nil {
				t.Fatalf("a resume point (at %d) before the caller held anything", p.Next())
			}
			holds.Store(true)
			for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
				if p, err := LoadPartial(path, id); err == nil {
					if p.From() > int64(gate.limit) {
						t.Errorf("the resume point needs the archive from %d, past the %d bytes read", p.From(), gate.limit)
					}
					return
				}
				if time.Now().After(deadline) {
					t.Fatal("the stalled pass wrote no resume point within 5 s of the caller holding what it read")
				}
			}
		})
	}
}
