package tarscan

import (
	"bytes"
	"math/rand/v2"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// smallArchive builds an archive with one of each kind of header, and
// returns it with the offsets where a cut leaves a valid shorter archive.
func smallArchive() (data []byte, clean []int) {
	a := &arch{}
	mark := func() { clean = append(clean, a.Len()) }
	mark()
	a.pax('g', "comment=global", "uname=g")
	mark()
	a.pax('x', "path="+strings.Repeat("p", 150), "mtime=1.5", "SCHILY.xattr.user.x=1")
	mark() // an archive may end after extended headers, as GNU tar reads it
	a.file(hb{Name: "short", Typeflag: '0', Layout: tarbuild.USTAR}, []byte("pax member"))
	mark()
	a.file(hb{Name: "././@LongLink", Typeflag: 'L', Layout: tarbuild.GNU}, []byte(strings.Repeat("l", 120)+"\x00"))
	mark()
	a.hdr(hb{Name: "x", Typeflag: '2', Linkname: "target", Layout: tarbuild.GNU})
	mark()
	a.hdr(hb{Name: "dir/", Typeflag: '5', Layout: tarbuild.USTAR, Mode: 0o755})
	mark()
	var chunks []SparseChunk
	for i := range int64(6) {
		chunks = append(chunks, SparseChunk{i * 100, 3})
	}
	a.Write(gnuSparseHeader("oldsparse", 600, chunks))
	a.data([]byte("aaabbbcccdddeeefff"))
	mark()
	a.pax('x', "GNU.sparse.major=1", "GNU.sparse.minor=0", "GNU.sparse.name=sparse10", "GNU.sparse.realsize=30")
	mark()
	a.file(hb{Name: "GNUSparseFile.0/sparse10", Typeflag: '0', Layout: tarbuild.USTAR},
		sparse1Data([]SparseChunk{{0, 4}, {20, 6}}, "abcdefghij"))
	mark()
	a.file(hb{Name: "v7", Typeflag: 0, Layout: tarbuild.V7}, []byte("old"))
	mark()
	a.end()
	for i := a.Len() - 2*blockSize + 1; i <= a.Len(); i++ {
		clean = append(clean, i)
	}
	return a.Bytes(), clean
}

// TestTruncatedEverywhere cuts a small archive at every offset.
func TestTruncatedEverywhere(t *testing.T) {
	data, clean := smallArchive()
	full, err := checkScan(t, data, Limits{})
	if err != nil || len(full) != 6 {
		t.Fatalf("full scan: got %d members, %v, want 6, nil", len(full), err)
	}
	for n := 0; n <= len(data); n++ {
		hs, err := checkScan(t, data[:n], Limits{})
		if len(hs) > 0 && !reflect.DeepEqual(hs, full[:len(hs)]) {
			t.Fatalf("cut at %d: members are not a prefix of the full list", n)
		}
		want := "ErrTruncated"
		switch {
		case slices.Contains(clean, n):
			want = "nil"
		case n < plausiblePrefixSize:
			want = "ErrNotTar"
		}
		if got := errKind(err); got != want {
			t.Fatalf("cut at %d: got %v, want %s", n, err, want)
		}
		if want == "nil" {
			wantN := 0
			for _, h := range full {
				if h.DataOffset <= int64(n) {
					wantN++
				}
			}
			if len(hs) != wantN {
				t.Fatalf("cut at %d: got %d members, want %d", n, len(hs), wantN)
			}
		}
	}
}

// TestFlippedBytes flips bits of every byte of a small archive.
func TestFlippedBytes(t *testing.T) {
	data, _ := smallArchive()
	kinds := map[string]int{}
	for i := range data {
		masks := []byte{0xff, 0x01, 0x80}
		if data[i] == 0 {
			masks = masks[:1] // padding: one flip is enough
		}
		for _, mask := range masks {
			d := bytes.Clone(data)
			d[i] ^= mask
			_, err := checkScan(t, d, Limits{})
			kinds[errKind(err)]++
		}
	}
	t.Logf("outcomes: %v", kinds)
	if kinds["ErrCorrupt"] == 0 || kinds["ErrNotTar"] == 0 || kinds["nil"] == 0 {
		t.Errorf("outcomes: got %v, want some nil, ErrCorrupt and ErrNotTar", kinds)
	}
}

// TestNotTar feeds inputs that are not tar archives.
func TestNotTar(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	random := func(n int) []byte {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}
	tarData, _ := smallArchive()
	gz := tarbuild.Gzip(tarData)
	tests := []struct {
		name string
		data []byte
	}{
		{"random 1", random(1)},
		{"random 100", random(100)},
		{"random 300", random(300)},
		{"random 512", random(512)},
		{"random 100k", random(100_000)},
		{"gzip", gz},
		{"zstd magic", append([]byte{0x28, 0xb5, 0x2f, 0xfd}, random(2000)...)},
		{"text", []byte(strings.Repeat("this is not a tar archive\n", 100))},
		{"ones", bytes.Repeat([]byte{0xff}, 2048)},
	}
	if _, err := exec.LookPath("pigz"); err == nil {
		cmd := exec.Command("pigz", "-c")
		cmd.Stdin = bytes.NewReader(tarData)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("pigz: %v", err)
		}
		tests = append(tests, struct {
			name string
			data []byte
		}{"pigz", out})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			hs, err := checkScan(t, tt.data, Limits{})
			if len(hs) != 0 || errKind(err) != "ErrNotTar" {
				t.Fatalf("got %d members, %v, want 0, ErrNotTar", len(hs), err)
			}
		})
	}
}

// TestRandomMutations mutates seed archives at random and checks the
// invariants, like a short deterministic fuzz run.
func TestRandomMutations(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	seeds := fuzzSeeds(t)
	lim := Limits{MaxPAXSize: 1 << 16, MaxNameLen: 1 << 12, MaxSparseChunks: 1 << 10}
	iters := 3000
	if testing.Short() {
		iters = 300
	}
	for range iters {
		d := bytes.Clone(seeds[rng.IntN(len(seeds))])
		if len(d) == 0 {
			continue
		}
		for range 1 + rng.IntN(4) {
			switch rng.IntN(4) {
			case 0:
				d[rng.IntN(len(d))] = byte(rng.Uint32())
			case 1: // write a number into a numeric field
				blk := rng.IntN(len(d)/blockSize+1) * blockSize
				off := blk + []int{100, 108, 116, 124, 136, 345, 357, 386, 398, 483}[rng.IntN(10)]
				if off+12 <= len(d) {
					tarbuild.PutBase256(d[off:off+12], rng.Int64()>>rng.IntN(64))
					if blk+blockSize <= len(d) {
						tarbuild.SetChecksum(d[blk : blk+blockSize])
					}
				}
			case 2:
				d = d[:rng.IntN(len(d)+1)]
			case 3: // change a type flag and fix the checksum
				blk := rng.IntN(len(d)/blockSize+1) * blockSize
				if blk+blockSize <= len(d) {
					d[blk+156] = "0125xgLKSDVM7Z"[rng.IntN(14)]
					tarbuild.SetChecksum(d[blk : blk+blockSize])
				}
			}
			if len(d) == 0 {
				break
			}
		}
		checkScan(t, d, lim)
	}
}
