package inflate

import (
	"bytes"
	stdgzip "compress/gzip"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os/exec"
	"strings"
	"testing"

	kgzip "github.com/klauspost/compress/gzip"

	"github.com/tarmount/tarmount/internal/testutil"
)

// scaled returns n, or an eighth of it under the race detector.
func scaled(n int) int {
	if raceEnabled {
		return max(n/8, 1)
	}
	return n
}

// sample returns deterministic test data of the given kind.
func sample(kind string, n int) []byte {
	r := rand.New(rand.NewPCG(uint64(n), uint64(len(kind))))
	b := make([]byte, n)
	switch kind {
	case "random":
		for i := range b {
			b[i] = byte(r.Uint32())
		}
	case "zeros":
	case "text":
		words := []string{"tar", "mount", "gzip", "window", "checkpoint", "the", "a", "of", "span", "inflate", "\n", "lazy", "remote", "index", "0123456789"}
		var buf bytes.Buffer
		for buf.Len() < n {
			buf.WriteString(words[r.IntN(len(words))])
			buf.WriteByte(' ')
		}
		copy(b, buf.Bytes())
	case "mixed":
		// Runs of random, repeated and text bytes, with far matches.
		for i := 0; i < n; {
			k := min(n-i, 1+r.IntN(20000))
			switch r.IntN(4) {
			case 0:
				for j := 0; j < k; j++ {
					b[i+j] = byte(r.Uint32())
				}
			case 1:
				c := byte(r.Uint32())
				for j := 0; j < k; j++ {
					b[i+j] = c
				}
			case 2:
				if i > 0 {
					src := r.IntN(i)
					for j := 0; j < k; j++ {
						b[i+j] = b[src+j%(i-src)]
					}
				}
			default:
				copy(b[i:i+k], sample("text", k))
			}
			i += k
		}
	default:
		panic(kind)
	}
	return b
}

type compressor struct {
	name string
	fn   func(t testing.TB, data []byte) []byte
}

func stdLevel(level int) func(testing.TB, []byte) []byte {
	return func(t testing.TB, data []byte) []byte {
		var buf bytes.Buffer
		w, err := stdgzip.NewWriterLevel(&buf, level)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		w.Close()
		return buf.Bytes()
	}
}

func klauspostLevel(level int) func(testing.TB, []byte) []byte {
	return func(t testing.TB, data []byte) []byte {
		var buf bytes.Buffer
		w, err := kgzip.NewWriterLevel(&buf, level)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(data)
		w.Close()
		return buf.Bytes()
	}
}

// multiMember gzips pieces of data separately and concatenates them, as
// pigz --independent and concatenated .gz files do.
func multiMember(piece int) func(testing.TB, []byte) []byte {
	return func(t testing.TB, data []byte) []byte {
		var out bytes.Buffer
		for i := 0; i < len(data) || i == 0; i += piece {
			out.Write(stdLevel(6)(t, data[i:min(i+piece, len(data))]))
		}
		return out.Bytes()
	}
}

func command(name string, args ...string) func(testing.TB, []byte) []byte {
	return func(t testing.TB, data []byte) []byte {
		if _, err := exec.LookPath(name); err != nil {
			testutil.Missing(t, "%s not installed", name)
		}
		cmd := exec.Command(name, args...)
		cmd.Stdin = bytes.NewReader(data)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		return out
	}
}

var compressors = []compressor{
	{"std-0", stdLevel(0)},
	{"std-1", stdLevel(1)},
	{"std-6", stdLevel(6)},
	{"std-9", stdLevel(9)},
	{"std-huffman", stdLevel(stdgzip.HuffmanOnly)},
	{"klauspost-1", klauspostLevel(1)},
	{"klauspost-5", klauspostLevel(5)},
	{"klauspost-9", klauspostLevel(9)},
	{"multi-member", multiMember(100 << 10)},
	{"gzip-cli", command("gzip", "-c", "-6")},
	{"gzip-cli-1", command("gzip", "-c", "-1")},
	{"pigz", command("pigz", "-c", "-p", "2", "-b", "128")},
	{"pigz-independent", command("pigz", "-c", "-p", "2", "-i", "-b", "64")},
}

func decodeAll(t testing.TB, comp []byte, opts Options) []byte {
	t.Helper()
	got, err := io.ReadAll(NewReader(bytes.NewReader(comp), opts))
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return got
}

