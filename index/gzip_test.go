package index

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"runtime"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index/inflate"
	"github.com/tarmount/tarmount/index/tarscan"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// serialGzipIndex records the checkpoints and span digests of the gzip
// stream obj as the pass did before it decoded on a goroutine of its own:
// the inflater calls the recorder as it decodes.
func serialGzipIndex(t *testing.T, obj []byte, span int64) *Index {
	t.Helper()
	ix := &Index{Span: span, Codec: CodecGzip}
	rec := newRecorder(ix, span, nil)
	z := inflate.NewReader(bytes.NewReader(obj), inflate.Options{
		Span:   span,
		OnData: rec.write,
		OnCheckpoint: func(cp inflate.Checkpoint) {
			c := Checkpoint{Kind: cp.Kind, In: CompressedOffset(cp.In), Bit: cp.Bit, Out: UncompressedOffset(cp.Out)}
			if cp.Sums {
				c.pass = binary.LittleEndian.AppendUint32(binary.LittleEndian.AppendUint32(nil, cp.CRC), cp.Size)
			}
			if len(cp.Window) > 0 {
				var err error
				if c.window, err = compressWindow(cp.Window); err != nil {
					t.Fatal(err)
				}
			}
			rec.mark(c)
		},
	})
	n, err := io.Copy(io.Discard, z)
	if err != nil {
		t.Fatal(err)
	}
	rec.finish()
	ix.TarSize = n
	return ix
}

func sameCheckpoints(t *testing.T, what string, got, want *Index) {
	t.Helper()
	if len(got.Checkpoints) != len(want.Checkpoints) || len(got.Digests) != len(want.Digests) {
		t.Fatalf("%s: got %d checkpoints and %d digests, want %d and %d", what,
			len(got.Checkpoints), len(got.Digests), len(want.Checkpoints), len(want.Digests))
	}
	for i, g := range got.Checkpoints {
		w := want.Checkpoints[i]
		if g.Kind != w.Kind || g.In != w.In || g.Bit != w.Bit || g.Out != w.Out || !bytes.Equal(g.window, w.window) || !bytes.Equal(g.pass, w.pass) {
			t.Fatalf("%s: checkpoint %d: got %+v, want %+v", what, i, g, w)
		}
		if got.Digests[i] != want.Digests[i] {
			t.Fatalf("%s: digest %d: got %x, want %x", what, i, got.Digests[i], want.Digests[i])
		}
	}
}

// TestGzipPassSameIndex: the gzip pass, which decodes on a goroutine of
// its own, records the checkpoints, windows, pass states and span digests
// that the inflater reports when it calls the recorder as it decodes, and
// each digest is that of the bytes between its checkpoints.
func TestGzipPassSameIndex(t *testing.T) {
	raw := tarBytes(t, []member{
		{name: "a.bin", data: randomData(21, scaled(3<<20))},
		{name: "d/", typ: tar.TypeDir, mode: 0o755},
		{name: "d/b.bin", data: randomData(22, 70000)},
		{name: "d/c.bin", data: bytes.Repeat([]byte("tarmount "), scaled(200000))},
	})
	half := len(raw) / 2
	for _, c := range []struct {
		name string
		obj  []byte
		span int64
	}{
		{"level 6", tarbuild.GzipLevel(raw, 6), 64 << 10},
		{"level 1 small spans", tarbuild.GzipLevel(raw, 1), 8 << 10},
		{"stored", tarbuild.GzipLevel(raw, 0), 100 << 10},
		{"members", tarbuild.GzipMembers(raw, 300<<10, 6), 128 << 10},
		{"empty member between", append(append(tarbuild.GzipLevel(raw[:half], 6), tarbuild.GzipLevel(nil, 6)...), tarbuild.GzipLevel(raw[half:], 6)...), 64 << 10},
		{"one span", tarbuild.GzipLevel(raw, 6), DefaultSpan},
	} {
		t.Run(c.name, func(t *testing.T) {
			want := serialGzipIndex(t, c.obj, c.span)

			got := &Index{Span: c.span, Codec: CodecGzip, Source: fetch.Identity{Size: int64(len(c.obj))}}
			rec := newRecorder(got, c.span, nil)
			g := newGzipPass(bytes.NewReader(c.obj), rec)
			defer g.close()
			if _, err := io.Copy(io.Discard, io.LimitReader(g, int64(half))); err != nil {
				t.Fatal(err)
			}
			tarSize, end, err := g.finish()
			if err != nil {
				t.Fatal(err)
			}
			rec.finish()
			if tarSize != want.TarSize || end != int64(len(c.obj)) {
				t.Fatalf("finish: got %d, %d, want %d, %d", tarSize, end, want.TarSize, len(c.obj))
			}
			sameCheckpoints(t, "pass", got, want)

			ix := build(t, c.obj, c.span)
			for i := range want.Checkpoints {
				want.Checkpoints[i].pass = nil // an index keeps no pass state
			}
			sameCheckpoints(t, "Build", ix, want)
			for i, cp := range ix.Checkpoints {
				to := ix.TarSize
				if i+1 < len(ix.Checkpoints) {
					to = int64(ix.Checkpoints[i+1].Out)
				}
				if d := xxhash.Sum64(raw[cp.Out:to]); ix.Digests[i] != d {
					t.Fatalf("digest %d: got %x, want %x, that of bytes %d to %d", i, ix.Digests[i], d, cp.Out, to)
				}
			}
		})
	}
}

