package fetch

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readAll reads the whole object through b.ReadAt, in pieces that do not
// line up with blocks.
func readAll(t testing.TB, b *Blocks) []byte {
	t.Helper()
	out := make([]byte, b.Size())
	for off := int64(0); off < b.Size(); off += 777 {
		p := out[off:min(off+777, b.Size())]
		n, err := b.ReadAt(context.Background(), p, off)
		if err == io.EOF && n == len(p) {
			err = nil
		}
		require.NoError(t, err)
		require.Equal(t, len(p), n)
	}
	return out
}

// TestBlocksDiskRemount reads an object through Blocks with a disk cache,
// then again through new Blocks and a new DiskCache on the same directory
// (a remount): ReadAt, Stream, ReadCached and RangeReader fetch nothing.
func TestBlocksDiskRemount(t *testing.T) {
	const bs = 1024
	data := randomBytes(10*bs+123, 1)
	dir := t.TempDir()

	src := newIDSource(data, `"v1"`)
	d := newTestDisk(t, dir, DiskCacheOptions{})
	b := NewBlocks(src, BlocksOptions{BlockSize: bs, Workers: 3, Disk: d})
	require.Equal(t, data, readAll(t, b))
	b.Close()
	d.Close()
	st := b.Stats()
	require.Equal(t, int64(11), st.DiskWrites)
	require.Zero(t, st.DiskHits)

	src2 := newIDSource(data, `"v1"`)
	d2 := newTestDisk(t, dir, DiskCacheOptions{})
	// A memory cache of Workers+2 blocks: most blocks come from disk again
	// and again.
	b2 := newTestBlocks(t, src2, BlocksOptions{BlockSize: bs, Workers: 1, CacheBytes: 1, Disk: d2})
	ctx := t.Context()
	checkRanges(t, func(p []byte, off int64) (int, error) { return b2.ReadAt(ctx, p, off) }, data, bs, 3)
	s := b2.Stream(ctx, 100)
	all, err := io.ReadAll(s)
	s.Close()
	require.NoError(t, err)
	require.Equal(t, data[100:], all)
	for _, r := range [][2]int64{{0, 10}, {1000, 3000}, {5000, 5000}, {int64(len(data)) - 7, 7}} {
		p := make([]byte, r[1])
		require.True(t, b2.ReadCached(p, r[0]), "ReadCached %v", r)
		require.Equal(t, data[r[0]:r[0]+r[1]], p)
		p = make([]byte, r[1])
		n, err := b2.Ranges().ReadAt(ctx, p, r[0])
		require.NoError(t, err)
		require.Equal(t, int(r[1]), n)
		require.Equal(t, data[r[0]:r[0]+r[1]], p)
	}
	require.Empty(t, src2.Offsets(), "fetched from the source after a remount")
	st = b2.Stats()
	require.Zero(t, st.BytesFetched)
	require.Positive(t, st.DiskHits)
	require.Zero(t, st.DiskWrites)
}

