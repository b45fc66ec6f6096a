package fetch

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// idSource is a memSource with an identity that a disk cache accepts.
type idSource struct {
	*memSource
	id Identity
}

func newIDSource(data []byte, etag string) idSource {
	return idSource{memSource: newMemSource(data), id: Identity{Size: int64(len(data)), ETag: etag}}
}

func (s idSource) Identity() Identity { return s.id }

func newTestDisk(t testing.TB, dir string, opts DiskCacheOptions) *DiskCache {
	t.Helper()
	d, err := OpenDiskCache(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	return d
}

// entryBytes is what the files below dir take, temporary ones included.
func entryBytes(t testing.TB, dir string) (total int64, files int) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.Type().IsRegular() {
			fi, err := e.Info()
			if err != nil {
				return err
			}
			total += fi.Size()
			files++
		}
		return nil
	})
	require.NoError(t, err)
	return total, files
}

// entryFiles returns the entry files of key, by name.
func entryFiles(t testing.TB, d *DiskCache, key string) map[string]string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(d.Dir(), key))
	require.NoError(t, err)
	m := map[string]string{}
	for _, e := range ents {
		m[e.Name()] = filepath.Join(d.Dir(), key, e.Name())
	}
	return m
}

func TestDiskCachePutGet(t *testing.T) {
	d := newTestDisk(t, t.TempDir(), DiskCacheOptions{})
	key := Identity{Size: 1, ETag: `"x"`}.Key()
	data := randomBytes(5000, 1)
	require.NoError(t, d.Put(key, 4096, data))
	require.NoError(t, d.Put(key, 4096, data), "a second put of the same entry")

	got := make([]byte, len(data))
	require.True(t, d.Get(key, 4096, got))
	require.Equal(t, data, got)

	other := Identity{Size: 1, ETag: `"y"`}.Key()
	for _, tc := range []struct {
		name string
		key  string
		off  int64
		n    int
	}{
		{"other key", other, 4096, 5000},
		{"other offset", key, 4097, 5000},
		{"shorter", key, 4096, 4999},
		{"longer", key, 4096, 5001},
		{"bad key", "../../etc", 4096, 5000},
		{"upper-case key", strings.ToUpper(key), 4096, 5000},
		{"negative offset", key, -1, 5000},
		{"empty", key, 4096, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.False(t, d.Get(tc.key, tc.off, make([]byte, tc.n)))
		})
	}
	require.Error(t, d.Put("../x", 0, data))
	require.Error(t, d.Put(key, 0, nil))

	files := entryFiles(t, d, key)
	require.Len(t, files, 1)
	fi, err := os.Stat(files["4096-5000"])
	require.NoError(t, err)
	require.Equal(t, int64(diskHeaderSize+5000), fi.Size())
	st := d.Stats()
	require.Equal(t, int64(1), st.Hits)
	require.Equal(t, int64(2), st.Writes)
	require.Equal(t, int64(diskHeaderSize+5000), st.UsedBytes)
}

func TestDiskCacheable(t *testing.T) {
	for _, tc := range []struct {
		id   Identity
		want bool
	}{
		{Identity{Size: 10}, false},
		{Identity{Size: 10, ETag: `W/"weak"`}, false},
		{Identity{Size: 10, ETag: `"strong"`}, true},
		{Identity{Size: 10, LastModified: time.Unix(1, 0)}, true},
		{Identity{Size: 10, VersionID: "v1"}, true},
	} {
		require.Equal(t, tc.want, DiskCacheable(tc.id), "%v", tc.id)
	}
}

// TestDiskCacheBound writes far more than the bound: after every write the
// directory holds at most MaxBytes, and the least recently used entries
// go first.
func TestDiskCacheBound(t *testing.T) {
	const n, entry = 1000, diskHeaderSize + 1000
	dir := t.TempDir()
	d := newTestDisk(t, dir, DiskCacheOptions{MaxBytes: 10 * entry})
	d.touchAfter = 0
	key := Identity{Size: 1 << 30, ETag: `"a"`}.Key()
	put := func(i int) {
		t.Helper()
		require.NoError(t, d.Put(key, int64(i)*n, randomBytes(n, uint64(i))))
		total, _ := entryBytes(t, dir)
		require.LessOrEqual(t, total, int64(10*entry), "after writing entry %d", i)
	}
	for i := range 60 {
		put(i)
	}
	require.Positive(t, d.Stats().Evictions)

	// LRU: entries 100..107 get increasing ages, 100 (the oldest) is then
	// read, and three more entries push out the three least recently used.
	require.NoError(t, os.RemoveAll(filepath.Join(dir, key)))
	d.scanMu.Lock()
	d.scanLocked(0)
	d.scanMu.Unlock()
	for i := 100; i < 108; i++ {
		put(i)
	}
	past := time.Now().Add(-time.Hour)
	files := entryFiles(t, d, key)
	for i := 100; i < 108; i++ {
		ts := past.Add(time.Duration(i) * time.Second)
		require.NoError(t, os.Chtimes(files[fmt.Sprintf("%d-%d", i*n, n)], ts, ts))
	}
	require.True(t, d.Get(key, 100*n, make([]byte, n)))
	for i := 108; i < 111; i++ {
		put(i)
	}
	files = entryFiles(t, d, key)
	for i := 100; i < 111; i++ {
		_, ok := files[fmt.Sprintf("%d-%d", i*n, n)]
		require.Equal(t, i == 100 || i > 103, ok, "entry %d present", i)
	}
}

