package index

import (
	"bytes"
	"context"
	"fmt"
	"sync"
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

// TestBesideFetchesEachSpanOnce: a mount's Reader and a whole-archive
// reader beside it (DecodeSpanBeside) that ask for the same spans at the
// same moment fetch and decode each span once between them, whichever asks
// first, and both get the archive's bytes.
func TestBesideFetchesEachSpanOnce(t *testing.T) {
	data, obj, ix, id, base := readaheadArchive(t, 12)
	n := len(ix.Checkpoints)
	for round := range 20 {
		mountSrc, wholeSrc := newMemSource(obj), newMemSource(obj)
		// Every fetch is held until both readers have asked for every
		// span: a claim made first is still in flight when the other
		// reader asks.
		mountSrc.Gate, wholeSrc.Gate = make(chan struct{}), make(chan struct{})
		mount := NewReader(ix, mountSrc, ReaderOptions{Readahead: -1})
		whole := NewReader(ix, wholeSrc, ReaderOptions{Readahead: -1})
		mount.Borrow(whole)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var wg sync.WaitGroup
		errs := make(chan error, 2*n)
		asked := make(chan struct{}, 2*n)
		for i := range n {
			wg.Go(func() {
				asked <- struct{}{}
				d, err := whole.DecodeSpanBeside(ctx, i, nil, mount)
				start, end := ix.SpanBounds(i)
				if err == nil && len(d) != int(end-start) {
					err = fmt.Errorf("span %d: got %d bytes, want %d", i, len(d), end-start)
				}
				errs <- err
			})
			wg.Go(func() {
				asked <- struct{}{}
				start, end := ix.SpanBounds(i)
				from, to := max(int64(start)-base, 0), min(int64(end)-base, int64(len(data)))
				if from >= to {
					errs <- nil
					return
				}
				p := make([]byte, to-from)
				_, err := mount.ReadAt(ctx, id, p, from)
				if err == nil && !bytes.Equal(p, data[from:to]) {
					err = fmt.Errorf("span %d: the mount read other bytes than the archive's", i)
				}
				errs <- err
			})
		}
		// Let every claim be made (the asks, then a moment for the
		// claims after them), then every fetch go.
		for range 2 * n {
			<-asked
		}
		time.Sleep(20 * time.Millisecond)
		close(mountSrc.Gate)
		close(wholeSrc.Gate)
		wg.Wait()
		cancel()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		fetched := map[int64]int{}
		for _, r := range append(mountSrc.TakeRanges(), wholeSrc.TakeRanges()...) {
			fetched[r[0]]++
		}
		for i := range n {
			if k := fetched[int64(ix.Checkpoints[i].In)]; k > 1 {
				t.Errorf("round %d: span %d fetched %d times, want once", round, i, k)
			}
		}
		mount.Close()
		whole.Close()
	}
}

// TestReadaheadSkipsWholeDecoded: a mount's Reader reads ahead no span
// that the whole-archive reader it borrows from has already decoded (the
// materialization has its files on their way to disk), and still reads
// ahead the others.
func TestReadaheadSkipsWholeDecoded(t *testing.T) {
	_, obj, ix, id, _ := readaheadArchive(t, 8)
	const done = 2 // decoded by the whole-archive reader before the read
	whole := NewReader(ix, newMemSource(obj), ReaderOptions{Readahead: -1})
	defer whole.Close()
	ctx := context.Background()
	if _, err := whole.DecodeSpanInto(ctx, done, nil); err != nil {
		t.Fatal(err)
	}
	src := newMemSource(obj)
	mount := NewReader(ix, src, ReaderOptions{Readahead: 4})
	mount.slots = make(chan struct{}, 32)
	defer mount.Close()
	mount.Borrow(whole)
	// A read of the file from its start reads ahead over spans 1-4.
	if _, err := mount.ReadAt(ctx, id, make([]byte, 100), 0); err != nil {
		t.Fatal(err)
	}
	mount.mu.Lock()
	var calls []*spanCall
	for _, c := range mount.spans {
		calls = append(calls, c)
	}
	mount.mu.Unlock()
	for _, c := range calls {
		<-c.done
	}
	fetched := map[int64]bool{}
	for _, r := range src.TakeRanges() {
		fetched[r[0]] = true
	}
	if fetched[int64(ix.Checkpoints[done].In)] {
		t.Errorf("span %d, decoded by the whole-archive reader, was fetched again by readahead", done)
	}
	if !fetched[int64(ix.Checkpoints[done+1].In)] {
		t.Errorf("span %d was not read ahead, want it read ahead past span %d", done+1, done)
	}
}
