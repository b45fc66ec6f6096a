// Package tarscan reads a decoded tar stream once, in order, and reports
// every member's header fields and where its data lies in the stream. It
// knows nothing of compression, transports or FUSE: it sees a plain
// io.Reader of tar bytes and counts offsets in that stream.
//
// A member is a run of header blocks followed by its data, padded to the
// 512-byte block size:
//
//	HeaderOffset                          DataOffset
//	|                                     |
//	[g|V ...][x|X|L|K hdr + data ...][hdr][1.0 sparse map][stored data][pad]
//	 global    per-member extended    main  (pax sparse    StoredSize   to
//	 headers   headers (pax, GNU)     hdr    1.0 only)     bytes        512
//
// Members tile the stream: a member's HeaderOffset is where the previous
// member's padded data ended, so pax global headers and volume labels in
// between are counted with the member that follows them.
//
// Header block (offsets in decimal):
//
//	  0 name[100]      100 mode[8]       108 uid[8]        116 gid[8]
//	124 size[12]       136 mtime[12]     148 chksum[8]     156 typeflag[1]
//	157 linkname[100]  257 magic[6]      263 version[2]    265 uname[32]
//	297 gname[32]      329 devmajor[8]   337 devminor[8]   345 ...
//
//	ustar  "ustar\0" "00":  345 prefix[155]  500 pad[12]
//	star   "ustar\0" "00":  345 prefix[131]  476 atime[12]  488 ctime[12]
//	                        508 "tar\0"
//	GNU    "ustar " " \0":  345 atime[12]  357 ctime[12]  369 offset[12]
//	                        381 longnames[4]  385 pad[1]
//	                        386 sparse[4] of {offset[12] numbytes[12]}
//	                        482 isextended[1]  483 realsize[12]  495 pad[17]
//	GNU sparse extension block: 0 sparse[21] of {offset[12] numbytes[12]}
//	                        504 isextended[1]  505 pad[7]
//	v7     no magic: the fields up to linkname; the rest is padding.
//
// Numeric fields hold octal text (leading spaces or NULs, ended by a space
// or NUL) or, when the first byte has its top bit set, a GNU base-256
// two's-complement number.
package tarscan

import (
	"errors"
	"fmt"
	"io"
	"math"
	"strings"
)

// Sentinel errors. Every error from Next or Read that is about the archive
// itself wraps one of them and says at which stream offset and what was
// wrong. Errors from the underlying reader are wrapped as they are.
var (
	// ErrNotTar means the first header block is not a valid tar header
	// (bad checksum or unreadable checksum field).
	ErrNotTar = errors.New("tarscan: not a tar archive")
	// ErrCorrupt means a later header has a bad checksum, a number, pax
	// record or sparse map is malformed, a limit was exceeded, or the
	// archive uses a feature that is not supported (GNU multi-volume).
	ErrCorrupt = errors.New("tarscan: corrupt archive")
	// ErrTruncated means the stream ended inside a header, an extended
	// header or a member's data.
	ErrTruncated = errors.New("tarscan: truncated archive")
)

// Normalized type flags reported in Header.Typeflag.
const (
	TypeReg     byte = '0'
	TypeLink    byte = '1' // hard link to Linkname
	TypeSymlink byte = '2'
	TypeChar    byte = '3'
	TypeBlock   byte = '4'
	TypeDir     byte = '5'
	TypeFIFO    byte = '6'
)