// TestBlocksDiskRanges checks that RangeReader fetches exactly the ranges
// asked for, stores them, and serves them from disk after a remount.
func TestBlocksDiskRanges(t *testing.T) {
	const bs = 1024
	data := randomBytes(20*bs, 2)
	dir := t.TempDir()
	ranges := [][2]int64{{100, 1500}, {3000, 700}, {5000, 4096}, {int64(len(data)) - 10, 10}}
	ctx := t.Context()
	read := func(b *Blocks) {
		t.Helper()
		for _, r := range ranges {
			p := make([]byte, r[1])
			n, err := b.Ranges().ReadAt(ctx, p, r[0])
			require.NoError(t, err)
			require.Equal(t, int(r[1]), n)
			require.Equal(t, data[r[0]:r[0]+r[1]], p)
		}
	}

	src := newIDSource(data, `"v1"`)
	d := newTestDisk(t, dir, DiskCacheOptions{})
	b := NewBlocks(src, BlocksOptions{BlockSize: bs, Disk: d})
	read(b)
	require.Equal(t, []int64{100, 3000, 5000, int64(len(data)) - 10}, src.Offsets(), "one request per range, exact offsets")
	st := b.Stats()
	require.Equal(t, int64(1500+700+4096+10), st.BytesFetched)
	b.Close()
	d.Close()
	require.Equal(t, int64(4), b.Stats().DiskWrites)

	src2 := newIDSource(data, `"v1"`)
	b2 := newTestBlocks(t, src2, BlocksOptions{BlockSize: bs, Disk: newTestDisk(t, dir, DiskCacheOptions{})})
	read(b2)
	require.Empty(t, src2.Offsets())
	require.Equal(t, int64(4), b2.Stats().DiskHits)

	// A range that was not stored is fetched.
	p := make([]byte, 10)
	_, err := b2.Ranges().ReadAt(ctx, p, 0)
	require.NoError(t, err)
	require.Equal(t, []int64{0}, src2.Offsets())
	// Past the end: io.EOF from the source, nothing stored.
	p = make([]byte, 20)
	n, err := b2.Ranges().ReadAt(ctx, p, int64(len(data))-10)
	require.ErrorIs(t, err, io.EOF)
	require.Equal(t, 10, n)
}

// TestBlocksDiskNewIdentity: a changed object (another ETag, same size) is
// never served the old object's blocks; a source without a usable
// identity is not cached on disk at all.
func TestBlocksDiskNewIdentity(t *testing.T) {
	const bs = 1024
	old, cur := randomBytes(8*bs, 1), randomBytes(8*bs, 2)
	dir := t.TempDir()
	d := newTestDisk(t, dir, DiskCacheOptions{})
	b := NewBlocks(newIDSource(old, `"v1"`), BlocksOptions{BlockSize: bs, Disk: d})
	require.Equal(t, old, readAll(t, b))
	b.Close()
	d.Close()

	d = newTestDisk(t, dir, DiskCacheOptions{})
	src := newIDSource(cur, `"v2"`)
	b = newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Disk: d})
	require.Equal(t, cur, readAll(t, b))
	p := make([]byte, 100)
	require.True(t, b.ReadCached(p, 0))
	require.Equal(t, cur[:100], p)
	require.Len(t, src.Offsets(), 8)
	require.Zero(t, b.Stats().DiskHits)

	for _, id := range []Identity{{Size: 8 * bs}, {Size: 8 * bs, ETag: `W/"v1"`}} {
		src := idSource{memSource: newMemSource(old), id: id}
		b := NewBlocks(src, BlocksOptions{BlockSize: bs, Disk: d})
		require.Equal(t, old, readAll(t, b))
		b.Close()
		require.Len(t, src.Offsets(), 8, "identity %v", id)
		require.Zero(t, b.Stats().DiskHits+b.Stats().DiskWrites, "identity %v", id)
		_, err := os.Stat(filepath.Join(dir, id.Key()))
		require.ErrorIs(t, err, fs.ErrNotExist)
	}
}

