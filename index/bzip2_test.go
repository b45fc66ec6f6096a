package index

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os/exec"
	"testing"

	"github.com/tarmount/tarmount/fetch"
)

// bzip2Cases are the bzip2 variants of codecCases.
func bzip2Cases() []codecCase {
	var cs []codecCase
	for _, c := range codecCases() {
		if c.codec == CodecBzip2 {
			cs = append(cs, c)
		}
	}
	return cs
}

// sequential decodes obj with NewDecoder.
func sequential(t testing.TB, obj []byte) []byte {
	t.Helper()
	d, _, err := NewDecoder(bytes.NewReader(obj))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	want, err := io.ReadAll(d)
	if err != nil {
		t.Fatalf("sequential decode: %v", err)
	}
	return want
}

// TestBzip2Spans decodes every span of bzip2 archives on its own, with a
// checkpoint at every block and with spans of several blocks (which cross
// the stream boundaries of multi-stream files), and compares them with a
// sequential decode and with what the bzip2 CLI decodes.
func TestBzip2Spans(t *testing.T) {
	raw := tarBytes(t, []member{
		{name: "a", data: randomData(11, scaled(3<<20))},
		{name: "b", data: bytes.Repeat([]byte{0}, 300<<10)}, // runs: blocks that decode big
		{name: "c", data: randomData(12, 70<<10)},
	})
	for _, tc := range bzip2Cases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := tc.make(t, raw)
			if want := sequential(t, obj); !bytes.Equal(want, raw) {
				t.Fatalf("sequential decode differs from the tar stream")
			}
			if _, err := exec.LookPath("bzip2"); err == nil {
				cmd := exec.Command("bzip2", "-d")
				cmd.Stdin = bytes.NewReader(obj)
				if out, err := cmd.Output(); err != nil || !bytes.Equal(out, raw) {
					t.Fatalf("bzip2 -d disagrees with the tar stream (%v)", err)
				}
			}
			for _, span := range []int64{1, 256 << 10} {
				ix := build(t, obj, span)
				if ix.StreamOnly() {
					t.Fatalf("span %d: stream-only", span)
				}
				if int64(ix.End) != int64(len(obj)) {
					t.Errorf("span %d: End: got %d, want %d", span, ix.End, len(obj))
				}
				r := NewReader(ix, newMemSource(obj), ReaderOptions{})
				for i, cp := range ix.Checkpoints {
					if cp.Kind != kindBzip2Block || cp.Flags < 1 || cp.Flags > 9 {
						t.Fatalf("span %d: checkpoint %d: kind %d level %d", span, i, cp.Kind, cp.Flags)
					}
					got, err := r.DecodeSpan(context.Background(), i)
					if err != nil {
						t.Fatalf("span %d: checkpoint %d: %v", span, i, err)
					}
					if !bytes.Equal(got, raw[cp.Out:ix.spanEnd(i)]) {
						t.Fatalf("span %d: checkpoint %d at %d: bytes differ", span, i, cp.Out)
					}
				}
				r.Close()
				t.Logf("span %d: %d checkpoints", span, len(ix.Checkpoints))
			}
		})
	}
}

// TestBzip2CorruptSpan flips a byte in the middle of one span's compressed
// bytes: reads of that span fail with ErrCorrupt, and the other spans
// still read.
func TestBzip2CorruptSpan(t *testing.T) {
	data := randomData(13, 2<<20) // three blocks at -9
	raw := tarBytes(t, []member{{name: "f", data: data}})
	for _, tc := range bzip2Cases() {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			obj := tc.make(t, raw)
			ix := build(t, obj, 1)
			if len(ix.Checkpoints) < 3 {
				t.Fatalf("%d checkpoints, want 3 or more (three blocks)", len(ix.Checkpoints))
			}
			k := len(ix.Checkpoints) / 2
			lo, hi := int64(ix.Checkpoints[k].In), int64(ix.Checkpoints[k+1].In)
			for _, at := range []int64{lo + 20, (lo + hi) / 2, hi - 20} {
				bad := bytes.Clone(obj)
				bad[at] ^= 0x10
				r := NewReader(ix, newMemSource(bad), ReaderOptions{})
				if _, err := r.DecodeSpan(context.Background(), k); !errors.Is(err, ErrCorrupt) {
					t.Errorf("flip at %d in span %d: got %v, want ErrCorrupt", at, k, err)
				}
				id, _ := ix.LookupPath("f")
				off := int64(ix.Checkpoints[k].Out) - int64(ix.Entry(id).DataOffset)
				buf := make([]byte, 100)
				if _, err := r.ReadAt(context.Background(), id, buf, off+10); !errors.Is(err, ErrCorrupt) {
					t.Errorf("flip at %d: read: got %v, want ErrCorrupt", at, err)
				}
				for _, i := range []int{k - 1, k + 1} {
					got, err := r.DecodeSpan(context.Background(), i)
					if err != nil || !bytes.Equal(got, raw[ix.Checkpoints[i].Out:ix.spanEnd(i)]) {
						t.Errorf("flip at %d: span %d: %v", at, i, err)
					}
				}
				r.Close()
				// The pass over the damaged archive fails.
				if at != (lo+hi)/2 {
					continue
				}
				if _, err := Build(context.Background(), bytes.NewReader(bad), fetch.Identity{Size: int64(len(bad))}, BuildOptions{}); !errors.Is(err, ErrCorrupt) {
					t.Errorf("flip at %d: Build: got %v, want ErrCorrupt", at, err)
				}
			}
		})
	}
}