// Header is one member of the archive: its header fields after every
// extension (GNU long names, pax records, sparse maps) was applied, and
// where its data lies in the stream.
type Header struct {
	// Name is the full path as recorded (after GNU long names, pax path,
	// ustar prefix, GNU sparse name); it is not cleaned.
	Name string
	// Linkname is the target of a symlink or hard link.
	Linkname string
	// Typeflag is one of TypeReg ... TypeFIFO.
	Typeflag byte
	// Mode holds the permission bits with setuid, setgid and sticky
	// (mask 07777).
	Mode         int64
	UID, GID     int64
	Uname, Gname string
	// Size is the logical size: the real size of a sparse file, 0 for
	// links, directories, devices and FIFOs.
	Size int64
	// ATime and CTime are zero unless HasATime and HasCTime.
	MTime, ATime, CTime Time
	HasATime, HasCTime  bool
	// Devmajor and Devminor are set for TypeChar and TypeBlock.
	Devmajor, Devminor int64
	// Xattrs are the extended attributes from SCHILY.xattr.NAME and
	// LIBARCHIVE.xattr.NAME pax records, decoded, in archive order; a
	// name recorded twice keeps its first position and its last value.
	Xattrs []Xattr
	// Sparse is nil unless the member is a sparse file. Chunks are sorted,
	// do not overlap, have Length > 0 and lie within Size; their data is
	// stored back to back starting at DataOffset. A sparse file that is
	// all hole has a non-nil, empty Sparse.
	Sparse []SparseChunk
	// DataOffset is the stream offset of the first stored data byte (after
	// the in-data map of a pax sparse 1.0 file).
	DataOffset int64
	// StoredSize is the number of stored data bytes at DataOffset: the sum
	// of the chunk lengths of a sparse file, Size for other regular files,
	// 0 for the rest (whatever data the archive may carry for them is
	// skipped).
	StoredSize int64
	// HeaderOffset is the stream offset of this member's first header
	// block, including its extended headers and any pax global header or
	// volume label since the previous member.
	HeaderOffset int64
	// PAX holds the pax records (global and per-member) that were not
	// consumed into the fields above, for diagnostics. It is nil when
	// there are none.
	PAX map[string]string
}

// Xattr is one extended attribute.
type Xattr struct{ Name, Value string }

// SparseChunk is one data region of a sparse file: Length bytes at logical
// Offset.
type SparseChunk struct{ Offset, Length int64 }

// Limits bound what a hostile archive can make the Scanner allocate. Zero
// or negative fields take their defaults.
type Limits struct {
	// MaxPAXSize bounds one pax extended header and the pax records
	// gathered for one member. Default 16 MiB.
	MaxPAXSize int64
	// MaxGlobalPAXSize bounds the pax global records in force (there may
	// also be at most 256 of them). They apply to every later member, so a
	// small bound keeps a hostile archive from making each member cost
	// that much. Default 64 KiB.
	MaxGlobalPAXSize int64
	// MaxNameLen bounds names and link targets from GNU long-name headers
	// and pax records. Default 64 KiB: Linux paths end at 4 KiB, and GNU
	// tar and bsdtar fail on longer names (Go's testdata
	// pax-bad-hdr-large.tar.bz2 has one of 1 MiB).
	MaxNameLen int
	// MaxSparseChunks bounds the entries of one sparse map. Default 1<<20.
	MaxSparseChunks int
}

const (
	blockSize = 512

	defaultMaxPAXSize      = 16 << 20
	defaultMaxGlobalSize   = 64 << 10
	defaultMaxNameLen      = 64 << 10
	defaultMaxSparseChunks = 1 << 20

	// maxGlobalRecords bounds the pax global records in force, which every
	// later member copies (as xattrs or PAX entries).
	maxGlobalRecords = 256

	dropBufSize      = 32 << 10
	paxReadChunk     = 64 << 10
	maxEmptyReads    = 100
	discardChunkSize = 1 << 30
)

func (l Limits) withDefaults() Limits {
	if l.MaxPAXSize <= 0 {
		l.MaxPAXSize = defaultMaxPAXSize
	}
	if l.MaxGlobalPAXSize <= 0 {
		l.MaxGlobalPAXSize = defaultMaxGlobalSize
	}
	if l.MaxNameLen <= 0 {
		l.MaxNameLen = defaultMaxNameLen
	}
	if l.MaxSparseChunks <= 0 {
		l.MaxSparseChunks = defaultMaxSparseChunks
	}
	return l
}

