package index

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"

	"github.com/tarmount/tarmount/internal/testutil"
)

// checkRead reads n bytes of entry id at off through r and compares them
// with data, the entry's content: a read past the end gives io.EOF, a
// short one the bytes up to the end and io.EOF.
func checkRead(t *testing.T, r *Reader, id EntryID, name string, data []byte, off int64, n int) {
	t.Helper()
	buf := make([]byte, n)
	got, err := r.ReadAt(context.Background(), id, buf, off)
	w := data[min(off, int64(len(data))):min(off+int64(n), int64(len(data)))]
	switch {
	case len(w) < n && err != io.EOF:
		t.Fatalf("%s: read %d at %d of %d bytes: got %d bytes, err %v; want %d bytes and io.EOF", name, n, off, len(data), got, err, len(w))
	case len(w) == n && err != nil:
		t.Fatalf("%s: read %d at %d of %d bytes: %v", name, n, off, len(data), err)
	case got != len(w) || !bytes.Equal(buf[:got], w):
		t.Fatalf("%s: read %d at %d: got %d bytes that differ from the %d of a sequential read", name, n, off, got, len(w))
	}
}

// checkAllSpans decodes every span alone and compares it with the tar
// stream raw.
func checkAllSpans(t *testing.T, r *Reader, raw []byte) {
	t.Helper()
	for i := 0; i < r.NumSpans(); i++ {
		got, err := r.DecodeSpan(context.Background(), i)
		if err != nil {
			t.Fatalf("span %d: %v", i, err)
		}
		start, end := r.SpanBounds(i)
		if !bytes.Equal(got, raw[start:end]) {
			t.Fatalf("span %d [%d, %d) differs from the tar stream", i, start, end)
		}
	}
}

// checkContents reads every file of want through r: whole, at random
// ranges, and across the checkpoints within it.
func checkContents(t *testing.T, r *Reader, ix *Index, want map[string][]byte, rng *rand.Rand) {
	t.Helper()
	for _, name := range sortedNames(want) {
		data := want[name]
		id, ok := ix.LookupPath(name)
		if !ok {
			t.Fatalf("%s: not in the index", name)
		}
		e := ix.Entry(id)
		if e.Type != TypeReg || e.Size != int64(len(data)) {
			t.Fatalf("%s: got a %v of %d bytes, want a file of %d", name, e.Type, e.Size, len(data))
		}
		checkRead(t, r, id, name, data, 0, len(data)+1)
		for k := 0; k < 3; k++ {
			checkRead(t, r, id, name, data, rng.Int64N(int64(len(data))+2), 1+rng.IntN(int(2*ix.Span)))
		}
		if e.Sparse {
			continue // its stored offsets are not its logical ones
		}
		reads := 0
		for _, cp := range ix.Checkpoints {
			off := int64(cp.Out) - int64(e.DataOffset)
			if off <= 0 || off >= e.Size || reads >= 8 {
				continue
			}
			checkRead(t, r, id, name, data, off-1, 2+rng.IntN(64))
			reads++
		}
	}
}

// FuzzRandomAccess derives a small tar tree from the input (fuzzTree),
// compresses it in one of the ways Go can in-process (fuzzVariants) with
// fuzzer-chosen frame, member or block sizes and options, indexes it with
// a fuzzer-chosen span (or loads the index a packed archive carries),
// saves and loads the index, and reads through a Reader: every span
// decoded alone must equal the same bytes of the tar stream, and every
// read of every file, whole, at random ranges and across checkpoints,
// what archive/tar reads sequentially.
func FuzzRandomAccess(f *testing.F) {
	variants := fuzzVariants()
	for i := range variants {
		f.Add(uint8(i), uint16(512), uint16(2048), uint8(0), fuzzSeedTree)
		f.Add(uint8(i), uint16(100), uint16(700), uint8(3), fuzzSeedTree[:14])
		f.Add(uint8(i), uint16(0x8000|4000), uint16(300), uint8(0x81), fuzzSeedTree[10:])
	}
	f.Fuzz(func(t *testing.T, variant uint8, span, piece uint16, opt uint8, tree []byte) {
		v := variants[int(variant)%len(variants)]
		raw := fuzzTree(tree)
		// At most 16 spans or so: a span costs a fetch, a decoder (and
		// its buffers, sized for spans of megabytes) and a digest. As
		// many pieces at most: each costs an encoder (xz's are slow).
		spanBytes := max(32+int64(span%8192), int64(len(raw)/16))
		obj := v.make(t, raw, max(64+int(piece%16384), len(raw)/16), opt)
		ix, local := fuzzIndex(t, obj, v.embedded, spanBytes)
		if ix.Codec != v.codec || ix.TarSize != int64(len(raw)) {
			t.Fatalf("%s: got codec %v and a tar of %d bytes, want %v and %d", v.name, ix.Codec, ix.TarSize, v.codec, len(raw))
		}
		// A cache that holds every span, so that each is decoded once
		// more at most; or, with the span's top bit set, one of two spans,
		// so that reads evict and decode again.
		cache := int64(1 << 20)
		if span&0x8000 != 0 {
			cache = 2 * spanBytes
		}
		r := NewReader(ix, newMemSource(obj), ReaderOptions{CacheBytes: cache, Local: local})
		defer r.Close()
		checkAllSpans(t, r, raw)
		checkContents(t, r, ix, tarContents(t, raw), rand.New(rand.NewPCG(xxhash.Sum64(tree), uint64(span))))
	})
}

