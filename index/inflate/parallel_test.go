package inflate

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"slices"
	"testing"
)

// decoded is what a decoder made of a stream: the bytes, the checkpoints
// reported, the error that ended it (nil at the end) and Trailing.
type decoded struct {
	out      []byte
	cps      []Checkpoint
	err      error
	trailing bool
}

func sequential(comp []byte, span int64) decoded {
	var d decoded
	z := NewReader(bytes.NewReader(comp), Options{Span: span, OnCheckpoint: func(cp Checkpoint) { d.cps = appendCheckpoint(d.cps, cp) }})
	d.out, d.err = io.ReadAll(z)
	d.trailing = z.Trailing()
	return d
}

func parallel(t testing.TB, comp []byte, span int64, workers, chunk int) (decoded, *ParallelReader) {
	t.Helper()
	var d decoded
	p := newParallelReader(context.Background(), bytes.NewReader(comp), Options{Span: span, OnCheckpoint: func(cp Checkpoint) { d.cps = appendCheckpoint(d.cps, cp) }}, workers, chunk)
	defer p.Close()
	d.out, d.err = io.ReadAll(p)
	d.trailing = p.Trailing()
	return d, p
}

// sameDecode fails t unless got is want: the same bytes, checkpoints,
// trailing flag and kind of error.
func sameDecode(t testing.TB, got, want decoded) {
	t.Helper()
	if !bytes.Equal(got.out, want.out) {
		t.Fatalf("got %d bytes, want %d (first difference at %d)", len(got.out), len(want.out), firstDiff(got.out, want.out))
	}
	if (got.err == nil) != (want.err == nil) || errors.Is(got.err, ErrCorrupt) != errors.Is(want.err, ErrCorrupt) ||
		errors.Is(got.err, ErrTruncated) != errors.Is(want.err, ErrTruncated) || errors.Is(got.err, ErrNotGzip) != errors.Is(want.err, ErrNotGzip) {
		t.Fatalf("got error %v, want %v", got.err, want.err)
	}
	if got.trailing != want.trailing {
		t.Fatalf("got trailing %v, want %v", got.trailing, want.trailing)
	}
	if len(got.cps) != len(want.cps) {
		t.Fatalf("got %d checkpoints, want %d", len(got.cps), len(want.cps))
	}
	for i := range got.cps {
		g, w := got.cps[i], want.cps[i]
		if g.Kind != w.Kind || g.In != w.In || g.Bit != w.Bit || g.Out != w.Out || !bytes.Equal(g.Window, w.Window) ||
			g.Sums != w.Sums || g.CRC != w.CRC || g.Size != w.Size {
			t.Fatalf("checkpoint %d: got %+v, want %+v (windows of %d and %d bytes)", i,
				Checkpoint{Kind: g.Kind, In: g.In, Bit: g.Bit, Out: g.Out, Sums: g.Sums, CRC: g.CRC, Size: g.Size},
				Checkpoint{Kind: w.Kind, In: w.In, Bit: w.Bit, Out: w.Out, Sums: w.Sums, CRC: w.CRC, Size: w.Size}, len(g.Window), len(w.Window))
		}
	}
}

// TestParallel decodes every kind of data from every compressor in small
// chunks, with two and three workers, and wants the sequential Reader's
// bytes and checkpoints.
func TestParallel(t *testing.T) {
	for _, kind := range []string{"random", "zeros", "text", "mixed"} {
		for _, size := range []int{0, 1000, scaled(3 << 20)} {
			data := sample(kind, size)
			for _, c := range compressors {
				for _, workers := range []int{2, 3} {
					t.Run(fmt.Sprintf("%s/%d/%s/%d", kind, size, c.name, workers), func(t *testing.T) {
						comp := c.fn(t, data)
						want := sequential(comp, 200<<10)
						got, p := parallel(t, comp, 200<<10, workers, 64<<10)
						sameDecode(t, got, want)
						if want.err == nil && !bytes.Equal(got.out, data) {
							t.Fatalf("got %d bytes, want the data", len(got.out))
						}
						t.Logf("%d chunks, %d of them decoded by the consumer, for %d of input; fell back %v", p.chunks, p.bridged, (len(comp)+64<<10-1)/(64<<10), p.fellBack)
					})
				}
			}
		}
	}
}