// TestDiskCacheTooBig refuses an entry larger than the whole cache.
func TestDiskCacheTooBig(t *testing.T) {
	d := newTestDisk(t, t.TempDir(), DiskCacheOptions{MaxBytes: 1000})
	key := Identity{Size: 1, ETag: `"a"`}.Key()
	require.ErrorContains(t, d.Put(key, 0, make([]byte, 1000)), "larger than the cache")
	require.Equal(t, int64(1), d.Stats().Errors)
}

// TestDiskCacheTwoProcesses has two DiskCaches on one directory, as two
// tarmount processes would, write, read and evict the same entries at
// once: a read finds the right bytes or nothing, never other bytes.
func TestDiskCacheTwoProcesses(t *testing.T) {
	const n = 2000
	dir := t.TempDir()
	maxBytes := int64(30 * (n + diskHeaderSize))
	caches := []*DiskCache{
		newTestDisk(t, dir, DiskCacheOptions{MaxBytes: maxBytes}),
		newTestDisk(t, dir, DiskCacheOptions{MaxBytes: maxBytes}),
	}
	keys := []string{Identity{Size: 1, ETag: `"a"`}.Key(), Identity{Size: 1, ETag: `"b"`}.Key()}
	content := func(k, i int) []byte { return randomBytes(n, uint64(k*1000+i)) }
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			d := caches[g%2]
			r := rand.New(rand.NewPCG(uint64(g), 9))
			p := make([]byte, n)
			for range 300 {
				k, i := r.IntN(2), r.IntN(50)
				if r.IntN(2) == 0 {
					if err := d.Put(keys[k], int64(i)*n, content(k, i)); err != nil {
						errs <- err
						return
					}
				} else if d.Get(keys[k], int64(i)*n, p) && !bytes.Equal(p, content(k, i)) {
					errs <- fmt.Errorf("entry %d of key %d: wrong bytes", i, k)
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
	for _, d := range caches {
		require.Zero(t, d.Stats().Corrupt)
	}
	total, _ := entryBytes(t, dir)
	require.LessOrEqual(t, total, maxBytes+maxBytes/8+2*(n+diskHeaderSize), "two writers may pass the bound by one scan interval")
	matches, err := filepath.Glob(filepath.Join(dir, "*", diskTempPrefix+"*"))
	require.NoError(t, err)
	require.Empty(t, matches, "temporary files left")
}

// TestDiskCacheCrash simulates what a crash leaves behind: a writer killed
// before its rename leaves a temporary file, which is never served and is
// removed once stale; a machine that lost power may leave a short file or
// zeros under the final name, which a later process rejects and removes.
func TestDiskCacheCrash(t *testing.T) {
	dir := t.TempDir()
	key := Identity{Size: 1, ETag: `"a"`}.Key()
	data := randomBytes(3000, 1)
	d := newTestDisk(t, dir, DiskCacheOptions{})
	for i := range 3 {
		require.NoError(t, d.Put(key, int64(i)*3000, data))
	}
	d.Close()
	files := entryFiles(t, d, key)
	short, zeroed := files["0-3000"], files["3000-3000"]
	require.NoError(t, os.Truncate(short, diskHeaderSize+1000))
	raw, err := os.ReadFile(zeroed)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(zeroed, make([]byte, len(raw)), 0o600))
	// Temporary files of a dead writer (stale) and of a live one.
	stale, live := filepath.Join(dir, key, diskTempPrefix+"dead"), filepath.Join(dir, key, diskTempPrefix+"live")
	for _, p := range []string{stale, live} {
		require.NoError(t, os.WriteFile(p, raw[:100], 0o600))
	}
	old := time.Now().Add(-2 * diskStaleTemp)
	require.NoError(t, os.Chtimes(stale, old, old))

	d = newTestDisk(t, dir, DiskCacheOptions{})
	p := make([]byte, 3000)
	require.False(t, d.Get(key, 0, p))
	require.False(t, d.Get(key, 3000, p))
	require.True(t, d.Get(key, 6000, p))
	require.Equal(t, data, p)
	require.Equal(t, int64(2), d.Stats().Corrupt)
	for _, p := range []string{short, zeroed} {
		_, err := os.Stat(p)
		require.ErrorIs(t, err, fs.ErrNotExist, "damaged entry left in place")
	}
	// The first write scans: the stale temporary file goes, the live stays.
	require.NoError(t, d.Put(key, 0, data))
	_, err = os.Stat(stale)
	require.ErrorIs(t, err, fs.ErrNotExist)
	_, err = os.Stat(live)
	require.NoError(t, err)
	require.True(t, d.Get(key, 0, p))
}

// TestDiskCachePutAsync: queued writes are written and reported, Close
// writes what is still queued, and a write after Close is refused.
func TestDiskCachePutAsync(t *testing.T) {
	dir := t.TempDir()
	key := Identity{Size: 1, ETag: `"a"`}.Key()
	d := newTestDisk(t, dir, DiskCacheOptions{QueueBytes: 1 << 20})
	var mu sync.Mutex
	done := map[int64]bool{}
	for i := range int64(64) {
		ok := d.PutAsync(key, i*1000, randomBytes(1000, uint64(i)), func(ok bool) {
			mu.Lock()
			done[i] = ok
			mu.Unlock()
		})
		require.True(t, ok)
	}
	d.Close()
	require.Len(t, done, 64)
	p := make([]byte, 1000)
	for i := range int64(64) {
		require.True(t, done[i])
		require.True(t, d.Get(key, i*1000, p))
		require.Equal(t, randomBytes(1000, uint64(i)), p)
	}
	require.False(t, d.PutAsync(key, 0, p, nil))
	st := d.Stats()
	require.Equal(t, int64(64), st.Writes)
	require.Equal(t, int64(1), st.Dropped)
}

// BenchmarkDiskCacheScan measures the directory scan that bounds the
// cache, over 2560 entries (10 GiB of 4 MiB blocks) in 4 objects.
func BenchmarkDiskCacheScan(b *testing.B) {
	const entries = 2560
	dir := b.TempDir()
	d := newTestDisk(b, dir, DiskCacheOptions{})
	for i := range entries {
		key := Identity{Size: 1, ETag: fmt.Sprintf(`"%d"`, i%4)}.Key()
		if err := d.Put(key, int64(i)<<22, []byte{byte(i)}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		d.scanMu.Lock()
		d.scanLocked(0)
		d.scanMu.Unlock()
	}
}

// BenchmarkDiskCacheGet reads one verified entry (from the page cache), at
// the size of a compressed gzip span and of a block.
func BenchmarkDiskCacheGet(b *testing.B) {
	for _, n := range []int{1 << 20, 4 << 20} {
		b.Run(fmt.Sprintf("%dKiB", n>>10), func(b *testing.B) {
			d := newTestDisk(b, b.TempDir(), DiskCacheOptions{})
			key := Identity{Size: 1, ETag: `"a"`}.Key()
			data := randomBytes(n, 1)
			if err := d.Put(key, 0, data); err != nil {
				b.Fatal(err)
			}
			p := make([]byte, n)
			b.SetBytes(int64(n))
			b.ReportAllocs()
			for b.Loop() {
				if !d.Get(key, 0, p) {
					b.Fatal("miss")
				}
			}
		})
	}
}

// TestDiskStatsDuringScan: Stats (status, metrics) answers while a scan
// of the cache directory runs, which holds scanMu for as long as it reads
// a directory of perhaps millions of entries; the scan is stood in for by
// holding scanMu.
func TestDiskStatsDuringScan(t *testing.T) {
	d := newTestDisk(t, t.TempDir(), DiskCacheOptions{MaxBytes: 1 << 20})
	d.added(1000)
	d.scanMu.Lock()
	defer d.scanMu.Unlock()
	got := make(chan DiskStats, 1)
	go func() { got <- d.Stats() }()
	select {
	case st := <-got:
		require.Equal(t, int64(0), st.UsedBytes, "the added entry file does not exist: the scan found none")
	case <-time.After(5 * time.Second):
		t.Fatal("Stats waits for the scan")
	}
}
