package inflate

// Speculative parallel decoding, after the technique of rapidgzip and pugz
// (written from their papers' description, not their code).
//
// The compressed stream is cut into chunks of parChunk bytes. A worker
// decodes each chunk on its own:
//
//	compressed  |<---- chunk i-1 ---->|<----- chunk i ----->|<-- chunk i+1 ...
//	                          start i ^                 end i ^
//	worker i:   finds a block start at or after the chunk's first bit
//	            (candidate), decodes from there with an unknown window, and
//	            stops at the first block header at or after the next
//	            chunk's first bit (end i, which the next chunk should find)
//	output i:   |markers...|bytes .........................|
//	            back-references into the unknown 32 KiB before the chunk
//	            are 16-bit markers (markFlag|index into that window), until
//	            32 KiB pass without one; the rest is decoded as bytes with
//	            the fast loop.
//
// The ParallelReader (the consumer) takes the chunks in order. Chunk i is
// used only when its start is exactly where chunk i-1 stopped (end i-1),
// which the previous, confirmed decode proves to be a block header: a
// false start (bits that look like a block header) is never used. Its
// markers are then resolved from the last 32 KiB of chunk i-1's output,
// and its bytes handed out. The consumer also computes each member's
// CRC-32 and size as it hands the bytes out and checks them against the
// trailers the workers found, and records the checkpoints the sequential
// Reader would record: the workers note every block end and member start,
// with its offsets, and the consumer applies the Reader's rule (the first
// block boundary after Span bytes) with the windows at hand.
//
// When a chunk cannot be used (no start found, a start other than the
// previous end, a worker error, more output than a chunk may hold, a
// block longer than two chunks), the consumer stops the workers and
// decodes the rest of the stream with a sequential Reader from the last
// confirmed block header, with its window and running checksums: the
// result, bytes, checkpoints and errors, is always the sequential one.

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"unsafe"

	"golang.org/x/sync/errgroup"
)

const (
	// parChunk is the compressed size of a chunk: large enough that the
	// search for a block start and the decoding with markers (at most a
	// few hundred KiB of output) are a small part of a chunk's work.
	parChunk = 4 << 20
	// parMaxRatio bounds a chunk's output (parMaxRatio*parChunk, 32
	// MiB): a chunk that would decode to more is left to the sequential
	// Reader.
	parMaxRatio = 8
	// parMaxBlock bounds the output of the block a chunk that outgrew
	// its bound stops after (zlib's blocks hold at most 32K symbols,
	// 8 MiB), or the chunk's bound if smaller.
	parMaxBlock = 8 << 20
	// parMaxMarked bounds the output decoded with markers in a chunk.
	parMaxMarked = 4 << 20
	// parMaxCandidates bounds the block starts a worker tries in its
	// chunk, so that input full of false starts costs a bounded time.
	parMaxCandidates = 256
	// markFlag marks a 16-bit output symbol that stands for the byte
	// at index symbol&^markFlag of the unknown window before the chunk.
	markFlag = 0x8000
)

// errOutOfInput: a worker reached the end of its input, which is not the
// end of the stream. errTooBig: a chunk's output outgrew job.max (or
// parMaxMarked).
var (
	errOutOfInput = errors.New("inflate: chunk input ended")
	errTooBig     = errors.New("inflate: chunk output too big")
)

// What a worker records, at an index of its output buffer.
type evKind uint8

const (
	// evBlock: a (non-final) block ended; in is the bit offset of the
	// next block's header.
	evBlock evKind = iota + 1
	// evMemberEnd: a member's trailer was read: crc and size.
	evMemberEnd
	// evMemberStart: a member header starts at byte in.
	evMemberStart
)

type event struct {
	kind      evKind
	out       int // index in the job's output buffer
	in        int64
	crc, size uint32
}

// spec is a worker Reader's own state (Reader.spec).
type spec struct {
	stopBit int64 // stop at the first block header at or after this bit
	last    bool  // the input ends where the stream does
	events  []event
	stopped bool // stopped at stopBit (else the stream ended)
}

