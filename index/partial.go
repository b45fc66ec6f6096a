package index

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index/inflate"
	"github.com/tarmount/tarmount/index/tarscan"
)

// A partial index: what a first pass that stopped early (unmount, a
// signal, a crash) had built, so that the next pass over the same object
// resumes where it stood and fetches only the rest. The pass appends to
// it as it goes (partialLog), so that a crash loses at most the last span:
//
//	magic "TARMOUNT-PART\n\0\0" (16 bytes), version u32 LE
//	records, each: type (byte), payload length (uvarint), payload,
//	               CRC-32C of the payload (u32 LE)
//	  'I' once, first: identity (as in the index file), codec, span
//	  'H' a member's header (tarscan.Header, PAX left out), in archive
//	      order, with the digest of its data (digest.go; 0: none)
//	  'R' a resume point: the members before it (count), where the next
//	      member starts (offset, pax global records in force), the
//	      checkpoints (with the pass's state there: a gzip member's or lz4
//	      frame's checksums so far) and span digests recorded since the
//	      previous 'R'
//	  'T' the tail, written once, when ctx stops the pass: the number of
//	      the resume point it follows (1 for the first 'R'), where its
//	      checkpoint starts in the archive as stored (Partial.In), and
//	      then, to the end of the payload, the archive's bytes from there
//	      on that the pass had read and still held (Build's
//	      BuildOptions.Cached), at most maxTailBytes
//
// A resume point is written at the first member header after each new
// checkpoint (every span of a plain tar): the pass resumes at its latest
// checkpoint, decodes to the member's header and scans on from there. The
// checkpoint's span digest is computed again, and so are the later
// checkpoints: a resumed pass ends with the same index as one that never
// stopped. A torn or damaged record ends the file: the latest resume point
// before it is used. Only codecs whose pass can start at a checkpoint
// write one (codec.resume: plain tar, gzip, lz4, zstd at frame starts,
// bzip2 and xz at block starts), and only up to the first span served
// from the decoded copy (a zstd frame too big to decode per read).
//
// Inside such spans, a codec that follows its decoder's state there
// (codec.midKind: zstd, at block boundaries) writes more resume points:
// one when ctx stops the pass, and, so that a crash keeps some too, one
// as the pass goes every midEvery bytes of output (partialLog.midDue).
// Each is an 'R' record whose payload ends with that mid point (a
// checkpoint of kind midKind, then its pass state) after the digests.
// The resumed pass starts at the mid point rather than the latest
// checkpoint, whose span digest it goes on computing from the state kept
// in the mid point; the mid point never enters an index.
// The rule for the bytes before it: they are served from the decoded
// copy that the stopped pass wrote, which its caller keeps beside the
// partial index and hands to the resumed pass as BuildOptions.Local
// (Partial.LocalBefore says up to where it must hold the bytes); the span
// digests check every read of it. A caller without that copy does not
// use the mid point (Partial.WithoutLocal): the pass starts over.
//
// The tail spares the next pass fetching again what this one had read
// past its latest checkpoint: a whole xz block (24 MiB of tar from
// xz -T2 -6), for one. The next pass reads it first, then fetches from
// Partial.From on. It is used only when it follows the latest resume point
// in the file and names it and its offset; its CRC, the identity record
// and the checks of the pass itself (the codec's checksums, the span
// digests computed again) stand against wrong bytes. A torn, damaged or
// stale tail is left unused: the pass fetches those bytes again. A crash
// writes no tail.

const (
	partialVersion = 4 // 3: the tail record; 4: mid points
	partialMagic   = "TARMOUNT-PART\n\x00\x00"
)

// maxTailBytes bounds the tail a stopped pass keeps: a whole xz block of
// xz -T2 -6 (24 MiB of tar, at most a little more stored) fits, and the
// memory the tail takes while it is written and read back stays small
// beside the block cache it comes from (half of --cache-mem, 128 MiB by
// default).
const maxTailBytes = 32 << 20

// tailChunk is the unit in which the tail is copied from the block cache:
// the tail ends at the first chunk that is not all cached.
const tailChunk = 64 << 10

// Record types of a partial index.
const (
	recIdentity = 'I'
	recHeader   = 'H'
	recResume   = 'R'
	recTail     = 'T'
)

