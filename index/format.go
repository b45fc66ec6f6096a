package index

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/klauspost/compress/zstd"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index/inflate"
	"github.com/tarmount/tarmount/internal/atomicfile"
)

// The index file:
//
//	0               16        20        24                32
//	+---------------+---------+---------+-----------------+----------------+--------+
//	| magic         | version | flags   | payload length  | payload (zstd) | sha256 |
//	+---------------+---------+---------+-----------------+----------------+--------+
//	 "TARMOUNT-IDX\n\0\0\0"      u32 LE    u32 LE  u64 LE                      32 bytes over
//	                                                                         all before it
//
// The decompressed payload is a sequence of fields, integers as uvarints
// (varints where they may be negative), a str as uvarint offset and length
// in the string table:
//
//	identity     size, etag (uvarint length + bytes), last-modified (varint ns, 0 unknown), version id (like etag)
//	archive      codec (byte), tar size, span, end of the compressed data
//	checkpoints  count, then kind (byte), in, bit (byte), flags (byte), out, window length,
//	             window (DEFLATE)
//	digests      count, then u64 LE each
//	strtab       length, bytes
//	owners       count, then uname (str), gname (str)
//	entries      count, then parent, name (str), type (byte), sparse (byte), mode, uid, gid,
//	             owner, size, mtime (varint s, then ns), data offset, nlink, extra, child first,
//	             child count
//	extras       count, then atime, ctime (varint s, then ns each), link (str), devmajor, devminor,
//	             xattr first, xattr count, sparse first, sparse count
//	dirents      count, then name (str), id
//	xattrs       count, then name (str), value (str)
//	sparse       count, then offset, length
//	member sums  count (0, or one per entry), then u64 LE each: the xxhash64 of a
//	             regular file's data, 0 for none (digest.go)
//	notes        count, then message, reason (raw), count, example (raw)
const (
	// Version 2 added codecs zstd, lz4, bzip2 and xz, their checkpoint
	// kinds, checkpoint flags and the end of the compressed data.
	// Version 3 added checkpoints at bzip2 and xz block starts.
	// Version 4 added the member digests.
	// Version 5 keeps times as seconds and nanoseconds, so that times
	// past 2262 survive, and adds the notes.
	formatVersion = 5
	headerSize    = 32
	sumSize       = sha256.Size
)

var magic = [16]byte{'T', 'A', 'R', 'M', 'O', 'U', 'N', 'T', '-', 'I', 'D', 'X', '\n', 0, 0, 0}

// maxPayload bounds the decompressed payload of an index file.
const maxPayload = 8 << 30

// Marshal encodes ix in the index file format.
func (ix *Index) Marshal() ([]byte, error) {
	payload := ix.payload()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	body := enc.EncodeAll(payload, nil)
	enc.Close()
	out := make([]byte, headerSize, headerSize+len(body)+sumSize)
	copy(out, magic[:])
	binary.LittleEndian.PutUint32(out[16:], formatVersion)
	binary.LittleEndian.PutUint64(out[24:], uint64(len(body)))
	out = append(out, body...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...), nil
}

type encoder struct{ buf []byte }

func encodeIdentity(e *encoder, id fetch.Identity) {
	e.uvarint(uint64(id.Size))
	e.raw(id.ETag)
	var lm int64
	if !id.LastModified.IsZero() {
		lm = id.LastModified.UnixNano()
	}
	e.varint(lm)
	e.raw(id.VersionID)
}

func encodeCheckpoint(e *encoder, cp Checkpoint) {
	e.byte(uint8(cp.Kind))
	e.uvarint(uint64(cp.In))
	e.byte(cp.Bit)
	e.byte(cp.Flags)
	e.uvarint(uint64(cp.Out))
	e.raw(string(cp.window))
}

func encodeDigests(e *encoder, ds []uint64) {
	e.uvarint(uint64(len(ds)))
	for _, d := range ds {
		e.buf = binary.LittleEndian.AppendUint64(e.buf, d)
	}
}

func (e *encoder) uvarint(v uint64) { e.buf = binary.AppendUvarint(e.buf, v) }
func (e *encoder) varint(v int64)   { e.buf = binary.AppendVarint(e.buf, v) }
func (e *encoder) byte(v uint8)     { e.buf = append(e.buf, v) }
func (e *encoder) raw(s string)     { e.uvarint(uint64(len(s))); e.buf = append(e.buf, s...) }
func (e *encoder) ref(r strRef)     { e.uvarint(uint64(r.off)); e.uvarint(uint64(r.n)) }

// strtab is the string table of an index being built.
type strtab struct {
	data     []byte
	at       map[string]uint64
	overflow bool
}