// TestBlocksDiskDamage damages entries on disk in every way a crash or a
// bad disk can (a flipped data byte, a flipped header byte, a short file,
// zeros under the final name, a stray temporary file): each damaged entry
// is refetched, never served, and replaced.
func TestBlocksDiskDamage(t *testing.T) {
	const bs = 1024
	data := randomBytes(9*bs, 3)
	dir := t.TempDir()
	src := newIDSource(data, `"v1"`)
	key := src.Identity().Key()
	d := newTestDisk(t, dir, DiskCacheOptions{})
	b := NewBlocks(src, BlocksOptions{BlockSize: bs, Disk: d})
	readAll(t, b)
	b.Close()
	d.Close()

	name := func(i int) string { return filepath.Join(dir, key, fmt.Sprintf("%d-%d", i*bs, bs)) }
	edit := func(i int, f func(b []byte) []byte) {
		raw, err := os.ReadFile(name(i))
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(name(i), f(raw), 0o600))
	}
	edit(0, func(b []byte) []byte { b[diskHeaderSize+500] ^= 1; return b })   // data bit
	edit(1, func(b []byte) []byte { b[45] ^= 0x80; return b })                // offset in header
	edit(2, func(b []byte) []byte { return b[:diskHeaderSize+bs/2] })         // partial write
	edit(3, func(b []byte) []byte { clear(b[diskHeaderSize:]); return b })    // data lost at power-off
	edit(4, func(b []byte) []byte { clear(b); return b })                     // whole file lost
	edit(5, func(b []byte) []byte { b[60] ^= 1; return b })                   // checksum bit
	edit(6, func(b []byte) []byte { return append(b[:diskHeaderSize], 'x') }) // header of a longer entry
	// A whole, valid entry under another entry's name (block 8 as block 7)
	// is caught by its header, not its checksum.
	raw, err := os.ReadFile(name(8))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(name(7), raw, 0o600))
	// A crashed writer's temporary file holding the right bytes is never
	// looked at; it goes at the next scan once stale.
	tmp := filepath.Join(dir, key, diskTempPrefix+"crash")
	require.NoError(t, os.WriteFile(tmp, []byte("partial"), 0o600))
	stale := time.Now().Add(-2 * diskStaleTemp)
	require.NoError(t, os.Chtimes(tmp, stale, stale))

	d = newTestDisk(t, dir, DiskCacheOptions{})
	src2 := newIDSource(data, `"v1"`)
	b = NewBlocks(src2, BlocksOptions{BlockSize: bs, Disk: d})
	require.Equal(t, data, readAll(t, b))
	b.Close()
	d.Close()
	require.Equal(t, []int64{0, bs, 2 * bs, 3 * bs, 4 * bs, 5 * bs, 6 * bs, 7 * bs}, src2.Offsets(), "damaged blocks refetched")
	require.Equal(t, int64(8), d.Stats().Corrupt)
	_, err = os.Stat(tmp)
	require.ErrorIs(t, err, fs.ErrNotExist, "stale temporary file removed")

	// Damaged entries were rewritten: a third open serves everything.
	d = newTestDisk(t, dir, DiskCacheOptions{})
	src3 := newIDSource(data, `"v1"`)
	b = newTestBlocks(t, src3, BlocksOptions{BlockSize: bs, Disk: d})
	require.Equal(t, data, readAll(t, b))
	require.Empty(t, src3.Offsets())
	require.Zero(t, d.Stats().Corrupt)
}

// TestBlocksDiskQueueFull: when the write queue is full writes are dropped
// at once (the reader does not wait), and a dropped block is written at a
// later hit.
func TestBlocksDiskQueueFull(t *testing.T) {
	const bs = 1024
	data := randomBytes(4*bs, 4)
	d := newTestDisk(t, t.TempDir(), DiskCacheOptions{QueueBytes: bs})
	// Hold the writers: fill the queue with a write whose done blocks.
	key := Identity{Size: 1, ETag: `"other"`}.Key()
	release := make(chan struct{})
	var releaseOnce sync.Once
	unblock := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before d.Close, which waits for the writers
	var hold sync.WaitGroup
	hold.Add(diskWriters)
	for i := range diskWriters {
		require.True(t, d.PutAsync(key, int64(i), []byte{1}, func(bool) { hold.Done(); <-release }))
	}
	hold.Wait()
	require.True(t, d.PutAsync(key, 99, make([]byte, bs), nil), "fills the queue")
	require.False(t, d.PutAsync(key, 100, []byte{1}, nil))

	b := newTestBlocks(t, newIDSource(data, `"v1"`), BlocksOptions{BlockSize: bs, Disk: d})
	readAll(t, b)
	st := b.Stats()
	require.Zero(t, st.DiskWrites)
	require.Positive(t, st.DiskDropped)
	unblock()
	// Hits queue the dropped blocks again, as the queue has room.
	for deadline := time.Now().Add(10 * time.Second); b.Stats().DiskWrites < 4; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "dropped blocks not written after hits: %+v", b.Stats())
		readAll(t, b)
	}
}