// TestBzip2ChanceMagic cuts a block at a chance match of the block magic
// inside its compressed data: the walker merges the pieces back and
// decodes the block, in the pass and in a span.
func TestBzip2ChanceMagic(t *testing.T) {
	raw := tarBytes(t, []member{{name: "f", data: randomData(14, 200<<10)}})
	obj := cli("bzip2", "-1")(t, raw)
	ix := build(t, obj, 1)
	if len(ix.Checkpoints) < 2 {
		t.Fatalf("%d checkpoints", len(ix.Checkpoints))
	}
	// A chance magic is too rare to find in real data: cut the first
	// block in the middle as if one were there.
	start := int64(ix.Checkpoints[0].In)*8 + int64(ix.Checkpoints[0].Bit)
	end := int64(ix.Checkpoints[1].In)*8 + int64(ix.Checkpoints[1].Bit)
	first := &bz2Item{start: start, end: end, base: start / 8, data: obj[start/8 : (end+7)/8], magic: bz2BlockMagic}
	whole := decodeBz2Block(first, 1)
	if whole.err != nil {
		t.Fatal(whole.err)
	}
	mid := (start + end) / 2
	a := &bz2Item{start: start, end: mid, base: start / 8, data: obj[start/8 : (mid+7)/8], magic: bz2BlockMagic}
	b := &bz2Item{start: mid, end: end, base: mid / 8, data: obj[mid/8 : (end+7)/8], magic: bitsAt(obj, mid, 48)}
	if decodeBz2Block(a, 1).err == nil {
		t.Fatal("a block cut in the middle decodes")
	}
	if got := decodeBz2Block(a.merge(b), 1); got.err != nil || !bytes.Equal(got.out, whole.out) {
		t.Fatalf("merged block: %v", got.err)
	}
	// Through the walker: a queue with the block cut in two.
	w := newBz2Walker(nil, obj[start/8:(end+7)/8], start/8, start, 1, 1)
	w.limit, w.span = end, true
	w.queue = []*bz2Item{a, b}
	w.open = -1
	got, err := w.next()
	if err != nil || !bytes.Equal(got, whole.out) {
		t.Fatalf("walker: %v", err)
	}
	if _, err := w.next(); err != io.EOF {
		t.Fatalf("walker after the block: got %v, want io.EOF", err)
	}
}

// TestFindMagic plants both magics at every bit offset.
func TestFindMagic(t *testing.T) {
	for _, m := range []uint64{bz2BlockMagic, bz2EndMagic} {
		for bit := int64(0); bit < 80; bit++ {
			p := make([]byte, 20)
			w := bitWriter{}
			w.write(0, uint(bit%40))
			w.write(0, uint(bit-bit%40))
			w.write(m, 48)
			w.flush()
			copy(p, w.buf)
			got, magic, ok := findMagic(p, 0, int64(len(p))*8)
			if !ok || got != bit || magic != m {
				t.Fatalf("magic %x at %d: got %d %x %v", m, bit, got, magic, ok)
			}
			if _, _, ok := findMagic(p, bit+1, int64(len(p))*8); ok {
				t.Fatalf("magic %x at %d: found again after it", m, bit)
			}
			if _, _, ok := findMagic(p, 0, bit+47); ok {
				t.Fatalf("magic %x at %d: found past the limit", m, bit)
			}
		}
	}
}