// TestParallelUsesWorkers checks that data that is neither random nor
// highly compressible is decoded by the workers throughout, in chunks of
// the default size: the parallel path is not a sequential one in
// disguise.
func TestParallelUsesWorkers(t *testing.T) {
	for _, c := range []compressor{
		{"std-6", stdLevel(6)}, {"std-1", stdLevel(1)}, {"std-9", stdLevel(9)}, {"klauspost-5", klauspostLevel(5)},
		{"gzip-cli", command("gzip", "-c", "-6")}, {"pigz", command("pigz", "-c", "-p", "2")},
	} {
		t.Run(c.name, func(t *testing.T) {
			data := sample("mixed", scaled(24<<20))
			chunk := scaled(parChunk)
			comp := c.fn(t, data)
			want := sequential(comp, 1<<20)
			got, p := parallel(t, comp, 1<<20, 2, chunk)
			sameDecode(t, got, want)
			if n := (len(comp) + chunk - 1) / chunk; p.fellBack || p.chunks != n || p.bridged != 0 {
				t.Fatalf("%d of %d chunks, %d decoded by the consumer, fell back %v; want all from the workers", p.chunks, n, p.bridged, p.fellBack)
			}
		})
	}
}

// storedStream returns a gzip member of stored blocks of blockSize bytes
// of data each (a final empty one last).
func storedStream(data []byte, blockSize int) []byte {
	out := []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}
	for i := 0; i < len(data); i += blockSize {
		b := data[i:min(i+blockSize, len(data))]
		out = append(out, 0)
		out = binary.LittleEndian.AppendUint16(out, uint16(len(b)))
		out = binary.LittleEndian.AppendUint16(out, ^uint16(len(b)))
		out = append(out, b...)
	}
	out = append(out, 1, 0, 0, 0xff, 0xff)
	out = binary.LittleEndian.AppendUint32(out, crc32.ChecksumIEEE(data))
	return binary.LittleEndian.AppendUint32(out, uint32(len(data)))
}

// TestParallelFalseStart plants, in every stored block, a false stored
// block header whose length reaches exactly to the next true header: a
// worker that starts at it decodes on without an error, in step with the
// true blocks. Its start is not where the previous chunk ended, so the
// worker's decode must be rejected (the consumer decodes the chunk from
// the true start) and the result still be exact.
func TestParallelFalseStart(t *testing.T) {
	const block, fake = 60000, 1000
	data := sample("random", 40*block)
	for i := 0; i < len(data); i += block {
		at := i + block - fake - 5
		b := data[at : at+5]
		b[0] = 0
		binary.LittleEndian.PutUint16(b[1:], fake)
		binary.LittleEndian.PutUint16(b[3:], ^uint16(fake))
	}
	comp := storedStream(data, block)
	want := sequential(comp, 100<<10)
	got, p := parallel(t, comp, 100<<10, 2, 256<<10)
	sameDecode(t, got, want)
	if p.bridged == 0 {
		t.Fatalf("the false start was not met (%d chunks from the workers); the test proves nothing", p.chunks)
	}
	// Chunks that start between a false header and the true one (10
	// bytes before it: a block and its header make 60005 bytes) find the
	// true one.
	z := newParallelReader(context.Background(), bytes.NewReader(comp), Options{}, 2, block+5)
	defer z.Close()
	out, err := io.ReadAll(z)
	if err != nil || !bytes.Equal(out, data) {
		t.Fatalf("chunks past the false headers: err %v, equal %v", err, bytes.Equal(out, data))
	}
	// But the last, which holds only the final block: final blocks are
	// not looked for.
	if z.bridged > 1 || z.fellBack {
		t.Fatalf("%d of %d chunks decoded by the consumer, fell back %v; want all but the last from the workers", z.bridged, z.chunks, z.fellBack)
	}
}

