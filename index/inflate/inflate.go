// Package inflate decodes gzip streams (one or more members) and records
// checkpoints from which decoding can later resume: at a DEFLATE block
// boundary, a checkpoint holds the compressed byte and bit offset, the
// uncompressed offset and the last 32 KiB of output; at a gzip member start
// it needs no window at all.
//
// ParallelReader (parallel.go) decodes one stream on several goroutines,
// speculatively: workers find block starts in chunks of the compressed
// stream and decode them with an unknown window, and the reader resolves
// and checks them in order, with the same output, checkpoints and errors
// as Reader.
//
// It knows nothing of tar, transports or caches: it reads compressed bytes
// from an io.Reader and hands out decoded bytes.
package inflate

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
)

// Errors reported by Reader. Errors from the underlying reader are passed
// through wrapped.
var (
	ErrCorrupt   = errors.New("inflate: corrupt gzip stream")
	ErrTruncated = errors.New("inflate: truncated gzip stream")
	ErrNotGzip   = errors.New("inflate: not a gzip stream")
)

// WindowSize is the DEFLATE history size: a checkpoint inside a member
// stores at most this many bytes of preceding output.
const WindowSize = 32 << 10

// Kind says how decoding resumes at a checkpoint.
type Kind uint8

const (
	// KindMember: In is the first byte of a gzip member header; no
	// window is needed.
	KindMember Kind = iota + 1
	// KindBlock: In and Bit locate the first bit of a DEFLATE block
	// header; Window holds the output that precedes it in its member.
	KindBlock
)

// Checkpoint is a place where decoding can resume.
type Checkpoint struct {
	Kind Kind
	// In is the compressed offset of the byte holding the first bit;
	// Bit (0-7) is how many low bits of that byte were already consumed.
	In  int64
	Bit uint8
	// Out is the uncompressed offset of the first byte decoded from here.
	Out int64
	// Window is the output preceding Out within the same member, at most
	// WindowSize bytes; nil for KindMember. Owned by the checkpoint.
	Window []byte
	// Sums says that CRC and Size are the CRC-32 and the size (modulo
	// 2^32) of the member's output before Out: a Reader resumed here
	// (NewReaderAt) checks the member's trailer as if it had decoded it
	// from its start. The Reader sets them on the KindBlock checkpoints
	// of a member it decodes from its start.
	Sums      bool
	CRC, Size uint32
}

// Options tune a Reader.
type Options struct {
	// Span is the number of output bytes between checkpoints: one is
	// reported at the first block boundary or member start after Span
	// bytes have passed since the previous one. Zero reports none.
	Span int64
	// OnCheckpoint receives each checkpoint, in order, synchronously from
	// the decoding goroutine. The first member start (offset 0) is
	// always reported when Span > 0. A checkpoint may be followed by one
	// with the same Out, which replaces it: a member start right after an
	// empty final block needs no window.
	OnCheckpoint func(Checkpoint)
	// OnData, if set, sees every decoded byte once, in order, before
	// Read hands it out, and all bytes before a checkpoint's Out before
	// that checkpoint is reported. p is valid only during the call.
	OnData func(p []byte)
	// Limit, when positive, ends the stream (io.EOF) after that many
	// bytes of output from the starting point.
	Limit int64
}

// Decoder states between calls.
const (
	stHeader = iota
	stBlock
	stStored
	stHuffman
	stTrailer
	stDone
)

const (
	chunkSize = 256 << 10
	margin    = 258 + 16 // room for one match (and word copies) past the stop point
	bufSize   = WindowSize + chunkSize + margin
	inSize    = 128 << 10
	keepIn    = 8 // input bytes kept before inPos when compacting, to un-read the bit buffer
)