// seedArchive is an archive of a fixed tree with its index, for the fuzz
// targets that start from valid archives (FuzzCorruptSpans,
// FuzzUnmarshal).
type seedArchive struct {
	name  string
	obj   []byte // nil: the tool that makes it is missing
	raw   []byte
	ix    *Index
	local *memFile
	want  map[string][]byte
}

// seedArchives makes raw in every variant, Go's and the CLIs' (big, for
// lz4's linked blocks, which are 64 KiB at least), and indexes them with
// a span of 2 KiB: a few dozen spans at most.
func seedArchives(t testing.TB, raw, big []byte) []seedArchive {
	var out []seedArchive
	add := func(name string, raw, obj []byte, embedded bool) {
		a := seedArchive{name: name, obj: obj, raw: raw}
		if obj != nil {
			a.ix, a.local = fuzzIndex(t, obj, embedded, 2048)
			a.want = tarContents(t, raw)
		}
		out = append(out, a)
	}
	for _, v := range fuzzVariants() {
		add(v.name, raw, v.make(t, raw, 2048, 1), v.embedded)
	}
	for _, v := range cliVariants() {
		r := raw
		if v.tool == "lz4" {
			r = big
		}
		add(v.name, r, v.make(t, r), false)
	}
	return out
}

// corruptArchives are the archives FuzzCorruptSpans damages: fuzzSeedTree
// in every variant but plain tar, which has no spans and no checksums.
func corruptArchives(t testing.TB) []seedArchive {
	big := tarBytes(t, []member{{name: "a", data: randomData(1, 150<<10)}, {name: "d/", typ: '5'}, {name: "d/b", data: randomData(2, 9000)}})
	all := seedArchives(t, fuzzTree(fuzzSeedTree), big)
	out := all[:0]
	for _, a := range all {
		if a.ix == nil || a.ix.Codec != CodecNone {
			out = append(out, a)
		}
	}
	return out
}

// smallIndexArchives are fuzzSmallIndexTree in every variant: their
// indexes are small (checkpoint windows of repeated bytes compress to
// little), for the index decoder's fuzz seeds and the flip test.
func smallIndexArchives(t testing.TB) []seedArchive {
	big := tarBytes(t, []member{{name: "a", data: bytes.Repeat([]byte("tarmount "), 17<<10)}, {name: "d/", typ: '5'}, {name: "d/b", data: randomData(2, 900)}})
	return seedArchives(t, fuzzTree(fuzzSmallIndexTree), big)
}