// ref interns s.
func (t *strtab) ref(s string) strRef {
	if s == "" {
		return strRef{}
	}
	off, ok := t.at[s]
	if !ok {
		off = uint64(len(t.data))
		if off+uint64(len(s)) > math.MaxUint32 {
			t.overflow = true
			return strRef{}
		}
		t.data = append(t.data, s...)
		t.at[s] = off
	}
	return strRef{uint32(off), uint32(len(s))}
}

func (ix *Index) payload() []byte {
	e := &encoder{buf: make([]byte, 0, 64+len(ix.strtab)+len(ix.recs)*24+len(ix.dirents)*8)}
	encodeIdentity(e, ix.Source)
	e.byte(uint8(ix.Codec))
	e.uvarint(uint64(ix.TarSize))
	e.uvarint(uint64(ix.Span))
	e.uvarint(uint64(ix.End))
	e.uvarint(uint64(len(ix.Checkpoints)))
	for _, cp := range ix.Checkpoints {
		encodeCheckpoint(e, cp)
	}
	encodeDigests(e, ix.Digests)
	e.raw(ix.strtab)
	e.uvarint(uint64(len(ix.owners)))
	for _, o := range ix.owners {
		e.ref(o.uname)
		e.ref(o.gname)
	}
	e.uvarint(uint64(len(ix.recs)))
	for i := range ix.recs {
		r := &ix.recs[i]
		e.uvarint(uint64(r.parent))
		e.ref(r.name)
		e.byte(uint8(r.typ))
		if r.sparse {
			e.byte(1)
		} else {
			e.byte(0)
		}
		e.uvarint(uint64(r.mode))
		e.uvarint(uint64(r.uid))
		e.uvarint(uint64(r.gid))
		e.uvarint(uint64(r.owner))
		e.uvarint(uint64(r.size))
		e.varint(r.mtime)
		e.uvarint(uint64(r.mtimeNsec))
		e.uvarint(uint64(r.dataOff))
		e.uvarint(uint64(r.nlink))
		e.uvarint(uint64(r.extra))
		e.uvarint(uint64(r.childFirst))
		e.uvarint(uint64(r.childCount))
	}
	e.uvarint(uint64(len(ix.extras)))
	for _, x := range ix.extras {
		e.varint(x.atime)
		e.uvarint(uint64(x.atimeNsec))
		e.varint(x.ctime)
		e.uvarint(uint64(x.ctimeNsec))
		e.ref(x.link)
		e.uvarint(uint64(x.devmajor))
		e.uvarint(uint64(x.devminor))
		e.uvarint(uint64(x.xattrFirst))
		e.uvarint(uint64(x.xattrCount))
		e.uvarint(uint64(x.sparseFirst))
		e.uvarint(uint64(x.sparseCount))
	}
	e.uvarint(uint64(len(ix.dirents)))
	for _, d := range ix.dirents {
		e.ref(d.name)
		e.uvarint(uint64(d.id))
	}
	e.uvarint(uint64(len(ix.xattrs)))
	for _, x := range ix.xattrs {
		e.ref(x.name)
		e.ref(x.value)
	}
	e.uvarint(uint64(len(ix.sparse)))
	for _, c := range ix.sparse {
		e.uvarint(uint64(c.Offset))
		e.uvarint(uint64(c.Length))
	}
	e.uvarint(uint64(len(ix.memberDigests)))
	for _, d := range ix.memberDigests {
		e.buf = binary.LittleEndian.AppendUint64(e.buf, d)
	}
	e.uvarint(uint64(len(ix.Notes)))
	for _, n := range ix.Notes {
		e.raw(n.Message)
		e.raw(n.Reason)
		e.uvarint(uint64(n.Count))
		e.raw(n.Example)
	}
	return e.buf
}

// Unmarshal decodes an index file. Every count, offset and reference is
// checked: a corrupt or hostile file gives ErrBadIndex, never a panic.
func Unmarshal(data []byte) (*Index, error) {
	if len(data) < headerSize+sumSize || !bytes.Equal(data[:16], magic[:]) {
		return nil, fmt.Errorf("%w: not a tarmount index", ErrBadIndex)
	}
	if v := binary.LittleEndian.Uint32(data[16:]); v != formatVersion {
		return nil, fmt.Errorf("%w: version %d (this tarmount reads %d; build a new index with tarmount index)", ErrVersion, v, formatVersion)
	}
	n := binary.LittleEndian.Uint64(data[24:])
	if n != uint64(len(data)-headerSize-sumSize) {
		return nil, fmt.Errorf("%w: length mismatch (truncated file?)", ErrBadIndex)
	}
	sum := sha256.Sum256(data[:len(data)-sumSize])
	if !bytes.Equal(sum[:], data[len(data)-sumSize:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrBadIndex)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxPayload))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	payload, err := dec.DecodeAll(data[headerSize:len(data)-sumSize], nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadIndex, err)
	}
	return decodePayload(payload)
}

