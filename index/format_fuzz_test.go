package index

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// indexPayload returns the decompressed payload of an index file of any
// version, checking nothing but the framing.
func indexPayload(t testing.TB, data []byte) []byte {
	t.Helper()
	if len(data) < headerSize+sumSize {
		t.Fatalf("index of %d bytes", len(data))
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	p, err := dec.DecodeAll(data[headerSize:len(data)-sumSize], nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// goldenFiles returns the index files in testdata, every format version.
func goldenFiles(t testing.TB) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join("testdata", "golden-v*.idx"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no golden files: %v", err)
	}
	out := map[string][]byte{}
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(p)] = data
	}
	return out
}

// TestIndexFlipRefused flips every byte of valid index files, one at a
// time and in several ways: each damaged file is refused (the checksum
// covers the whole file; the header is checked before it).
func TestIndexFlipRefused(t *testing.T) {
	files := map[string][]byte{}
	if data, err := goldenIndex().Marshal(); err == nil {
		files["golden"] = data
	}
	for _, a := range smallIndexArchives(t) {
		if a.ix == nil {
			continue
		}
		data, err := a.ix.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		files[a.name] = data
	}
	for name, data := range files {
		if _, err := Unmarshal(data); err != nil {
			t.Fatalf("%s: the intact index: %v", name, err)
		}
		for i := range data {
			for _, x := range []byte{0x01, 0x80, 0xff} {
				bad := bytes.Clone(data)
				bad[i] ^= x
				_, err := Unmarshal(bad)
				if err == nil {
					t.Fatalf("%s: byte %d of %d XOR %#x accepted", name, i, len(data), x)
				}
				if !errors.Is(err, ErrBadIndex) && !errors.Is(err, ErrVersion) {
					t.Fatalf("%s: byte %d XOR %#x: got %v, want ErrBadIndex or ErrVersion", name, i, x, err)
				}
			}
		}
	}
}

// useIndex calls what fs, materialize and the commands call on an index,
// for every entry (up to a bound, for speed) and every span, and checks
// what a valid index promises: entries exist, directory listings are
// sorted and found by Lookup, spans are ordered.
func useIndex(t *testing.T, ix *Index) {
	t.Helper()
	n := min(ix.Len(), 1<<10)
	if ix.Len() == 0 || ix.Entry(RootID).Type != TypeDir {
		t.Fatal("no root directory")
	}
	if ix.Entry(EntryID(ix.Len())) != nil {
		t.Fatal("an entry past the last")
	}
	for id := EntryID(0); int(id) < n; id++ {
		e := ix.Entry(id)
		if e == nil {
			t.Fatalf("entry %d of %d is nil", id, ix.Len())
		}
		ix.LookupPath(ix.Path(id))
		for _, c := range ix.Children(id) {
			got, ok := ix.Lookup(id, c.Name)
			if !ok || got != c.ID {
				t.Fatalf("entry %d: Lookup(%q) = %d, %v; Children says %d", id, c.Name, got, ok, c.ID)
			}
			if ix.Entry(c.ID) == nil {
				t.Fatalf("entry %d: child %q is entry %d of %d", id, c.Name, c.ID, ix.Len())
			}
		}
		ix.Xattrs(id)
		var stored int64
		for _, c := range ix.SparseMap(id) {
			stored += c.Length
		}
		if s := ix.StoredSize(id); e.Type == TypeReg && (s < 0 || e.Sparse && s != stored || int64(e.DataOffset)+s > ix.TarSize) {
			t.Fatalf("entry %d: %d bytes stored at %d in a tar of %d", id, s, e.DataOffset, ix.TarSize)
		}
	}
	ix.StreamOnly()
	for i := 0; i < ix.NumSpans(); i++ {
		start, end := ix.SpanBounds(i)
		if start < 0 || start >= end && i+1 < ix.NumSpans() || int64(end) > ix.TarSize || ix.SpanStoredBytes(i) < 0 {
			t.Fatalf("span %d: [%d, %d) in a tar of %d", i, start, end, ix.TarSize)
		}
	}
}

// readThrough reads some of every file and decodes some spans through a
// Reader over src: errors are expected, panics, hangs and reads that
// return more than asked are not.
func readThrough(t *testing.T, ix *Index, src Source, local io.ReaderAt) {
	t.Helper()
	r := NewReader(ix, src, ReaderOptions{CacheBytes: 1 << 20, Local: local})
	defer r.Close()
	ctx := context.Background()
	for i := 0; i < min(r.NumSpans(), 16); i++ {
		r.DecodeSpan(ctx, i)
	}
	files := 0
	for id := EntryID(0); int(id) < ix.Len() && files < 16; id++ {
		e := ix.Entry(id)
		if e.Type != TypeReg {
			continue
		}
		files++
		buf := make([]byte, min(e.Size, 4096)+1)
		for _, off := range []int64{0, e.Size - int64(len(buf)) + 2} {
			n, err := r.ReadAt(ctx, id, buf, max(off, 0))
			if n > len(buf) || err == nil && n != len(buf) {
				t.Fatalf("entry %d: read %d at %d: got %d bytes, err %v", id, len(buf), off, n, err)
			}
		}
	}
}

// fuzzNoise is the content of the source that indexes of no seed archive
// are read over.
var fuzzNoise = func() []byte {
	b := make([]byte, 1<<16)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}()

// FuzzUnmarshal fuzzes the index decoder. The input is an index file
// (checked by Unmarshal: header, length, checksum) and, since a hostile
// file simply carries a valid checksum, also the payload behind the
// checksum (decodePayload), which is where fuzzing finds something. An
// index that is not refused must be safe to use: every accessor over
// every entry and span (useIndex), a save and load that gives the same
// payload, and reads through a Reader over a source of the size it
// records (the archive it was built from, for the seeds and their
// mutants; noise otherwise) must not panic, hang or allocate without
// bound.
func FuzzUnmarshal(f *testing.F) {
	archives := smallIndexArchives(f)
	bySize := map[int64]*seedArchive{}
	for i := range archives {
		a := &archives[i]
		if a.ix == nil {
			continue
		}
		bySize[a.ix.Source.Size] = a
		data, err := a.ix.Marshal()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(a.ix.payload())
	}
	for _, data := range goldenFiles(f) {
		f.Add(data)
		f.Add(indexPayload(f, data))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if ix, err := Unmarshal(data); err == nil {
			useIndex(t, ix)
		} else if !errors.Is(err, ErrBadIndex) && !errors.Is(err, ErrVersion) {
			t.Fatalf("Unmarshal: got %v, want ErrBadIndex or ErrVersion", err)
		}
		ix, err := decodePayload(data)
		if err != nil {
			if !errors.Is(err, ErrBadIndex) {
				t.Fatalf("decodePayload: got %v, want ErrBadIndex", err)
			}
			return
		}
		useIndex(t, ix)
		p := ix.payload()
		again, err := decodePayload(p)
		if err != nil {
			t.Fatalf("an accepted index, saved again, is refused: %v", err)
		}
		if !bytes.Equal(again.payload(), p) {
			t.Fatal("an accepted index, saved and loaded again, changed")
		}
		switch a := bySize[ix.Source.Size]; {
		case a != nil:
			readThrough(t, ix, newMemSource(a.obj), a.local)
		case ix.Source.Size <= int64(len(fuzzNoise)):
			readThrough(t, ix, newMemSource(fuzzNoise[:ix.Source.Size]), nil)
		}
	})
}
