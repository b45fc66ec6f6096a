package index

import (
	"archive/tar"
	"bytes"
	"testing"

	"github.com/tarmount/tarmount/index/inflate"
)

// tarHead returns the first bytes of a plain tar archive of one file.
func tarHead(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "a", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// magicHead returns magic followed by zeros, as long as sniffing looks.
func magicHead(magic ...byte) []byte { return append(magic, make([]byte, 1024)...) }

func TestRegistry(t *testing.T) {
	all := []inflate.Kind{inflate.KindMember, inflate.KindBlock, kindFrame, kindLZ4Block, kindLZ4Legacy, kindLocal, kindBzip2Block, kindXzBlock}
	bz2Block := []byte{'B', 'Z', 'h', '9', 0x31, 0x41, 0x59, 0x26, 0x53, 0x59}
	bz2Empty := []byte{'B', 'Z', 'h', '1', 0x17, 0x72, 0x45, 0x38, 0x50, 0x90}
	tests := []struct {
		codec Codec
		name  string
		heads [][]byte // stream starts that sniff as codec
		kinds []inflate.Kind
		// streamOnly: StreamOnlyReason says something of its own.
		streamOnly bool
	}{
		{CodecNone, "tar", [][]byte{tarHead(t), make([]byte, 1024)}, nil, false},
		{CodecGzip, "gzip", [][]byte{magicHead(magicGzip...)}, []inflate.Kind{inflate.KindMember, inflate.KindBlock}, false},
		{CodecZstd, "zstd", [][]byte{magicHead(magicZstd...)}, []inflate.Kind{kindFrame, kindLocal}, true},
		{CodecLZ4, "lz4", [][]byte{magicHead(magicLZ4...), magicHead(magicLZ4Legacy...)}, []inflate.Kind{kindFrame, kindLZ4Block, kindLZ4Legacy}, false},
		{CodecBzip2, "bzip2", [][]byte{magicHead(bz2Block...), magicHead(bz2Empty...)}, []inflate.Kind{kindBzip2Block, kindLocal}, false},
		{CodecXz, "xz", [][]byte{magicHead(magicXz...)}, []inflate.Kind{kindXzBlock, kindLocal}, true},
	}
	if got, want := len(tests), int(codecEnd-CodecNone); got != want {
		t.Fatalf("the test covers %d codecs, want %d", got, want)
	}
	names := map[string]Codec{}
	for _, c := range registry {
		if prev, ok := names[c.name]; ok {
			t.Errorf("name %q registered for %d and %d", c.name, prev, c.id)
		}
		names[c.name] = c.id
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := 0
			for _, c := range registry {
				if c.id == tt.codec {
					n++
				}
			}
			if n != 1 {
				t.Errorf("got %d registrations, want 1", n)
			}
			if got := tt.codec.String(); got != tt.name {
				t.Errorf("String: got %q, want %q", got, tt.name)
			}
			if !tt.codec.known() {
				t.Errorf("known: got false, want true")
			}
			if got, want := tt.codec.compressed(), tt.codec != CodecNone; got != want {
				t.Errorf("compressed: got %v, want %v", got, want)
			}
			if !tt.codec.compressed() {
				if _, _, err := newPass(bytes.NewReader(nil), tt.codec, newRecorder(&Index{}, DefaultSpan, nil)); err == nil {
					t.Errorf("newPass of a plain tar: got no error")
				}
				if _, err := tt.codec.def().decodeSpan(nil, Checkpoint{}, nil, -1, 0, nil); err == nil {
					t.Errorf("decodeSpan of a plain tar: got no error")
				}
			}
			for i, head := range tt.heads {
				if got := sniff(head); got != tt.codec {
					t.Errorf("sniff of head %d: got %v, want %v", i, got, tt.codec)
				}
				if got, _, err := sniffStream(&peekReader{r: bytes.NewReader(head)}); err != nil || got != tt.codec {
					t.Errorf("sniffStream of head %d: got %v, %v, want %v", i, got, err, tt.codec)
				}
			}
			for _, k := range all {
				want := false
				for _, w := range tt.kinds {
					want = want || w == k
				}
				if got := kindAllowed(tt.codec, k); got != want {
					t.Errorf("kindAllowed(%d): got %v, want %v", k, got, want)
				}
			}
			generic := tt.name + " streams are decoded from their start"
			if got := tt.codec.StreamOnlyReason(); (got != generic) != tt.streamOnly {
				t.Errorf("StreamOnlyReason: got %q, want it specific to the codec: %v", got, tt.streamOnly)
			}
		})
	}
}

func TestUnknownCodec(t *testing.T) {
	for _, c := range []Codec{0, codecEnd, 255} {
		if c.known() {
			t.Errorf("%d: known: got true, want false", c)
		}
		if got := c.String(); got != "unknown" {
			t.Errorf("%d: String: got %q, want %q", c, got, "unknown")
		}
		for _, k := range []inflate.Kind{inflate.KindMember, kindFrame, kindLocal} {
			if kindAllowed(c, k) {
				t.Errorf("%d: kindAllowed(%d): got true, want false", c, k)
			}
		}
		if _, _, err := newPass(bytes.NewReader(nil), c, newRecorder(&Index{}, DefaultSpan, nil)); err == nil {
			t.Errorf("%d: newPass: got no error", c)
		}
	}
	if got := sniff([]byte("PK\x03\x04")); got != 0 {
		t.Errorf("sniff of a zip: got %v, want 0", got)
	}
}