// discarder64 is a reader that can skip bytes without copying them.
type discarder64 interface {
	Discard(n int64) (int64, error)
}

// discarder is the bufio.Reader form of discarder64.
type discarder interface {
	Discard(n int) (int, error)
}

// Scanner reads tar headers from a stream, in order.
//
// A Scanner is not safe for concurrent use. It reads the stream in 512-byte
// blocks and never reads past the end-of-archive marker (except for the one
// block that shows a lone zero block to be corruption), so r should be
// buffered (a bufio.Reader, or a decoder that buffers). The Scanner keeps no
// reference to the Headers it returns.
type Scanner struct {
	r    io.Reader
	d64  discarder64
	dint discarder
	lim  Limits

	off     int64 // stream offset after the last consumed byte
	blk     [blockSize]byte
	drop    []byte // scratch for skipping data when r cannot Discard
	headers int64  // valid header blocks seen; 0 means the next is the first
	resyncs int    // runs of damaged blocks skipped to the next header (readHeader)
	err     error  // sticky: returned by every call after the first error

	// The member last returned by Next.
	dataLeft int64 // stored data bytes not consumed yet by Read
	padLeft  int64 // bytes after the stored data up to the next header
	curOff   int64 // offset of its main header block, for messages

	// Extended headers seen for the member being read. Reused.
	pend    pending
	paxBuf  []byte   // pax records of the 'x' headers, back to back
	paxRecs []paxRec // records in paxBuf
	long    []byte   // GNU 'L' long name
	longLnk []byte   // GNU 'K' long link name
	sparse  []SparseChunk
	xattrs  []Xattr // capacity reused for paxState.xattrs

	// Pax global state, rebuilt at each 'g' header and never modified:
	// the records, and what they say, decoded once (its byte slices
	// point into gBuf).
	gBuf   []byte
	gRecs  []paxRec
	global paxState

	// Where the member last returned starts (its HeaderOffset), and the
	// global records in force there: its headers may change them (State).
	curStart   int64
	startGBuf  []byte
	startGRecs []paxRec

	// Last uname and gname returned, to share identical strings.
	uname, gname string
}

// pending says which extended headers precede the current member.
type pending struct {
	pax, long, longLnk bool
}

func (p pending) active() bool { return p.pax || p.long || p.longLnk }

// NewScanner returns a Scanner reading the tar stream r from offset 0.
// When r implements Discard(n int64) (int64, error) or the bufio-style
// Discard(n int) (int, error), member data is skipped with it; otherwise it
// is read and dropped through a reused buffer.
func NewScanner(r io.Reader, lim Limits) *Scanner {
	s := &Scanner{r: r, lim: lim.withDefaults()}
	switch d := r.(type) {
	case discarder64:
		s.d64 = d
	case discarder:
		s.dint = d
	}
	return s
}

// State is where a scan stands between two members, to resume it later
// there (NewScannerAt): the stream offset of the next member's first
// header block, and the pax global records in force there.
type State struct {
	Offset int64
	Global []string // "key=value", in the order they were set
}

// State returns where the member last returned by Next starts
// (Header.HeaderOffset), with the pax global records in force before its
// headers: a scan resumed there returns that member again.
func (s *Scanner) State() State {
	st := State{Offset: s.curStart}
	for _, r := range s.startGRecs {
		st.Global = append(st.Global, string(s.startGBuf[r.k0:r.v1]))
	}
	return st
}

