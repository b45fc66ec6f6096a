package index

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"

	"github.com/tarmount/tarmount/fetch"
)

// plainBlockBytes is the block size of the plain-read tests: smaller than
// the default so that the archive stays small, larger than pieceBytes.
const plainBlockBytes = 1 << 20

// plainFixture is a plain tar read through fetch.Blocks, with members
// around the limits of plain.go: small (whole-file pieces), big (pieces
// and blocks), and many small files in a row (a reader walking them).
type plainFixture struct {
	obj    []byte
	ix     *Index
	src    *memSource
	blocks *fetch.Blocks
	r      *Reader
	files  map[string][]byte
}

func newPlainFixture(t *testing.T) *plainFixture {
	t.Helper()
	f := &plainFixture{files: map[string][]byte{
		"pad1":  randomData(21, 3<<20),
		"small": randomData(22, 300<<10),
		"pad2":  randomData(23, 3<<20),
		"big":   randomData(24, 6<<20),
		"pad3":  randomData(25, 3<<20),
	}}
	var members []member
	for _, name := range []string{"pad1", "small", "pad2", "big", "pad3"} {
		members = append(members, member{name: name, data: f.files[name]})
	}
	for i := range 40 {
		name := fmt.Sprintf("walk/%02d", i)
		f.files[name] = randomData(uint64(100+i), 20<<10)
		members = append(members, member{name: name, data: f.files[name]})
	}
	members = append(members, member{name: "pad4", data: randomData(26, 3<<20)})
	f.obj = tarBytes(t, members)
	f.ix = build(t, f.obj, DefaultSpan)
	if f.ix.Codec != CodecNone {
		t.Fatalf("codec %s, want a plain tar", f.ix.Codec)
	}
	f.src = newMemSource(f.obj)
	f.blocks = fetch.NewBlocks(f.src, fetch.BlocksOptions{BlockSize: plainBlockBytes, Workers: 4})
	t.Cleanup(func() { f.blocks.Close() })
	f.r = NewReader(f.ix, f.blocks, ReaderOptions{})
	t.Cleanup(func() { f.r.Close() })
	return f
}

// read reads n bytes of name at off and checks them.
func (f *plainFixture) read(t *testing.T, name string, off, n int64) {
	t.Helper()
	if err := f.check(name, off, n); err != nil {
		t.Fatal(err)
	}
}

// check reads n bytes of name at off and compares them with the file.
func (f *plainFixture) check(name string, off, n int64) error {
	id, ok := f.ix.LookupPath(name)
	if !ok {
		return fmt.Errorf("no %s", name)
	}
	want := f.files[name][off:min(off+n, int64(len(f.files[name])))]
	p := make([]byte, n)
	got, err := f.r.ReadAt(context.Background(), id, p, off)
	if err != nil && !(err == io.EOF && got == len(want)) {
		return fmt.Errorf("read %s at %d: %w", name, off, err)
	}
	if !bytes.Equal(p[:got], want) {
		return fmt.Errorf("read %s at %d: got %d bytes, want the %d of the file", name, off, got, len(want))
	}
	return nil
}

// exact returns the ranges read that are not blocks, and the bytes read
// in all.
func (f *plainFixture) exact() (exact [][2]int64, fetched int64) {
	size := int64(len(f.obj))
	for _, rg := range f.src.TakeRanges() {
		fetched += rg[1]
		if rg[0]%plainBlockBytes != 0 || rg[1] != min(plainBlockBytes, size-rg[0]) {
			exact = append(exact, rg)
		}
	}
	return exact, fetched
}

// dataOffset returns where the data of name starts in the archive.
func (f *plainFixture) dataOffset(name string) int64 {
	id, _ := f.ix.LookupPath(name)
	return int64(f.ix.Entry(id).DataOffset)
}

// TestPlainSmallFile: a small file read in the kernel's reads of 128 KiB
// costs one request for exactly its bytes.
func TestPlainSmallFile(t *testing.T) {
	f := newPlainFixture(t)
	for off := int64(0); off < 300<<10; off += 128 << 10 {
		f.read(t, "small", off, 128<<10)
	}
	got := f.src.TakeRanges()
	want := [][2]int64{{f.dataOffset("small"), 300 << 10}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("reads of a small file fetched %v, want %v (one exact range)", got, want)
	}
}

