package materialize

import (
	"context"
	"fmt"
	"io"

	"github.com/tarmount/tarmount/index"
)

// IndexSpans returns the spans of an archive read through r: its
// checkpoint spans, each decoded and verified on its own (without r's
// cache), when the index has them; for a plain tar, pieces of rawSpanBytes
// read from src with one ranged read each. It returns nil for a compressed
// archive without checkpoints, which only a one-pass extraction (Stage)
// can read. What the mount that serves the archive meanwhile has fetched
// and decoded is taken from it (Peers) rather than fetched again.
func IndexSpans(r *index.Reader, src index.Source, peers Peers) Spans {
	switch {
	case r.HasSpans():
		return indexSpans{r, peers.Spans}
	case !r.Codec.Compressed():
		read := peers.ReadAt
		if read == nil {
			read = src.ReadAt
		}
		return rawSpans{read: read, size: r.TarSize}
	}
	return nil
}

// Peers are the caches of a mount that serves the archive while it is
// materialized (files read at boot, their readahead): a span or piece
// that both need is fetched and decoded once. The zero value has none.
type Peers struct {
	// Spans is the mount's reader: a span in its cache, or being
	// decoded for a read, is copied from there
	// (index.Reader.DecodeSpanBeside).
	Spans *index.Reader
	// ReadAt reads the bytes of a plain tar through the mount's block
	// cache: from it when they are there, else joining the mount's
	// fetch of them, else fetching them in the calling goroutine so that
	// a read through the mount joins that fetch (fetch.Blocks.ReadBeside).
	ReadAt func(ctx context.Context, p []byte, off int64) (int, error)
}

type indexSpans struct {
	r    *index.Reader
	peer *index.Reader // nil: none
}

func (s indexSpans) Len() int { return s.r.NumSpans() }

func (s indexSpans) Bounds(i int) (int64, int64) {
	a, b := s.r.SpanBounds(i)
	return int64(a), int64(b)
}

func (s indexSpans) Stored(i int) int64 { return s.r.SpanStoredBytes(i) }

func (s indexSpans) Read(ctx context.Context, i int, from, to int64, buf []byte) ([]byte, []byte, error) {
	data, err := s.r.DecodeSpanBeside(ctx, i, buf, s.peer)
	if err != nil {
		return nil, nil, err
	}
	start, _ := s.r.SpanBounds(i)
	return data[from-int64(start) : to-int64(start)], data, nil
}

// rawSpanBytes is the size of the pieces of a plain tar read at once.
const rawSpanBytes = 4 << 20

type rawSpans struct {
	read func(ctx context.Context, p []byte, off int64) (int, error) // the archive
	size int64
}

func (s rawSpans) Len() int { return int((s.size + rawSpanBytes - 1) / rawSpanBytes) }

func (s rawSpans) Bounds(i int) (int64, int64) {
	return int64(i) * rawSpanBytes, min(int64(i+1)*rawSpanBytes, s.size)
}

func (s rawSpans) Stored(i int) int64 {
	a, b := s.Bounds(i)
	return b - a
}

func (s rawSpans) Read(ctx context.Context, i int, from, to int64, buf []byte) ([]byte, []byte, error) {
	p := buf
	if int64(cap(p)) < to-from {
		p = make([]byte, to-from)
	}
	p = p[:to-from]
	n, err := s.read(ctx, p, from)
	if err == io.EOF && n == len(p) {
		err = nil
	}
	if err == nil && n < len(p) {
		err = io.ErrUnexpectedEOF
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read archive at %d: %w", from, err)
	}
	return p, p, nil
}