// NewScannerAt returns a Scanner that resumes a scan at st: r yields the
// tar stream from st.Offset on, which must be where a member's first
// header block starts (State).
func NewScannerAt(r io.Reader, lim Limits, st State) (*Scanner, error) {
	s := NewScanner(r, lim)
	s.off, s.curStart, s.headers = st.Offset, st.Offset, 1
	var gBuf []byte
	var gRecs []paxRec
	for _, kv := range st.Global {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: bad pax global record %q to resume at %d", ErrCorrupt, kv, st.Offset)
		}
		k0 := len(gBuf)
		gBuf = append(gBuf, kv...)
		gRecs = append(gRecs, paxRec{k0, k0 + len(k), len(gBuf)})
	}
	if len(gRecs) > 0 {
		if err := s.setGlobal(gBuf, gRecs, st.Offset); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Offset returns the stream offset after the last byte the Scanner
// consumed. After Next returned a member it is that member's DataOffset;
// after io.EOF it is the end of the end-of-archive marker.
func (s *Scanner) Offset() int64 { return s.off }

// Next skips what is left of the current member's data and returns the
// next member. It returns io.EOF after the end-of-archive marker (two zero
// blocks, or one zero block followed by the end of the stream) or when the
// stream ends cleanly at a header boundary. Pax global headers are applied
// to the members that follow, each in place of the one before
// (readGlobal), and are not returned; volume labels are skipped. After an
// error every later call returns the same error.
//
// The returned Header is owned by the caller.
func (s *Scanner) Next() (*Header, error) {
	if s.err != nil {
		return nil, s.err
	}
	h, err := s.next()
	if err != nil {
		s.err = err
		return nil, err
	}
	return h, nil
}

// Read reads the stored data of the member last returned by Next: up to
// StoredSize bytes starting at DataOffset (for a sparse file, its chunks
// back to back). It returns io.EOF at the end of that data. Reading is
// optional: Next skips whatever was not read.
func (s *Scanner) Read(p []byte) (int, error) {
	if s.err != nil {
		return 0, s.err
	}
	if s.dataLeft == 0 {
		return 0, io.EOF
	}
	if len(p) == 0 {
		return 0, nil
	}
	if int64(len(p)) > s.dataLeft {
		p = p[:s.dataLeft]
	}
	n, err := s.r.Read(p)
	s.off += int64(n)
	s.dataLeft -= int64(n)
	switch {
	case err == io.EOF && s.dataLeft > 0:
		s.err = fmt.Errorf("%w: member at %d: data ends at %d, %d bytes short",
			ErrTruncated, s.curOff, s.off, s.dataLeft)
		return n, s.err
	case err == io.EOF:
		return n, nil // the padding, if missing, is reported by Next
	case err != nil:
		s.err = fmt.Errorf("tarscan: read member at %d: %w", s.curOff, err)
		return n, s.err
	}
	return n, nil
}

func (s *Scanner) next() (*Header, error) {
	if n := s.dataLeft + s.padLeft; n > 0 {
		s.dataLeft, s.padLeft = 0, 0
		if err := s.skip(n); err != nil {
			return nil, s.dataErr(s.curOff, err)
		}
	}
	start := s.off
	s.curStart, s.startGBuf, s.startGRecs = start, s.gBuf, s.gRecs
	s.pend = pending{}
	s.paxBuf = s.paxBuf[:0]
	s.paxRecs = s.paxRecs[:0]
	for {
		at := s.off
		hdrOff, err := s.readHeader(at)
		if err != nil {
			return nil, err
		}
		if hdrOff != at {
			// Damaged blocks were skipped (readHeader): the member
			// starts at its header, with the global records so far.
			start = hdrOff
			s.curStart, s.startGBuf, s.startGRecs = start, s.gBuf, s.gRecs
		}
		switch tf := s.blk[156]; tf {
		case 'x', 'X':
			err = s.readPAX(hdrOff)
		case 'g':
			err = s.readGlobal(hdrOff)
		case 'L', 'K':
			err = s.readLong(hdrOff, tf)
		case 'V':
			err = s.skipMeta(hdrOff)
		case 'M':
			return nil, fmt.Errorf("%w: header at %d: GNU multi-volume continuation is not supported",
				ErrCorrupt, hdrOff)
		default:
			return s.member(start, hdrOff)
		}
		if err != nil {
			return nil, err
		}
	}
}

// dataErr words an error met while skipping the data of the member at off.
func (s *Scanner) dataErr(off int64, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: member at %d: data ends at %d", ErrTruncated, off, s.off)
	}
	return fmt.Errorf("tarscan: read member at %d: %w", off, err)
}