// TestParallelDamaged cuts and corrupts streams: the parallel decode
// fails as the sequential one does, with the same bytes before, and
// never hangs.
func TestParallelDamaged(t *testing.T) {
	data := sample("mixed", scaled(2<<20))
	for _, c := range compressors[:9] {
		t.Run(c.name, func(t *testing.T) {
			comp := c.fn(t, data)
			r := rand.New(rand.NewPCG(3, uint64(len(comp))))
			for i := 0; i < scaled(40); i++ {
				bad := bytes.Clone(comp)
				if i%2 == 0 {
					bad = bad[:r.IntN(len(bad))]
				} else {
					bad[10+r.IntN(len(bad)-10)] ^= byte(1 + r.IntN(255))
				}
				got, _ := parallel(t, bad, 100<<10, 2, 32<<10)
				sameDecode(t, got, sequential(bad, 100<<10))
			}
		})
	}
}

// TestParallelEdges: not gzip, trailing data, a reserved flag.
func TestParallelEdges(t *testing.T) {
	text := sample("text", 300<<10)
	comp := stdLevel(6)(t, text)
	reserved := bytes.Clone(comp)
	reserved[3] |= 0x20
	for name, in := range map[string][]byte{
		"empty":         nil,
		"not gzip":      []byte("hello, this is not gzip"),
		"zeros":         make([]byte, 200<<10),
		"trailing":      append(bytes.Clone(comp), make([]byte, 100<<10)...),
		"reserved flag": reserved,
		"two members":   append(bytes.Clone(comp), comp...),
	} {
		t.Run(name, func(t *testing.T) {
			got, _ := parallel(t, in, 64<<10, 2, 16<<10)
			sameDecode(t, got, sequential(in, 64<<10))
		})
	}
}

// TestParallelOnData checks that OnData sees every byte in order, and all
// bytes before a checkpoint when the checkpoint is reported, as with
// Reader.
func TestParallelOnData(t *testing.T) {
	data := sample("mixed", scaled(3<<20))
	comp := multiMember(700<<10)(t, data)
	var seen []byte
	cps := 0
	p := newParallelReader(context.Background(), bytes.NewReader(comp), Options{
		Span:   300 << 10,
		OnData: func(b []byte) { seen = append(seen, b...) },
		OnCheckpoint: func(cp Checkpoint) {
			cps++
			if int64(len(seen)) != cp.Out {
				t.Errorf("checkpoint at %d reported after %d bytes of data", cp.Out, len(seen))
			}
		},
	}, 2, 64<<10)
	defer p.Close()
	got, err := io.ReadAll(p)
	if err != nil || !bytes.Equal(got, data) || !bytes.Equal(seen, data) {
		t.Fatalf("err %v; read %d bytes, OnData saw %d; want %d", err, len(got), len(seen), len(data))
	}
	if cps < 2 || p.chunks < 2 {
		t.Fatalf("%d checkpoints, %d chunks: the test proves nothing", cps, p.chunks)
	}
}

// TestParallelClose stops a ParallelReader before and while it is read.
func TestParallelClose(t *testing.T) {
	comp := stdLevel(6)(t, sample("mixed", 2<<20))
	p := newParallelReader(context.Background(), bytes.NewReader(comp), Options{}, 2, 32<<10)
	p.Close()
	p.Close()
	ctx, cancel := context.WithCancel(context.Background())
	p = newParallelReader(ctx, bytes.NewReader(comp), Options{}, 2, 32<<10)
	if _, err := p.Read(make([]byte, 1000)); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.ReadAll(p); !errors.Is(err, context.Canceled) {
		t.Fatalf("read after cancel: got %v, want context.Canceled", err)
	}
	p.Close()
}

func FuzzParallel(f *testing.F) {
	for _, c := range compressors[:9] {
		f.Add(c.fn(f, sample("mixed", 20000)), uint16(3000))
	}
	f.Add(storedStream(sample("text", 30000), 2000), uint16(5000))
	f.Fuzz(func(t *testing.T, comp []byte, chunk uint16) {
		want := sequential(comp, 4000)
		got, _ := parallel(t, comp, 4000, 2, 512+int(chunk))
		sameDecode(t, got, want)
		if !slices.Equal(got.out, want.out) {
			t.Fatal("bytes differ")
		}
	})
}