// ErrNoPartial is returned by LoadPartial when there is no partial index
// to resume from: no file, one for another version of the object, or one
// without a resume point.
var ErrNoPartial = errors.New("index: no partial index to resume from")

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// Partial is a partial index read back (LoadPartial), to resume a pass
// with BuildOptions.Resume.
type Partial struct {
	Source fetch.Identity
	Codec  Codec
	Span   int64

	headers     []*tarscan.Header // members before scan.Offset
	sums        []memberSum       // the digests of their data (digest.go)
	checkpoints []Checkpoint      // up to the one the pass resumes at
	digests     []uint64          // of the spans before it
	scan        tarscan.State
	end         int64  // file offset after the latest resume point
	points      int    // resume points read
	tail        []byte // the archive's bytes from In on, kept by the stopped pass
	// mid, if set, is where the pass resumes inside the span of the
	// latest checkpoint (codec.midKind).
	mid *Checkpoint
}

// In is where the resumed pass reads the archive as stored from: its
// latest checkpoint, or for a plain tar the next member.
func (p *Partial) In() int64 {
	if p.mid != nil {
		return int64(p.mid.In)
	}
	if n := len(p.checkpoints); n > 0 {
		return int64(p.checkpoints[n-1].In)
	}
	return p.scan.Offset
}

// From is where the resumed pass fetches the archive from: In, past the
// bytes the stopped pass kept in its tail (Build reads those first).
func (p *Partial) From() int64 { return p.In() + int64(len(p.tail)) }

// LocalBefore is where the resumed pass starts writing BuildOptions.Local:
// the local copy must hold the decoded bytes before it, as the stopped
// pass wrote them (the package doc of partial.go says why). It is 0 when
// the pass resumes at a checkpoint, needing no bytes before it.
func (p *Partial) LocalBefore() int64 {
	if p.mid == nil {
		return 0
	}
	return int64(p.mid.Out)
}

// ReadsLocal reports whether the resumed pass reads part of the tar
// stream from BuildOptions.Local: it resumes decoding inside a member's
// data, past the member start it scans on from (a mid point written
// when that member's data was too long for the window at its start to
// be held), and reads the bytes between the two from the local copy.
func (p *Partial) ReadsLocal() bool {
	return p.mid != nil && int64(p.mid.Out) > p.scan.Offset
}

// WithoutLocal returns p for a caller that does not have the local copy
// LocalBefore asks for: nil (start over) when p resumes at a mid point.
func (p *Partial) WithoutLocal() *Partial {
	if p.mid != nil {
		return nil
	}
	return p
}

// Next is where the next member starts in the tar stream: the resumed
// pass hands the members from there on to OnMember.
func (p *Partial) Next() int64 { return p.scan.Offset }

// Headers are the members before Next, in archive order. The caller must
// not modify them.
func (p *Partial) Headers() []*tarscan.Header { return p.headers }

// Members is the number of members the pass had read.
func (p *Partial) Members() int { return len(p.headers) }

// LoadPartial reads the partial index at path, if it was written for the
// object id and holds a resume point; else it fails with ErrNoPartial (or
// a read error).
func LoadPartial(path string, id fetch.Identity) (*Partial, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, ErrNoPartial
	}
	if err != nil {
		return nil, err
	}
	if len(data) < len(partialMagic)+4 || string(data[:len(partialMagic)]) != partialMagic ||
		binary.LittleEndian.Uint32(data[len(partialMagic):]) != partialVersion {
		return nil, fmt.Errorf("%w: %s is not a partial index of this version", ErrNoPartial, path)
	}
	pos := len(partialMagic) + 4
	p := &Partial{}
	var headers []*tarscan.Header
	var digests []uint64 // of headers' data, 0 for none
	known := false
	for pos < len(data) {
		typ, payload, next, ok := nextRecord(data, pos)
		if !ok {
			break // torn or damaged: what came before stands
		}
		pos = next
		d := &decoder{buf: payload}
		switch {
		case typ == recIdentity && !known:
			p.Source = decodeIdentity(d)
			p.Codec = Codec(d.byte("codec"))
			p.Span = int64(d.uvarint("span"))
			if d.err != nil || !p.Source.Equal(id) || !p.Codec.known() {
				return nil, fmt.Errorf("%w: %s was written for another version of the archive", ErrNoPartial, path)
			}
			known = true
		case typ == recHeader && known:
			h := decodeHeader(d)
			digest := d.uvarint("digest")
			if d.err != nil {
				return finishPartial(p, path)
			}
			headers, digests = append(headers, h), append(digests, digest)
		case typ == recResume && known:
			if !p.applyResume(d, headers, digests) {
				return finishPartial(p, path)
			}
			p.end = int64(pos)
			p.points++
			p.tail = nil // it was for an older resume point
		case typ == recTail && known:
			p.applyTail(d)
		default:
			return finishPartial(p, path)
		}
	}
	return finishPartial(p, path)
}