// Reader decodes a gzip stream. It is not safe for concurrent use.
type Reader struct {
	r    io.Reader
	opts Options

	// Input: in[inPos:inEnd] is unread; inBase is the stream offset of in[0].
	in        []byte
	inPos     int
	inEnd     int
	inBase    int64
	srcEOF    bool
	srcErr    error
	bits      uint64
	nbits     uint
	virt      uint // zero bits appended after the end of input
	memberIn  int64
	firstMemb bool

	// Output: out[rd:op] is decoded but unread; outBase is the
	// uncompressed offset of out[0]; out[hist:op] is history usable by
	// back-references (the current member's output only).
	out     []byte
	op      int
	rd      int
	hist    int
	outBase int64
	limit   int64 // absolute uncompressed end, or -1
	// chunkEnd is where decode returns at the latest; pre, when set,
	// is the history that precedes out[0] (DecodeInto's window), valid
	// while hist is 0.
	chunkEnd int
	pre      []byte

	state      int
	final      bool
	storedLeft int
	lit, dist  []uint32 // current tables
	dyn        *tables  // a dynamic block's tables, reused
	// A match huffmanFast left for huffman to copy (fastFar).
	farLen, farDist int
	lens            [320]uint8

	crcOn    bool
	crc      uint32
	hcrc     uint32 // CRC32 of the member header read so far
	crcPos   int
	isize    uint32
	lastCP   int64
	haveCP   bool
	observed int // out[:observed] has been passed to OnData
	lastKind Kind
	err      error
	trailing bool
	// spec, when set, makes the Reader a worker of a ParallelReader
	// (parallel.go): it records its block ends and members instead of
	// checkpoints, leaves checksums to the ParallelReader, and stops at
	// the first block header at or after spec.stopBit.
	spec *spec
}

// NewReader returns a Reader that decodes the gzip stream in r from its
// first byte.
func NewReader(r io.Reader, opts Options) *Reader {
	z := newReader(r, opts, 0)
	z.state = stHeader
	z.firstMemb = true
	return z
}

// NewReaderAt returns a Reader that resumes at cp. r must yield the
// compressed stream from offset cp.In on. The checksums of a member
// entered in the middle are verified only when cp has its Sums; callers
// verify spans themselves.
func NewReaderAt(r io.Reader, cp Checkpoint, opts Options) (*Reader, error) {
	if err := checkCheckpoint(cp); err != nil {
		return nil, err
	}
	z := newReader(r, opts, cp.In)
	switch cp.Kind {
	case KindMember:
		z.state = stHeader
	case KindBlock:
		n := copy(z.out, cp.Window)
		z.op, z.rd, z.crcPos, z.observed = n, n, n, n
		z.state = stBlock
		if cp.Sums {
			z.crcOn, z.crc, z.isize, z.memberIn = true, cp.CRC, cp.Size, cp.In
		}
		if err := z.fill(1); err != nil {
			return nil, err
		}
		if z.inEnd == 0 {
			return nil, fmt.Errorf("%w: no input at checkpoint %d", ErrTruncated, cp.In)
		}
		z.bits = uint64(z.in[0]) >> cp.Bit
		z.nbits = 8 - uint(cp.Bit)
		z.inPos = 1
	}
	z.outBase = cp.Out - int64(z.op)
	if opts.Limit > 0 {
		z.limit = cp.Out + opts.Limit
	}
	z.lastCP = cp.Out
	z.haveCP = true
	return z, nil
}

// checkCheckpoint rejects a checkpoint that no stream could have given.
func checkCheckpoint(cp Checkpoint) error {
	switch cp.Kind {
	case KindMember:
		if cp.Bit != 0 || len(cp.Window) != 0 {
			return fmt.Errorf("%w: member checkpoint with bit offset or window", ErrCorrupt)
		}
	case KindBlock:
		if cp.Bit > 7 || len(cp.Window) > WindowSize {
			return fmt.Errorf("%w: bad checkpoint", ErrCorrupt)
		}
	default:
		return fmt.Errorf("%w: unknown checkpoint kind %d", ErrCorrupt, cp.Kind)
	}
	return nil
}

func newReader(r io.Reader, opts Options, inBase int64) *Reader {
	return &Reader{
		r:      r,
		opts:   opts,
		in:     make([]byte, inSize),
		inBase: inBase,
		out:    make([]byte, bufSize),
		limit:  limitOf(opts.Limit),

		chunkEnd: WindowSize + chunkSize,
	}
}

// Margin is the room DecodeInto needs past the end of its destination:
// a match that crosses the end is written whole (and word copies may
// overrun it) before decoding stops.
const Margin = margin