func TestRoundTrip(t *testing.T) {
	for _, kind := range []string{"random", "zeros", "text", "mixed"} {
		for _, size := range []int{0, 1, 1000, scaled(3 << 20)} {
			data := sample(kind, size)
			for _, c := range compressors {
				t.Run(fmt.Sprintf("%s/%d/%s", kind, size, c.name), func(t *testing.T) {
					comp := c.fn(t, data)
					got := decodeAll(t, comp, Options{})
					if !bytes.Equal(got, data) {
						t.Fatalf("got %d bytes, want %d (first difference at %d)", len(got), len(data), firstDiff(got, data))
					}
				})
			}
		}
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func collect(t testing.TB, comp []byte, span int64) ([]Checkpoint, []byte) {
	var cps []Checkpoint
	got := decodeAll(t, comp, Options{Span: span, OnCheckpoint: func(cp Checkpoint) { cps = appendCheckpoint(cps, cp) }})
	return cps, got
}

// TestResume resumes at every checkpoint and checks the bytes that follow,
// up to the next checkpoint and across it.
func TestResume(t *testing.T) {
	data := sample("mixed", scaled(6<<20))
	for _, c := range compressors {
		t.Run(c.name, func(t *testing.T) {
			comp := c.fn(t, data)
			cps, got := collect(t, comp, int64(scaled(256<<10)))
			if !bytes.Equal(got, data) {
				t.Fatal("sequential decode differs")
			}
			if len(cps) < 3 {
				t.Fatalf("got %d checkpoints, want at least 3", len(cps))
			}
			if cps[0].Kind != KindMember || cps[0].In != 0 || cps[0].Out != 0 {
				t.Fatalf("first checkpoint %+v, want member start at 0", cps[0])
			}
			for i, cp := range cps {
				if i > 0 && cp.Out-cps[i-1].Out < int64(scaled(256<<10)) {
					t.Errorf("checkpoint %d at %d: only %d bytes after the previous", i, cp.Out, cp.Out-cps[i-1].Out)
				}
				end := int64(len(data))
				if i+1 < len(cps) {
					end = cps[i+1].Out
				}
				// Exactly one span, with a limit, as span reads do.
				z, err := NewReaderAt(bytes.NewReader(comp[cp.In:]), cp, Options{Limit: end - cp.Out})
				if err != nil {
					t.Fatal(err)
				}
				span, err := io.ReadAll(z)
				if err != nil {
					t.Fatalf("checkpoint %d (%+v): %v", i, cp.Out, err)
				}
				if !bytes.Equal(span, data[cp.Out:end]) {
					t.Fatalf("checkpoint %d: span differs at %d", i, firstDiff(span, data[cp.Out:end]))
				}
				// Only the compressed bytes up to the next checkpoint are needed.
				if i+1 < len(cps) {
					next := cps[i+1]
					need := next.In + 1
					z, err := NewReaderAt(bytes.NewReader(comp[cp.In:need]), cp, Options{Limit: end - cp.Out})
					if err != nil {
						t.Fatal(err)
					}
					span, err := io.ReadAll(z)
					if err != nil || !bytes.Equal(span, data[cp.Out:end]) {
						t.Fatalf("checkpoint %d with exact compressed range: err %v, equal %v", i, err, bytes.Equal(span, data[cp.Out:end]))
					}
					// In place, as index spans are decoded.
					dst := decodeInto(t, comp[cp.In:need], cp, end-cp.Out)
					if !bytes.Equal(dst, data[cp.Out:end]) {
						t.Fatalf("checkpoint %d: DecodeInto differs at %d", i, firstDiff(dst, data[cp.Out:end]))
					}
				}
				// Unbounded, to the end of the stream (crossing members).
				if i%3 == 0 {
					z, _ := NewReaderAt(bytes.NewReader(comp[cp.In:]), cp, Options{})
					rest, err := io.ReadAll(z)
					if err != nil || !bytes.Equal(rest, data[cp.Out:]) {
						t.Fatalf("checkpoint %d to the end: err %v, equal %v", i, err, bytes.Equal(rest, data[cp.Out:]))
					}
					if dst := decodeInto(t, comp[cp.In:], cp, int64(len(data))-cp.Out); !bytes.Equal(dst, data[cp.Out:]) {
						t.Fatalf("checkpoint %d: DecodeInto to the end differs at %d", i, firstDiff(dst, data[cp.Out:]))
					}
				}
			}
		})
	}
}

func TestMultiMemberCheckpoints(t *testing.T) {
	data := sample("text", 4<<20)
	comp := multiMember(1<<20)(t, data)
	cps, _ := collect(t, comp, 1<<20)
	members := 0
	for _, cp := range cps {
		if cp.Kind == KindMember {
			members++
			if cp.Window != nil || cp.Bit != 0 {
				t.Errorf("member checkpoint %+v has a window or bit offset", cp.Out)
			}
			if comp[cp.In] != 0x1f || comp[cp.In+1] != 0x8b {
				t.Errorf("member checkpoint at %d does not point at a gzip header", cp.In)
			}
		}
	}
	if members != 4 {
		t.Errorf("got %d member checkpoints, want 4", members)
	}
}

func TestTruncated(t *testing.T) {
	data := sample("mixed", 300<<10)
	comp := stdLevel(6)(t, data)
	for cut := 0; cut < len(comp); cut += 1 + cut/50 {
		got, err := io.ReadAll(NewReader(bytes.NewReader(comp[:cut]), Options{}))
		if err == nil {
			t.Fatalf("cut at %d of %d: no error", cut, len(comp))
		}
		if cut > 0 && !errors.Is(err, ErrTruncated) {
			t.Fatalf("cut at %d: got %v, want ErrTruncated", cut, err)
		}
		if !bytes.Equal(got, data[:len(got)]) {
			t.Fatalf("cut at %d: returned bytes differ from the data", cut)
		}
	}
}

func TestCorrupt(t *testing.T) {
	data := sample("mixed", 200<<10)
	comp := stdLevel(6)(t, data)
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < scaled(500); i++ {
		bad := bytes.Clone(comp)
		pos := 10 + r.IntN(len(bad)-10)
		bad[pos] ^= byte(1 + r.IntN(255))
		got, err := io.ReadAll(NewReader(bytes.NewReader(bad), Options{}))
		if err == nil && !bytes.Equal(got, data) {
			t.Fatalf("flip at %d: no error but wrong bytes", pos)
		}
	}
}

func TestNotGzip(t *testing.T) {
	for _, in := range [][]byte{nil, []byte("x"), []byte("hello, this is not gzip"), make([]byte, 1024)} {
		_, err := io.ReadAll(NewReader(bytes.NewReader(in), Options{}))
		if !errors.Is(err, ErrNotGzip) {
			t.Errorf("input %q: got %v, want ErrNotGzip", in[:min(len(in), 8)], err)
		}
	}
}

func TestTrailingGarbage(t *testing.T) {
	data := sample("text", 10000)
	comp := append(stdLevel(6)(t, data), make([]byte, 4096)...)
	z := NewReader(bytes.NewReader(comp), Options{})
	got, err := io.ReadAll(z)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("got err %v, equal %v", err, bytes.Equal(got, data))
	}
	if !z.Trailing() {
		t.Error("Trailing() = false, want true")
	}
}

// TestHeaderFields decodes members with every optional header field, and
// refuses a wrong header checksum.
func TestHeaderFields(t *testing.T) {
	data := sample("text", 5000)
	var buf bytes.Buffer
	w := stdgzip.NewWriter(&buf)
	w.Name, w.Comment, w.Extra = "name.tar", "a comment", bytes.Repeat([]byte("x"), 300)
	w.Write(data)
	w.Close()
	comp := buf.Bytes()
	// Set FHCRC and insert the header CRC after the header.
	hlen := 10 + 2 + 300 + len("name.tar") + 1 + len("a comment") + 1
	hdr := bytes.Clone(comp[:hlen])
	hdr[3] |= 0x02
	crc := crc32.ChecksumIEEE(hdr)
	withCRC := append(append(hdr, byte(crc), byte(crc>>8)), comp[hlen:]...)
	if got := decodeAll(t, withCRC, Options{}); !bytes.Equal(got, data) {
		t.Fatal("member with FEXTRA, FNAME, FCOMMENT and FHCRC: content differs")
	}
	bad := bytes.Clone(withCRC)
	bad[hlen] ^= 1
	if _, err := io.ReadAll(NewReader(bytes.NewReader(bad), Options{})); !errors.Is(err, ErrCorrupt) {
		t.Errorf("wrong header CRC: got %v, want ErrCorrupt", err)
	}
}

func TestBadChecksum(t *testing.T) {
	data := sample("text", 10000)
	comp := stdLevel(6)(t, data)
	comp[len(comp)-8] ^= 1
	_, err := io.ReadAll(NewReader(bytes.NewReader(comp), Options{}))
	if !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
}

func TestDiscardAndLimit(t *testing.T) {
	data := sample("mixed", 2<<20)
	comp := stdLevel(6)(t, data)
	z := NewReader(bytes.NewReader(comp), Options{Limit: 1500000})
	n, err := z.Discard(1000000)
	if err != nil || n != 1000000 {
		t.Fatalf("Discard: %d, %v", n, err)
	}
	if z.Offset() != 1000000 {
		t.Fatalf("Offset() = %d, want 1000000", z.Offset())
	}
	rest, err := io.ReadAll(z)
	if err != nil || !bytes.Equal(rest, data[1000000:1500000]) {
		t.Fatalf("after discard: err %v, %d bytes", err, len(rest))
	}
}

// oneByteReader hands out input one byte at a time, to exercise every
// refill path.
type oneByteReader struct{ r io.Reader }

func (o oneByteReader) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	return o.r.Read(p[:1])
}