// TestBlocksDiskConcurrent has several Blocks over two objects share
// one small DiskCache (so that entries are evicted while read) and read
// them at random from many goroutines with every read method.
func TestBlocksDiskConcurrent(t *testing.T) {
	const bs = 1024
	objs := [][]byte{randomBytes(40*bs+17, 5), randomBytes(30*bs, 6)}
	d := newTestDisk(t, t.TempDir(), DiskCacheOptions{MaxBytes: 24 * (bs + diskHeaderSize), QueueBytes: 4 * bs})
	var blocks []*Blocks
	for i := range 4 {
		data := objs[i%2]
		src := newIDSource(data, fmt.Sprintf(`"obj%d"`, i%2))
		blocks = append(blocks, newTestBlocks(t, src, BlocksOptions{BlockSize: bs, Workers: 2, CacheBytes: 1, Disk: d}))
	}
	ctx := t.Context()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 7))
			b := blocks[g%len(blocks)]
			data := objs[g%2]
			for range 150 {
				off := r.Int64N(int64(len(data)))
				n := 1 + r.Int64N(min(int64(len(data))-off, 3*bs))
				p := make([]byte, n)
				var err error
				switch r.IntN(4) {
				case 0:
					_, err = b.ReadAt(ctx, p, off)
				case 1:
					if !b.ReadCached(p, off) {
						continue
					}
				case 2:
					_, err = b.Ranges().ReadAt(ctx, p, off)
				case 3:
					s := b.Stream(ctx, off)
					_, err = io.ReadFull(s, p)
					s.Close()
				}
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Equal(p, data[off:off+n]) {
					errs <- fmt.Errorf("goroutine %d: wrong bytes at %d+%d", g, off, n)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	var hits int64
	for _, b := range blocks {
		hits += b.Stats().DiskHits
	}
	require.Positive(t, hits)
	require.Zero(t, d.Stats().Corrupt)
}

// BenchmarkBlockMiss reads 4 MiB blocks that are not in memory: from the
// disk cache (the page cache, in practice, on a remount), and from a
// loopback HTTP server unshaped and shaped like object storage.
func BenchmarkBlockMiss(b *testing.B) {
	const bs, nblocks = 4 << 20, 8
	data := randomBytes(bs*nblocks, 1)
	dir := b.TempDir()
	o := &object{data: data, etag: `"e"`}
	srv := newTestServer(b, o)
	src, err := Open(context.Background(), srv.URL+"/a.tar", Options{})
	if err != nil {
		b.Fatal(err)
	}
	d := newTestDisk(b, dir, DiskCacheOptions{})
	warm := NewBlocks(src, BlocksOptions{BlockSize: bs, Disk: d})
	readAll(b, warm)
	warm.Close()
	d.Close()

	for _, tc := range []struct {
		name        string
		disk        bool
		delay       time.Duration
		bytesPerSec int64
	}{
		{"disk", true, 0, 0},
		{"http-unshaped", false, 0, 0},
		{"http-objstore", false, 20 * time.Millisecond, 80e6},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o.set(func(o *object) { o.delay, o.bytesPerSec = tc.delay, tc.bytesPerSec })
			opts := BlocksOptions{BlockSize: bs, Workers: 1, CacheBytes: 1}
			if tc.disk {
				opts.Disk = newTestDisk(b, dir, DiskCacheOptions{})
			}
			blocks := NewBlocks(src, opts)
			defer blocks.Close()
			p := make([]byte, bs)
			b.SetBytes(bs)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				// Workers+2 blocks fit in memory: cycling over 8 misses.
				if _, err := blocks.ReadAt(context.Background(), p, int64(i%nblocks)*bs); err != nil {
					b.Fatal(err)
				}
				i++
			}
			st := blocks.Stats()
			b.ReportMetric(float64(st.DiskHits)/float64(i), "diskhits/op")
			b.ReportMetric(float64(st.Requests)/float64(i), "requests/op")
		})
	}
}