// specBlockEnd records a block end and stops the worker at stopBit.
func (z *Reader) specBlockEnd() {
	bit := z.bitOffset()
	z.spec.events = append(z.spec.events, event{kind: evBlock, out: z.op, in: bit})
	if bit >= z.spec.stopBit {
		z.spec.stopped = true
		z.state = stDone
	}
}

// job is one chunk: its input, set by the producer before the job is
// queued, and the worker's result, set before done is closed.
type job struct {
	begin     int64       // compressed offset of data[0]
	n         int         // data[:n] is this chunk; data[n:] the next one
	data      []byte      // this chunk and the next, up to 2*parChunk bytes
	last      bool        // data ends where the stream does
	max       int         // the most output the chunk may have
	pool      *pool[byte] // of output buffers
	marksPool *pool[uint16]
	done      chan struct{}

	start int64 // bit offset where the worker started; -1: none found
	// aligned, when the chunk starts with a stored block, is the bit
	// offset of its LEN field (-1 otherwise): see startsAt.
	aligned int64
	end     int64 // bit offset of the block header it stopped at; -1: the stream ended
	// out[WindowSize:op] is the chunk's output; the consumer puts the
	// window before it in out[:WindowSize]. marks[i] is what
	// out[WindowSize+i] holds, a byte or a marker; minMark is the lowest
	// window index a marker refers to (WindowSize when none does).
	out      []byte
	op       int
	marks    []uint16
	nm       int // while decoding with markers: marks[:nm] is the output
	lastMark int
	minMark  int
	events   []event
	trailing bool
	err      error
}

// run decodes the job's chunk.
func (j *job) run(ctx context.Context) {
	defer close(j.done)
	j.start, j.end, j.minMark, j.aligned = -1, -1, WindowSize, -1
	stopBit := (j.begin + int64(j.n)) * 8
	z := &Reader{in: j.data, inEnd: len(j.data), inBase: j.begin, srcEOF: true, limit: -1,
		spec: &spec{stopBit: stopBit, last: j.last}}
	if j.begin == 0 {
		z.state, z.firstMemb = stHeader, true
		j.start = 0
		j.err = j.fast(z)
		return
	}
	tried, spent := 0, 0
	for bit := j.begin * 8; bit < stopBit && tried < parMaxCandidates && spent < j.max; bit++ {
		if !j.candidate(bit) {
			continue
		}
		if ctx.Err() != nil {
			j.err = ctx.Err()
			return
		}
		tried++
		j.reset(z, bit)
		if z.blockHeader() != nil {
			continue
		}
		aligned := int64(-1)
		if z.state == stStored {
			aligned = (bit + 3 + 7) &^ 7
		}
		err := j.marked(z)
		if err == nil {
			j.start, j.aligned = bit, aligned
			return
		}
		// What false starts decode counts against the chunk's output
		// bound: a chunk's search costs at most about twice its decode.
		spent += j.nm
		if z.out != nil {
			spent += z.op - WindowSize
		}
		if errors.Is(err, errTooBig) || errors.Is(err, errOutOfInput) ||
			!j.last && errors.Is(err, ErrTruncated) && z.inPos >= z.inEnd-8 {
			// A start that decoded to the end of the input or the
			// output bound: most likely the true one, and the next
			// candidates would be no better.
			j.err = err
			return
		}
	}
	j.err = fmt.Errorf("%w: no block start found in chunk at %d", ErrCorrupt, j.begin)
}

// startsAt reports whether the chunk's decode started at bit, or at a
// header equivalent to the one at bit: a stored block header is three
// zero bits and zero padding to a byte boundary, so any of the zero bits
// before it may start the same block (the worker takes the first).
func (j *job) startsAt(bit int64) bool {
	return j.start == bit || j.aligned >= 0 && j.start < bit && bit+3 <= j.aligned
}

