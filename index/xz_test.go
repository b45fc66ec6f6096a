package index

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"testing"

	"github.com/ulikunitz/xz"

	"github.com/tarmount/tarmount/fetch"
)

// TestXzCorruptBlock damages one block of a multi-block .tar.xz: the pass
// fails with ErrCorrupt, and through the index of the good archive a read
// of that block's span fails with ErrCorrupt while its neighbours still
// read right. With no check in the stream, the span digest catches it.
func TestXzCorruptBlock(t *testing.T) {
	data := randomData(11, scaled(1<<20))
	raw := tarBytes(t, []member{{name: "f", data: data}})
	for _, check := range []string{"crc64", "none"} {
		for _, where := range []string{"data", "header"} {
			t.Run(check+"-"+where, func(t *testing.T) {
				t.Parallel()
				obj := cli("xz", "-T2", "--block-size=16KiB", "-C", check)(t, raw)
				const span = 16 << 10
				ix := build(t, obj, span)
				if ix.StreamOnly() || len(ix.Checkpoints) < 5 {
					t.Fatalf("StreamOnly %v with %d checkpoints, want random access", ix.StreamOnly(), len(ix.Checkpoints))
				}
				k := len(ix.Checkpoints) / 2
				cp, next := ix.Checkpoints[k], ix.Checkpoints[k+1]
				bad := bytes.Clone(obj)
				at := int64(cp.In) + 1 // the block header's flags
				if where == "data" {
					at = int64(cp.In) + (int64(next.In)-int64(cp.In))/2
				}
				bad[at] ^= 0x55

				_, err := Build(context.Background(), bytes.NewReader(bad), fetch.Identity{Size: int64(len(bad))},
					BuildOptions{Span: span, Local: &memFile{}})
				if check != "none" && !errors.Is(err, ErrCorrupt) {
					t.Errorf("pass over the damaged archive: got %v, want ErrCorrupt", err)
				}

				r := NewReader(ix, newMemSource(bad), ReaderOptions{Readahead: -1})
				defer r.Close()
				if _, err := r.DecodeSpan(context.Background(), k); !errors.Is(err, ErrCorrupt) {
					t.Errorf("span %d of the damaged block: got %v, want ErrCorrupt", k, err)
				}
				for _, i := range []int{k - 1, k + 1} {
					got, err := r.DecodeSpan(context.Background(), i)
					if err != nil {
						t.Fatalf("span %d: %v", i, err)
					}
					if !bytes.Equal(got, raw[ix.Checkpoints[i].Out:ix.spanEnd(i)]) {
						t.Errorf("span %d: bytes differ", i)
					}
				}
				id, _ := ix.LookupPath("f")
				buf := make([]byte, 100)
				off := int64(cp.Out) - int64(ix.Entry(id).DataOffset)
				if _, err := r.ReadAt(context.Background(), id, buf, off); !errors.Is(err, ErrCorrupt) {
					t.Errorf("read in the damaged block: got %v, want ErrCorrupt", err)
				}
			})
		}
	}
}

// TestXzSpanFetch checks that a read of a multi-block .tar.xz fetches only
// the compressed span that holds it.
func TestXzSpanFetch(t *testing.T) {
	data := randomData(12, scaled(2<<20))
	raw := tarBytes(t, []member{{name: "f", data: data}})
	obj := cli("xz", "-T2", "--block-size=32KiB")(t, raw)
	ix := build(t, obj, 64<<10)
	src := newMemSource(obj)
	r := NewReader(ix, src, ReaderOptions{Readahead: -1})
	defer r.Close()
	id, _ := ix.LookupPath("f")
	off := int64(len(data) / 2)
	buf := make([]byte, 10)
	if _, err := r.ReadAt(context.Background(), id, buf, off); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, data[off:off+10]) {
		t.Fatal("bytes differ")
	}
	i := ix.span(int64(ix.Entry(id).DataOffset) + off)
	want := int64(ix.Checkpoints[i+1].In - ix.Checkpoints[i].In)
	if got := src.Bytes(); got != want || src.Requests() != 1 {
		t.Errorf("fetched %d bytes in %d requests, want %d in 1", got, src.Requests(), want)
	}
}

