package index

import (
	"bytes"
	"context"
	"errors"
	"sync"
	"testing"
)

// TestLocalDamaged reads a stream-only archive through a damaged or short
// local copy: the spans that are intact read as usual; a damaged one fails
// with ErrCorrupt and is reported to ReaderOptions.LocalDamaged.
func TestLocalDamaged(t *testing.T) {
	data := randomData(7, 256<<10)
	ix, local := buildLocal(t, zstdStream(t, tarBytes(t, []member{{name: "f", data: data}})), 4096)
	if !ix.StreamOnly() {
		t.Fatalf("got %d checkpoints, want a stream-only index", len(ix.Checkpoints))
	}
	id, _ := ix.LookupPath("f")
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
