package index

import "context"

// Spans for whole-archive readers (extraction): an archive with
// checkpoints splits at them into spans that decode independently, so that
// a reader of the whole tar stream can decode them in parallel. These
// helpers expose that split without going through a Reader's span cache,
// so that such a reader neither evicts the spans that random reads use nor
// waits behind them.

// HasSpans reports whether the archive splits into independently
// decodable spans: a compressed archive with checkpoints. A plain tar
// (CodecNone) has none; its bytes are read with ranged reads directly.
func (ix *Index) HasSpans() bool {
	return ix.Codec.compressed() && len(ix.Checkpoints) > 0 && len(ix.Digests) == len(ix.Checkpoints)
}

// HasSpans reports whether r can decode the archive in independent spans:
// the index has them, and r has the local decoded copy if the archive is
// stream-only (without it, only one pass over the archive reads it).
func (r *Reader) HasSpans() bool {
	return r.ix.HasSpans() && (r.local != nil || !r.ix.StreamOnly())
}

// NumSpans returns the number of spans r can decode (0 if none).
func (r *Reader) NumSpans() int {
	if !r.HasSpans() {
		return 0
	}
	return len(r.ix.Checkpoints)
}

// NumSpans returns the number of spans (0 without checkpoints).
func (ix *Index) NumSpans() int {
	if !ix.HasSpans() {
		return 0
	}
	return len(ix.Checkpoints)
}

// SpanBounds returns the decoded range [start, end) of span i.
func (ix *Index) SpanBounds(i int) (start, end UncompressedOffset) {
	return ix.Checkpoints[i].Out, UncompressedOffset(ix.spanEnd(i))
}

// SpanStoredBytes returns about how many bytes of the archive as stored
// span i decodes from (for progress reports).
func (ix *Index) SpanStoredBytes(i int) int64 {
	end := ix.Source.Size
	if i+1 < len(ix.Checkpoints) {
		end = int64(ix.Checkpoints[i+1].In)
	}
	return max(end-int64(ix.Checkpoints[i].In), 0)
}

// DecodeSpan fetches and decodes span i and checks it against its digest,
// as a read through r would, but without r's span cache and decode slots:
// the caller bounds how many spans are fetched at once, which may be
// more than the cores to hide the source's latency; at most GOMAXPROCS
// of them decode at once, the others wait with their fetched bytes. The
// returned slice is the caller's. It is safe for concurrent use.
func (r *Reader) DecodeSpan(ctx context.Context, i int) ([]byte, error) {
	return r.DecodeSpanInto(ctx, i, nil)
}

// DecodeSpanInto is DecodeSpan that may decode into buf, a slice the
// caller no longer uses (typically one a previous call returned), when it
// has room; otherwise it allocates. The returned slice may share buf's
// memory.
func (r *Reader) DecodeSpanInto(ctx context.Context, i int, buf []byte) ([]byte, error) {
	l := r.lend(i)
	data, err := r.decodeSpan(ctx, i, true, buf, nil)
	r.endLend(i, l, data, err)
	return data, err
}

// SpanBounds returns the decoded range of span i, as Index.SpanBounds.
func (r *Reader) SpanBounds(i int) (start, end UncompressedOffset) { return r.ix.SpanBounds(i) }

// SpanStoredBytes returns the compressed bytes of span i, as
// Index.SpanStoredBytes.
func (r *Reader) SpanStoredBytes(i int) int64 { return r.ix.SpanStoredBytes(i) }
