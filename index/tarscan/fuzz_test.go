package tarscan

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

// oneByteMax bounds the inputs that checkScan also reads one byte at a
// time, which is slow.
const oneByteMax = 1 << 10

// checkScan scans data with each kind of reader and checks what must hold
// for any input: no panic, errors wrap a sentinel, every reader kind sees
// the same members and error, offsets and sizes are consistent, and
// Scanner.Read yields the bytes at DataOffset. It returns the members and
// the final error of the first reader kind.
func checkScan(t testing.TB, data []byte, lim Limits) ([]*Header, error) {
	t.Helper()
	var first []*Header
	var firstErr error
	for k, rk := range readerKinds {
		if rk.name == "onebyte" && len(data) > oneByteMax {
			continue
		}
		hs, err := checkScanOne(t, rk.name, rk.wrap(data), data, lim)
		if k == 0 {
			first, firstErr = hs, err
			continue
		}
		if !reflect.DeepEqual(hs, first) {
			t.Fatalf("%s: members differ from %s", rk.name, readerKinds[0].name)
		}
		if errKind(err) != errKind(firstErr) {
			t.Fatalf("%s: error: got %v, want %v as with %s", rk.name, err, firstErr, readerKinds[0].name)
		}
	}
	return first, firstErr
}

func checkScanOne(t testing.TB, kind string, r io.Reader, data []byte, lim Limits) ([]*Header, error) {
	t.Helper()
	s := NewScanner(r, lim)
	var hs []*Header
	var prev *Header
	var readBuf []byte
	for i := 0; ; i++ {
		h, err := s.Next()
		if err == nil || err == io.EOF {
			// The previous member's data was consumed.
			if prev != nil && prev.DataOffset+prev.StoredSize > s.Offset() {
				t.Fatalf("%s: member %d: data %d+%d ends past the consumed %d",
					kind, i-1, prev.DataOffset, prev.StoredSize, s.Offset())
			}
			if s.Offset() > int64(len(data)) {
				t.Fatalf("%s: Offset %d past the %d-byte input", kind, s.Offset(), len(data))
			}
		}
		if err == io.EOF {
			if _, again := s.Next(); again != io.EOF {
				t.Fatalf("%s: Next after io.EOF: got %v", kind, again)
			}
			return hs, nil
		}
		if err != nil {
			if k := errKind(err); k != "ErrNotTar" && k != "ErrCorrupt" && k != "ErrTruncated" {
				t.Fatalf("%s: error wraps no sentinel: %v", kind, err)
			}
			if errors.Is(err, ErrNotTar) && len(hs) > 0 {
				t.Fatalf("%s: ErrNotTar after %d members", kind, len(hs))
			}
			return hs, err
		}
		checkHeader(t, kind, h)
		if prev != nil && h.HeaderOffset < prev.DataOffset+prev.StoredSize {
			t.Fatalf("%s: member %d starts at %d inside the previous data", kind, i, h.HeaderOffset)
		}
		if s.Offset() != h.DataOffset {
			t.Fatalf("%s: Offset after Next: got %d, want DataOffset %d", kind, s.Offset(), h.DataOffset)
		}
		// Read a little of the data through the Scanner on odd members.
		if i%2 == 1 && h.StoredSize > 0 && h.DataOffset+h.StoredSize <= int64(len(data)) {
			n := min(h.StoredSize, 700)
			readBuf = append(readBuf[:0], make([]byte, n)...)
			if _, err := io.ReadFull(s, readBuf); err != nil {
				t.Fatalf("%s: read %d bytes of member %d: %v", kind, n, i, err)
			}
			if !bytes.Equal(readBuf, data[h.DataOffset:h.DataOffset+n]) {
				t.Fatalf("%s: member %d: Read differs from the bytes at DataOffset", kind, i)
			}
		}
		hs = append(hs, h)
		prev = h
	}
}

// checkHeader checks the invariants of one Header.
func checkHeader(t testing.TB, kind string, h *Header) {
	t.Helper()
	switch h.Typeflag {
	case TypeReg, TypeLink, TypeSymlink, TypeChar, TypeBlock, TypeDir, TypeFIFO:
	default:
		t.Fatalf("%s: %q: Typeflag %q not normalized", kind, h.Name, h.Typeflag)
	}
	if h.HeaderOffset < 0 || h.DataOffset < h.HeaderOffset+blockSize || h.DataOffset%blockSize != 0 {
		t.Fatalf("%s: %q: offsets header %d data %d", kind, h.Name, h.HeaderOffset, h.DataOffset)
	}
	if h.Size < 0 || h.StoredSize < 0 || h.StoredSize > h.Size && h.Sparse == nil {
		t.Fatalf("%s: %q: sizes %d/%d", kind, h.Name, h.Size, h.StoredSize)
	}
	if h.Typeflag != TypeReg && (h.Size != 0 || h.StoredSize != 0 || h.Sparse != nil) {
		t.Fatalf("%s: %q: type %q with sizes %d/%d", kind, h.Name, h.Typeflag, h.Size, h.StoredSize)
	}
	if h.Mode&^07777 != 0 || h.UID < 0 || h.GID < 0 || h.Devmajor < 0 || h.Devminor < 0 {
		t.Fatalf("%s: %q: mode %o uid %d gid %d dev %d,%d", kind, h.Name, h.Mode, h.UID, h.GID, h.Devmajor, h.Devminor)
	}
	if h.Sparse != nil {
		var end, sum int64
		for _, c := range h.Sparse {
			if c.Length <= 0 || c.Offset < end || c.Offset+c.Length > h.Size {
				t.Fatalf("%s: %q: bad sparse map %v for size %d", kind, h.Name, h.Sparse, h.Size)
			}
			end = c.Offset + c.Length
			sum += c.Length
		}
		if sum != h.StoredSize {
			t.Fatalf("%s: %q: sparse map holds %d bytes, StoredSize %d", kind, h.Name, sum, h.StoredSize)
		}
	}
}

// fuzzSeeds returns archives of every kind the Scanner knows.
func fuzzSeeds(t testing.TB) [][]byte {
	var seeds [][]byte
	for _, f := range allFormats {
		data, _ := goArchive(t, f, 1000)
		seeds = append(seeds, data)
	}
	for _, c := range craftedCases() {
		if len(c.data) < 1<<16 {
			seeds = append(seeds, c.data)
		}
	}
	return seeds
}

// maxFuzzSeed keeps the seeds small, so that minimizing a new input takes
// moments rather than the whole fuzzing time.
const maxFuzzSeed = 3 << 10

// FuzzScan checks that no input makes the Scanner panic, hang or report
// inconsistent offsets.
func FuzzScan(f *testing.F) {
	for _, s := range fuzzSeeds(f) {
		if len(s) <= maxFuzzSeed {
			f.Add(s)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		checkScan(t, data, Limits{MaxPAXSize: 1 << 16, MaxNameLen: 1 << 12, MaxSparseChunks: 1 << 10})
	})
}
