package index

import (
	"bytes"
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestReadTraceFetchWait: a read whose span is still being fetched calls
// its trace's FetchWait, and the function it returned once the bytes are
// in, before the read returns; a read of a cached span calls neither.
func TestReadTraceFetchWait(t *testing.T) {
	data, obj, ix, id, base := readaheadArchive(t, 4)
	const span = 2
	spanIn := int64(ix.Checkpoints[span].In)
	src := &gatedSource{data: obj, open: make(chan struct{}), allow: func(off int64) bool { return off != spanIn }}
	r := NewReader(ix, src, ReaderOptions{Readahead: -1})
	defer r.Close()

	var waits, resumes atomic.Int32
	trace := &ReadTrace{FetchWait: func() func() {
		waits.Add(1)
		return func() { resumes.Add(1) }
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = WithReadTrace(ctx, trace)
	off := int64(ix.Checkpoints[span].Out) - base + 10
	p := make([]byte, 1000)
	done := make(chan error, 1)
	go func() {
		_, err := r.ReadAt(ctx, id, p, off)
		done <- err
	}()
	for waits.Load() == 0 {
		select {
		case err := <-done:
			t.Fatalf("the read returned (%v) while its span's fetch was held", err)
		case <-time.After(time.Millisecond):
		}
	}
	if n := resumes.Load(); n != 0 {
		t.Fatalf("resumed %d times while the fetch is held, want 0", n)
	}
	close(src.open)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p, data[off:off+int64(len(p))]) {
		t.Fatal("the read got other bytes than the archive's")
	}
	if w, r := waits.Load(), resumes.Load(); w != 1 || r != 1 {
		t.Fatalf("got %d fetch waits and %d resumes, want 1 and 1", w, r)
	}
	// The span is cached now: no wait.
	if _, err := r.ReadAt(ctx, id, p, off); err != nil {
		t.Fatal(err)
	}
	if w := waits.Load(); w != 1 {
		t.Fatalf("got %d fetch waits after a read of a cached span, want still 1", w)
	}
}

// TestAdmitAfterFetch: DecodeSpanInto asks ReaderOptions.Admit only once
// its span's bytes are in, decodes only once admitted, and releases the
// admission when the decode ends.
func TestAdmitAfterFetch(t *testing.T) {
	data, obj, ix, _, base := readaheadArchive(t, 4)
	const span = 2
	spanIn := int64(ix.Checkpoints[span].In)
	src := &gatedSource{data: obj, open: make(chan struct{}), allow: func(off int64) bool { return off != spanIn }}
	asked, admit, released := make(chan struct{}, 1), make(chan struct{}), make(chan struct{}, 1)
	r := NewReader(ix, src, ReaderOptions{Readahead: -1, Admit: func(ctx context.Context) (func(), error) {
		asked <- struct{}{}
		select {
		case <-admit:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return func() { released <- struct{}{} }, nil
	}})
	defer r.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type decoded struct {
		data []byte
		err  error
	}
	done := make(chan decoded, 1)
	go func() {
		d, err := r.DecodeSpanInto(ctx, span, nil)
		done <- decoded{d, err}
	}()
	select {
	case <-asked:
		t.Fatal("admission asked for before the span's bytes were fetched")
	case <-time.After(50 * time.Millisecond):
	}
	close(src.open)
	select {
	case <-asked:
	case <-ctx.Done():
		t.Fatal("admission never asked for after the fetch")
	}
	select {
	case d := <-done:
		t.Fatalf("the decode ended (%v) before it was admitted", d.err)
	case <-released:
		t.Fatal("released before admitted")
	case <-time.After(50 * time.Millisecond):
	}
	close(admit)
	d := <-done
	if d.err != nil {
		t.Fatal(d.err)
	}
	// The span lies within the file's data, which starts at base.
	start, end := ix.SpanBounds(span)
	from, to := int64(start)-base, int64(end)-base
	if from < 0 || to > int64(len(data)) || !bytes.Equal(d.data, data[from:to]) {
		t.Fatalf("the decode of [%d, %d) got other bytes than the archive's", start, end)
	}
	select {
	case <-released:
	default:
		t.Fatal("the admission was not released when the decode ended")
	}
}