// readHeader reads the header block at off into s.blk, checks it, and
// returns its offset. It returns io.EOF at the end of the archive.
//
// A block with a bad checksum where a member's first header belongs, after
// the archive's first header, is skipped, with the blocks after it, up to
// the next that is a header (or the end of the archive): GNU tar does so
// ("Skipping to next header", and a failure status at the end), and so
// does bsdtar ("Damaged tar archive"). Resyncs counts such runs.
func (s *Scanner) readHeader(off int64) (int64, error) {
	skipping := false
	for ; ; off += blockSize {
		n, err := s.readFull(s.blk[:])
		switch {
		case err == io.EOF:
			// GNU tar ends there too: the extended headers describe no
			// member.
			return off, io.EOF
		case err == io.ErrUnexpectedEOF:
			if s.headers == 0 && !plausiblePrefix(s.blk[:n]) {
				return off, fmt.Errorf("%w: %d bytes", ErrNotTar, n)
			}
			if !s.pend.active() && isZero(s.blk[:n]) {
				return off, io.EOF // a cut end-of-archive marker
			}
			return off, fmt.Errorf("%w: header at %d: stream ends after %d of %d bytes",
				ErrTruncated, off, n, blockSize)
		case err != nil:
			return off, fmt.Errorf("tarscan: read header at %d: %w", off, err)
		}
		if isZero(s.blk[:]) {
			if s.pend.active() {
				return off, fmt.Errorf("%w: header at %d: zero block after an extended header", ErrCorrupt, off)
			}
			return off, s.readEndMarker(off)
		}
		if checksumOK(&s.blk) {
			s.headers++
			return off, nil
		}
		switch {
		case s.headers == 0:
			return off, fmt.Errorf("%w: header at %d: bad checksum", ErrNotTar, off)
		case s.pend.active():
			return off, fmt.Errorf("%w: header at %d: bad checksum", ErrCorrupt, off)
		case !skipping:
			skipping = true
			s.resyncs++
		}
	}
}

// Resyncs returns how many times the scan has skipped damaged blocks to
// the next header (readHeader) so far.
func (s *Scanner) Resyncs() int { return s.resyncs }

// readEndMarker reads the block after a zero block at off.
func (s *Scanner) readEndMarker(off int64) error {
	n, err := s.readFull(s.blk[:])
	switch {
	case err == io.EOF:
		return io.EOF
	case err == io.ErrUnexpectedEOF:
		if isZero(s.blk[:n]) {
			return io.EOF
		}
		return fmt.Errorf("%w: header at %d: stream ends after %d of %d bytes",
			ErrTruncated, off+blockSize, n, blockSize)
	case err != nil:
		return fmt.Errorf("tarscan: read header at %d: %w", off+blockSize, err)
	}
	if !isZero(s.blk[:]) {
		return fmt.Errorf("%w: header at %d: lone zero block before a non-zero block", ErrCorrupt, off)
	}
	return io.EOF
}

// metaSize parses the size of the extended header in s.blk at off.
func (s *Scanner) metaSize(off int64) (int64, error) {
	n, ok := parseNumeric(s.blk[124:136])
	if !ok || n < 0 {
		return 0, fmt.Errorf("%w: header at %d: bad size field %q", ErrCorrupt, off, fieldText(s.blk[124:136]))
	}
	return n, nil
}

// readPAX reads the records of the pax extended header at off as the
// member's records. Of several in a row the last counts, as in GNU tar.
func (s *Scanner) readPAX(off int64) error {
	n, err := s.metaSize(off)
	if err != nil {
		return err
	}
	s.paxBuf, s.paxRecs = s.paxBuf[:0], s.paxRecs[:0]
	if n > s.lim.MaxPAXSize-int64(len(s.paxBuf)) {
		return fmt.Errorf("%w: header at %d: pax records of %d bytes exceed the limit of %d",
			ErrCorrupt, off, n+int64(len(s.paxBuf)), s.lim.MaxPAXSize)
	}
	from := len(s.paxBuf)
	if s.paxBuf, err = s.readMeta(off, s.paxBuf, n); err != nil {
		return err
	}
	if s.paxRecs, err = parsePAX(s.paxBuf, from, s.paxRecs); err != nil {
		return fmt.Errorf("%w: header at %d: %v", ErrCorrupt, off, err)
	}
	s.pend.pax = true
	return nil
}