// DecodeInto decodes the len(dst) bytes of output that follow cp into
// dst, from comp, the compressed stream from cp.In on. It decodes in
// place, without the Reader's buffers or copies: dst must have room for
// Margin more bytes (cap(dst) >= len(dst)+Margin), which it may
// overwrite. It fails with ErrTruncated when the stream ends first and
// ErrCorrupt when it is not valid; as with NewReaderAt, checksums of a
// member entered in the middle are not verified. comp and cp.Window are
// only read.
func DecodeInto(dst, comp []byte, cp Checkpoint) error {
	if cap(dst)-len(dst) < Margin {
		return fmt.Errorf("inflate: destination has %d bytes of margin, want %d", cap(dst)-len(dst), Margin)
	}
	if err := checkCheckpoint(cp); err != nil {
		return err
	}
	z := &Reader{
		in:       comp,
		inEnd:    len(comp),
		inBase:   cp.In,
		srcEOF:   true,
		out:      dst[:cap(dst)],
		outBase:  cp.Out,
		limit:    cp.Out + int64(len(dst)),
		chunkEnd: len(dst),
		lastCP:   cp.Out,
		haveCP:   true,
	}
	switch cp.Kind {
	case KindMember:
		z.state = stHeader
	case KindBlock:
		if len(comp) == 0 {
			return fmt.Errorf("%w: no input at checkpoint %d", ErrTruncated, cp.In)
		}
		z.pre = cp.Window
		z.bits = uint64(comp[0]) >> cp.Bit
		z.nbits = 8 - uint(cp.Bit)
		z.inPos = 1
		z.state = stBlock
	}
	for z.op < len(dst) {
		if z.state == stDone {
			return z.truncated()
		}
		if err := z.decode(); err != nil {
			return err
		}
	}
	return nil
}

func limitOf(n int64) int64 {
	if n > 0 {
		return n
	}
	return -1
}

// Offset returns the uncompressed offset of the next byte Read returns.
func (z *Reader) Offset() int64 { return z.outBase + int64(z.rd) }

// Trailing reports whether data that is not a gzip member followed the
// last member (it is ignored, as gzip -d does).
func (z *Reader) Trailing() bool { return z.trailing }

// Read implements io.Reader.
func (z *Reader) Read(p []byte) (int, error) {
	for z.rd == z.op {
		if err := z.more(); err != nil {
			return 0, err
		}
	}
	n := copy(p, z.out[z.rd:z.op])
	z.rd += n
	return n, nil
}

// BufSize is the least length of a buffer ReadInto decodes into.
const BufSize = bufSize

// ReadInto is Read without the copy out: it moves the history that
// back-references need (at most WindowSize bytes, with any output not yet
// read) from the Reader's output buffer to the front of buf, makes buf the
// output buffer, decodes the next output there and returns it as
// buf[start:end]. The buffer the Reader had (its own, or the buf of the
// previous call) is read during the call and never after: the caller may
// reuse it once ReadInto returns, and buf may be that very buffer. buf
// must hold at least BufSize bytes, and stay unchanged until the next call
// of a method of the Reader returns. Output decoded before an error is
// returned first, as Read does.
func (z *Reader) ReadInto(buf []byte) (start, end int, err error) {
	if len(buf) < bufSize {
		panic("inflate: ReadInto buffer shorter than BufSize")
	}
	z.moveTo(buf)
	for z.rd == z.op {
		if err := z.more(); err != nil {
			return 0, 0, err
		}
	}
	start, end = z.rd, z.op
	z.rd = z.op
	return start, end, nil
}

// Discard skips n bytes of output without copying them.
func (z *Reader) Discard(n int64) (int64, error) {
	var done int64
	for done < n {
		if z.rd == z.op {
			if err := z.more(); err != nil {
				return done, err
			}
			continue
		}
		k := int64(z.op - z.rd)
		if k > n-done {
			k = n - done
		}
		z.rd += int(k)
		done += k
	}
	return done, nil
}

// WriteTo writes the rest of the stream to w.
func (z *Reader) WriteTo(w io.Writer) (int64, error) {
	var total int64
	for {
		if z.rd == z.op {
			if err := z.more(); err != nil {
				if err == io.EOF {
					return total, nil
				}
				return total, err
			}
			continue
		}
		n, err := w.Write(z.out[z.rd:z.op])
		z.rd += n
		total += int64(n)
		if err != nil {
			return total, err
		}
	}
}

// more decodes the next chunk of output. It is called only when all
// decoded output has been read.
func (z *Reader) more() error {
	if z.err != nil {
		return z.err
	}
	if z.limit >= 0 && z.outBase+int64(z.op) >= z.limit {
		z.err = io.EOF
		return z.err
	}
	if z.state == stDone {
		z.err = io.EOF
		return z.err
	}
	if z.op >= WindowSize+chunkSize {
		z.slide()
	}
	err := z.decode()
	z.observe()
	if err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		z.err = err
		if z.rd < z.op {
			return nil // hand out what was decoded before the error
		}
		return err
	}
	return nil
}