// from decodes j's chunk from bit, a block header, with the output
// before it in window (as much of it as the member has), on the calling
// goroutine, and returns the result as a job of its own that shares j's
// input.
func (j *job) from(bit int64, window []byte) *job {
	b := &job{begin: j.begin, n: j.n, data: j.data, last: j.last, max: j.max, pool: j.pool, marksPool: j.marksPool,
		start: bit, end: -1, minMark: WindowSize, aligned: -1}
	z := &Reader{in: b.data, inEnd: len(b.data), inBase: b.begin, srcEOF: true, limit: -1,
		spec: &spec{stopBit: (b.begin + int64(b.n)) * 8, last: b.last}}
	b.reset(z, bit)
	z.out = b.pool.get(b.outSize())
	copy(z.out[WindowSize-len(window):], window)
	z.hist = WindowSize - len(window)
	b.err = b.fast(z)
	return b
}

// outSize is the size of a chunk's output buffer to start with: room
// for a compression ratio of 5.
func (j *job) outSize() int { return WindowSize + 5*j.n + margin }

// pool keeps freed buffers for reuse, at most cap(c) of them.
type pool[T any] struct{ c chan []T }

func newPool[T any](n int) *pool[T] { return &pool[T]{make(chan []T, n)} }

// get returns a buffer of at least n elements, with any content.
func (p *pool[T]) get(n int) []T {
	select {
	case b := <-p.c:
		if cap(b) >= n {
			return b[:cap(b)]
		}
	default:
	}
	return make([]T, n)
}

func (p *pool[T]) put(b []T) {
	if b == nil {
		return
	}
	select {
	case p.c <- b:
	default:
	}
}

// reset puts z at bit, to decode a block header there, and forgets any
// earlier attempt.
func (j *job) reset(z *Reader, bit int64) {
	i := int(bit/8 - j.begin)
	z.inPos = i + 1
	z.bits = uint64(j.data[i]) >> (bit % 8)
	z.nbits = 8 - uint(bit%8)
	z.virt = 0
	z.state = stBlock
	z.spec.events = z.spec.events[:0]
	z.spec.stopped = false
	z.trailing = false
	if z.out != nil {
		j.pool.put(z.out)
	}
	z.out, z.op, z.hist = nil, WindowSize, 0
	j.nm, j.lastMark = 0, 0
	j.minMark = WindowSize
	j.events = nil
	j.op = 0
}

// peek returns the 64 bits of the chunk's input from bit on (zeros past
// its end).
func (j *job) peek(bit int64) uint64 {
	i := int(bit/8 - j.begin)
	var v uint64
	if i+8 <= len(j.data) {
		v = binary.LittleEndian.Uint64(j.data[i:])
	} else if i < len(j.data) {
		var b [8]byte
		copy(b[:], j.data[i:])
		v = binary.LittleEndian.Uint64(b[:])
	}
	return v >> (bit % 8)
}

// candidate reports whether bit may start a non-final dynamic or stored
// block: the cheap checks, before the header is parsed in full. Final
// blocks and fixed-code blocks are not looked for: their headers say too
// little to tell them from noise.
func (j *job) candidate(bit int64) bool {
	v := j.peek(bit)
	switch v & 7 {
	case 4: // BFINAL 0, BTYPE 2: dynamic
		if v>>3&31 > 29 || v>>8&31 > 29 {
			return false
		}
		nclen := int(v>>13&15) + 4
		w := j.peek(bit + 17)
		var count [8]int
		for i := range nclen {
			count[w>>(3*i)&7]++
		}
		// The code length code must be complete (a single one-bit
		// codeword is allowed, as buildTable allows it).
		left := 1
		for l := 1; l <= 7; l++ {
			left = left<<1 - count[l]
			if left < 0 {
				return false
			}
		}
		return left == 0 || count[1] == 1 && nclen-count[0] == 1
	case 0: // BFINAL 0, BTYPE 0: stored
		pad := (8 - (bit+3)%8) % 8
		if v>>3&(1<<pad-1) != 0 {
			return false // encoders pad with zero bits
		}
		w := j.peek(bit + 3 + pad)
		return uint16(w) == ^uint16(w>>16)
	}
	return false
}

