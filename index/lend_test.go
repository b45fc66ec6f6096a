package index

import (
	"bytes"
	"context"
	"testing"
	"time"
)

// TestBorrowJoinsDecode: a read through a Reader that borrows from a
// whole-archive reader waits for the span that reader is decoding into
// its caller's buffer, instead of fetching and decoding it again, and the
// decode hands its buffer back only after the copy.
func TestBorrowJoinsDecode(t *testing.T) {
	data, obj, ix, id, base := readaheadArchive(t, 6)
	const span = 4
	spanIn := int64(ix.Checkpoints[span].In)
	// The whole-archive reader's fetch of the span stalls until the read
	// through the mount has joined it.
	gated := &gatedSource{data: obj, open: make(chan struct{}), allow: func(off int64) bool { return off != spanIn }}
	whole := NewReader(ix, gated, ReaderOptions{Readahead: -1})
	defer whole.Close()
	mountSrc := newMemSource(obj)
	mount := NewReader(ix, mountSrc, ReaderOptions{Readahead: -1})
	defer mount.Close()
	mount.Borrow(whole)

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type decoded struct {
		data []byte
		err  error
	}
	wholeDone := make(chan decoded, 1)
	go func() {
		d, err := whole.DecodeSpanInto(ctx, span, nil)
		// The caller owns the buffer now: scribbling on it must not
		// reach the mount's copy.
		want := append([]byte(nil), d...)
		for i := range d {
			d[i] = 0xAA
		}
		wholeDone <- decoded{want, err}
	}()
	holds := func(r *Reader, m func(*Reader) bool) {
		for {
			r.mu.Lock()
			ok := m(r)
			r.mu.Unlock()
			if ok {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	holds(whole, func(r *Reader) bool { _, ok := r.lent[span]; return ok })
	off := int64(ix.Checkpoints[span].Out) - base + 100
	readDone := make(chan decoded, 1)
	go func() {
		p := make([]byte, 4096)
		n, err := mount.ReadAt(ctx, id, p, off)
		readDone <- decoded{p[:n], err}
	}()
	holds(whole, func(r *Reader) bool { return r.lent[span].joined > 0 })
	close(gated.open)
	w, r := <-wholeDone, <-readDone
	if w.err != nil || r.err != nil {
		t.Fatalf("whole-archive decode: %v; read through the mount: %v", w.err, r.err)
	}
	if !bytes.Equal(r.data, data[off:off+4096]) {
		t.Fatalf("the read through the mount got other bytes than the archive's")
	}
	if n := mountSrc.Requests(); n != 0 {
		t.Errorf("the mount's reader fetched %d times (%v), want nothing: the span was being decoded", n, mountSrc.TakeRanges())
	}
	if st := mount.Stats(); st.SpanBorrows != 1 || st.SpanDecodes != 0 {
		t.Errorf("got %d spans borrowed and %d decoded by the mount's reader, want 1 and 0", st.SpanBorrows, st.SpanDecodes)
	}
	whole.mu.Lock()
	left := len(whole.lent)
	whole.mu.Unlock()
	if left != 0 {
		t.Errorf("%d spans still lent after their decodes ended, want 0", left)
	}

	// Once the decode has ended, the span is gone from the whole-archive
	// reader: the mount decodes the next span itself.
	mount.Borrow(whole)
	p := make([]byte, 100)
	next := int64(ix.Checkpoints[span+1].Out) - base + 10
	if _, err := mount.ReadAt(ctx, id, p, next); err != nil || !bytes.Equal(p, data[next:next+100]) {
		t.Fatalf("read of span %d: %v, or other bytes", span+1, err)
	}
	if st := mount.Stats(); st.SpanDecodes != 1 {
		t.Errorf("got %d spans decoded by the mount's reader, want 1", st.SpanDecodes)
	}
}