// slide moves the last WindowSize bytes of history to the front.
func (z *Reader) slide() { z.moveTo(z.out) }

// moveTo moves the last WindowSize bytes of history, and any output not
// yet read, to the front of buf, which becomes the output buffer (it may
// be the output buffer itself).
func (z *Reader) moveTo(buf []byte) {
	z.updateCRC()
	keep := z.op - z.hist
	if keep > WindowSize {
		keep = WindowSize
	}
	shift := min(z.op-keep, z.rd)
	copy(buf, z.out[shift:z.op])
	z.out = buf
	z.outBase += int64(shift)
	z.op -= shift
	z.rd -= shift
	z.crcPos -= shift
	z.observed -= shift
	z.hist -= shift
	if z.hist < 0 {
		z.hist = 0
	}
}

func (z *Reader) updateCRC() {
	if z.crcOn && z.crcPos < z.op {
		z.crc = crc32.Update(z.crc, crc32.IEEETable, z.out[z.crcPos:z.op])
		z.isize += uint32(z.op - z.crcPos)
	}
	z.crcPos = z.op
}

// stopAt is the output index at which decode must return to the caller.
func (z *Reader) stopAt() int {
	stop := z.chunkEnd
	if z.limit >= 0 {
		if l := z.limit - z.outBase; l < int64(stop) {
			stop = int(l)
		}
	}
	return stop
}

// decode runs the state machine until some output is produced and the
// output chunk is full, the limit is reached, or the stream ends.
func (z *Reader) decode() error {
	for {
		stop := z.stopAt()
		if z.op >= stop {
			return nil
		}
		var err error
		switch z.state {
		case stHeader:
			err = z.header()
		case stBlock:
			err = z.blockHeader()
		case stStored:
			err = z.stored(stop)
		case stHuffman:
			err = z.huffman(stop)
		case stTrailer:
			err = z.trailer()
		case stDone:
			return nil
		}
		if err != nil {
			return err
		}
		if z.op > z.rd && z.op >= stop {
			return nil
		}
	}
}

// bitOffset returns the compressed position of the next unread bit.
func (z *Reader) bitOffset() int64 {
	return (z.inBase+int64(z.inPos))*8 - int64(z.nbits-z.virt)
}

func (z *Reader) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w at compressed offset %d: %s", ErrCorrupt, z.bitOffset()/8, fmt.Sprintf(format, args...))
}

func (z *Reader) truncated() error {
	if z.srcErr != nil && z.srcErr != io.EOF {
		return fmt.Errorf("read compressed stream at %d: %w", z.inBase+int64(z.inEnd), z.srcErr)
	}
	return fmt.Errorf("%w at compressed offset %d", ErrTruncated, z.inBase+int64(z.inEnd))
}

// fill makes at least n bytes available in in[inPos:inEnd] unless the
// source ends first. It compacts the buffer, keeping keepIn bytes before
// inPos so the bit buffer can be returned to the input.
func (z *Reader) fill(n int) error {
	if z.inEnd-z.inPos >= n {
		return nil
	}
	if z.srcEOF {
		return nil
	}
	if z.inPos > keepIn {
		drop := z.inPos - keepIn
		copy(z.in, z.in[drop:z.inEnd])
		z.inBase += int64(drop)
		z.inPos -= drop
		z.inEnd -= drop
	}
	for z.inEnd-z.inPos < n && !z.srcEOF {
		m, err := z.r.Read(z.in[z.inEnd:])
		z.inEnd += m
		if err != nil {
			z.srcEOF = true
			z.srcErr = err
		} else if m == 0 && z.inEnd == len(z.in) {
			break
		}
	}
	if z.srcErr != nil && z.srcErr != io.EOF {
		return fmt.Errorf("read compressed stream at %d: %w", z.inBase+int64(z.inEnd), z.srcErr)
	}
	return nil
}

// refillSlow tops up the bit buffer near the end of the input buffer,
// reading more input, and past the end of the source appends zero bits
// (tracked in virt) so that the caller can detect overreads.
func (z *Reader) refillSlow() error {
	if err := z.fill(8); err != nil {
		return err
	}
	if z.inPos+8 <= z.inEnd {
		z.bits |= binary.LittleEndian.Uint64(z.in[z.inPos:]) << z.nbits
		z.inPos += int(63-z.nbits) >> 3
		z.nbits |= 56
		return nil
	}
	for z.nbits <= 56 && z.inPos < z.inEnd {
		z.bits |= uint64(z.in[z.inPos]) << z.nbits
		z.inPos++
		z.nbits += 8
	}
	for z.nbits <= 56 {
		z.nbits += 8
		z.virt += 8
	}
	return nil
}