type decoder struct {
	buf    []byte
	pos    int
	strtab string
	err    error
}

func (d *decoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: bad %s at payload offset %d", ErrBadIndex, what, d.pos)
	}
}

func (d *decoder) uvarint(what string) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.buf[d.pos:])
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.pos += n
	return v
}

// bounded reads a uvarint that must not exceed max.
func (d *decoder) bounded(what string, max uint64) uint64 {
	v := d.uvarint(what)
	if v > max {
		d.fail(what)
		return 0
	}
	return v
}

func (d *decoder) varint(what string) int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.buf[d.pos:])
	if n <= 0 {
		d.fail(what)
		return 0
	}
	d.pos += n
	return v
}

func (d *decoder) byte(what string) uint8 {
	if d.err != nil || d.pos >= len(d.buf) {
		d.fail(what)
		return 0
	}
	d.pos++
	return d.buf[d.pos-1]
}

func (d *decoder) bytes(what string, n uint64) []byte {
	if d.err != nil || n > uint64(len(d.buf)-d.pos) {
		d.fail(what)
		return nil
	}
	b := d.buf[d.pos : d.pos+int(n)]
	d.pos += int(n)
	return b
}

func (d *decoder) raw(what string) string {
	return string(d.bytes(what, d.uvarint(what)))
}

func (d *decoder) ref(what string) strRef {
	off, n := d.uvarint(what), d.uvarint(what)
	if d.err != nil {
		return strRef{}
	}
	if off > uint64(len(d.strtab)) || n > uint64(len(d.strtab))-off {
		d.fail(what)
		return strRef{}
	}
	return strRef{uint32(off), uint32(n)}
}

// count reads an element count that the remaining payload can hold, at
// minSize bytes an element.
func (d *decoder) count(what string, minSize int) int {
	v := d.uvarint(what)
	if d.err != nil || v > uint64(len(d.buf)-d.pos)/uint64(minSize) {
		d.fail(what)
		return 0
	}
	return int(v)
}

// Head is what the start of an index file says: the identity of the
// archive it was built for, its codec and the size of its tar stream.
type Head struct {
	Source  fetch.Identity
	Codec   Codec
	TarSize int64
}

// ReadHead reads the head of the index file at path without loading the
// index (which may be large): what tarmount cache ls shows of each.
func ReadHead(path string) (Head, error) {
	f, err := os.Open(path)
	if err != nil {
		return Head{}, err
	}
	defer f.Close()
	var hdr [headerSize]byte
	if _, err := io.ReadFull(f, hdr[:]); err != nil || !bytes.Equal(hdr[:16], magic[:]) {
		return Head{}, fmt.Errorf("%w: %s is not a tarmount index", ErrBadIndex, path)
	}
	if v := binary.LittleEndian.Uint32(hdr[16:]); v != formatVersion {
		return Head{}, fmt.Errorf("%w: %s: version %d (this tarmount reads %d)", ErrVersion, path, v, formatVersion)
	}
	body := io.LimitReader(f, int64(binary.LittleEndian.Uint64(hdr[24:]))) // not the checksum after it
	dec, err := zstd.NewReader(body, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(maxPayload))
	if err != nil {
		return Head{}, err
	}
	defer dec.Close()
	// The identity's strings are bounded by the decoder's checks; 64 KiB
	// holds any head an index of ours starts with.
	buf := make([]byte, 64<<10)
	n, err := io.ReadFull(dec, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return Head{}, fmt.Errorf("%w: %s: %v", ErrBadIndex, path, err)
	}
	d := &decoder{buf: buf[:n]}
	var h Head
	h.Source = decodeIdentity(d)
	h.Codec = Codec(d.byte("codec"))
	h.TarSize = int64(d.bounded("tar size", math.MaxInt64))
	if d.err != nil {
		return Head{}, fmt.Errorf("%s: %w", path, d.err)
	}
	return h, nil
}

func decodeIdentity(d *decoder) fetch.Identity {
	var id fetch.Identity
	id.Size = int64(d.bounded("size", math.MaxInt64))
	id.ETag = d.raw("etag")
	if lm := d.varint("last-modified"); lm != 0 {
		id.LastModified = time.Unix(0, lm)
	}
	id.VersionID = d.raw("version id")
	return id
}

