package index

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

// streamOnlyFile indexes a single-frame zstd archive of one file "f" of
// random data (from seed), with small spans, and returns the data, the
// stream-only index, its local copy and the file's id.
func streamOnlyFile(t *testing.T, seed uint64) ([]byte, *Index, *memFile, EntryID) {
	t.Helper()
	data := randomData(seed, 256<<10)
	ix, local := buildLocal(t, zstdStream(t, tarBytes(t, []member{{name: "f", data: data}})), 4096)
	if !ix.StreamOnly() {
		t.Fatalf("got %d checkpoints, want a stream-only index", len(ix.Checkpoints))
	}
	id, _ := ix.LookupPath("f")
	return data, ix, local, id
}

// TestLocalDamaged reads a stream-only archive through a damaged or short
// local copy: the spans that are intact read as usual; a damaged one fails
// with ErrCorrupt and is reported to ReaderOptions.LocalDamaged.
func TestLocalDamaged(t *testing.T) {
	data, ix, local, id := streamOnlyFile(t, 7)
	at := int64(ix.Entry(id).DataOffset) + 200<<10
	for _, tc := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"flipped byte", func(b []byte) []byte { b[at] ^= 1; return b }},
		{"short", func(b []byte) []byte { return b[:at] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var mu sync.Mutex
			var damaged []int
			r := NewReader(ix, newMemSource(nil), ReaderOptions{
				Local:     &memFile{data: tc.damage(bytes.Clone(local.data))},
				Readahead: -1,
				LocalDamaged: func(i int) {
					mu.Lock()
					defer mu.Unlock()
					damaged = append(damaged, i)
				},
			})
			defer r.Close()
			buf := make([]byte, 4096)
			if n, err := r.ReadAt(context.Background(), id, buf, 0); err != nil || !bytes.Equal(buf[:n], data[:4096]) {
				t.Errorf("read of an intact span: got %d bytes, %v; want the data", n, err)
			}
			if _, err := r.ReadAt(context.Background(), id, make([]byte, len(data)), 0); !errors.Is(err, ErrCorrupt) {
				t.Errorf("read across the damage: got %v, want ErrCorrupt", err)
			}
			mu.Lock()
			defer mu.Unlock()
			if len(damaged) == 0 {
				t.Error("LocalDamaged was not called")
			}
		})
	}
}

// waitingFile is a local copy that holds its bytes up to have only:
// WaitLocal waits for more until ctx ends, then fails with failErr when
// it is set.
type waitingFile struct {
	*memFile
	have    int64
	failErr error
}

func (w *waitingFile) WaitLocal(ctx context.Context, end int64) error {
	if end <= w.have {
		return nil
	}
	if w.failErr != nil {
		return w.failErr
	}
	<-ctx.Done()
	return ctx.Err()
}

// TestLocalWaiter reads a stream-only archive through a local copy that
// is still being written (LocalWaiter): a span the copy holds reads at
// once; one past it waits until the read's ctx ends, or fails with the
// copy's own error (not ErrCorrupt, and the copy is not reported damaged).
func TestLocalWaiter(t *testing.T) {
	data, ix, local, id := streamOnlyFile(t, 8)
	start := int64(ix.Entry(id).DataOffset)
	failed := errors.New("decode pass failed")
	for _, tc := range []struct {
		name    string
		failErr error
		want    error
	}{
		{"ctx ends", nil, context.DeadlineExceeded},
		{"copy fails", failed, failed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			damaged := false
			r := NewReader(ix, newMemSource(nil), ReaderOptions{
				Local:        &waitingFile{memFile: local, have: start + 64<<10, failErr: tc.failErr},
				Readahead:    -1,
				LocalDamaged: func(int) { damaged = true },
			})
			defer r.Close()
			buf := make([]byte, 4096)
			if n, err := r.ReadAt(context.Background(), id, buf, 0); err != nil || !bytes.Equal(buf[:n], data[:4096]) {
				t.Errorf("read of a span the copy holds: got %d bytes, %v; want the data", n, err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			_, err := r.ReadAt(ctx, id, buf, 200<<10)
			if !errors.Is(err, tc.want) || errors.Is(err, ErrCorrupt) {
				t.Errorf("read past the copy: got %v, want %v", err, tc.want)
			}
			if damaged {
				t.Error("LocalDamaged was called for a copy still being written")
			}
		})
	}
}