func TestSlowSource(t *testing.T) {
	data := sample("mixed", 1<<20)
	for _, c := range compressors[:9] {
		comp := c.fn(t, data)
		got, err := io.ReadAll(NewReader(oneByteReader{bytes.NewReader(comp)}, Options{}))
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("%s: err %v, equal %v", c.name, err, bytes.Equal(got, data))
		}
	}
}

func FuzzInflate(f *testing.F) {
	for _, c := range compressors[:9] {
		f.Add(c.fn(f, sample("mixed", 5000)))
	}
	f.Add(stdLevel(6)(f, sample("zeros", 100000)))
	f.Fuzz(func(t *testing.T, comp []byte) {
		want, wantErr := io.ReadAll(mustStd(comp))
		var cps []Checkpoint
		z := NewReader(bytes.NewReader(comp), Options{Span: 1000, OnCheckpoint: func(cp Checkpoint) { cps = appendCheckpoint(cps, cp) }})
		got, err := io.ReadAll(z)
		// RFC 1952 says a decoder must fail on reserved header flags, as
		// gzip does; the standard library ignores them.
		reserved := errors.Is(err, ErrCorrupt) && strings.Contains(err.Error(), "reserved header flags")
		if wantErr == nil && len(want) > 0 && !reserved {
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("stdlib decodes %d bytes; we got %d bytes, err %v", len(want), len(got), err)
			}
		}
		if err == nil && wantErr != nil && !z.Trailing() && len(comp) > 0 {
			t.Fatalf("stdlib fails (%v) but we decoded %d bytes", wantErr, len(got))
		}
		if err != nil {
			return
		}
		// The fast loop in Go decodes the same bytes as the one in
		// assembly (where there is one).
		useGoLoop = true
		again, err := io.ReadAll(NewReader(bytes.NewReader(comp), Options{}))
		useGoLoop = false
		if err != nil || !bytes.Equal(again, got) {
			t.Fatalf("with the Go loop: err %v, equal %v", err, bytes.Equal(again, got))
		}
		for _, cp := range cps {
			z, err := NewReaderAt(bytes.NewReader(comp[cp.In:]), cp, Options{})
			if err != nil {
				t.Fatal(err)
			}
			rest, err := io.ReadAll(z)
			if err != nil || !bytes.Equal(rest, got[cp.Out:]) {
				t.Fatalf("resume at %d: err %v", cp.Out, err)
			}
			if dst := decodeInto(t, comp[cp.In:], cp, int64(len(got))-cp.Out); !bytes.Equal(dst, got[cp.Out:]) {
				t.Fatalf("DecodeInto at %d differs at %d", cp.Out, firstDiff(dst, got[cp.Out:]))
			}
		}
	})
}