// marked decodes from the block whose header z has just read, with
// 16-bit output and markers for the unknown window, until 32 KiB of
// output pass without a marker (or a member ends); then it goes on with
// fast. j.marks[:j.nm] is the output so far; j.lastMark is one past the
// last symbol that is a marker.
func (j *job) marked(z *Reader) error {
	for {
		switch z.state {
		case stStored:
			n := z.storedLeft
			if z.inEnd-z.inPos < n {
				if !j.last {
					return errOutOfInput
				}
				return z.truncated()
			}
			if err := j.room(n); err != nil {
				return err
			}
			for i, c := range z.in[z.inPos : z.inPos+n] {
				j.marks[j.nm+i] = uint16(c)
			}
			j.nm += n
			z.inPos += n
			z.storedLeft = 0
		case stHuffman:
			clean, err := j.huffmanMarked(z)
			if err != nil {
				return err
			}
			if clean {
				// In the middle of the block: z goes on with it.
				j.bytes(z)
				return j.fast(z)
			}
		}
		z.op = WindowSize + j.nm
		z.endBlock()
		switch {
		case z.state == stBlock && j.nm-j.lastMark < WindowSize:
			if err := z.blockHeader(); err != nil {
				return err
			}
			continue
		case z.state == stDone: // stopped: all was decoded with markers
			j.bytes(z)
			j.out, j.op, j.events, j.end = z.out, z.op, z.spec.events, z.bitOffset()
			return nil
		}
		// Clear of markers (stBlock), or at a member's end (stTrailer):
		// the rest is decoded as bytes.
		j.bytes(z)
		return j.fast(z)
	}
}

// room makes room for n more symbols in j.marks, up to parMaxMarked.
func (j *job) room(n int) error {
	if j.nm+n <= len(j.marks) {
		return nil
	}
	if j.nm+n > parMaxMarked {
		return errTooBig
	}
	m := j.marksPool.get(parMaxMarked)
	copy(m, j.marks[:j.nm])
	j.marksPool.put(j.marks)
	j.marks = m
	return nil
}

// bytes moves the output decoded with markers into a byte buffer that z
// decodes on into: out[WindowSize:] (markers left as zero, for the
// consumer to resolve), and keeps in j.marks the symbols before
// lastMark, which the consumer resolves.
func (j *job) bytes(z *Reader) {
	out := j.pool.get(max(WindowSize+j.nm+margin+(1<<20), j.outSize()))
	for i, v := range j.marks[:j.nm] {
		out[WindowSize+i] = byte(v)
	}
	j.marks = j.marks[:j.lastMark]
	z.out = out
	z.op = WindowSize + j.nm
	z.hist = WindowSize
}

