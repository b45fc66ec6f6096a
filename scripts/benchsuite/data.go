package main

import (
	"archive/tar"
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// The datasets are tar streams written from Go, the same bytes for the same
// seed and size on every machine (the go dataset: for the same toolchain).
// Their compressed forms are made by the codecs' own CLIs from the .tar.

// rng is splitmix64: tiny, fast and fixed forever, unlike math/rand whose
// streams may change between Go releases.
type rng struct{ s uint64 }

func newRNG(seed uint64) *rng { return &rng{s: seed} }

func (r *rng) next() uint64 {
	r.s += 0x9e3779b97f4a7c15
	z := r.s
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intn returns a number in [0, n); the modulo bias is irrelevant here.
func (r *rng) intn(n int) int { return int(r.next() % uint64(n)) }

// textGen writes text-like bytes: words of a seeded vocabulary drawn with a
// skew (common words are common), some numbers, sentences and lines. It
// compresses about 3x with gzip -6.
type textGen struct {
	r     *rng
	vocab [][]byte
	col   int
}

const vocabSize = 1024

func newTextGen(seed uint64) *textGen {
	r := newRNG(seed)
	g := &textGen{r: r, vocab: make([][]byte, vocabSize)}
	for i := range g.vocab {
		w := make([]byte, 2+r.intn(9))
		for j := range w {
			w[j] = byte('a' + r.intn(26))
		}
		g.vocab[i] = w
	}
	return g
}

// fill writes text into p, all of it.
func (g *textGen) fill(p []byte) {
	var word [24]byte
	for len(p) > 0 {
		x := g.r.next()
		var w []byte
		if x&63 == 0 {
			// A number: digits are what makes the text less compressible.
			n := x >> 8
			k := 0
			for i := 0; i < 6; i++ {
				word[k] = byte('0' + n%10)
				n /= 10
				k++
			}
			w = word[:k]
		} else {
			// Product of two uniforms: a skew towards low indexes.
			a, b := (x>>20)&(vocabSize-1), (x>>40)&(vocabSize-1)
			w = g.vocab[a*b/vocabSize]
		}
		var sep byte = ' '
		g.col += len(w) + 1
		switch {
		case g.col > 72:
			sep, g.col = '\n', 0
		case x>>60 == 0:
			n := copy(word[:], w)
			word[n] = '.'
			w = word[:n+1]
		}
		n := copy(p, w)
		p = p[n:]
		if len(p) > 0 {
			p[0] = sep
			p = p[1:]
		}
	}
}

// fixedTime is the mtime of every generated entry.
var fixedTime = time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)

// smallLayout: files are spread over smallTop*smallSub directories.
const (
	smallTop = 40
	smallSub = 50
)

// writeSmall writes a tar of n files of 1-8 KiB of text in
// small/dTT/dSS/fNNNNNNN.txt, directories first in each branch.
func writeSmall(w io.Writer, n int, seed uint64) error {
	tw := tar.NewWriter(w)
	g := newTextGen(seed)
	sizes := newRNG(seed ^ 0x5eed)
	buf := make([]byte, 8<<10)
	dir := func(name string) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755,
			ModTime: fixedTime, Format: tar.FormatUSTAR})
	}
	if err := dir("small"); err != nil {
		return err
	}
	dirs := smallTop * smallSub
	perDir := (n + dirs - 1) / dirs
	for i := 0; i < n; i++ {
		d := i / perDir
		if i%perDir == 0 {
			if d%smallSub == 0 {
				if err := dir(fmt.Sprintf("small/d%02d", d/smallSub)); err != nil {
					return err
				}
			}
			if err := dir(fmt.Sprintf("small/d%02d/d%02d", d/smallSub, d%smallSub)); err != nil {
				return err
			}
		}
		size := 1<<10 + sizes.intn(7<<10+1)
		p := buf[:size]
		g.fill(p)
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("small/d%02d/d%02d/f%07d.txt", d/smallSub, d%smallSub, i),
			Mode: 0o644, Size: int64(size), ModTime: fixedTime, Format: tar.FormatUSTAR}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if _, err := tw.Write(p); err != nil {
			return err
		}
	}
	return tw.Close()
}