// TestXzBigBlocks checks an archive whose blocks are too big to decode
// per read, with or without their sizes in the block headers, and a small
// one at the end: the big blocks are read from the local copy, the small
// one from the archive, and every byte reads right.
func TestXzBigBlocks(t *testing.T) {
	data := randomData(13, scaled(3<<20))
	raw := tarBytes(t, []member{{name: "f", data: data}})
	block := int64(len(raw)/3 - 1000) // three of them, then a small one
	for _, tc := range []struct {
		name string
		make func(t testing.TB, raw []byte) []byte
	}{
		{"sizes", cli("xz", "-T2", "-1", fmt.Sprintf("--block-size=%d", block))},
		{"no-sizes", xzGoBlocks(block)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := tc.make(t, raw)
			span := block / 10 // big blocks of 10 spans
			ix, local := buildLocal(t, obj, span)
			if !ix.StreamOnly() {
				t.Fatal("not stream-only")
			}
			last := ix.Checkpoints[len(ix.Checkpoints)-1]
			if last.Kind != kindXzBlock || int64(last.Out) != 3*block {
				t.Errorf("last checkpoint %+v, want the small block's start", last)
			}
			// A block of unknown size goes to the local copy until it
			// ends, in case it turns out too big.
			if tc.name == "sizes" && local.writes >= int64(len(raw)) {
				t.Errorf("local copy got %d bytes, want less than the tar (%d)", local.writes, len(raw))
			}
			r := NewReader(ix, newMemSource(obj), ReaderOptions{Local: local})
			defer r.Close()
			id, _ := ix.LookupPath("f")
			if got := readAll(t, r, id); !bytes.Equal(got, data) {
				t.Error("content differs")
			}
		})
	}
}

// FuzzXzBlocks fuzzes the xz container walker of the index pass and the
// span decoder: the pass never panics or hangs, and when it succeeds,
// every span decoded alone equals the sequential decode, which equals
// what ulikunitz/xz decodes when it accepts the input.
func FuzzXzBlocks(f *testing.F) {
	raw := fuzzTar(f)
	f.Add(xzGoBlocks(2048)(f, raw))
	f.Add(padded(xzGoBlocks(3000))(f, raw))
	f.Add(xzGoBlocks(9000)(f, raw))
	if _, err := exec.LookPath("xz"); err == nil {
		f.Add(cli("xz", "-T2", "--block-size=2KiB")(f, raw))
		f.Add(cli("xz", "-T1", "--block-size=2KiB", "-C", "sha256")(f, raw))
		f.Add(concat(cli("xz", "-T2", "--block-size=1KiB", "-C", "crc32"))(f, raw))
		f.Add(cli("xz", "-T2", "--block-size=4KiB", "-C", "none")(f, raw))
		f.Add(cli("xz", "-6")(f, raw))
		f.Add(cli("xz", "-T2", "--block-size=9000")(f, raw))
	}
	f.Fuzz(func(t *testing.T, obj []byte) {
		checkSpans(t, obj)
		ix, err := Build(context.Background(), bytes.NewReader(obj), fetch.Identity{Size: int64(len(obj))}, BuildOptions{Span: 512, Local: &memFile{}})
		if err != nil || ix.Codec != CodecXz {
			return
		}
		d, _, err := NewDecoder(bytes.NewReader(obj))
		if err != nil {
			t.Fatal(err)
		}
		defer d.Close()
		ours, err := io.ReadAll(d)
		if err != nil {
			t.Fatalf("the pass succeeded, the sequential decode failed: %v", err)
		}
		xr, err := xz.NewReader(bytes.NewReader(obj))
		if err != nil {
			return
		}
		theirs, err := io.ReadAll(io.LimitReader(xr, int64(len(ours))+1))
		if err == nil && !bytes.Equal(ours, theirs) {
			t.Fatalf("decoded %d bytes, ulikunitz/xz %d: they differ", len(ours), len(theirs))
		}
	})
}