// FuzzCorruptSpans damages a copy of a valid archive (or of the local
// decoded copy that stream-only spans are read from) at fuzzer-chosen
// bytes and reads through the index of the intact archive, so that each
// codec's span decoder meets hostile input that the index pass never
// checked: every span and every file must read as an error wrapping
// ErrCorrupt or as exactly the intact bytes, never panic or hang. The
// span digests are what catch damage that the codec's own checks miss.
//
// damageLocal damages the local copy instead of the archive (which
// changes nothing for an archive without stream-only spans). edits is a
// list of 4-byte records: a 3-byte little-endian offset (modulo the size
// of what is damaged) and a byte to XOR there.
func FuzzCorruptSpans(f *testing.F) {
	archives := corruptArchives(f)
	for i, a := range archives {
		if a.obj == nil {
			continue
		}
		for _, frac := range []int{1, 3, 5, 7, 9} {
			pos := len(a.obj) * frac / 10
			f.Add(uint8(i), false, []byte{byte(pos), byte(pos >> 8), byte(pos >> 16), 0x55})
		}
		if a.ix.StreamOnly() {
			f.Add(uint8(i), true, []byte{0x10, 0x02, 0, 0x01})
		}
		f.Add(uint8(i), false, []byte{0x40, 0, 0, 0xff, 0x41, 0, 0, 0xff, 0x20, 0x05, 0, 0x80})
	}
	f.Fuzz(func(t *testing.T, variant uint8, damageLocal bool, edits []byte) {
		a := archives[int(variant)%len(archives)]
		if a.obj == nil {
			testutil.Missing(t, "%s: tool missing", a.name)
		}
		obj, local := a.obj, a.local
		var hits []int64
		if damageLocal {
			local = &memFile{data: bytes.Clone(local.data)}
			hits = damage(local.data, edits)
		} else {
			obj = bytes.Clone(obj)
			hits = damage(obj, edits)
		}
		r := NewReader(a.ix, newMemSource(obj), ReaderOptions{CacheBytes: 1 << 20, Local: local})
		defer r.Close()
		// Only the spans whose bytes were damaged are decoded, and the
		// files with data in them read: the others read as they did
		// intact, and would only slow fuzzing.
		var spans []int
		for i := 0; i < r.NumSpans(); i++ {
			if spanDamaged(a.ix, i, hits, damageLocal) {
				spans = append(spans, i)
			}
		}
		for _, i := range spans {
			got, err := r.DecodeSpan(context.Background(), i)
			if err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s: span %d: got %v, want ErrCorrupt", a.name, i, err)
				}
				continue
			}
			start, end := r.SpanBounds(i)
			if !bytes.Equal(got, a.raw[start:end]) {
				t.Fatalf("%s: span %d: wrong bytes from a damaged archive", a.name, i)
			}
		}
		for _, name := range sortedNames(a.want) {
			data := a.want[name]
			id, _ := a.ix.LookupPath(name)
			start := int64(a.ix.Entry(id).DataOffset)
			if !slices.ContainsFunc(spans, func(i int) bool {
				s, e := a.ix.SpanBounds(i)
				return start < int64(e) && int64(s) < start+a.ix.StoredSize(id)
			}) {
				continue
			}
			buf := make([]byte, len(data)+1)
			n, err := r.ReadAt(context.Background(), id, buf, 0)
			if err != nil && err != io.EOF {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%s: %s: got %v, want ErrCorrupt", a.name, name, err)
				}
				continue
			}
			if !bytes.Equal(buf[:n], data) {
				t.Fatalf("%s: %s: wrong bytes from a damaged archive", a.name, name)
			}
		}
	})
}

// damage XORs b at the places edits says (see FuzzCorruptSpans) and
// returns them.
func damage(b []byte, edits []byte) []int64 {
	if len(b) == 0 {
		return nil
	}
	var hits []int64
	for i := 0; i+4 <= len(edits); i += 4 {
		off := (int(edits[i]) | int(edits[i+1])<<8 | int(edits[i+2])<<16) % len(b)
		b[off] ^= edits[i+3]
		hits = append(hits, int64(off))
	}
	return hits
}

// spanDamaged reports whether one of hits lies in what span i is decoded
// from: its compressed bytes (and the next byte, where a block
// checkpoint's first bits lie), or its bytes in the local copy.
func spanDamaged(ix *Index, i int, hits []int64, local bool) bool {
	cp := ix.Checkpoints[i]
	var lo, hi int64
	switch {
	case local != (cp.Kind == kindLocal):
		return false
	case local:
		s, e := ix.SpanBounds(i)
		lo, hi = int64(s), int64(e)
	default:
		lo, hi = int64(cp.In), int64(ix.End)
		if i+1 < len(ix.Checkpoints) {
			hi = min(hi, int64(ix.Checkpoints[i+1].In)+1)
		}
	}
	return slices.ContainsFunc(hits, func(h int64) bool { return lo <= h && h < hi })
}