// decodeInto runs DecodeInto for n bytes into a buffer with the margin
// filled with a marker, and fails the test on an error.
func decodeInto(t testing.TB, comp []byte, cp Checkpoint, n int64) []byte {
	t.Helper()
	dst := bytes.Repeat([]byte{0xa5}, int(n)+Margin)[:n]
	if err := DecodeInto(dst, comp, cp); err != nil {
		t.Fatalf("DecodeInto at %d for %d bytes: %v", cp.Out, n, err)
	}
	return dst
}

// TestDecodeIntoErrors checks that DecodeInto fails, rather than return
// wrong bytes, when its input or its window cannot give the span.
func TestDecodeIntoErrors(t *testing.T) {
	data := sample("text", 2<<20) // every block refers back
	comp := stdLevel(6)(t, data)
	cps, _ := collect(t, comp, 256<<10)
	var cp Checkpoint
	for _, c := range cps {
		if c.Kind == KindBlock && len(c.Window) == WindowSize {
			cp = c
			break
		}
	}
	if cp.Kind != KindBlock {
		t.Fatal("no block checkpoint with a full window")
	}
	n := int64(len(data)) - cp.Out
	cases := []struct {
		name string
		dst  []byte
		comp []byte
		cp   Checkpoint
		want error
	}{
		{"no margin", make([]byte, n), comp[cp.In:], cp, nil},
		{"truncated input", make([]byte, n, n+Margin), comp[cp.In : cp.In+(int64(len(comp))-cp.In)/2], cp, ErrTruncated},
		{"past the end of the stream", make([]byte, n+1, n+1+Margin), comp[cp.In:], cp, ErrTruncated},
		{"empty input", make([]byte, n, n+Margin), nil, cp, ErrTruncated},
		{"window too short", make([]byte, n, n+Margin), comp[cp.In:], func() Checkpoint {
			c := cp
			c.Window = c.Window[WindowSize-16:]
			return c
		}(), ErrCorrupt},
		{"bit offset", make([]byte, n, n+Margin), comp[cp.In:], func() Checkpoint { c := cp; c.Bit = 9; return c }(), ErrCorrupt},
		{"member with window", make([]byte, n, n+Margin), comp, Checkpoint{Kind: KindMember, Window: []byte{1}}, ErrCorrupt},
		{"unknown kind", make([]byte, n, n+Margin), comp, Checkpoint{Kind: 9}, ErrCorrupt},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := DecodeInto(c.dst, c.comp, c.cp)
			if err == nil {
				t.Fatalf("got no error, want %v", c.want)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Fatalf("got %v, want %v", err, c.want)
			}
		})
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }

func mustStd(comp []byte) io.Reader {
	r, err := stdgzip.NewReader(bytes.NewReader(comp))
	if err != nil {
		return errReader{err}
	}
	return r
}

// appendCheckpoint applies the replacement rule of Options.OnCheckpoint.
func appendCheckpoint(cps []Checkpoint, cp Checkpoint) []Checkpoint {
	if n := len(cps); n > 0 && cps[n-1].Out == cp.Out {
		cps[n-1] = cp
		return cps
	}
	return append(cps, cp)
}

// TestOnData checks that OnData sees every byte in order, and all bytes
// before a checkpoint when the checkpoint is reported.
func TestOnData(t *testing.T) {
	data := sample("mixed", 3<<20)
	comp := multiMember(700<<10)(t, data)
	var seen []byte
	z := NewReader(bytes.NewReader(comp), Options{
		Span:   300 << 10,
		OnData: func(p []byte) { seen = append(seen, p...) },
		OnCheckpoint: func(cp Checkpoint) {
			if int64(len(seen)) != cp.Out {
				t.Errorf("checkpoint at %d reported after %d bytes of data", cp.Out, len(seen))
			}
		},
	})
	got, err := io.ReadAll(z)
	if err != nil || !bytes.Equal(got, data) || !bytes.Equal(seen, data) {
		t.Fatalf("err %v, read equal %v, seen equal %v", err, bytes.Equal(got, data), bytes.Equal(seen, data))
	}
}