// readGlobal reads the pax global header at off. Its records replace
// those in force, as GNU tar replaces them: a key it leaves out no longer
// applies, the first of a key given twice counts, and an empty value sets
// nothing.
//
// A header holding a record that names the members after it
// (namesMembers) is read as holding none, as bsdtar reads every global
// header. GNU tar gives them all that name, and fails where it is empty,
// so that bsdtar's tree is the one to give (Go's testdata
// pax-global-records.tar). The members that an earlier header names are
// read before the empty name is: to give that tree in one pass, every
// such header is ignored, also where GNU tar would extract the archive.
func (s *Scanner) readGlobal(off int64) error {
	n, err := s.metaSize(off)
	if err != nil {
		return err
	}
	if n > s.lim.MaxPAXSize {
		return fmt.Errorf("%w: header at %d: pax global header of %d bytes exceeds the limit of %d",
			ErrCorrupt, off, n, s.lim.MaxPAXSize)
	}
	// Read into the member buffer past its records, then copy to gBuf.
	from := len(s.paxBuf)
	buf, err := s.readMeta(off, s.paxBuf, n)
	s.paxBuf = buf[:from]
	if err != nil {
		return err
	}
	var recs []paxRec
	if recs, err = parsePAX(buf, from, nil); err != nil {
		return fmt.Errorf("%w: header at %d: %v", ErrCorrupt, off, err)
	}
	for _, r := range recs {
		if namesMembers(r.key(buf)) {
			return s.setGlobal(nil, nil, off)
		}
	}
	var gBuf []byte
	var gRecs []paxRec
	seen := make(map[string]bool, len(recs))
	for _, r := range recs {
		k, v := r.key(buf), r.value(buf)
		if seen[string(k)] {
			continue
		}
		seen[string(k)] = true
		if len(v) == 0 || ignoredGlobal(k) {
			continue
		}
		k0 := len(gBuf)
		gBuf = append(gBuf, k...)
		k1 := len(gBuf)
		gBuf = append(gBuf, '=')
		gBuf = append(gBuf, v...)
		gRecs = append(gRecs, paxRec{k0, k1, len(gBuf)})
		if len(gRecs) > maxGlobalRecords {
			return fmt.Errorf("%w: header at %d: more than %d pax global records in force",
				ErrCorrupt, off, maxGlobalRecords)
		}
		if int64(len(gBuf)) > s.lim.MaxGlobalPAXSize {
			return fmt.Errorf("%w: header at %d: pax global records exceed the limit of %d bytes",
				ErrCorrupt, off, s.lim.MaxGlobalPAXSize)
		}
	}
	return s.setGlobal(gBuf, gRecs, off)
}

// setGlobal makes gRecs, records in gBuf, the pax global records in
// force; off is the header they came from, for messages.
func (s *Scanner) setGlobal(gBuf []byte, gRecs []paxRec, off int64) error {
	var g paxState
	for _, r := range gRecs {
		if err := s.applyPAX(&g, r.key(gBuf), r.value(gBuf)); err != nil {
			return fmt.Errorf("%w: header at %d: pax global record %q: %v", ErrCorrupt, off, r.key(gBuf), err)
		}
	}
	g.xattrIndex = nil
	s.gBuf, s.gRecs, s.global = gBuf, gRecs, g
	return nil
}