// finishPartial returns p if it holds a resume point.
func finishPartial(p *Partial, path string) (*Partial, error) {
	if p.end == 0 {
		return nil, fmt.Errorf("%w: %s has no resume point", ErrNoPartial, path)
	}
	return p, nil
}

// nextRecord returns the record at pos, and where the next one starts.
func nextRecord(data []byte, pos int) (typ byte, payload []byte, next int, ok bool) {
	if pos >= len(data) {
		return 0, nil, 0, false
	}
	typ = data[pos]
	n, k := binary.Uvarint(data[pos+1:])
	if k <= 0 || n > uint64(len(data)) {
		return 0, nil, 0, false
	}
	start := pos + 1 + k
	end := start + int(n)
	if end+4 > len(data) {
		return 0, nil, 0, false
	}
	payload = data[start:end]
	if crc32.Checksum(payload, crcTable) != binary.LittleEndian.Uint32(data[end:]) {
		return 0, nil, 0, false
	}
	return typ, payload, end + 4, true
}

// applyTail reads a tail record: it is kept when it is for the latest
// resume point read, and ignored otherwise.
func (p *Partial) applyTail(d *decoder) {
	point, in := d.uvarint("resume point"), d.uvarint("tail offset")
	tail := d.buf[min(d.pos, len(d.buf)):]
	if d.err != nil || p.end == 0 || point != uint64(p.points) || in != uint64(p.In()) ||
		len(tail) > maxTailBytes || in+uint64(len(tail)) > uint64(max(p.Source.Size, 0)) {
		return
	}
	p.tail = tail
}

// applyResume reads a resume point whose members are headers[:count],
// with the digests of their data; it reports false when the record is not
// valid.
func (p *Partial) applyResume(d *decoder, headers []*tarscan.Header, memberDigests []uint64) bool {
	count := d.uvarint("members")
	var st tarscan.State
	st.Offset = int64(d.uvarint("scan offset"))
	for range d.count("global records", 1) {
		st.Global = append(st.Global, d.raw("global record"))
	}
	cps := append([]Checkpoint(nil), p.checkpoints...)
	for range d.count("checkpoints", 5) {
		cp := Checkpoint{Kind: inflate.Kind(d.byte("kind")), In: CompressedOffset(d.uvarint("in")), Bit: d.byte("bit"),
			Flags: d.byte("flags"), Out: UncompressedOffset(d.uvarint("out"))}
		if w := d.raw("window"); w != "" {
			cp.window = []byte(w)
		}
		if st := d.raw("pass state"); st != "" {
			cp.pass = []byte(st)
		}
		cps = append(cps, cp)
	}
	spanDigests := append([]uint64(nil), p.digests...)
	for range d.count("digests", 8) {
		spanDigests = append(spanDigests, binary.LittleEndian.Uint64(d.bytes("digest", 8)))
	}
	var mid *Checkpoint
	if d.err == nil && d.pos < len(d.buf) {
		mid = &Checkpoint{Kind: inflate.Kind(d.byte("kind")), In: CompressedOffset(d.uvarint("in")), Bit: d.byte("bit"),
			Flags: d.byte("flags"), Out: UncompressedOffset(d.uvarint("out"))}
		mid.window, mid.pass = []byte(d.raw("window")), []byte(d.raw("pass state"))
		if d.err != nil || d.pos != len(d.buf) || len(cps) == 0 || mid.Kind == 0 || mid.Kind != p.Codec.def().midKind ||
			mid.Bit != 0 || mid.Out < cps[len(cps)-1].Out || mid.In < cps[len(cps)-1].In {
			return false
		}
	}
	for i := len(p.checkpoints); i < len(cps); i++ {
		if cp := cps[i]; cp.Bit > 7 || !kindAllowed(p.Codec, cp.Kind) || i == 0 && cp.Out != 0 || i > 0 && cp.Out <= cps[i-1].Out {
			return false
		}
	}
	switch {
	case d.err != nil, count > uint64(len(headers)):
		return false
	case p.Codec.compressed() && (len(cps) == 0 || len(spanDigests) != len(cps)-1 || mid == nil && int64(cps[len(cps)-1].Out) > st.Offset):
		return false
	case !p.Codec.compressed() && len(cps) != 0:
		return false
	}
	p.headers, p.checkpoints, p.digests, p.scan, p.mid = headers[:count], cps, spanDigests, st, mid
	p.sums = p.sums[:0]
	for i, h := range p.headers {
		if s := memberDigests[i]; s != 0 {
			p.sums = append(p.sums, memberSum{UncompressedOffset(h.DataOffset), s})
		}
	}
	return true
}