// TestGoLoop runs the decoding tests again with fastLoopGo, which amd64
// builds otherwise leave to the assembly loop.
func TestGoLoop(t *testing.T) {
	useGoLoop = true
	t.Cleanup(func() { useGoLoop = false })
	for name, test := range map[string]func(*testing.T){
		"RoundTrip":        TestRoundTrip,
		"Resume":           TestResume,
		"Truncated":        TestTruncated,
		"Corrupt":          TestCorrupt,
		"DecodeIntoErrors": TestDecodeIntoErrors,
		"DiscardAndLimit":  TestDiscardAndLimit,
	} {
		t.Run(name, test)
	}
}

// TestSymbols checks that makeSymbols gives every symbolFunc's entries.
func TestSymbols(t *testing.T) {
	for name, c := range map[string]struct {
		f    symbolFunc
		syms *symbols
	}{"litlen": {litlenSymbol, litlenSymbols}, "dist": {distSymbol, distSymbols}, "plain": {plainSymbol, plainSymbols}} {
		for s := range maxSymbols {
			for clen := uint32(0); clen <= maxCodeBits; clen++ {
				if got, want := c.syms.base[s]+clen*c.syms.per[s], c.f(s, clen); got != want {
					t.Fatalf("%s: symbol %d, %d bits: got %#x, want %#x", name, s, clen, got, want)
				}
			}
		}
	}
}

// readAllInto decodes z with ReadInto, taking each call's buffer from
// bufs in turn (a buffer other than the Reader's is scribbled over before
// it is handed in, as a consumer done with it might leave it), and Read for every third call
// when mix is set. It returns the output and the error that ended it.
func readAllInto(z *Reader, bufs [][]byte, mix bool) ([]byte, error) {
	var got []byte
	var p [1000]byte
	cur := -1 // the buffer the Reader decodes in, which it still reads
	for i := 0; ; i++ {
		if mix && i%3 == 2 {
			n, err := z.Read(p[:])
			got = append(got, p[:n]...)
			if err != nil {
				return got, err
			}
			continue
		}
		buf := bufs[i%len(bufs)]
		if i%len(bufs) != cur {
			for j := range buf {
				buf[j] = 0xa5
			}
		}
		cur = i % len(bufs)
		start, end, err := z.ReadInto(buf)
		if err != nil {
			return got, err
		}
		if start >= end {
			return got, fmt.Errorf("ReadInto returned buf[%d:%d] without an error", start, end)
		}
		got = append(got, buf[start:end]...)
	}
}

// TestReadInto checks that decoding into buffers the caller hands in, the
// same one again or others, gives the bytes Read gives, and the same
// errors.
func TestReadInto(t *testing.T) {
	data := sample("mixed", scaled(3<<20))
	comp := multiMember(700<<10)(t, data)
	cps, _ := collect(t, comp, int64(scaled(256<<10)))
	for _, c := range []struct {
		name string
		bufs int
		mix  bool
	}{{"one buffer", 1, false}, {"two buffers", 2, false}, {"three buffers", 3, false}, {"with reads", 2, true}} {
		t.Run(c.name, func(t *testing.T) {
			bufs := make([][]byte, c.bufs)
			for i := range bufs {
				bufs[i] = make([]byte, BufSize+i)
			}
			got, err := readAllInto(NewReader(bytes.NewReader(comp), Options{}), bufs, c.mix)
			if err != io.EOF || !bytes.Equal(got, data) {
				t.Fatalf("got %d bytes (first difference at %d), err %v; want %d bytes, io.EOF", len(got), firstDiff(got, data), err, len(data))
			}
			cp := cps[len(cps)/2]
			z, err := NewReaderAt(bytes.NewReader(comp[cp.In:]), cp, Options{})
			if err != nil {
				t.Fatal(err)
			}
			got, err = readAllInto(z, bufs, c.mix)
			if err != io.EOF || !bytes.Equal(got, data[cp.Out:]) {
				t.Fatalf("from checkpoint at %d: got %d bytes, err %v; want %d bytes, io.EOF", cp.Out, len(got), err, len(data)-int(cp.Out))
			}
			cut := len(comp) * 2 / 3
			got, err = readAllInto(NewReader(bytes.NewReader(comp[:cut]), Options{}), bufs, c.mix)
			if !errors.Is(err, ErrTruncated) || !bytes.Equal(got, data[:len(got)]) {
				t.Fatalf("cut at %d: got err %v, bytes equal %v; want ErrTruncated and equal bytes", cut, err, bytes.Equal(got, data[:len(got)]))
			}
		})
	}
}
