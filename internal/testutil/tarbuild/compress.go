package tarbuild

import (
	"bytes"
	"compress/gzip"

	seekablezstd "github.com/SaveTheRbtz/zstd-seekable-format-go/pkg"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// Gzip compresses b as one gzip member at the default level.
func Gzip(b []byte) []byte { return GzipLevel(b, gzip.DefaultCompression) }

// GzipLevel compresses b as one gzip member at level (as compress/gzip
// numbers them).
func GzipLevel(b []byte, level int) []byte {
	var out bytes.Buffer
	w, err := gzip.NewWriterLevel(&out, level)
	if err != nil {
		panic(err)
	}
	w.Write(b)
	w.Close()
	return out.Bytes()
}

// GzipMembers compresses b as concatenated gzip members of piece
// uncompressed bytes each (the last may be shorter) at level.
func GzipMembers(b []byte, piece, level int) []byte {
	var out bytes.Buffer
	zw, err := gzip.NewWriterLevel(&out, level)
	if err != nil {
		panic(err)
	}
	for i := 0; i < len(b); i += piece {
		zw.Reset(&out)
		zw.Write(b[i:min(i+piece, len(b))])
		zw.Close()
	}
	return out.Bytes()
}

// ZstdFrames compresses b as zstd frames of frame decoded bytes each, and
// returns where each frame starts.
func ZstdFrames(b []byte, frame int) ([]byte, []int) {
	enc := zstdEncoder()
	defer enc.Close()
	var out []byte
	var starts []int
	for i := 0; i < len(b); i += frame {
		starts = append(starts, len(out))
		out = enc.EncodeAll(b[i:min(i+frame, len(b))], out)
	}
	return out, starts
}

// ZstdStream compresses b as one zstd frame written as a stream, with no
// content size in its header: what zstd makes from a pipe.
func ZstdStream(b []byte) []byte {
	var out bytes.Buffer
	w, err := zstd.NewWriter(&out, zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic(err)
	}
	w.Write(b)
	w.Close()
	return out.Bytes()
}

// ZstdSeekable compresses b in the zstd seekable format: a frame per frame
// decoded bytes and a seek table in a trailing skippable frame.
func ZstdSeekable(b []byte, frame int) []byte {
	enc := zstdEncoder()
	defer enc.Close()
	var out bytes.Buffer
	sw, err := seekablezstd.NewWriter(&out, enc)
	if err != nil {
		panic(err)
	}
	for i := 0; i < len(b); i += frame {
		if _, err := sw.Write(b[i:min(i+frame, len(b))]); err != nil {
			panic(err)
		}
	}
	if err := sw.Close(); err != nil {
		panic(err)
	}
	return out.Bytes()
}

func zstdEncoder() *zstd.Encoder {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic(err)
	}
	return enc
}

// LZ4 compresses b as one lz4 frame of independent 64 KiB blocks with a
// content checksum (and block checksums when blockSums).
func LZ4(b []byte, blockSums bool) []byte {
	return LZ4Blocks(b, lz4.Block64Kb, blockSums)
}

// LZ4Blocks is LZ4 with blocks of the given size.
func LZ4Blocks(b []byte, block lz4.BlockSize, blockSums bool) []byte {
	var out bytes.Buffer
	w := lz4.NewWriter(&out)
	if err := w.Apply(lz4.BlockSizeOption(block), lz4.BlockChecksumOption(blockSums), lz4.ChecksumOption(true)); err != nil {
		panic(err)
	}
	w.Write(b)
	w.Close()
	return out.Bytes()
}