// readLong reads the GNU long name ('L') or long link name ('K') at off.
func (s *Scanner) readLong(off int64, tf byte) error {
	n, err := s.metaSize(off)
	if err != nil {
		return err
	}
	if n > int64(s.lim.MaxNameLen)+1 {
		return fmt.Errorf("%w: header at %d: GNU long name of %d bytes exceeds the limit of %d",
			ErrCorrupt, off, n, s.lim.MaxNameLen)
	}
	dst := &s.long
	if tf == 'K' {
		dst = &s.longLnk
	}
	if *dst, err = s.readMeta(off, (*dst)[:0], n); err != nil {
		return err
	}
	*dst = cstr(*dst)
	if tf == 'K' {
		s.pend.longLnk = true
	} else {
		s.pend.long = true
	}
	return nil
}

// skipMeta skips the data of the header at off that is not returned.
func (s *Scanner) skipMeta(off int64) error {
	n, err := s.metaSize(off)
	if err != nil {
		return err
	}
	if n > math.MaxInt64-s.off-blockSize {
		return fmt.Errorf("%w: header at %d: size %d out of range", ErrCorrupt, off, n)
	}
	if err := s.skip(padded(n)); err != nil {
		return s.dataErr(off, err)
	}
	return nil
}

// readMeta appends the n data bytes of the extended header at off to dst,
// growing dst only as bytes arrive, and skips the padding.
func (s *Scanner) readMeta(off int64, dst []byte, n int64) ([]byte, error) {
	for left := n; left > 0; {
		c := int(min(left, paxReadChunk))
		dst = growLen(dst, c)
		m, err := s.readFull(dst[len(dst)-c:])
		dst = dst[:len(dst)-c+m]
		left -= int64(m)
		if err != nil {
			return dst, s.dataErr(off, err)
		}
	}
	if err := s.skip(padded(n) - n); err != nil {
		return dst, s.dataErr(off, err)
	}
	return dst, nil
}

// growLen extends b by n bytes, reallocating with amortized growth.
func growLen(b []byte, n int) []byte {
	if cap(b)-len(b) < n {
		nb := make([]byte, len(b), max(2*cap(b), len(b)+n))
		copy(nb, b)
		b = nb
	}
	return b[:len(b)+n]
}

// readFull reads len(p) bytes like io.ReadFull, counting them, and gives
// up with io.ErrNoProgress on a reader that keeps returning nothing.
func (s *Scanner) readFull(p []byte) (int, error) {
	n, empty := 0, 0
	for n < len(p) {
		m, err := s.r.Read(p[n:])
		n += m
		s.off += int64(m)
		if err != nil {
			if err == io.EOF && n > 0 && n < len(p) {
				err = io.ErrUnexpectedEOF
			}
			if n == len(p) && err == io.EOF {
				err = nil
			}
			return n, err
		}
		if m > 0 {
			empty = 0
		} else if empty++; empty >= maxEmptyReads {
			return n, io.ErrNoProgress
		}
	}
	return n, nil
}

// skip consumes n bytes of the stream. A short stream gives
// io.ErrUnexpectedEOF.
func (s *Scanner) skip(n int64) error {
	if n <= 0 {
		return nil
	}
	switch {
	case s.d64 != nil:
		m, err := s.d64.Discard(n)
		s.off += m
		if m < n && (err == nil || err == io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		if m == n {
			err = nil
		}
		return err
	case s.dint != nil:
		for n > 0 {
			c := int(min(n, discardChunkSize))
			m, err := s.dint.Discard(c)
			s.off += int64(m)
			n -= int64(m)
			if m < c {
				if err == nil || err == io.EOF {
					err = io.ErrUnexpectedEOF
				}
				return err
			}
		}
		return nil
	}
	if s.drop == nil {
		s.drop = make([]byte, dropBufSize)
	}
	for n > 0 {
		c := min(n, int64(len(s.drop)))
		m, err := s.readFull(s.drop[:c])
		n -= int64(m)
		if err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// padded rounds n up to a whole number of blocks.
func padded(n int64) int64 { return (n + blockSize - 1) &^ (blockSize - 1) }