// writeBig writes a tar of one file big/data.txt of size bytes of text.
func writeBig(w io.Writer, size int64, seed uint64) error {
	tw := tar.NewWriter(w)
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: "big/", Mode: 0o755, ModTime: fixedTime,
		Format: tar.FormatUSTAR}); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "big/data.txt", Mode: 0o644, Size: size,
		ModTime: fixedTime, Format: tar.FormatUSTAR}); err != nil {
		return err
	}
	g := newTextGen(seed)
	buf := make([]byte, 1<<20)
	for left := size; left > 0; {
		p := buf[:min(left, int64(len(buf)))]
		g.fill(p)
		if _, err := tw.Write(p); err != nil {
			return err
		}
		left -= int64(len(p))
	}
	return tw.Close()
}

// writeTree writes the tree at root as a tar with every name under top/:
// directories, regular files and symlinks in lexical order, owners 0,
// mtimes in whole seconds.
func writeTree(w io.Writer, root, top string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		name := filepath.ToSlash(filepath.Join(top, rel))
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode().IsRegular(), info.IsDir():
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		default:
			return nil
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		hdr.Name = name
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		hdr.ModTime = hdr.ModTime.Truncate(time.Second)
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if _, err := io.Copy(tw, f); err != nil {
			return fmt.Errorf("copy %s: %w", p, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

// writeFile runs write into path atomically (a temporary name, then
// rename), unless path exists already.
func writeFile(path string, write func(io.Writer) error) error {
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(f, 1<<20)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp, path)
}

// Member is one regular file of an archive and the CRC-32C of its content.
type Member struct {
	Path string `json:"path"`
	Size int64  `json:"size"`
	CRC  uint32 `json:"crc"`
	// Offset is where the member's data starts in the tar stream.
	Offset int64 `json:"offset"`
}

// Facts are what the scenarios check their reads against, computed once
// from the .tar.
type Facts struct {
	TarBytes int64    `json:"tar_bytes"`
	Entries  int      `json:"entries"`
	Files    int      `json:"files"` // regular files
	Dirs     int      `json:"dirs"`
	Symlinks int      `json:"symlinks"`
	Probe    Member   `json:"probe"`   // stat'ed to tell a mount is ready
	Reads    []Member `json:"reads"`   // the small files read at random
	Largest  Member   `json:"largest"` // read sequentially
	// Along are the files at 10%, 50% and 90% of the tar stream (the
	// first non-empty regular file whose data reaches past that point),
	// which the progressive mount waits for.
	Along []Member `json:"along"`
	// Early are, for 1% and 10% of the tar stream, the last non-empty
	// regular file whose data ends at or before that point (none when
	// the first file reaches past it), which the boot scenario reads.
	Early []Mark `json:"early"`
}

// alongPercents are where in the tar stream Facts.Along lie.
var alongPercents = []int64{10, 50, 90}

// earlyPercents are the points of the tar stream of Facts.Early.
var earlyPercents = []int64{1, 10}

// Mark is a member that lies before a point of the tar stream.
type Mark struct {
	Percent int64 `json:"percent"` // the point, in percent of the tar stream
	Member
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// smallReadMax bounds the members that scenario 3 may pick.
const smallReadMax = 64 << 10

// readSpacing is how far apart in the tar stream scenario 3's files lie:
// more than any tool's unit of decoding (tarmount's spans are 4 MiB), so
// that no read finds its data decoded by an earlier one and every read is
// cold. An archive holds fewer such files than reads asked for when it is
// smaller than reads*readSpacing.
const readSpacing = 5 << 20

// scanFacts reads a tar stream and picks nreads members below 64 KiB,
// spacing apart, with the seed (in the order they will be read).
func scanFacts(r io.Reader, nreads int, seed uint64, spacing int64) (*Facts, error) {
	cr := &countReader{r: r}
	tr := tar.NewReader(cr)
	f := &Facts{}
	var small, all []Member
	buf := make([]byte, 1<<20)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		f.Entries++
		switch hdr.Typeflag {
		case tar.TypeDir:
			f.Dirs++
		case tar.TypeSymlink:
			f.Symlinks++
		case tar.TypeReg:
			f.Files++
			start := cr.n // tar.Reader reads no further than the header
			h := crc32.New(castagnoli)
			n, err := io.CopyBuffer(h, tr, buf)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", hdr.Name, err)
			}
			m := Member{Path: strings.TrimSuffix(hdr.Name, "/"), Size: n, CRC: h.Sum32(), Offset: start}
			if f.Probe.Path == "" {
				f.Probe = m
			}
			if m.Size > f.Largest.Size {
				f.Largest = m
			}
			if m.Size < smallReadMax {
				small = append(small, m)
			}
			if m.Size > 0 {
				all = append(all, m)
			}
		}
	}
	// The tar reader stops at the end-of-archive blocks; count the rest.
	if _, err := io.Copy(io.Discard, cr); err != nil {
		return nil, err
	}
	f.TarBytes = cr.n
	f.Reads = pick(small, nreads, seed, spacing)
	for _, pct := range alongPercents {
		at := f.TarBytes * pct / 100
		if i := slices.IndexFunc(all, func(m Member) bool { return m.Offset+m.Size > at }); i >= 0 {
			f.Along = append(f.Along, all[i])
		}
	}
	for _, pct := range earlyPercents {
		at := f.TarBytes * pct / 100
		i := slices.IndexFunc(all, func(m Member) bool { return m.Offset+m.Size > at })
		if i < 0 {
			i = len(all)
		}
		if i > 0 {
			f.Early = append(f.Early, Mark{Percent: pct, Member: all[i-1]})
		}
	}
	return f, nil
}

// pick returns up to n members of ms chosen with the seed, no two of
// them closer than spacing in the tar stream, in a random order.
func pick(ms []Member, n int, seed uint64, spacing int64) []Member {
	ms = slices.Clone(ms)
	r := newRNG(seed)
	var chosen []Member
	var offs []int64 // of chosen, sorted
	for i := 0; i < len(ms) && len(chosen) < n; i++ {
		j := i + r.intn(len(ms)-i)
		ms[i], ms[j] = ms[j], ms[i]
		m := ms[i]
		k, _ := slices.BinarySearch(offs, m.Offset)
		if k > 0 && m.Offset-offs[k-1] < spacing || k < len(offs) && offs[k]-m.Offset < spacing {
			continue
		}
		offs = slices.Insert(offs, k, m.Offset)
		chosen = append(chosen, m)
	}
	return chosen
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// loadFacts returns the facts of tarPath, from its .facts.json when that
// was made for the same file, size and choice of reads.
func loadFacts(tarPath string, nreads int, seed uint64) (*Facts, error) {
	st, err := os.Stat(tarPath)
	if err != nil {
		return nil, err
	}
	cache := tarPath + ".facts.json"
	type stored struct {
		ID    string `json:"id"`
		Facts *Facts `json:"facts"`
	}
	id := fmt.Sprintf("v3 %d %d %d %d %d", st.Size(), st.ModTime().UnixNano(), nreads, seed, readSpacing)
	if b, err := os.ReadFile(cache); err == nil {
		var s stored
		if json.Unmarshal(b, &s) == nil && s.ID == id && s.Facts != nil {
			return s.Facts, nil
		}
	}
	f, err := os.Open(tarPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	facts, err := scanFacts(bufio.NewReaderSize(f, 1<<20), nreads, seed, readSpacing)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", tarPath, err)
	}
	b, err := json.Marshal(stored{ID: id, Facts: facts})
	if err != nil {
		return nil, err
	}
	return facts, os.WriteFile(cache, b, 0o644)
}