// TestPlainCachedBlocks: bytes in cached blocks are read from them.
func TestPlainCachedBlocks(t *testing.T) {
	f := newPlainFixture(t)
	start := f.dataOffset("small")
	if _, err := f.blocks.ReadAt(t.Context(), make([]byte, 300<<10), start); err != nil {
		t.Fatal(err)
	}
	f.src.TakeRanges()
	f.read(t, "small", 0, 128<<10)
	f.read(t, "small", 200<<10, 100<<10)
	if got := f.src.TakeRanges(); len(got) != 0 {
		t.Errorf("reads in cached blocks fetched %v, want nothing", got)
	}
}

// TestPlainRandomRead: a random read in a large file fetches the aligned
// piece that holds it, and the kernel's next reads in it fetch nothing.
func TestPlainRandomRead(t *testing.T) {
	f := newPlainFixture(t)
	f.read(t, "big", 3<<20+1000, 4096)
	f.read(t, "big", 3<<20+128<<10, 128<<10)
	f.read(t, "big", 3<<20, 10)
	got := f.src.TakeRanges()
	want := [][2]int64{{f.dataOffset("big") + 3<<20, pieceBytes}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("random reads in a large file fetched %v, want %v (one piece)", got, want)
	}
}

// TestPlainSequential: a large file read from its start in 128 KiB reads
// fetches its first piece exactly and the rest in blocks, prefetched ahead
// of the reader, each byte about once.
func TestPlainSequential(t *testing.T) {
	f := newPlainFixture(t)
	size := int64(len(f.files["big"]))
	f.read(t, "big", 0, 128<<10)
	if n := f.blocks.Stats().Prefetches; n < plainFirstWindow {
		t.Errorf("after the first read of a large file: %d blocks prefetched, want at least %d", n, plainFirstWindow)
	}
	for off := int64(128 << 10); off < size; off += 128 << 10 {
		f.read(t, "big", off, 128<<10)
	}
	// The first piece is read from the first block when its prefetch
	// wins the race.
	exact, fetched := f.exact()
	if want := [][2]int64{{f.dataOffset("big"), pieceBytes}}; len(exact) > 1 || len(exact) == 1 && exact[0] != want[0] {
		t.Errorf("a sequential read made exact range requests %v, want at most %v (its first piece)", exact, want)
	}
	// The file's blocks, one more at each end for the alignment, and the
	// first piece.
	if limit := size + 2*plainBlockBytes + pieceBytes; fetched > limit {
		t.Errorf("a sequential read of %d bytes fetched %d, want at most %d", size, fetched, limit)
	}
	st := f.blocks.Stats()
	if st.Prefetches < size/plainBlockBytes {
		t.Errorf("%d blocks prefetched, want at least %d", st.Prefetches, size/plainBlockBytes)
	}
}

// TestPlainWalk: a reader that reads the small files of a directory in
// archive order (grep -r, a build) reads blocks after its first file,
// not one exact range per file.
func TestPlainWalk(t *testing.T) {
	f := newPlainFixture(t)
	for i := range 40 {
		f.read(t, fmt.Sprintf("walk/%02d", i), 0, 128<<10)
	}
	exact, _ := f.exact()
	if want := [][2]int64{{f.dataOffset("walk/00"), 20 << 10}}; fmt.Sprint(exact) != fmt.Sprint(want) {
		t.Errorf("walking 40 small files made exact range requests %v, want %v (the first file)", exact, want)
	}
}

// TestPlainConcurrent: parallel readers of every file, at random offsets
// and from the start, read the archive's bytes.
func TestPlainConcurrent(t *testing.T) {
	f := newPlainFixture(t)
	var wg sync.WaitGroup
	for name, data := range f.files {
		wg.Go(func() {
			size := int64(len(data))
			for _, off := range []int64{size / 2, 0, size / 3, size - 1} {
				if err := f.check(name, off, 128<<10); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
}