// overread reports whether decoding consumed bits past the end of input.
func (z *Reader) overread() bool { return z.nbits < z.virt }

// unreadBits returns whole bytes held in the bit buffer to the input,
// after dropping the bits of a partial byte.
func (z *Reader) alignAndUnread() error {
	drop := z.nbits % 8
	z.bits >>= drop
	z.nbits -= drop
	if z.overread() {
		return z.truncated()
	}
	z.inPos -= int(z.nbits-z.virt) / 8
	z.bits, z.nbits, z.virt = 0, 0, 0
	return nil
}

// getBits returns the next n (<= 32) bits.
func (z *Reader) getBits(n uint) (uint32, error) {
	if z.nbits < n {
		if err := z.refillSlow(); err != nil {
			return 0, err
		}
	}
	v := uint32(z.bits & (1<<n - 1))
	z.bits >>= n
	z.nbits -= n
	if z.overread() {
		return 0, z.truncated()
	}
	return v, nil
}

// header parses a gzip member header from the byte-aligned input.
func (z *Reader) header() error {
	if err := z.alignAndUnread(); err != nil {
		return err
	}
	if err := z.fill(10); err != nil {
		return err
	}
	if z.spec != nil && !z.spec.last && z.inEnd-z.inPos < 10 {
		return errOutOfInput // more of the stream follows the worker's input
	}
	start := z.inBase + int64(z.inPos)
	if z.inEnd-z.inPos < 10 {
		if z.inEnd == z.inPos && z.firstMemb {
			return fmt.Errorf("%w: empty input", ErrNotGzip)
		}
		if z.inEnd == z.inPos {
			z.state = stDone
			return nil
		}
		if !z.firstMemb && !isGzipPrefix(z.in[z.inPos:z.inEnd]) {
			z.trailing = true
			z.state = stDone
			return nil
		}
		if z.firstMemb && !isGzipPrefix(z.in[z.inPos:z.inEnd]) {
			return fmt.Errorf("%w: bad magic at %d", ErrNotGzip, start)
		}
		return z.truncated()
	}
	h := z.in[z.inPos : z.inPos+10]
	if h[0] != 0x1f || h[1] != 0x8b {
		if z.firstMemb {
			return fmt.Errorf("%w: bad magic at %d", ErrNotGzip, start)
		}
		z.trailing = true
		z.state = stDone
		return nil
	}
	if h[2] != 8 {
		return fmt.Errorf("%w at %d: unknown compression method %d", ErrCorrupt, start, h[2])
	}
	flg := h[3]
	if flg&0xe0 != 0 {
		return fmt.Errorf("%w at %d: reserved header flags set", ErrCorrupt, start)
	}
	z.hcrc = crc32.ChecksumIEEE(h)
	z.inPos += 10
	if flg&0x04 != 0 { // FEXTRA
		if err := z.fill(2); err != nil {
			return err
		}
		if z.inEnd-z.inPos < 2 {
			return z.truncated()
		}
		n := int(binary.LittleEndian.Uint16(z.in[z.inPos:]))
		if err := z.skipBytes(2 + n); err != nil {
			return err
		}
	}
	for _, f := range []byte{0x08, 0x10} { // FNAME, FCOMMENT
		if flg&f != 0 {
			if err := z.skipString(); err != nil {
				return err
			}
		}
	}
	if flg&0x02 != 0 { // FHCRC: the low 16 bits of the CRC32 of the header
		if err := z.fill(2); err != nil {
			return err
		}
		if z.inEnd-z.inPos < 2 {
			return z.truncated()
		}
		if binary.LittleEndian.Uint16(z.in[z.inPos:]) != uint16(z.hcrc) {
			return fmt.Errorf("%w at %d: header checksum mismatch", ErrCorrupt, start)
		}
		z.inPos += 2
	}
	out := z.outBase + int64(z.op)
	due := !z.haveCP || out-z.lastCP >= z.opts.Span || out == z.lastCP && z.lastKind == KindBlock
	if z.opts.Span > 0 && z.opts.OnCheckpoint != nil && due {
		z.emit(Checkpoint{Kind: KindMember, In: start, Out: out})
	}
	z.firstMemb = false
	z.memberIn = start
	z.hist = z.op
	z.pre = nil // a new member refers to nothing before it
	z.crcOn = z.spec == nil
	if z.spec != nil {
		z.spec.events = append(z.spec.events, event{kind: evMemberStart, out: z.op, in: start})
	}
	z.crc = 0
	z.isize = 0
	z.crcPos = z.op
	z.state = stBlock
	return nil
}