// failingReader yields data, then fails with err.
type failingReader struct {
	data []byte
	err  error
}

func (f *failingReader) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		return 0, f.err
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

// TestGzipPassErrors: when the source fails or the stream is corrupt or
// cut short, the pass hands out every byte the inflater decoded before,
// with the recorder seeing just those, and then the inflater's error,
// unchanged, from Read and from finish.
func TestGzipPassErrors(t *testing.T) {
	raw := tarBytes(t, []member{{name: "a.bin", data: randomData(23, scaled(4<<20))}})
	obj := tarbuild.GzipLevel(raw, 6)
	corrupt := bytes.Clone(obj)
	for i := len(obj) / 2; i < len(obj)/2+64; i++ {
		corrupt[i] ^= 0x5a
	}
	boom := errors.New("connection reset")
	for _, c := range []struct {
		name string
		src  func() io.Reader
		is   error
	}{
		{"source fails", func() io.Reader { return &failingReader{obj[:len(obj)/2], boom} }, boom},
		{"source fails at once", func() io.Reader { return &failingReader{nil, boom} }, boom},
		{"corrupt", func() io.Reader { return bytes.NewReader(corrupt) }, inflate.ErrCorrupt},
		{"cut short", func() io.Reader { return bytes.NewReader(obj[:len(obj)/3]) }, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			want, wantErr := io.ReadAll(inflate.NewReader(c.src(), inflate.Options{Span: 64 << 10, OnCheckpoint: func(inflate.Checkpoint) {}}))
			if wantErr == nil {
				t.Fatal("the inflater decodes the stream: the test shows nothing")
			}
			rec := newRecorder(&Index{}, 64<<10, nil)
			g := newGzipPass(c.src(), rec)
			defer g.close()
			var got []byte
			buf := make([]byte, 3000)
			var err error
			for err == nil {
				var n int
				n, err = g.Read(buf)
				got = append(got, buf[:n]...)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes before the error, want the %d the inflater hands out", len(got), len(want))
			}
			if rec.out != int64(len(got)) {
				t.Fatalf("the recorder saw %d bytes, want the %d handed out", rec.out, len(got))
			}
			if err.Error() != wantErr.Error() || c.is != nil && !errors.Is(err, c.is) {
				t.Fatalf("got error %v, want %v", err, wantErr)
			}
			if _, _, ferr := g.finish(); ferr != err {
				t.Fatalf("finish: got %v, want %v", ferr, err)
			}
		})
	}
}

// TestGzipPassStopsEarly: a pass whose reader stops early stops its
// decoder (close returns, and later reads fail once the output decoded
// ahead is read), and so does Build whose OnMember fails: no goroutine
// is left.
func TestGzipPassStopsEarly(t *testing.T) {
	// More than the pipe holds ahead of its reader, even under the race
	// detector: else the whole stream may be decoded before the close.
	raw := tarBytes(t, []member{
		{name: "a.bin", data: randomData(24, max(scaled(8<<20), 2*pipeSlots*pipeSlotBytes))},
		{name: "b.bin", data: randomData(25, 1000)},
	})
	obj := tarbuild.GzipLevel(raw, 1)

	before := runtime.NumGoroutine()
	g := newGzipPass(bytes.NewReader(obj), newRecorder(&Index{}, 64<<10, nil))
	buf := make([]byte, 1000)
	if _, err := io.ReadFull(g, buf); err != nil {
		t.Fatal(err)
	}
	closed := within(func() error { g.close(); return nil })
	returned(t, closed, "close")
	select {
	case <-g.done:
	default:
		t.Fatal("the decoder runs after close")
	}
	g.close() // again
	got := bytes.Clone(buf)
	var err error
	for err == nil {
		var n int
		n, err = g.Read(buf)
		got = append(got, buf[:n]...)
	}
	if err != io.ErrClosedPipe {
		t.Fatalf("Read after close: got %v, want io.ErrClosedPipe", err)
	}
	if !bytes.HasPrefix(raw, got) || len(got) >= len(raw) {
		t.Fatalf("Read after close: got %d bytes, want part of the stream", len(got))
	}

	stop := errors.New("stop here")
	_, err = Build(context.Background(), bytes.NewReader(obj), fetch.Identity{Size: int64(len(obj))}, BuildOptions{
		OnMember: func(*tarscan.Header, io.Reader) error { return stop },
	})
	if !errors.Is(err, stop) {
		t.Fatalf("Build: got %v, want %v", err, stop)
	}
	for deadline := time.Now().Add(5 * time.Second); runtime.NumGoroutine() > before; {
		if time.Now().After(deadline) {
			t.Fatalf("got %d goroutines after the passes, want %d", runtime.NumGoroutine(), before)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