// partialLog appends to a partial index during a pass (BuildOptions.Partial).
// Write errors are reported once, by Close; the pass goes on without it.
// It is not safe for concurrent use: the pass writes it.
type partialLog struct {
	path    string
	f       *os.File
	w       *bufio.Writer
	buf     []byte // the record being written
	hbuf    []byte // the header record's payload being encoded
	err     error
	members int    // headers written
	points  int    // resume points in the file
	cps     int    // checkpoints written
	digests int    // digests written
	lastOut int64  // plain tar: scan offset of the latest resume point
	in      int64  // where the latest resume point's checkpoint starts (Partial.In)
	held    []byte // the tail the pass resumed with, until a resume point follows: the start of its own
	local   bool   // a span served from the decoded copy was reached: no more resume points at checkpoints
	// mid, if set, is the pass decoder that gives a mid point when ctx
	// stops the pass; cand is the member start it was last told of.
	mid      midResumer
	cand     midCandidate
	midTried int64 // tar offset of the latest mid point that could not be made as the pass went
	// floor, if set, is BuildOptions.Holds: a resume point is written
	// only once it says the caller holds what comes before the member
	// start the point resumes at; waiting is one made before it did.
	floor   func(need int64) bool
	waiting *heldPoint
}

// heldPoint is a resume point made before the caller held what comes
// before it (partialLog.floor): it is written once the caller does.
type heldPoint struct {
	mid  *Checkpoint // nil: at the latest checkpoint before cand
	cand midCandidate
}

// midResumer is a pass decoder that can resume inside a span served from
// the decoded copy (codec.midKind).
type midResumer interface {
	// memberAt is told where each member starts in the tar stream.
	memberAt(off int64)
	// midPoint returns a resume point at or before the latest member
	// start it was told of, with its window and pass state; false when
	// it has none.
	midPoint() (Checkpoint, bool)
	// latestPoint returns a resume point as near the end of the output
	// so far as it has one, after the latest member start it was told
	// of, or false.
	latestPoint() (Checkpoint, bool)
	// midEvery is how much tar output a mid point written as the pass
	// goes must follow the latest resume point by at least (0: none is
	// written before the pass stops): each costs compressing a window.
	midEvery() int64
	// pointWritten is told of each resume point written, at tar offset
	// off (where the next member starts).
	pointWritten(off int64)
	// keepLess says that the pass keeps what a mid point needs only
	// before one comes due as the pass goes (the log has a floor).
	keepLess()
}

// midCandidate is a member start a mid point may resume at.
type midCandidate struct {
	ok      bool
	members int
	st      tarscan.State
}

// createPartialLog starts a new partial index at path (replacing one that
// is there) for a pass over the object id in codec, with checkpoints every
// span bytes.
func createPartialLog(path string, id fetch.Identity, codec Codec, span int64) (*partialLog, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	l := &partialLog{path: path, f: f, w: bufio.NewWriterSize(f, 256<<10)}
	var head [len(partialMagic) + 4]byte
	copy(head[:], partialMagic)
	binary.LittleEndian.PutUint32(head[len(partialMagic):], partialVersion)
	l.w.Write(head[:])
	e := &encoder{}
	encodeIdentity(e, id)
	e.byte(uint8(codec))
	e.uvarint(uint64(span))
	l.record(recIdentity, e.buf)
	return l, l.flush()
}