func isGzipPrefix(b []byte) bool {
	return len(b) == 0 || b[0] == 0x1f && (len(b) == 1 || b[1] == 0x8b)
}

// skipBytes and skipString skip header bytes, adding them to hcrc.
func (z *Reader) skipBytes(n int) error {
	for n > 0 {
		if z.inPos == z.inEnd {
			if err := z.fill(1); err != nil {
				return err
			}
			if z.inPos == z.inEnd {
				return z.truncated()
			}
		}
		k := z.inEnd - z.inPos
		if k > n {
			k = n
		}
		z.hcrc = crc32.Update(z.hcrc, crc32.IEEETable, z.in[z.inPos:z.inPos+k])
		z.inPos += k
		n -= k
	}
	return nil
}

func (z *Reader) skipString() error {
	for {
		if z.inPos == z.inEnd {
			if err := z.fill(1); err != nil {
				return err
			}
			if z.inPos == z.inEnd {
				return z.truncated()
			}
		}
		c := z.in[z.inPos]
		z.hcrc = crc32.Update(z.hcrc, crc32.IEEETable, z.in[z.inPos:z.inPos+1])
		z.inPos++
		if c == 0 {
			return nil
		}
	}
}

func (z *Reader) trailer() error {
	z.updateCRC()
	if err := z.alignAndUnread(); err != nil {
		return err
	}
	if err := z.fill(8); err != nil {
		return err
	}
	if z.inEnd-z.inPos < 8 {
		return z.truncated()
	}
	crc := binary.LittleEndian.Uint32(z.in[z.inPos:])
	size := binary.LittleEndian.Uint32(z.in[z.inPos+4:])
	if z.spec != nil {
		z.spec.events = append(z.spec.events, event{kind: evMemberEnd, out: z.op, crc: crc, size: size})
	}
	if z.crcOn && (crc != z.crc || size != z.isize) {
		return fmt.Errorf("%w: member at %d: checksum mismatch", ErrCorrupt, z.memberIn)
	}
	z.inPos += 8
	z.crcOn = false
	z.state = stHeader
	return nil
}

// blockHeader reads a DEFLATE block header and prepares its tables.
func (z *Reader) blockHeader() error {
	v, err := z.getBits(3)
	if err != nil {
		return err
	}
	z.final = v&1 != 0
	switch v >> 1 {
	case 0:
		if err := z.alignAndUnread(); err != nil {
			return err
		}
		if err := z.fill(4); err != nil {
			return err
		}
		if z.inEnd-z.inPos < 4 {
			return z.truncated()
		}
		n := binary.LittleEndian.Uint16(z.in[z.inPos:])
		nn := binary.LittleEndian.Uint16(z.in[z.inPos+2:])
		if n != ^nn {
			return z.corrupt("stored block length check")
		}
		z.inPos += 4
		z.storedLeft = int(n)
		z.state = stStored
	case 1:
		z.lit, z.dist = fixedTables.lit(), fixedTables.dist()
		z.state = stHuffman
	case 2:
		if err := z.dynamicTables(); err != nil {
			return err
		}
		z.state = stHuffman
	default:
		return z.corrupt("reserved block type")
	}
	return nil
}

// endBlock is called after each block; it records a checkpoint when due.
func (z *Reader) endBlock() {
	if z.final {
		z.state = stTrailer
		return
	}
	z.state = stBlock
	if z.spec != nil {
		z.specBlockEnd()
		return
	}
	out := z.outBase + int64(z.op)
	if z.opts.Span > 0 && z.opts.OnCheckpoint != nil && out-z.lastCP >= z.opts.Span {
		bit := z.bitOffset()
		w := z.op - z.hist
		if w > WindowSize {
			w = WindowSize
		}
		win := make([]byte, w)
		copy(win, z.out[z.op-w:z.op])
		z.emit(Checkpoint{Kind: KindBlock, In: bit / 8, Bit: uint8(bit % 8), Out: out, Window: win})
	}
}

func (z *Reader) emit(cp Checkpoint) {
	z.observe()
	if cp.Kind == KindBlock && z.crcOn {
		z.updateCRC()
		cp.Sums, cp.CRC, cp.Size = true, z.crc, z.isize
	}
	z.lastCP = cp.Out
	z.haveCP = true
	z.lastKind = cp.Kind
	z.opts.OnCheckpoint(cp)
}