// huffmanMarked decodes symbols of a Huffman block into j.marks until the
// block ends (clean false) or 32 KiB of output have passed without a
// marker (clean true). Markers stand for bytes of the unknown window.
func (j *job) huffmanMarked(z *Reader) (clean bool, err error) {
	bits, nbits := z.bits, z.nbits
	in, inPos, inEnd := z.in, z.inPos, z.inEnd
	lit, dist := z.lit, z.dist
	virt := z.virt
	marks, n, lastMark := j.marks, j.nm, j.lastMark
	save := func() {
		z.bits, z.nbits, z.inPos = bits, nbits, inPos
		j.nm, j.lastMark = n, lastMark
	}
	for {
		if n-lastMark >= WindowSize {
			save()
			z.op = WindowSize + n
			return true, nil
		}
		if n+maxMatch > len(marks) {
			save()
			if err := j.room(maxMatch); err != nil {
				return false, err
			}
			marks = j.marks
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
				inPos = z.inPos
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
			marks[n] = uint16(byte(e >> 16))
			n++
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
		src := n - distance
		switch {
		case src < 0:
			for k := range length {
				if s := src + k; s < 0 {
					marks[n+k] = markFlag | uint16(WindowSize+s)
					j.minMark = min(j.minMark, WindowSize+s)
				} else {
					marks[n+k] = marks[s]
				}
			}
			lastMark = n + length
		case distance >= length:
			copy(marks[n:n+length], marks[src:src+length])
			// The last marker copied, if any: a scan back through
			// the part of the source before lastMark.
			for k := min(length, lastMark-src) - 1; k >= 0; k-- {
				if marks[src+k] >= markFlag {
					lastMark = n + k + 1
					break
				}
			}
		default:
			for k := range length {
				v := marks[src+k]
				marks[n+k] = v
				if v >= markFlag {
					lastMark = n + k + 1
				}
			}
		}
		n += length
	}
}

// maxMatch is the longest match of DEFLATE.
const maxMatch = 258

// fast decodes on with the Reader's loops into z.out, which grows up to
// j.max bytes of output, until the worker stops or the stream ends.
func (j *job) fast(z *Reader) error {
	if z.out == nil {
		z.out = j.pool.get(j.outSize())
		z.op, z.hist = WindowSize, WindowSize
	}
	for {
		z.chunkEnd = len(z.out) - margin
		z.rd = 0
		if err := z.decode(); err != nil {
			return err
		}
		if z.state == stDone {
			j.out, j.op, j.events, j.trailing = z.out, z.op, z.spec.events, z.trailing
			if z.spec.stopped {
				j.end = z.bitOffset()
			}
			return nil
		}
		if z.op >= z.chunkEnd {
			if z.op-WindowSize >= j.max {
				// Stop at the next block header: the consumer decodes
				// on from there. A block of more than parMaxBlock of
				// output is left to the sequential Reader.
				if z.op-WindowSize >= j.max+min(parMaxBlock, j.max) {
					return errTooBig
				}
				z.spec.stopBit = 0
			}
			out := j.pool.get(min(2*len(z.out), WindowSize+j.max+min(parMaxBlock, j.max)+margin))
			copy(out, z.out[:z.op])
			j.pool.put(z.out)
			z.out = out
		}
	}
}

// ParallelReader decodes a gzip stream as Reader does, with the same
// output, checkpoints and errors, on several goroutines: see the comment
// at the top of parallel.go. Options.Limit is not supported.
//
// It reads r ahead on a goroutine of its own (never concurrently with
// another read of r) and decodes up to workers chunks at once, with at
// most workers more decoded and waiting. Memory is bounded: workers+4
// chunks' input buffers of 8 MiB (a chunk and the next), and workers+2
// chunks' output, each at most 40 MiB (parMaxRatio times the chunk, and
// one block more; typically 5 times the chunk, 20 MiB) and 8 MiB of
// markers; about 60 MiB a worker in the worst case, 30 typically.
//
// How many workers: GOMAXPROCS (the index pass's choice), since the
// consumer's work (resolving markers, checksums, copying out) is a small
// part of decoding; but below ParallelMinProcs, or below two chunks of
// input (ParallelMinSize), the sequential Reader does as well or better.
//
// Read and Trailing are for one goroutine; Close may be called from any,
// more than once, and must be called when done (it waits for the
// goroutines).
type ParallelReader struct {
	// set once
	opts    Options
	src     io.Reader
	workers int
	chunk   int // compressed bytes per chunk: parChunk, less in tests
	cancel  context.CancelFunc
	ctx     context.Context
	jobs    chan *job     // in stream order; closed when the producer ends
	outs    *pool[byte]   // chunks' output buffers
	marks   *pool[uint16] // chunks' marks buffers
	ins     *pool[byte]   // chunks' input buffers
	prodEnd chan struct{} // closed when the producer and its workers ended
	stop    sync.Once

	// the producer's, read by the consumer after prodEnd
	held   [][]byte // chunks read but not queued
	srcErr error    // what ended the reads of src (nil: it was stopped)

	// the consumer's
	cur      *job
	prev     *job  // the chunk before cur, once cur is done
	pos      int   // cur.out[:pos] handed out
	ev       int   // cur.events[:ev] applied
	expect   int64 // bit offset where the next chunk must start
	outOff   int64 // uncompressed offset of cur.out[WindowSize]
	tail     []byte
	lastCP   int64
	haveCP   bool
	lastKind Kind
	member   int64 // uncompressed offset where the current member starts
	memberIn int64
	crc      uint32
	size     uint32
	seq      *Reader // the sequential Reader, after a fallback
	trailing bool
	err      error
	// For tests: the chunks decoded by the workers and handed out, and
	// whether the sequential Reader took over.
	chunks   int
	bridged  int // of chunks, decoded by the consumer from a known start
	fellBack bool
}

// NewParallelReader returns a ParallelReader of the gzip stream in r
// (from its first byte) with up to workers decoding goroutines. It stops
// when ctx ends.
func NewParallelReader(ctx context.Context, r io.Reader, opts Options, workers int) *ParallelReader {
	return newParallelReader(ctx, r, opts, workers, parChunk)
}

func newParallelReader(ctx context.Context, r io.Reader, opts Options, workers, chunk int) *ParallelReader {
	ctx, cancel := context.WithCancel(ctx)
	workers = max(workers, 1)
	p := &ParallelReader{
		opts:    opts,
		src:     r,
		workers: workers,
		chunk:   chunk,
		ctx:     ctx,
		cancel:  cancel,
		jobs:    make(chan *job, workers),
		outs:    newPool[byte](workers + 2),
		marks:   newPool[uint16](workers + 2),
		ins:     newPool[byte](workers + 3),
		prodEnd: make(chan struct{}),
		tail:    make([]byte, 0, WindowSize),
	}
	go p.produce()
	return p
}

// produce reads the stream in chunks and queues a job for each once the
// next chunk is read (a chunk's job decodes into the next one), with a
// worker to run it.
func (p *ParallelReader) produce() {
	g, ctx := errgroup.WithContext(p.ctx)
	g.SetLimit(p.workers)
	defer func() {
		g.Wait()
		close(p.jobs)
		close(p.prodEnd)
	}()
	var prev *job
	var off int64
	for {
		buf := p.ins.get(2 * p.chunk)
		n, err := io.ReadFull(p.src, buf[:p.chunk])
		if err == io.ErrUnexpectedEOF {
			err = io.EOF
		}
		if prev != nil {
			prev.data = append(prev.data[:prev.n], buf[:n]...)
			prev.last = err == io.EOF
			if !p.queue(ctx, g, prev) {
				p.held = append(p.held, prev.data[:prev.n], buf[:n])
				return
			}
			prev = nil
		}
		if err != nil {
			p.srcErr = err
			if n > 0 {
				j := &job{begin: off, n: n, data: buf[:n], last: err == io.EOF, max: parMaxRatio * p.chunk, pool: p.outs, marksPool: p.marks, done: make(chan struct{})}
				if !p.queue(ctx, g, j) {
					p.held = append(p.held, buf[:n])
				}
			}
			return
		}
		prev = &job{begin: off, n: n, data: buf[:n], max: parMaxRatio * p.chunk, pool: p.outs, marksPool: p.marks, done: make(chan struct{})}
		off += int64(n)
		if ctx.Err() != nil {
			p.held = append(p.held, prev.data[:prev.n])
			return
		}
	}
}

// queue hands j to the consumer and starts its worker; false when the
// reader is stopping.
func (p *ParallelReader) queue(ctx context.Context, g *errgroup.Group, j *job) bool {
	select {
	case p.jobs <- j:
	case <-ctx.Done():
		return false
	}
	g.Go(func() error {
		j.run(ctx)
		return nil
	})
	return true
}

// Close stops the goroutines and waits for them.
func (p *ParallelReader) Close() error {
	p.Stop()
	<-p.prodEnd
	return nil
}

// Stop asks the goroutines to stop, without waiting.
func (p *ParallelReader) Stop() { p.stop.Do(p.cancel) }

// Trailing reports whether data that is not a gzip member followed the
// last member, as Reader.Trailing.
func (p *ParallelReader) Trailing() bool {
	if p.seq != nil {
		return p.seq.Trailing()
	}
	return p.trailing
}

// Read implements io.Reader.
func (p *ParallelReader) Read(b []byte) (int, error) {
	done := 0
	for {
		switch {
		case p.seq != nil && done == 0:
			return p.seq.Read(b)
		case p.seq != nil || p.err != nil && done > 0:
			return done, nil
		case p.err != nil:
			return 0, p.err
		case p.cur == nil && done > 0:
			return done, nil // the next chunk may not be ready
		case p.cur == nil:
			if err := p.next(); err != nil {
				p.err = err
			}
			continue
		}
		cur := p.cur
		for p.ev < len(cur.events) && cur.events[p.ev].out <= p.pos {
			if err := p.apply(cur.events[p.ev]); err != nil {
				p.err = err
				break
			}
			p.ev++
		}
		if p.err != nil {
			continue
		}
		if p.pos == cur.op {
			p.finishChunk()
			continue
		}
		if done == len(b) {
			return done, nil
		}
		lim := cur.op
		if p.ev < len(cur.events) {
			lim = min(lim, cur.events[p.ev].out)
		}
		n := copy(b[done:], cur.out[p.pos:lim])
		p.crc = crc32.Update(p.crc, crc32.IEEETable, b[done:done+n])
		p.size += uint32(n)
		if p.opts.OnData != nil {
			p.opts.OnData(b[done : done+n])
		}
		p.pos += n
		done += n
	}
}

// next takes the next chunk, or falls back to the sequential Reader.
func (p *ParallelReader) next() error {
	j := p.prev
	if j == nil || j.end >= (j.begin+int64(j.n))*8 {
		// The previous chunk ended in the next one: take it.
		var ok bool
		select {
		case j, ok = <-p.jobs:
		case <-p.ctx.Done():
			return p.ctx.Err()
		}
		if !ok {
			return p.fallback(nil)
		}
		select {
		case <-j.done:
		case <-p.ctx.Done():
			return p.ctx.Err()
		}
		if j.err == nil && j.startsAt(p.expect) && (j.minMark == WindowSize || WindowSize-j.minMark <= int(p.outOff-p.member)) {
			p.resolve(j)
			return nil
		}
	}
	// The previous chunk stopped short of the next one (it had too much
	// output), or this chunk's worker did not start where it ended:
	// decode the chunk here, from there.
	if p.expect == 0 || p.expect/8 < j.begin || p.expect/8 >= j.begin+int64(j.n) {
		// The stream's start is a member header, not a block's.
		return p.fallback(j)
	}
	if j.out != nil {
		p.outs.put(j.out)
		j.out = nil
	}
	b := j.from(p.expect, p.tail[len(p.tail)-int(min(int64(len(p.tail)), p.outOff-p.member)):])
	if b.err != nil {
		return p.fallback(j)
	}
	p.bridged++
	p.resolve(b)
	return nil
}

// resolve makes j the current chunk, resolving its markers with the
// window before it.
func (p *ParallelReader) resolve(j *job) {
	// Resolve the markers with the window before the chunk.
	copy(j.out[WindowSize-len(p.tail):], p.tail)
	for i, v := range j.marks {
		if v >= markFlag {
			j.out[WindowSize+i] = j.out[v&^markFlag]
		} else {
			j.out[WindowSize+i] = byte(v)
		}
	}
	p.cur, p.pos, p.ev = j, WindowSize, 0
	p.chunks++
}

// finishChunk moves on past the current chunk, keeping its last 32 KiB of
// output as the next one's window.
func (p *ParallelReader) finishChunk() {
	cur := p.cur
	if cur.end < 0 {
		p.trailing, p.err = cur.trailing, io.EOF
		p.Stop()
		return
	}
	from := max(cur.op-WindowSize, WindowSize-len(p.tail))
	p.tail = append(p.tail[:0], cur.out[from:cur.op]...)
	p.outOff += int64(cur.op - WindowSize)
	p.expect = cur.end
	p.outs.put(cur.out)
	p.marks.put(cur.marks)
	cur.out, cur.marks = nil, nil
	if p.prev != nil && unsafe.SliceData(p.prev.data) != unsafe.SliceData(cur.data) {
		p.ins.put(p.prev.data)
	}
	p.prev, p.cur = cur, nil
}

// apply records what a worker saw at the current output offset: a
// checkpoint when one is due, as Reader does, and the member checksums.
func (p *ParallelReader) apply(ev event) error {
	out := p.outOff + int64(ev.out-WindowSize)
	report := p.opts.Span > 0 && p.opts.OnCheckpoint != nil
	switch ev.kind {
	case evBlock:
		if report && out-p.lastCP >= p.opts.Span {
			w := int(min(WindowSize, out-p.member))
			win := bytes.Clone(p.cur.out[ev.out-w : ev.out])
			p.emit(Checkpoint{Kind: KindBlock, In: ev.in / 8, Bit: uint8(ev.in % 8), Out: out, Window: win,
				Sums: true, CRC: p.crc, Size: p.size})
		}
	case evMemberEnd:
		if ev.crc != p.crc || ev.size != p.size {
			return fmt.Errorf("%w: member at %d: checksum mismatch", ErrCorrupt, p.memberIn)
		}
	case evMemberStart:
		due := !p.haveCP || out-p.lastCP >= p.opts.Span || out == p.lastCP && p.lastKind == KindBlock
		if report && due {
			p.emit(Checkpoint{Kind: KindMember, In: ev.in, Out: out})
		}
		p.member, p.memberIn, p.crc, p.size = out, ev.in, 0, 0
	}
	return nil
}

func (p *ParallelReader) emit(cp Checkpoint) {
	p.lastCP, p.haveCP, p.lastKind = cp.Out, true, cp.Kind
	p.opts.OnCheckpoint(cp)
}

// fallback stops the workers and decodes the rest of the stream with a
// sequential Reader from p.expect, the last confirmed block header (or
// the stream's start), which lies in the chunk of j (nil: after every
// chunk read).
func (p *ParallelReader) fallback(j *job) error {
	if err := p.ctx.Err(); err != nil {
		return err // stopped from outside: the chunks read are not all queued
	}
	p.Stop()
	<-p.prodEnd
	p.fellBack = true
	var rs []io.Reader
	if j != nil {
		rs = append(rs, bytes.NewReader(j.data[p.expect/8-j.begin:j.n]))
	}
	for q := range p.jobs {
		rs = append(rs, bytes.NewReader(q.data[:q.n]))
	}
	for _, b := range p.held {
		rs = append(rs, bytes.NewReader(b))
	}
	switch p.srcErr {
	case nil:
		rs = append(rs, p.src)
	case io.EOF:
	default:
		rs = append(rs, failing{p.srcErr})
	}
	rest := io.MultiReader(rs...)
	if p.expect == 0 {
		p.seq = NewReader(rest, p.opts)
		return nil
	}
	w := int(min(int64(len(p.tail)), p.outOff-p.member))
	cp := Checkpoint{Kind: KindBlock, In: p.expect / 8, Bit: uint8(p.expect % 8), Out: p.outOff,
		Window: p.tail[len(p.tail)-w:], Sums: true, CRC: p.crc, Size: p.size}
	z, err := NewReaderAt(rest, cp, p.opts)
	if err != nil {
		return err
	}
	z.lastCP, z.haveCP, z.lastKind, z.memberIn = p.lastCP, p.haveCP, p.lastKind, p.memberIn
	z.firstMemb = false
	p.seq = z
	return nil
}

type failing struct{ err error }

func (e failing) Read([]byte) (int, error) { return 0, e.err }

// ParallelMinSize is the compressed size below which a ParallelReader
// does not pay: two chunks, the least that two workers share.
const ParallelMinSize = 2 * parChunk

// ParallelMinProcs is the least GOMAXPROCS at which a ParallelReader
// pays. Its workers spend about 1.6 times the CPU of the sequential
// Reader (the Go toolchain's tar.gz: 0.67 s of user and system time
// against 0.42 s), for the output decoded with markers (some 7%, at a
// third of the fast loop's speed), the chunks' output written to memory
// and copied out rather than kept in cache, and marker resolution. On two
// cores that leaves no gain in wall time (0.28-0.57 s against 0.25-0.34
// s, with other work on the machine); from four on the workers have
// cores to spare.
const ParallelMinProcs = 4