// appendPartialLog continues the partial index at path that p was read
// from, after its latest resume point (what followed it is dropped).
func appendPartialLog(path string, p *Partial) (*partialLog, error) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(p.end); err == nil {
		_, err = f.Seek(p.end, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return &partialLog{path: path, f: f, w: bufio.NewWriterSize(f, 256<<10), members: len(p.headers), points: p.points,
		cps: len(p.checkpoints), digests: len(p.digests), lastOut: p.scan.Offset, in: p.In(), held: p.tail}, nil
}

// record appends one record.
func (l *partialLog) record(typ byte, payload []byte) {
	if l.err != nil {
		return
	}
	l.buf = append(l.buf[:0], typ)
	l.buf = binary.AppendUvarint(l.buf, uint64(len(payload)))
	if _, l.err = l.w.Write(l.buf); l.err == nil {
		_, l.err = l.w.Write(payload)
	}
	if l.err == nil {
		l.buf = binary.LittleEndian.AppendUint32(l.buf[:0], crc32.Checksum(payload, crcTable))
		_, l.err = l.w.Write(l.buf)
	}
}

// header logs the next member, once the pass has read it, with the
// digest of its data (0: none, see digest.go).
func (l *partialLog) header(h *tarscan.Header, digest uint64) {
	if l.err != nil {
		return
	}
	e := &encoder{buf: l.hbuf[:0]}
	encodeHeader(e, h)
	e.uvarint(digest)
	l.hbuf = e.buf
	l.record(recHeader, l.hbuf)
	l.members++
}

// resumeAt returns the checkpoint of ix that a pass resumes at to scan
// the member that starts at off: the latest at or before off (-1: none).
func resumeAt(ix *Index, off int64) int {
	k := len(ix.Checkpoints) - 1
	for k >= 0 && int64(ix.Checkpoints[k].Out) > off {
		k--
	}
	return k
}

// due reports whether the member starting at st.Offset gives a new
// resume point: a checkpoint at or before it not logged yet (for a plain
// tar, a span since the latest resume point).
func (l *partialLog) due(ix *Index, st tarscan.State) bool {
	if l.members == 0 {
		return false // resuming before the first member is starting again
	}
	if !ix.Codec.compressed() {
		return st.Offset-l.lastOut >= ix.Span
	}
	k := resumeAt(ix, st.Offset)
	if k < max(l.cps, 1) {
		return false // nothing new, or the archive's start: no saving
	}
	for _, cp := range ix.Checkpoints[l.cps : k+1] {
		if cp.Kind == kindLocal {
			// Its span is read from the decoded copy: resume points at
			// checkpoints end here (a mid point may follow, at the end).
			l.local = true
			return false
		}
	}
	return true
}

// resume logs a resume point at st, before the member that starts there
// (due said so), and makes it durable against a crash of the process.
func (l *partialLog) resume(ix *Index, st tarscan.State) {
	l.write(ix, st, l.members, resumeAt(ix, st.Offset), nil) // k is -1 for a plain tar
}

// write logs a resume point at st, after members members, whose latest
// checkpoint is ix's k-th (and, if not nil, which resumes at mid, inside
// its span).
func (l *partialLog) write(ix *Index, st tarscan.State, members, k int, mid *Checkpoint) {
	e := &encoder{}
	e.uvarint(uint64(members))
	e.uvarint(uint64(st.Offset))
	e.uvarint(uint64(len(st.Global)))
	for _, g := range st.Global {
		e.raw(g)
	}
	e.uvarint(uint64(k + 1 - l.cps))
	for _, cp := range ix.Checkpoints[l.cps : k+1] {
		encodeCheckpoint(e, cp)
		e.raw(string(cp.pass))
	}
	digests := max(k, 0) // of the spans before checkpoint k
	encodeDigests(e, ix.Digests[l.digests:digests])
	if mid != nil {
		encodeCheckpoint(e, *mid)
		e.raw(string(mid.pass))
	}
	l.record(recResume, e.buf)
	if err := l.flush(); err == nil {
		l.cps, l.digests, l.lastOut = k+1, digests, st.Offset
		l.points++
		if l.mid != nil {
			l.mid.pointWritten(st.Offset)
		}
		l.in, l.held = st.Offset, nil
		switch {
		case mid != nil:
			l.in = int64(mid.In)
		case k >= 0:
			l.in = int64(ix.Checkpoints[k].In)
		}
	}
}

// writeMid logs the mid point the pass decoder gives (when ctx stopped
// the pass, or midDue said so): the next pass scans on from the latest
// member start the decoder was told of, and resumes decoding at or before
// it, or else (the member's data is too long for the window there to be
// held) at one of the newest boundaries, reading the bytes from the
// member's start to there from the decoded copy. It reports whether it
// logged one.
func (l *partialLog) writeMid(ix *Index) bool {
	if l.err != nil || l.mid == nil || !l.cand.ok {
		return false
	}
	mid, ok := l.mid.midPoint()
	if !ok || int64(mid.Out) > l.cand.st.Offset {
		if l.floor != nil {
			// A resume inside a member reads the bytes before it
			// from a decoded copy, which such a caller has not.
			return false
		}
		mid, ok = l.mid.latestPoint()
	}
	if !ok || l.points > 0 && int64(mid.In) <= l.in {
		return false
	}
	if l.floor != nil && !l.floor(l.cand.st.Offset) {
		l.waiting = &heldPoint{mid: &mid, cand: l.cand}
		return true
	}
	return l.writeMidAt(ix, mid, l.cand)
}

// writeMidAt logs the mid point mid for the member start cand.
func (l *partialLog) writeMidAt(ix *Index, mid Checkpoint, cand midCandidate) bool {
	k := resumeAt(ix, int64(mid.Out))
	if k < 0 || k+1 < l.cps {
		return false // before what is logged already
	}
	l.write(ix, cand.st, cand.members, k, &mid)
	return l.err == nil
}

// writeHeld logs the resume point held back, once the caller holds what
// comes before it (floor).
func (l *partialLog) writeHeld(ix *Index) {
	h := l.waiting
	if h == nil || l.err != nil || !l.floor(h.cand.st.Offset) {
		return
	}
	l.waiting = nil
	if h.mid != nil {
		l.writeMidAt(ix, *h.mid, h.cand)
	} else {
		l.write(ix, h.cand.st, h.cand.members, resumeAt(ix, h.cand.st.Offset), nil)
	}
}

// midDue reports whether a mid point is due before the member that
// starts at off, inside spans served from the decoded copy: so that a
// crash, which writes nothing at the end, loses at most the output since
// the latest one. They come at most every midEvery bytes of tar and every
// quarter of the output so far (a few dozen in all, whatever the size),
// and a mid point that could not be made is tried again a span later.
func (l *partialLog) midDue(off, span int64) bool {
	if !l.local || l.waiting != nil {
		return false
	}
	every := l.mid.midEvery()
	return every > 0 && off-l.lastOut >= max(every, off/4) && off-l.midTried >= span
}

// tick is told, now and then, that the scan has read the tar stream to
// pos: a mid point may be due inside a long member's data.
func (l *partialLog) tick(ix *Index, pos int64) {
	l.writeHeld(ix)
	if l.mid != nil && l.err == nil && l.cand.ok && l.midDue(pos, ix.Span) && !l.writeMid(ix) {
		l.midTried = pos
	}
}

// point logs a resume point before the member that the scan, now at st,
// has just returned, when one is due.
func (l *partialLog) point(ix *Index, st tarscan.State) {
	if l.err != nil {
		return
	}
	l.writeHeld(ix)
	if !l.local && l.waiting == nil && l.due(ix, st) {
		if l.floor == nil {
			l.resume(ix, st)
		} else {
			l.waiting = &heldPoint{cand: midCandidate{ok: true, members: l.members, st: tarscan.State{Offset: st.Offset, Global: slices.Clone(st.Global)}}}
		}
	}
	if l.mid != nil && l.members > 0 {
		l.mid.memberAt(st.Offset)
		l.cand = midCandidate{ok: true, members: l.members, st: tarscan.State{Offset: st.Offset, Global: slices.Clone(st.Global)}}
		if l.midDue(st.Offset, ix.Span) && !l.writeMid(ix) {
			l.midTried = st.Offset
		}
	}
}

// end closes the log of a pass that ended with err: it stays, for the
// next pass to resume, only when ctx stopped the pass and it holds a
// resume point. It then ends with the tail: the archive's bytes from the
// latest resume point to stood (where the pass had read to), those it
// holds and those cached has.
func (l *partialLog) end(ctx context.Context, ix *Index, err error, log *slog.Logger, stood int64, cached func(p []byte, off int64) bool) {
	if err != nil && ctx.Err() != nil {
		l.writeHeld(ix)
		l.waiting = nil // what the caller does not hold when the pass stops is lost
		l.writeMid(ix)
		l.waiting = nil
	}
	if err != nil && ctx.Err() != nil && l.points > 0 {
		l.tail(stood, cached)
		if cerr := l.Close(); cerr != nil {
			log.Warn("could not keep the partial index: the next pass starts again", "path", l.path, "err", cerr)
		}
		return
	}
	l.Remove()
}

// tail logs the tail (see end), at most maxTailBytes of it; none when
// none of it is at hand.
func (l *partialLog) tail(stood int64, cached func(p []byte, off int64) bool) {
	n := min(max(stood, l.in+int64(len(l.held)))-l.in, maxTailBytes)
	if l.err != nil || n <= 0 {
		return
	}
	e := &encoder{buf: make([]byte, 0, 2*binary.MaxVarintLen64+int(n))}
	e.uvarint(uint64(l.points))
	e.uvarint(uint64(l.in))
	head := len(e.buf)
	data := e.buf[head : head+int(n)]
	got := int64(copy(data, l.held))
	for cached != nil && got < n {
		k := min(tailChunk-(l.in+got)%tailChunk, n-got)
		if !cached(data[got:got+k], l.in+got) {
			break
		}
		got += k
	}
	if got > 0 {
		l.record(recTail, e.buf[:head+int(got)])
	}
}

func (l *partialLog) flush() error {
	if l.err == nil {
		l.err = l.w.Flush()
	}
	return l.err
}

// Close writes what is buffered and closes the file; it returns the first
// write error.
func (l *partialLog) Close() error {
	err := l.flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Remove closes the log and removes its file: the pass ended (its index
// is saved) or failed for good.
func (l *partialLog) Remove() error {
	l.f.Close()
	return os.Remove(l.path)
}

func encodeHeader(e *encoder, h *tarscan.Header) {
	e.raw(h.Name)
	e.raw(h.Linkname)
	e.byte(h.Typeflag)
	e.varint(h.Mode)
	e.varint(h.UID)
	e.varint(h.GID)
	e.raw(h.Uname)
	e.raw(h.Gname)
	e.varint(h.Size)
	for _, t := range []tarscan.Time{h.MTime, h.ATime, h.CTime} {
		e.varint(t.Sec)
		e.uvarint(uint64(t.Nsec))
	}
	var flags uint8
	if h.HasATime {
		flags |= 1
	}
	if h.HasCTime {
		flags |= 2
	}
	if h.Sparse != nil {
		flags |= 4
	}
	e.byte(flags)
	e.varint(h.Devmajor)
	e.varint(h.Devminor)
	e.uvarint(uint64(len(h.Xattrs)))
	for _, x := range h.Xattrs {
		e.raw(x.Name)
		e.raw(x.Value)
	}
	e.uvarint(uint64(len(h.Sparse)))
	for _, c := range h.Sparse {
		e.varint(c.Offset)
		e.varint(c.Length)
	}
	e.varint(h.DataOffset)
	e.varint(h.StoredSize)
	e.varint(h.HeaderOffset)
}

func decodeHeader(d *decoder) *tarscan.Header {
	h := &tarscan.Header{Name: d.raw("name"), Linkname: d.raw("linkname"), Typeflag: d.byte("type"),
		Mode: d.varint("mode"), UID: d.varint("uid"), GID: d.varint("gid"), Uname: d.raw("uname"), Gname: d.raw("gname"),
		Size: d.varint("size")}
	for _, t := range []*tarscan.Time{&h.MTime, &h.ATime, &h.CTime} {
		t.Sec, t.Nsec = d.varint("time"), int32(d.bounded("time", nanosPerSecond-1))
	}
	flags := d.byte("flags")
	h.HasATime, h.HasCTime = flags&1 != 0, flags&2 != 0
	h.Devmajor, h.Devminor = d.varint("devmajor"), d.varint("devminor")
	for range d.count("xattrs", 2) {
		h.Xattrs = append(h.Xattrs, tarscan.Xattr{Name: d.raw("xattr name"), Value: d.raw("xattr value")})
	}
	n := d.count("sparse", 2)
	if flags&4 != 0 {
		h.Sparse = make([]tarscan.SparseChunk, 0, n)
	}
	for range n {
		h.Sparse = append(h.Sparse, tarscan.SparseChunk{Offset: d.varint("sparse offset"), Length: d.varint("sparse length")})
	}
	h.DataOffset, h.StoredSize, h.HeaderOffset = d.varint("data offset"), d.varint("stored size"), d.varint("header offset")
	return h
}
