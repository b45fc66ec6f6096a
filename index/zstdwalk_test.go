package index

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/klauspost/compress/zstd"
)

// zstdResumeData is a tar-like stream with what makes zstd use every
// block kind and mode: text repeated across blocks (repeat offsets and
// tables carried over), incompressible runs (raw blocks, raw literals),
// long zero runs (RLE blocks) and short repeats of one byte.
func zstdResumeData(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 7))
	words := []string{"package ", "func ", "return ", "index", "zstd", " := ", "err != nil", "\n\t", "{\n", "}\n", "0x", "// "}
	var b bytes.Buffer
	for b.Len() < n {
		switch r.IntN(10) {
		case 0:
			k := r.IntN(64 << 10)
			for range k {
				b.WriteByte(byte(r.Uint32()))
			}
		case 1:
			b.Write(make([]byte, r.IntN(300<<10)))
		case 2:
			b.Write(bytes.Repeat([]byte{byte(r.IntN(256))}, r.IntN(5000)))
		case 3:
			if b.Len() > 1000 {
				// A copy of something far back: long offsets.
				from := r.IntN(b.Len() - 500)
				b.Write(append([]byte(nil), b.Bytes()[from:from+r.IntN(500)]...))
			}
		default:
			for range r.IntN(4000) {
				b.WriteString(words[r.IntN(len(words))])
				if r.IntN(8) == 0 {
					b.WriteString(string(rune('a' + r.IntN(26))))
				}
			}
		}
	}
	return b.Bytes()[:n]
}

// walkZstdFrame walks the one frame of obj and returns its header length,
// window size and boundaries.
func walkZstdFrame(t testing.TB, obj []byte) (zstdFrame, int64, []zstdBoundary) {
	t.Helper()
	h, err := parseZstdFrame(obj)
	if err != nil || h.skippable {
		t.Fatalf("frame header: %v", err)
	}
	window := zstdWindowSize(obj, h)
	var bounds []zstdBoundary
	w := newZstdWalker(h.headerLen, window, func(b zstdBoundary) { bounds = append(bounds, b) })
	// In uneven pieces, as a reader hands them over.
	rest := obj[h.headerLen:]
	for i := 0; len(rest) > 0; i++ {
		k := min(len(rest), 1+i*7919%70000)
		if err := w.write(rest[:k]); err != nil {
			t.Fatalf("walk: %v", err)
		}
		rest = rest[k:]
	}
	if !w.done {
		t.Fatal("walk did not reach the last block")
	}
	return h, window, bounds
}

// resumeZstdAt decodes the rest of obj's frame from boundary b, given
// out, the frame's whole output before it.
func resumeZstdAt(obj []byte, window int64, b zstdBoundary, out []byte, checksum bool) ([]byte, error) {
	p := &zstdResumePoint{window: window, state: b.state, checksum: checksum}
	if checksum {
		x := xxhash.New()
		x.Write(out[:b.out])
		p.sum, _ = x.MarshalBinary()
	}
	q, err := unmarshalZstdResumePoint(p.marshal())
	if err != nil {
		return nil, err
	}
	win := out[max(0, b.out-window):b.out]
	cr := newCountingReader(bytes.NewReader(obj[b.in:]), b.in)
	dec, err := q.resume(cr, win, nil)
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	got, err := io.ReadAll(dec)
	if err != nil {
		return nil, err
	}
	if q.checksum {
		var x xxhash.Digest
		if err := x.UnmarshalBinary(q.sum); err != nil {
			return nil, err
		}
		x.Write(got)
		sum := cr.peek(4)
		if len(sum) < 4 || binary.LittleEndian.Uint32(sum) != uint32(x.Sum64()) {
			return nil, errors.New("content checksum mismatch")
		}
	}
	return got, nil
}