// observe passes newly decoded output to OnData.
func (z *Reader) observe() {
	if z.opts.OnData != nil && z.observed < z.op {
		z.opts.OnData(z.out[z.observed:z.op])
	}
	z.observed = z.op
}

func (z *Reader) stored(stop int) error {
	for z.storedLeft > 0 {
		if z.op >= stop {
			return nil
		}
		if z.inPos == z.inEnd {
			if err := z.fill(1); err != nil {
				return err
			}
			if z.inPos == z.inEnd {
				return z.truncated()
			}
		}
		n := min(z.storedLeft, z.inEnd-z.inPos, stop-z.op)
		copy(z.out[z.op:], z.in[z.inPos:z.inPos+n])
		z.op += n
		z.inPos += n
		z.storedLeft -= n
	}
	z.endBlock()
	return nil
}

// dynamicTables reads the code length code and the literal/length and
// distance code lengths of a dynamic block.
func (z *Reader) dynamicTables() error {
	v, err := z.getBits(14)
	if err != nil {
		return err
	}
	nlit := int(v&0x1f) + 257
	ndist := int(v>>5&0x1f) + 1
	nclen := int(v>>10) + 4
	if nlit > 286 || ndist > 30 {
		return z.corrupt("too many length or distance codes")
	}
	var clens [19]uint8
	for i := 0; i < nclen; i++ {
		b, err := z.getBits(3)
		if err != nil {
			return err
		}
		clens[clenOrder[i]] = uint8(b)
	}
	var clTable [1 << clenPrimaryBits]uint32
	t := clTable[:]
	if err := buildTable(t, clens[:], clenPrimaryBits, plainSymbols); err != nil {
		return z.corrupt("code length code: %v", err)
	}
	lens := z.lens[:nlit+ndist]
	for i := 0; i < len(lens); {
		if z.nbits < 16 {
			if err := z.refillSlow(); err != nil {
				return err
			}
		}
		e := t[z.bits&(1<<clenPrimaryBits-1)]
		if int32(e) >= 0 {
			return z.corrupt("invalid code length code")
		}
		n := uint(e & 0xff)
		z.bits >>= n
		z.nbits -= n
		if z.overread() {
			return z.truncated()
		}
		sym := e >> 16 & 0xff
		if sym < 16 {
			lens[i] = uint8(sym)
			i++
			continue
		}
		var rep int
		var val uint8
		switch sym {
		case 16:
			if i == 0 {
				return z.corrupt("repeat with no previous length")
			}
			b, err := z.getBits(2)
			if err != nil {
				return err
			}
			rep, val = 3+int(b), lens[i-1]
		case 17:
			b, err := z.getBits(3)
			if err != nil {
				return err
			}
			rep = 3 + int(b)
		default:
			b, err := z.getBits(7)
			if err != nil {
				return err
			}
			rep = 11 + int(b)
		}
		if i+rep > len(lens) {
			return z.corrupt("code lengths overflow")
		}
		for ; rep > 0; rep-- {
			lens[i] = val
			i++
		}
	}
	if lens[256] == 0 {
		return z.corrupt("no end-of-block code")
	}
	if z.dyn == nil {
		z.dyn = new(tables)
	}
	if err := buildTable(z.dyn.lit(), lens[:nlit], litPrimaryBits, litlenSymbols); err != nil {
		return z.corrupt("literal/length code: %v", err)
	}
	if err := buildTable(z.dyn.dist(), lens[nlit:], distPrimaryBits, distSymbols); err != nil {
		return z.corrupt("distance code: %v", err)
	}
	z.lit, z.dist = z.dyn.lit(), z.dyn.dist()
	return nil
}

var clenOrder = [19]int{16, 17, 18, 0, 8, 7, 9, 6, 10, 5, 11, 4, 12, 3, 13, 2, 14, 1, 15}

// fixedTables are the tables of the fixed codes.
var fixedTables = new(tables)

func init() {
	var lens [288]uint8
	for i := range lens {
		switch {
		case i < 144:
			lens[i] = 8
		case i < 256:
			lens[i] = 9
		case i < 280:
			lens[i] = 7
		default:
			lens[i] = 8
		}
	}
	if err := buildTable(fixedTables.lit(), lens[:], litPrimaryBits, litlenSymbols); err != nil {
		panic(err)
	}
	var dl [32]uint8 // 30 and 31 are unused: distSymbol makes them invalid
	for i := range dl {
		dl[i] = 5
	}
	if err := buildTable(fixedTables.dist(), dl[:], distPrimaryBits, distSymbols); err != nil {
		panic(err)
	}
}