func decodePayload(p []byte) (*Index, error) {
	d := &decoder{buf: p}
	ix := &Index{}
	ix.Source = decodeIdentity(d)
	ix.Codec = Codec(d.byte("codec"))
	ix.TarSize = int64(d.bounded("tar size", math.MaxInt64))
	ix.Span = int64(d.bounded("span", math.MaxInt64))
	ix.End = CompressedOffset(d.bounded("end", uint64(ix.Source.Size)))
	if !ix.Codec.known() {
		d.fail("codec")
	}
	ix.Checkpoints = make([]Checkpoint, d.count("checkpoints", 6))
	for i := range ix.Checkpoints {
		cp := &ix.Checkpoints[i]
		cp.Kind = inflate.Kind(d.byte("checkpoint kind"))
		cp.In = CompressedOffset(d.bounded("checkpoint", uint64(ix.End)))
		cp.Bit = d.byte("checkpoint bit")
		cp.Flags = d.byte("checkpoint flags")
		cp.Out = UncompressedOffset(d.bounded("checkpoint", uint64(ix.TarSize)))
		if w := d.bytes("checkpoint window", d.uvarint("checkpoint window")); len(w) > 0 {
			cp.window = w
		}
		if cp.Bit > 7 || !kindAllowed(ix.Codec, cp.Kind) ||
			i == 0 && cp.Out != 0 || i > 0 && cp.Out <= ix.Checkpoints[i-1].Out {
			d.fail("checkpoint")
		}
	}
	if ix.Codec.compressed() && len(ix.Checkpoints) == 0 {
		d.fail("checkpoints")
	}
	ix.Digests = make([]uint64, d.count("digests", 8))
	for i := range ix.Digests {
		if b := d.bytes("digest", 8); b != nil {
			ix.Digests[i] = binary.LittleEndian.Uint64(b)
		}
	}
	if len(ix.Digests) != len(ix.Checkpoints) {
		d.fail("digest count")
	}
	ix.strtab = d.raw("string table")
	d.strtab = ix.strtab
	ix.owners = make([]ownerRec, d.count("owners", 4))
	for i := range ix.owners {
		ix.owners[i] = ownerRec{d.ref("uname"), d.ref("gname")}
	}
	n := d.count("entries", 17)
	if n == 0 {
		d.fail("entries")
	}
	ix.recs = make([]rec, n)
	for i := range ix.recs {
		r := &ix.recs[i]
		r.parent = EntryID(d.bounded("parent", uint64(n-1)))
		r.name = d.ref("name")
		r.typ = Type(d.byte("type"))
		r.sparse = d.byte("sparse") != 0
		r.mode = uint16(d.bounded("mode", 0o7777))
		r.uid = uint32(d.bounded("uid", math.MaxUint32))
		r.gid = uint32(d.bounded("gid", math.MaxUint32))
		r.owner = uint32(d.bounded("owner", uint64(max(len(ix.owners), 1)-1)))
		r.size = int64(d.bounded("size", math.MaxInt64))
		r.mtime = d.varint("mtime")
		r.mtimeNsec = uint32(d.bounded("mtime", nanosPerSecond-1))
		r.dataOff = int64(d.bounded("data offset", uint64(ix.TarSize)))
		r.nlink = uint32(d.bounded("nlink", math.MaxUint32))
		r.extra = uint32(d.bounded("extra", math.MaxUint32))
		r.childFirst = uint32(d.bounded("children", math.MaxUint32))
		r.childCount = uint32(d.bounded("children", math.MaxUint32))
		if r.typ < TypeReg || r.typ > TypeFIFO {
			d.fail("type")
		}
	}
	ix.extras = make([]extraRec, d.count("extras", 11))
	for i := range ix.extras {
		x := &ix.extras[i]
		x.atime = d.varint("atime")
		x.atimeNsec = uint32(d.bounded("atime", nanosPerSecond-1))
		x.ctime = d.varint("ctime")
		x.ctimeNsec = uint32(d.bounded("ctime", nanosPerSecond-1))
		x.link = d.ref("link")
		x.devmajor = uint32(d.bounded("devmajor", math.MaxUint32))
		x.devminor = uint32(d.bounded("devminor", math.MaxUint32))
		x.xattrFirst = uint32(d.bounded("xattrs", math.MaxUint32))
		x.xattrCount = uint32(d.bounded("xattrs", math.MaxUint32))
		x.sparseFirst = uint32(d.bounded("sparse", math.MaxUint32))
		x.sparseCount = uint32(d.bounded("sparse", math.MaxUint32))
	}
	ix.dirents = make([]direntRec, d.count("dirents", 3))
	for i := range ix.dirents {
		ix.dirents[i] = direntRec{name: d.ref("dirent name"), id: EntryID(d.bounded("dirent id", uint64(n-1)))}
	}
	ix.xattrs = make([]xattrRec, d.count("xattrs", 4))
	for i := range ix.xattrs {
		ix.xattrs[i] = xattrRec{d.ref("xattr name"), d.ref("xattr value")}
	}
	ix.sparse = make([]SparseChunk, d.count("sparse", 2))
	for i := range ix.sparse {
		ix.sparse[i] = SparseChunk{Offset: int64(d.bounded("sparse offset", math.MaxInt64)), Length: int64(d.bounded("sparse length", math.MaxInt64))}
	}
	if k := d.count("member digests", 8); k > 0 {
		if k != n {
			d.fail("member digest count")
		}
		ix.memberDigests = make([]uint64, k)
		for i := range ix.memberDigests {
			if b := d.bytes("member digest", 8); b != nil {
				ix.memberDigests[i] = binary.LittleEndian.Uint64(b)
			}
		}
	}
	if k := d.count("notes", 4); k > 0 {
		if k > maxNotes {
			d.fail("notes")
		}
		for i := 0; i < k && d.err == nil; i++ {
			n := Note{Message: d.raw("note"), Reason: d.raw("note"), Count: int(d.bounded("note", math.MaxInt32)), Example: d.raw("note")}
			if !slices.Contains([]string{noteSkipped, noteRenamed, noteIgnored, noteDated}, n.Message) {
				d.fail("note")
			}
			ix.Notes = append(ix.Notes, n)
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if d.pos != len(p) {
		return nil, fmt.Errorf("%w: %d trailing bytes in payload", ErrBadIndex, len(p)-d.pos)
	}
	if err := ix.validate(); err != nil {
		return nil, err
	}
	return ix, nil
}

// validate checks the references between records, so that accessors never
// index out of range, and the order that lookups rely on.
func (ix *Index) validate() error {
	bad := func(what string, id int) error {
		return fmt.Errorf("%w: entry %d: bad %s", ErrBadIndex, id, what)
	}
	if len(ix.owners) == 0 || ix.recs[RootID].typ != TypeDir {
		return bad("root", 0)
	}
	for _, x := range ix.extras {
		if uint64(x.xattrFirst)+uint64(x.xattrCount) > uint64(len(ix.xattrs)) ||
			uint64(x.sparseFirst)+uint64(x.sparseCount) > uint64(len(ix.sparse)) {
			return fmt.Errorf("%w: bad extra record", ErrBadIndex)
		}
	}
	for i := range ix.recs {
		r := &ix.recs[i]
		if r.extra > uint32(len(ix.extras)) {
			return bad("extra", i)
		}
		if uint64(r.childFirst)+uint64(r.childCount) > uint64(len(ix.dirents)) {
			return bad("children range", i)
		}
		if r.childCount > 0 && r.typ != TypeDir {
			return bad("children of a non-directory", i)
		}
		kids := ix.dirents[r.childFirst : r.childFirst+r.childCount]
		for j := 1; j < len(kids); j++ {
			if ix.str(kids[j-1].name) >= ix.str(kids[j].name) {
				return bad("directory order", i)
			}
		}
		if r.typ != TypeReg {
			continue
		}
		stored := r.size
		if r.sparse {
			stored = 0
			end := int64(0)
			x := ix.extra(r)
			for _, c := range ix.sparse[x.sparseFirst : x.sparseFirst+x.sparseCount] {
				if c.Offset < end || c.Length > r.size || c.Offset > r.size-c.Length {
					return bad("sparse map", i)
				}
				end = c.Offset + c.Length
				stored += c.Length
			}
		}
		if r.dataOff > ix.TarSize || stored > ix.TarSize-r.dataOff {
			return bad("data range", i)
		}
	}
	return nil
}

// Save writes ix to path atomically (a temporary file renamed into place).
func (ix *Index) Save(path string) error {
	data, err := ix.Marshal()
	if err != nil {
		return err
	}
	return SaveFile(path, data)
}

// SaveFile writes data, an index as Marshal encodes it (an index file
// fetched whole, say), to path as Save does: under a temporary name,
// then renamed, so that a reader never sees half of it.
func SaveFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := atomicfile.CreateTemp(filepath.Dir(path), ".tmp-*.idx")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// Load reads an index file.
func Load(path string) (*Index, error) {
	data, err := os.ReadFile(path) // one read of the size stat gives
	if err != nil {
		return nil, err
	}
	ix, err := Unmarshal(data)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", path, err)
	}
	return ix, nil
}
