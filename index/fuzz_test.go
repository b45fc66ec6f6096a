package index

import (
	"bytes"
	"context"
	"io"
	"os/exec"
	"testing"

	"github.com/pierrec/lz4/v4"

	"github.com/tarmount/tarmount/fetch"
)

// fuzzTar is a small tar stream for the fuzz seeds.
func fuzzTar(t testing.TB) []byte {
	return tarBytes(t, []member{
		{name: "a", data: randomData(1, 3000)},
		{name: "d/", typ: '5'},
		{name: "d/b", data: bytes.Repeat([]byte("tarmount "), 900)},
		{name: "c", data: randomData(2, 9000)},
	})
}

// checkSpans builds the index of obj with a tiny span and, when the pass
// succeeds, checks that every span decoded alone from its checkpoint
// equals the same bytes of a sequential decode: random access must agree
// with streaming, whatever the input.
func checkSpans(t *testing.T, obj []byte) {
	ix, err := Build(context.Background(), bytes.NewReader(obj), fetch.Identity{Size: int64(len(obj))}, BuildOptions{Span: 512, Local: &memFile{}})
	if err != nil {
		return
	}
	d, _, err := NewDecoder(bytes.NewReader(obj))
	if err != nil {
		t.Fatalf("the pass succeeded, NewDecoder failed: %v", err)
	}
	defer d.Close()
	want, err := io.ReadAll(io.LimitReader(d, ix.TarSize+1))
	if err != nil || int64(len(want)) != ix.TarSize {
		t.Fatalf("sequential decode: %d bytes, %v; the pass found %d", len(want), err, ix.TarSize)
	}
	r := NewReader(ix, newMemSource(obj), ReaderOptions{})
	defer r.Close()
	for i, cp := range ix.Checkpoints {
		if cp.Kind == kindLocal {
			continue
		}
		got, err := r.DecodeSpan(context.Background(), i)
		if err != nil {
			t.Fatalf("span %d: %v", i, err)
		}
		if !bytes.Equal(got, want[cp.Out:r.ix.spanEnd(i)]) {
			t.Fatalf("span %d at %d differs from the sequential decode", i, cp.Out)
		}
	}
}

// FuzzZstdFrames fuzzes the zstd frame walker of the index pass and the
// span decoder.
func FuzzZstdFrames(f *testing.F) {
	raw := fuzzTar(f)
	f.Add(zstdFrames(2048)(f, raw))
	f.Add(zstdStream(f, raw))
	f.Add(zstdSeekable(f, raw))
	var packed bytes.Buffer
	if _, err := Pack(context.Background(), &packed, bytes.NewReader(raw), PackOptions{Span: 4096}); err != nil {
		f.Fatal(err)
	}
	f.Add(packed.Bytes())
	f.Fuzz(func(t *testing.T, obj []byte) {
		checkSpans(t, obj)
		LoadEmbedded(context.Background(), newMemSource(obj), fetch.Identity{Size: int64(len(obj))})
	})
}

// FuzzLZ4Frames fuzzes the lz4 frame, block and legacy walker of the
// index pass and the span decoder.
func FuzzLZ4Frames(f *testing.F) {
	raw := fuzzTar(f)
	h := len(raw) / 2
	f.Add(lz4Go(lz4.BlockSizeOption(lz4.Block64Kb), lz4.ChecksumOption(true), lz4.BlockChecksumOption(true))(f, raw))
	f.Add(append(lz4Go(lz4.LegacyOption(true))(f, raw[:h]), lz4Go(lz4.ChecksumOption(false))(f, raw[h:])...))
	f.Add(lz4Go(lz4.LegacyOption(true))(f, raw))
	f.Fuzz(func(t *testing.T, obj []byte) {
		checkSpans(t, obj)
	})
}

// FuzzBzip2Blocks fuzzes the bzip2 block walker of the index pass and the
// span decoder.
func FuzzBzip2Blocks(f *testing.F) {
	raw := fuzzTar(f)
	h := len(raw) / 2
	for _, args := range [][]string{{"-1"}, {"-9"}} {
		if _, err := exec.LookPath("bzip2"); err != nil {
			break
		}
		f.Add(cli("bzip2", args...)(f, raw))
		f.Add(append(cli("bzip2", args...)(f, raw[:h]), cli("bzip2", args...)(f, raw[h:])...))
	}
	f.Fuzz(func(t *testing.T, obj []byte) {
		checkSpans(t, obj)
	})
}