// huffman decodes symbols of a Huffman block until the block ends or the
// output reaches stop: with huffmanFast while the input and the output are
// far from their ends, else with huffmanCareful.
func (z *Reader) huffman(stop int) error {
	for {
		switch z.huffmanFast(stop) {
		case fastEnd:
			z.endBlock()
			return nil
		case fastBadLit:
			return z.corrupt("invalid literal/length code")
		case fastBadDist:
			return z.corrupt("invalid distance code")
		case fastFar:
			// Before the member's output in out: DecodeInto's window
			// (pre), in the first WindowSize bytes of a span, or an
			// error.
			if z.farDist > z.op-z.hist+len(z.pre) {
				return z.corrupt("distance %d too far back", z.farDist)
			}
			z.copyPre(z.op, z.farDist, z.farLen)
			z.op += z.farLen
		}
		again, err := z.huffmanCareful(stop)
		if err != nil || !again {
			return err
		}
	}
}

// huffmanCareful decodes symbols of a Huffman block, one at a time and
// checking every read and write, until the block ends or the output
// reaches stop; or, once it has decoded a symbol, until huffmanFast can go
// on (again). It runs near the ends of the input and output buffers, and
// for the symbols huffmanFast leaves to it.
func (z *Reader) huffmanCareful(stop int) (again bool, err error) {
	bits, nbits := z.bits, z.nbits
	in, inPos, inEnd := z.in, z.inPos, z.inEnd
	out, op := z.out, z.op
	lit, dist := z.lit, z.dist
	hist, virt := z.hist, z.virt
	save := func() {
		z.bits, z.nbits, z.inPos, z.op = bits, nbits, inPos, op
	}
	for first := true; op < stop; first = false {
		if !first && virt == 0 && inPos+fastInput <= inEnd {
			save()
			return true, nil
		}
		if nbits < 48 {
			if inPos+8 <= inEnd {
				bits |= binary.LittleEndian.Uint64(in[inPos:]) << nbits
				inPos += int(63-nbits) >> 3
				nbits |= 56
			} else {
				save()
				if err := z.refillSlow(); err != nil {
					return false, err
				}
				bits, nbits, virt = z.bits, z.nbits, z.virt
				in, inPos, inEnd = z.in, z.inPos, z.inEnd
			}
		}
		var e uint32
		e, bits, nbits = lookup(lit, bits, nbits, litPrimaryBits)
		if int32(e) < 0 {
			bits >>= e & 0xff
			nbits -= uint(e & 0xff)
			if nbits < virt {
				save()
				return false, z.truncated()
			}
			out[op] = byte(e >> 16)
			op++
			continue
		}
		if e&flagExceptional != 0 {
			if e&flagEnd == 0 {
				save()
				return false, z.corrupt("invalid literal/length code")
			}
			bits >>= e & 0xff
			nbits -= uint(e & 0xff)
			save()
			if z.overread() {
				return false, z.truncated()
			}
			z.endBlock()
			return false, nil
		}
		var length, distance int
		var ok bool
		length, distance, bits, nbits, ok = match(e, bits, nbits, dist)
		if !ok {
			save()
			return false, z.corrupt("invalid distance code")
		}
		if nbits < virt {
			save()
			return false, z.truncated()
		}
		if distance > op-hist {
			if distance > op-hist+len(z.pre) {
				save()
				return false, z.corrupt("distance %d too far back", distance)
			}
			// Only DecodeInto, in the first WindowSize bytes: the match
			// starts in the window that precedes out.
			z.copyPre(op, distance, length)
			op += length
			continue
		}
		src := op - distance
		if distance >= 8 {
			// Word copies, forward: with distance >= 8 each word read
			// lies before the bytes being written. They may write up to 7
			// bytes past the match, inside the margin, to be overwritten.
			for n := 0; n < length; n += 8 {
				binary.LittleEndian.PutUint64(out[op+n:], binary.LittleEndian.Uint64(out[src+n:]))
			}
			op += length
			continue
		}
		end := op + length
		for op < end {
			op += copy(out[op:end], out[src:op])
		}
	}
	save()
	if z.overread() {
		return false, z.truncated()
	}
	return false, nil
}
