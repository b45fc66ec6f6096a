package index

import (
	"bytes"
	"context"
	"errors"
	"io"
	"testing"

	seekable "github.com/SaveTheRbtz/zstd-seekable-format-go/pkg"
	"github.com/klauspost/compress/zstd"

	"github.com/tarmount/tarmount/fetch"
)

// TestPack packs a tar stream and checks that the result needs no index
// pass (the embedded index is read with at most two requests), reads
// back every member, decodes with a plain zstd decoder and with a
// seekable zstd reader to the same tar stream, and that a packed archive
// of a compressed tar is the same.
func TestPack(t *testing.T) {
	members := sampleMembers()
	raw := tarBytes(t, members)
	var packed bytes.Buffer
	if _, err := Pack(context.Background(), &packed, bytes.NewReader(raw), PackOptions{Span: 512 << 10}); err != nil {
		t.Fatal(err)
	}
	obj := packed.Bytes()
	src := newMemSource(obj)
	id := fetch.Identity{Size: int64(len(obj)), ETag: `"p"`}
	ix, err := LoadEmbedded(context.Background(), src, id)
	if err != nil {
		t.Fatal(err)
	}
	if n := src.Requests(); n > 2 {
		t.Errorf("reading the embedded index took %d requests, want at most 2", n)
	}
	if ix.Source != id || ix.Codec != CodecZstd || ix.TarSize != int64(len(raw)) {
		t.Errorf("got source %v, codec %v, tar size %d", ix.Source, ix.Codec, ix.TarSize)
	}
	r := NewReader(ix, src, ReaderOptions{})
	defer r.Close()
	for _, m := range members {
		id, ok := ix.LookupPath(m.name)
		if !ok || m.typ != 0 || m.name == "dup" {
			continue
		}
		if got := readAll(t, r, id); !bytes.Equal(got, m.data) {
			t.Errorf("%s: content differs", m.name)
		}
	}
	big := members[2]
	checkRandomReads(t, r, ix, big.name, big.data)

	dec, _ := zstd.NewReader(nil)
	defer dec.Close()
	if got, err := dec.DecodeAll(obj, nil); err != nil || !bytes.Equal(got, raw) {
		t.Errorf("zstd decode: %v, equal %v", err, bytes.Equal(got, raw))
	}
	sr, err := seekable.NewReader(bytes.NewReader(obj), dec)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := io.ReadAll(sr); err != nil || !bytes.Equal(got, raw) {
		t.Errorf("seekable reader: %v, equal %v", err, bytes.Equal(got, raw))
	}
	// An index pass over the packed archive finds the same checkpoints.
	built := build(t, obj, 512<<10)
	if len(built.Checkpoints) != len(ix.Checkpoints) || built.StreamOnly() {
		t.Errorf("index pass: %d checkpoints, want %d", len(built.Checkpoints), len(ix.Checkpoints))
	}

	// From a compressed tar, through NewDecoder.
	for _, tc := range codecCases() {
		if tc.codec != CodecLZ4 && tc.codec != CodecGzip {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			d, codec, err := NewDecoder(bytes.NewReader(tc.make(t, raw)))
			if err != nil || codec != tc.codec {
				t.Fatalf("NewDecoder: %v, %v", codec, err)
			}
			defer d.Close()
			var again bytes.Buffer
			if _, err := Pack(context.Background(), &again, d, PackOptions{Span: 512 << 10}); err != nil {
				t.Fatal(err)
			}
			if got, err := dec.DecodeAll(again.Bytes(), nil); err != nil || !bytes.Equal(got, raw) {
				t.Errorf("zstd decode: %v, equal %v", err, bytes.Equal(got, raw))
			}
		})
	}
}

func TestLoadEmbeddedOthers(t *testing.T) {
	raw := tarBytes(t, sampleMembers())
	for _, tc := range codecCases() {
		if tc.codec != CodecZstd || tc.name == "zstd-cli" || tc.name == "pzstd-cli" || tc.name == "zstd-cli-concat" {
			continue
		}
		obj := tc.make(t, raw)
		_, err := LoadEmbedded(context.Background(), newMemSource(obj), fetch.Identity{Size: int64(len(obj))})
		if !errors.Is(err, ErrNoEmbeddedIndex) {
			t.Errorf("%s: got %v, want ErrNoEmbeddedIndex", tc.name, err)
		}
	}
}