func klauspostZstd(opts ...zstd.EOption) func(testing.TB, []byte) []byte {
	return func(t testing.TB, raw []byte) []byte {
		enc, err := zstd.NewWriter(nil, append([]zstd.EOption{zstd.WithEncoderConcurrency(1)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer enc.Close()
		return enc.EncodeAll(raw, nil)
	}
}

// TestZstdResumeAtBlocks resumes real zstd frames at random block
// boundaries: the rest must be exactly the frame's remaining output.
func TestZstdResumeAtBlocks(t *testing.T) {
	raw := zstdResumeData(1, 6<<20)
	small := zstdResumeData(2, 900<<10)
	tests := []struct {
		name string
		raw  []byte
		make func(testing.TB, []byte) []byte
	}{
		{"cli-3", raw, cli("zstd", "-3")},
		{"cli-19", raw, cli("zstd", "-19")},
		{"cli-1-no-check", raw, cli("zstd", "-1", "--no-check")},
		{"cli-9-long", raw, cli("zstd", "-9", "--long=23")},
		{"cli-stdin-small", small, cli("zstd", "-6", "--no-content-size")},
		{"klauspost-fastest", raw, klauspostZstd(zstd.WithEncoderLevel(zstd.SpeedFastest))},
		{"klauspost-default-nocrc", raw, klauspostZstd(zstd.WithEncoderCRC(false))},
		{"klauspost-best", raw, klauspostZstd(zstd.WithEncoderLevel(zstd.SpeedBestCompression))},
		{"klauspost-small-window", raw, klauspostZstd(zstd.WithWindowSize(1 << 16))},
		{"klauspost-single-segment", small, klauspostZstd(zstd.WithSingleSegment(true))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obj := tt.make(t, tt.raw)
			h, window, bounds := walkZstdFrame(t, obj)
			if len(bounds) < 3 {
				t.Fatalf("got %d block boundaries, want more", len(bounds))
			}
			if got := bounds[len(bounds)-1].out; got > int64(len(tt.raw)) {
				t.Fatalf("walk decoded %d bytes before the last block, more than the %d there are", got, len(tt.raw))
			}
			r := rand.New(rand.NewPCG(uint64(len(obj)), 1))
			picks := []int{0, 1, len(bounds) - 1}
			for range 12 {
				picks = append(picks, r.IntN(len(bounds)))
			}
			for _, i := range picks {
				b := bounds[i]
				got, err := resumeZstdAt(obj, window, b, tt.raw, h.checksum)
				if err != nil {
					t.Fatalf("resume at block %d (in %d, out %d): %v", i, b.in, b.out, err)
				}
				if !bytes.Equal(got, tt.raw[b.out:]) {
					t.Fatalf("resume at block %d (in %d, out %d): got %d bytes, want the %d after it", i, b.in, b.out, len(got), len(tt.raw)-int(b.out))
				}
			}
		})
	}
}

// TestZstdResumeDamaged: a damaged state, window or stream after a
// resume point gives an error, never other bytes (with the frame's
// checksum to tell).
func TestZstdResumeDamaged(t *testing.T) {
	raw := zstdResumeData(3, 2<<20)
	obj := klauspostZstd()(t, raw)
	h, window, bounds := walkZstdFrame(t, obj)
	b := bounds[len(bounds)/2]
	for _, tt := range []struct {
		name   string
		change func(b *zstdBoundary, obj, out []byte) ([]byte, []byte)
	}{
		{"reps", func(b *zstdBoundary, obj, out []byte) ([]byte, []byte) {
			b.state.reps = [3]uint32{b.state.reps[1], b.state.reps[0], b.state.reps[2] + 1}
			return obj, out
		}},
		{"window", func(b *zstdBoundary, obj, out []byte) ([]byte, []byte) {
			out = bytes.Clone(out)
			for i := b.out - 100; i < b.out; i++ {
				out[i] ^= 0x55
			}
			return obj, out
		}},
		{"tables", func(b *zstdBoundary, obj, out []byte) ([]byte, []byte) {
			b.state.tables[zstdOF], b.state.tables[zstdLL] = b.state.tables[zstdLL], b.state.tables[zstdOF]
			return obj, out
		}},
		{"stream", func(b *zstdBoundary, obj, out []byte) ([]byte, []byte) {
			obj = bytes.Clone(obj)
			obj[b.in+200] ^= 0x10
			return obj, out
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			bb := b
			o, out := tt.change(&bb, obj, raw)
			got, err := resumeZstdAt(o, window, bb, out, h.checksum)
			if err == nil && !bytes.Equal(got, raw[b.out:]) {
				t.Fatalf("got %d other bytes and no error", len(got))
			}
		})
	}
	// A damaged encoding of the point is refused or reads as some
	// state (the partial index's record CRC stands against damage);
	// it never panics.
	enc := (&zstdResumePoint{window: window, state: b.state}).marshal()
	for i := range enc {
		bad := bytes.Clone(enc)
		bad[i] ^= 0xff
		unmarshalZstdResumePoint(bad)
		unmarshalZstdResumePoint(bad[:i])
	}
}

// TestNCountRoundTrip writes and reads back FSE table descriptions.
func TestNCountRoundTrip(t *testing.T) {
	tables := []*fseTable{zstdPredefined[zstdLL], zstdPredefined[zstdOF], zstdPredefined[zstdML], rleTable(0), rleTable(35), rleTable(17)}
	for i, tab := range tables {
		b := appendNCount(nil, tab)
		norm, log, n, err := readNCount(b, 52, 9)
		if err != nil || n != len(b) || log != tab.log {
			t.Fatalf("table %d: read %d of %d bytes, log %d (want %d): %v", i, n, len(b), log, tab.log, err)
		}
		for s := range max(len(norm), len(tab.norm)) {
			var got, want int16
			if s < len(norm) {
				got = norm[s]
			}
			if s < len(tab.norm) {
				want = tab.norm[s]
			}
			if got != want {
				t.Fatalf("table %d symbol %d: got %d, want %d", i, s, got, want)
			}
		}
	}
}

// FuzzZstdWalk: the walker never panics and holds at most a block on
// hostile frames; what it accepts, the stock decoder resumes without
// panicking.
func FuzzZstdWalk(f *testing.F) {
	raw := zstdResumeData(4, 200<<10)
	f.Add(klauspostZstd()(f, raw))
	f.Add(klauspostZstd(zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithWindowSize(1<<12))(f, raw[:20000]))
	f.Fuzz(func(t *testing.T, obj []byte) {
		h, err := parseZstdFrame(obj)
		if err != nil || h.skippable || len(obj) < 6 {
			return
		}
		window := zstdWindowSize(obj, h)
		if window <= 0 || window > zstdMaxResumeWindow {
			return
		}
		var bounds []zstdBoundary
		w := newZstdWalker(h.headerLen, window, func(b zstdBoundary) { bounds = append(bounds, b) })
		w.write(obj[h.headerLen:])
		if cap(w.blk) > 3+zstdMaxBlock+8 {
			t.Fatalf("walker grew its block buffer to %d", cap(w.blk))
		}
		for _, b := range bounds[:min(len(bounds), 2)] {
			p := &zstdResumePoint{window: window, state: b.state}
			q, err := unmarshalZstdResumePoint(p.marshal())
			if err != nil {
				t.Fatalf("a walked state does not read back: %v", err)
			}
			cr := newCountingReader(bytes.NewReader(obj[min(b.in, int64(len(obj))):]), b.in)
			if dec, err := q.resume(cr, make([]byte, min(b.out, window)), nil); err == nil {
				io.Copy(io.Discard, io.LimitReader(dec, 4<<20))
				dec.Close()
			}
		}
	})
}

// BenchmarkZstdWalk measures the walker, with and without decoding the
// sequences, against the stock decoder over one frame: TARMOUNT_BENCH_ZST names a .tar.zst to use (the go
// dataset's, for one), else a frame of generated data. SetBytes counts
// the decoded bytes, so the two MB/s compare.
func BenchmarkZstdWalk(b *testing.B) {
	var obj []byte
	if p := os.Getenv("TARMOUNT_BENCH_ZST"); p != "" {
		var err error
		if obj, err = os.ReadFile(p); err != nil {
			b.Fatal(err)
		}
	} else {
		obj = klauspostZstd()(b, zstdResumeData(5, 32<<20))
	}
	h, window, bounds := walkZstdFrame(b, obj)
	_ = bounds
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(128<<20))
	if err != nil {
		b.Fatal(err)
	}
	defer dec.Close()
	var size int64
	if err := dec.Reset(bytes.NewReader(obj)); err != nil {
		b.Fatal(err)
	}
	if size, err = io.Copy(io.Discard, dec); err != nil {
		b.Fatal(err)
	}
	b.Run("walk", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			w := newZstdWalker(h.headerLen, window, nil)
			for rest := obj[h.headerLen:]; len(rest) > 0; rest = rest[min(len(rest), 256<<10):] {
				if err := w.write(rest[:min(len(rest), 256<<10)]); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("headers", func(b *testing.B) {
		// What the pass's tracker walks: the sequences are not decoded.
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			w := newZstdWalker(h.headerLen, window, nil)
			w.lazy = true
			if err := w.write(obj[h.headerLen:]); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(size)
		b.ReportAllocs()
		for b.Loop() {
			dec.Reset(bytes.NewReader(obj))
			io.Copy(io.Discard, dec)
		}
	})
}

// TestZstdRepsSettle: the repeat offsets at a boundary, found as the
// pass's tracker finds them (the sequences of the blocks just before it
// decoded from unknown offsets), equal those of a walk from the frame's
// start, and are found at almost every boundary.
func TestZstdRepsSettle(t *testing.T) {
	raw := zstdResumeData(6, 4<<20)
	for _, tt := range []struct {
		name string
		make func(testing.TB, []byte) []byte
	}{
		{"cli-3", cli("zstd", "-3")},
		{"cli-19", cli("zstd", "-19")},
		{"klauspost-default", klauspostZstd()},
	} {
		t.Run(tt.name, func(t *testing.T) {
			obj := tt.make(t, raw)
			h, window, want := walkZstdFrame(t, obj)
			var seqs []zstdSeqs
			w := newZstdWalker(h.headerLen, window, nil)
			w.lazy = true
			w.onBound = func(zstdBoundary) {
				s := w.seq
				s.bits = append([]byte(nil), s.bits...)
				seqs = append(seqs, s)
			}
			if err := w.write(obj[h.headerLen:]); err != nil {
				t.Fatal(err)
			}
			if len(seqs) != len(want) {
				t.Fatalf("lazy walk: got %d boundaries, want %d", len(seqs), len(want))
			}
			settled := 0
			for i := range seqs {
				var r revBits
				for from := i; from >= max(0, i-zstdKeepMarks); from-- {
					reps := [3]symRep{{0, 0}, {1, 0}, {2, 0}}
					ok := true
					for j := from; j <= i && ok; j++ {
						_, err := seqs[j].decode(&r, &reps)
						ok = err == nil
					}
					if !ok {
						t.Fatalf("boundary %d: the blocks from %d do not decode", i, from)
					}
					if reps[0].base < 0 && reps[1].base < 0 && reps[2].base < 0 {
						if got := [3]uint32{reps[0].v, reps[1].v, reps[2].v}; got != want[i].state.reps {
							t.Fatalf("boundary %d: got repeat offsets %v from block %d on, want %v", i, got, from, want[i].state.reps)
						}
						settled++
						break
					}
				}
			}
			if settled < len(seqs)*9/10 {
				t.Errorf("settled %d of %d boundaries, want nearly all", settled, len(seqs))
			}
		})
	}
}
