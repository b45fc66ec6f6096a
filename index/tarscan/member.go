package tarscan

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strings"
)

// paxState is what the pax records (global, then per-member) say about a
// member. Byte slices point into s.gBuf or s.paxBuf.
type paxState struct {
	path, linkpath, uname, gname []byte
	hasPath, hasLinkpath         bool
	hasUname, hasGname           bool

	size, uid, gid      int64
	hasSize, hasUID     bool
	hasGID              bool
	mtime, atime, ctime Time
	hasMTime, hasATime  bool
	hasCTime            bool
	devmajor, devminor  int64
	hasMajor, hasMinor  bool
	sparseName          []byte
	hasSparseName       bool
	sparseMajor         int64
	sparseMinor         int64
	hasSparseVer        bool
	realsize            int64
	hasRealsize         bool
	numblocks           int64
	hasNumblocks        bool
	sparseMap, sparse00 bool  // GNU.sparse.map / .offset seen
	sparseEntries       int64 // entries of the map as recorded, before appendChunk
	pendingNumbytes     bool  // GNU.sparse.offset waits for its numbytes
	xattrs              []Xattr
	other               map[string]string
	xattrIndex          map[string]int // built once there are many xattrs
}

const xattrLinearMax = 16

// member builds the Header of the main header block in s.blk at hdrOff,
// whose extended headers started at start.
func (s *Scanner) member(start, hdrOff int64) (*Header, error) {
	b := &s.blk
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: header at %d: %s", ErrCorrupt, hdrOff, fmt.Sprintf(format, args...))
	}
	num := func(name string, lo, hi int) (int64, error) {
		v, ok := parseNumeric(b[lo:hi])
		if !ok {
			return 0, corrupt("bad %s field %q", name, fieldText(b[lo:hi]))
		}
		return v, nil
	}
	nonNeg := func(name string, lo, hi int) (int64, error) {
		v, err := num(name, lo, hi)
		if err == nil && v < 0 {
			err = corrupt("negative %s %d", name, v)
		}
		return v, err
	}

	f := detectFormat(b)
	tf := b[156]
	h := &Header{HeaderOffset: start}
	mode, err := num("mode", 100, 108)
	if err != nil {
		return nil, err
	}
	h.Mode = mode & 07777
	if h.UID, err = nonNeg("uid", 108, 116); err != nil {
		return nil, err
	}
	if h.GID, err = nonNeg("gid", 116, 124); err != nil {
		return nil, err
	}
	raw, err := nonNeg("size", 124, 136)
	if err != nil {
		return nil, err
	}
	mtime, err := num("mtime", 136, 148)
	if err != nil {
		return nil, err
	}
	h.MTime = Time{Sec: mtime}

	// Fields that only the ustar family has.
	var prefix, uname, gname []byte
	if f != formatV7 {
		uname, gname = cstr(b[265:297]), cstr(b[297:329])
	}
	switch f {
	case formatUSTAR:
		prefix = cstr(b[345 : 345+ustarPrefixLen])
	case formatStar:
		prefix = cstr(b[345 : 345+starPrefixLen])
		s.headerTimes(h, 476, 488)
	case formatGNU:
		s.headerTimes(h, 345, 357)
	}
	isDev := tf == TypeChar || tf == TypeBlock
	if isDev && f != formatV7 {
		if h.Devmajor, err = nonNeg("devmajor", 329, 337); err != nil {
			return nil, err
		}
		if h.Devminor, err = nonNeg("devminor", 337, 345); err != nil {
			return nil, err
		}
	}

	// Pax records: what the global ones say, then the member's own.
	p := s.global
	p.xattrs = append(s.xattrs[:0], s.global.xattrs...)
	if s.global.other != nil {
		p.other = maps.Clone(s.global.other)
	}
	s.sparse = s.sparse[:0]
	defer func() { s.xattrs = p.xattrs[:0] }()
	for _, r := range s.paxRecs {
		if err := s.applyPAX(&p, r.key(s.paxBuf), r.value(s.paxBuf)); err != nil {
			return nil, corrupt("pax record %q: %v", r.key(s.paxBuf), err)
		}
	}
	if p.pendingNumbytes {
		return nil, corrupt("pax GNU.sparse.offset without GNU.sparse.numbytes")
	}

	// Names, most specific first.
	switch {
	case p.hasSparseName:
		h.Name = string(p.sparseName)
	case p.hasPath:
		h.Name = string(p.path)
	case s.pend.long:
		h.Name = string(s.long)
	case len(prefix) > 0:
		h.Name = string(prefix) + "/" + string(cstr(b[0:100]))
	default:
		h.Name = string(cstr(b[0:100]))
	}
	switch {
	case p.hasLinkpath:
		h.Linkname = string(p.linkpath)
	case s.pend.longLnk:
		h.Linkname = string(s.longLnk)
	default:
		if l := cstr(b[157:257]); len(l) > 0 {
			h.Linkname = string(l)
		}
	}
	if len(h.Name) > s.lim.MaxNameLen || len(h.Linkname) > s.lim.MaxNameLen {
		return nil, corrupt("name of %d bytes exceeds the limit of %d",
			max(len(h.Name), len(h.Linkname)), s.lim.MaxNameLen)
	}
	if p.hasUname {
		uname = p.uname
	}
	if p.hasGname {
		gname = p.gname
	}
	h.Uname = intern(&s.uname, uname)
	h.Gname = intern(&s.gname, gname)
	if p.hasUID {
		h.UID = p.uid
	}
	if p.hasGID {
		h.GID = p.gid
	}
	if p.hasMTime {
		h.MTime = p.mtime
	}
	if p.hasATime {
		h.ATime, h.HasATime = p.atime, true
	}
	if p.hasCTime {
		h.CTime, h.HasCTime = p.ctime, true
	}
	if isDev && p.hasMajor {
		h.Devmajor = p.devmajor
	}
	if isDev && p.hasMinor {
		h.Devminor = p.devminor
	}
	if p.hasSize {
		raw = p.size
	}
	if raw > math.MaxInt64/2 {
		return nil, corrupt("size %d out of range", raw)
	}
	if len(p.xattrs) > 0 {
		h.Xattrs = slices.Clone(p.xattrs)
	}
	h.PAX = p.other

	// Type.
	switch tf {
	case TypeLink, TypeSymlink, TypeChar, TypeBlock, TypeDir, TypeFIFO:
		h.Typeflag = tf
	case 'D': // GNU dumpdir: a directory with a listing as data
		h.Typeflag = TypeDir
	case '0', 0:
		h.Typeflag = TypeReg
		if strings.HasSuffix(h.Name, "/") {
			h.Typeflag = TypeDir
		}
	default: // '7' contiguous, 'S' sparse, and unknown types, as GNU tar does
		h.Typeflag = TypeReg
	}

	stored := raw
	if h.Typeflag == TypeReg {
		switch {
		case tf == 'S':
			if f != formatGNU {
				return nil, corrupt("GNU sparse type without the GNU magic")
			}
			realsize, err := nonNeg("GNU sparse realsize", gnuRealSize, gnuRealSize+12)
			if err != nil {
				return nil, err
			}
			if err := s.readOldSparse(hdrOff); err != nil { // overwrites s.blk
				return nil, err
			}
			if err := s.finishSparse(h, realsize, stored, hdrOff); err != nil {
				return nil, err
			}
		case p.hasSparseVer || p.sparseMap || p.sparse00 || p.hasNumblocks:
			if stored, err = s.paxSparse(h, &p, raw, hdrOff); err != nil {
				return nil, err
			}
		default:
			h.Size = raw
		}
		h.StoredSize = stored
	}
	h.DataOffset = s.off
	s.curOff = hdrOff
	s.dataLeft = h.StoredSize
	s.padLeft = padded(raw) - raw
	if h.Typeflag != TypeReg {
		s.padLeft = padded(raw)
	}
	if s.dataLeft+s.padLeft > math.MaxInt64-s.off {
		return nil, corrupt("size %d out of range", raw)
	}
	return h, nil
}

// headerTimes sets the atime and ctime of h from the GNU or star header
// fields at at and ct. A field that does not parse is ignored, as GNU tar
// and bsdtar do: they are seldom read, and old GNU tar wrote other data
// there.
func (s *Scanner) headerTimes(h *Header, at, ct int) {
	for _, t := range []struct {
		off int
		v   *Time
		has *bool
	}{{at, &h.ATime, &h.HasATime}, {ct, &h.CTime, &h.HasCTime}} {
		fld := s.blk[t.off : t.off+12]
		if isZero(fld) {
			continue
		}
		if v, ok := parseNumeric(fld); ok {
			*t.v, *t.has = Time{Sec: v}, true
		}
	}
}

// intern returns b as a string, reusing *last when it is equal.
func intern(last *string, b []byte) string {
	if string(b) != *last {
		*last = string(b)
	}
	return *last
}

// applyPAX applies one pax record. An empty value unsets the key.
func (s *Scanner) applyPAX(p *paxState, k, v []byte) error {
	var err error
	empty := len(v) == 0
	switch string(k) {
	case "path":
		v = cstr(v) // GNU tar and bsdtar take the path up to a NUL
		p.path, p.hasPath = v, !empty
		if len(v) > s.lim.MaxNameLen {
			return fmt.Errorf("%d bytes exceed the name limit of %d", len(v), s.lim.MaxNameLen)
		}
	case "linkpath":
		v = cstr(v)
		p.linkpath, p.hasLinkpath = v, !empty
		if len(v) > s.lim.MaxNameLen {
			return fmt.Errorf("%d bytes exceed the name limit of %d", len(v), s.lim.MaxNameLen)
		}
	case "uname":
		p.uname, p.hasUname = cstr(v), !empty
	case "gname":
		p.gname, p.hasGname = cstr(v), !empty
	case "size":
		p.size, p.hasSize, err = decimalField(v)
	case "uid":
		p.uid, p.hasUID, err = decimalField(v)
	case "gid":
		p.gid, p.hasGID, err = decimalField(v)
	case "SCHILY.devmajor":
		p.devmajor, p.hasMajor, err = decimalField(v)
	case "SCHILY.devminor":
		p.devminor, p.hasMinor, err = decimalField(v)
	// A time that is not a number is read as GNU tar reads it: the
	// number it starts with, else ignored (the header's mtime stands).
	case "mtime":
		p.mtime, p.hasMTime = timeField(v)
	case "atime":
		p.atime, p.hasATime = timeField(v)
	case "ctime":
		p.ctime, p.hasCTime = timeField(v)
	case "GNU.sparse.name":
		p.sparseName, p.hasSparseName = v, !empty
		if len(v) > s.lim.MaxNameLen {
			return fmt.Errorf("%d bytes exceed the name limit of %d", len(v), s.lim.MaxNameLen)
		}
	case "GNU.sparse.major":
		p.sparseMajor, p.hasSparseVer, err = decimalField(v)
	case "GNU.sparse.minor":
		p.sparseMinor, _, err = decimalField(v)
	case "GNU.sparse.realsize", "GNU.sparse.size":
		p.realsize, p.hasRealsize, err = decimalField(v)
	case "GNU.sparse.numblocks":
		p.numblocks, p.hasNumblocks, err = decimalField(v)
	case "GNU.sparse.offset":
		if p.pendingNumbytes {
			return fmt.Errorf("two offsets in a row")
		}
		var off int64
		if off, err = parseDecimal(v); err != nil {
			return err
		}
		if len(s.sparse) >= s.lim.MaxSparseChunks {
			return fmt.Errorf("more than %d sparse entries", s.lim.MaxSparseChunks)
		}
		s.sparse = append(s.sparse, SparseChunk{Offset: off}) // its length follows
		p.sparseEntries++
		p.sparse00, p.pendingNumbytes = true, true
	case "GNU.sparse.numbytes":
		if !p.pendingNumbytes {
			return fmt.Errorf("numbytes without an offset")
		}
		last := len(s.sparse) - 1
		c := s.sparse[last]
		if c.Length, err = parseDecimal(v); err != nil {
			return err
		}
		s.sparse = appendChunk(s.sparse[:last], c)
		p.pendingNumbytes = false
	case "GNU.sparse.map":
		if empty {
			break
		}
		s.sparse, p.sparseEntries, err = parseSparseMap(v, s.sparse[:0], s.lim.MaxSparseChunks)
		p.sparseMap = true
	default:
		switch {
		case bytes.HasPrefix(k, []byte("SCHILY.xattr.")):
			return s.addXattr(p, string(k[len("SCHILY.xattr."):]), string(v))
		case bytes.HasPrefix(k, []byte("LIBARCHIVE.xattr.")):
			name, err := unescapeURL(k[len("LIBARCHIVE.xattr."):])
			if err != nil {
				return err
			}
			val, err := base64.RawStdEncoding.DecodeString(string(bytes.TrimRight(v, "=")))
			if err != nil {
				return fmt.Errorf("bad base64 value: %v", err)
			}
			return s.addXattr(p, name, string(val))
		}
		if empty {
			delete(p.other, string(k))
			return nil
		}
		if p.other == nil {
			p.other = make(map[string]string)
		}
		p.other[string(k)] = string(v)
	}
	return err
}

// addXattr records an xattr, replacing the value of an earlier one with
// the same name.
func (s *Scanner) addXattr(p *paxState, name, value string) error {
	if name == "" {
		return fmt.Errorf("empty xattr name")
	}
	if p.xattrIndex == nil && len(p.xattrs) >= xattrLinearMax {
		p.xattrIndex = make(map[string]int, 2*len(p.xattrs))
		for i, x := range p.xattrs {
			p.xattrIndex[x.Name] = i
		}
	}
	if p.xattrIndex != nil {
		if i, ok := p.xattrIndex[name]; ok {
			p.xattrs[i].Value = value
			return nil
		}
		p.xattrIndex[name] = len(p.xattrs)
	} else {
		for i := range p.xattrs {
			if p.xattrs[i].Name == name {
				p.xattrs[i].Value = value
				return nil
			}
		}
	}
	p.xattrs = append(p.xattrs, Xattr{Name: name, Value: value})
	return nil
}

// decimalField parses a non-negative decimal pax value; empty unsets it.
func decimalField(v []byte) (int64, bool, error) {
	if len(v) == 0 {
		return 0, false, nil
	}
	x, err := parseDecimal(v)
	return x, err == nil, err
}

// timeField parses a pax time value; empty unsets it.
func timeField(v []byte) (Time, bool) {
	if len(v) == 0 {
		return Time{}, false
	}
	x, err := parsePAXTime(v)
	if err != nil {
		// GNU tar reads the number that the value starts with, if any
		// ("999xxx9324.43" is 999 s), as strtol would.
		n := 0
		if n < len(v) && v[n] == '-' {
			n++
		}
		digits := n
		for n < len(v) && v[n] >= '0' && v[n] <= '9' {
			n++
		}
		if n == digits {
			return Time{}, false
		}
		if n+1 < len(v) && v[n] == '.' && v[n+1] >= '0' && v[n+1] <= '9' {
			for n++; n < len(v) && v[n] >= '0' && v[n] <= '9'; n++ {
			}
		}
		x, err = parsePAXTime(v[:n])
	}
	if errors.Is(err, errOverflow) {
		// Seconds past the int64 range: bsdtar takes the nearest it
		// can hold, and the filesystem its own nearest as it sets it
		// (GNU tar refuses the archive).
		x, err = Time{Sec: math.MaxInt64}, nil
		if v[0] == '-' {
			x.Sec = -math.MaxInt64
		}
	}
	return x, err == nil
}

// appendChunk appends c to the sparse map dst compactly: an empty entry is
// dropped and one that starts where the last ends extends it, so that a
// map of millions of entries that GNU tar extracts (Go's testdata
// gnu-sparse-many-zeros.tar.bz2) takes the room of the data it describes.
// finishSparse checks the result.
func appendChunk(dst []SparseChunk, c SparseChunk) []SparseChunk {
	if c.Length == 0 && c.Offset >= 0 {
		return dst
	}
	if n := len(dst); n > 0 && c.Length > 0 && dst[n-1].Length > 0 && dst[n-1].Offset >= 0 &&
		dst[n-1].Offset+dst[n-1].Length == c.Offset && c.Length <= math.MaxInt64-c.Offset {
		dst[n-1].Length += c.Length
		return dst
	}
	return append(dst, c)
}

// parseSparseMap parses a GNU.sparse.map value "OFF,LEN,OFF,LEN...", of at
// most limit entries once compacted, and returns the number of entries it
// records.
func parseSparseMap(v []byte, dst []SparseChunk, limit int) ([]SparseChunk, int64, error) {
	n := bytes.Count(v, []byte(",")) + 1
	if n%2 != 0 {
		return dst, 0, fmt.Errorf("odd number of values")
	}
	for len(v) > 0 {
		o, rest, _ := bytes.Cut(v, []byte(","))
		l, rest, _ := bytes.Cut(rest, []byte(","))
		off, err := parseDecimal(o)
		if err != nil {
			return dst, 0, err
		}
		length, err := parseDecimal(l)
		if err != nil {
			return dst, 0, err
		}
		if dst = appendChunk(dst, SparseChunk{Offset: off, Length: length}); len(dst) > limit {
			return dst, 0, fmt.Errorf("more than %d sparse entries", limit)
		}
		v = rest
	}
	return dst, int64(n / 2), nil
}

// paxSparse fills the sparse map of a pax sparse member (GNU formats 0.0,
// 0.1 and 1.0) whose data has raw bytes, and returns the stored size.
func (s *Scanner) paxSparse(h *Header, p *paxState, raw, hdrOff int64) (int64, error) {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: header at %d: %s", ErrCorrupt, hdrOff, fmt.Sprintf(format, args...))
	}
	if !p.hasRealsize {
		return 0, corrupt("pax sparse file without GNU.sparse.realsize or GNU.sparse.size")
	}
	stored := raw
	switch {
	case p.hasSparseVer && p.sparseMajor == 1 && p.sparseMinor == 0:
		var err error
		if s.sparse, stored, err = s.readSparse1Map(raw, hdrOff); err != nil {
			return 0, err
		}
	case p.hasSparseVer && p.sparseMajor != 0:
		return 0, corrupt("unsupported GNU sparse version %d.%d", p.sparseMajor, p.sparseMinor)
	default:
		if p.hasNumblocks && p.numblocks != p.sparseEntries {
			return 0, corrupt("GNU.sparse.numblocks is %d but the map has %d entries",
				p.numblocks, p.sparseEntries)
		}
	}
	if err := s.finishSparse(h, p.realsize, stored, hdrOff); err != nil {
		return 0, err
	}
	return stored, nil
}

// readSparse1Map reads the map of a pax sparse 1.0 file at the start of its
// raw data bytes: decimal numbers each ended by '\n' (the entry count, then
// offset and length of each entry), padded to a block. It returns the map
// and the stored size after it.
func (s *Scanner) readSparse1Map(raw, hdrOff int64) ([]SparseChunk, int64, error) {
	m := mapReader{s: s, pos: blockSize, limit: raw, hdrOff: hdrOff}
	n, err := m.number()
	if err != nil {
		return nil, 0, err
	}
	// n is bounded by the member's data, which holds the map.
	dst := s.sparse[:0]
	for range n {
		off, err := m.number()
		if err != nil {
			return nil, 0, err
		}
		length, err := m.number()
		if err != nil {
			return nil, 0, err
		}
		if dst = appendChunk(dst, SparseChunk{Offset: off, Length: length}); len(dst) > s.lim.MaxSparseChunks {
			return nil, 0, fmt.Errorf("%w: header at %d: sparse map of more than %d entries",
				ErrCorrupt, hdrOff, s.lim.MaxSparseChunks)
		}
	}
	return dst, raw - m.used, nil
}

// mapReader reads the numbers of a sparse 1.0 map block by block.
type mapReader struct {
	s      *Scanner
	pos    int   // next byte in s.blk
	used   int64 // map bytes read, whole blocks
	limit  int64 // raw data size of the member
	hdrOff int64
}

func (m *mapReader) number() (int64, error) {
	var x int64
	digits := 0
	for {
		if m.pos == blockSize {
			if m.used+blockSize > m.limit {
				return 0, fmt.Errorf("%w: header at %d: sparse map runs past the member's %d data bytes",
					ErrCorrupt, m.hdrOff, m.limit)
			}
			n, err := m.s.readFull(m.s.blk[:])
			if err != nil {
				if n > 0 || err == io.EOF {
					return 0, fmt.Errorf("%w: header at %d: stream ends inside the sparse map",
						ErrTruncated, m.hdrOff)
				}
				return 0, m.s.dataErr(m.hdrOff, err)
			}
			m.used += blockSize
			m.pos = 0
		}
		c := m.s.blk[m.pos]
		m.pos++
		if c == '\n' && digits > 0 {
			return x, nil
		}
		if c < '0' || c > '9' || digits == maxDecimalDigits {
			return 0, fmt.Errorf("%w: header at %d: malformed sparse map at byte %d",
				ErrCorrupt, m.hdrOff, m.used-blockSize+int64(m.pos)-1)
		}
		x = x*10 + int64(c-'0')
		digits++
	}
}

// finishSparse checks the map in s.sparse against the real size and the
// stored size and copies it, without empty chunks, into h.
func (s *Scanner) finishSparse(h *Header, realsize, stored, hdrOff int64) error {
	corrupt := func(format string, args ...any) error {
		return fmt.Errorf("%w: header at %d: %s", ErrCorrupt, hdrOff, fmt.Sprintf(format, args...))
	}
	if realsize < 0 {
		return corrupt("negative sparse real size %d", realsize)
	}
	var end, sum int64
	n := 0
	for i, c := range s.sparse {
		if c.Offset < 0 || c.Length < 0 || c.Offset > realsize || c.Length > realsize-c.Offset {
			return corrupt("sparse entry %d (%d+%d) outside the real size %d", i, c.Offset, c.Length, realsize)
		}
		if c.Offset < end {
			return corrupt("sparse entry %d at %d overlaps or precedes the previous one ending at %d",
				i, c.Offset, end)
		}
		if c.Length > 0 {
			end = c.Offset + c.Length
			sum += c.Length
			n++
		}
	}
	if sum != stored {
		return corrupt("sparse map holds %d bytes but %d are stored", sum, stored)
	}
	h.Sparse = make([]SparseChunk, 0, n)
	for _, c := range s.sparse {
		if c.Length > 0 {
			h.Sparse = append(h.Sparse, c)
		}
	}
	h.Size = realsize
	return nil
}

// readOldSparse gathers the sparse entries of the GNU header in s.blk and
// of the extension blocks that follow it into s.sparse.
func (s *Scanner) readOldSparse(hdrOff int64) error {
	s.sparse = s.sparse[:0]
	done, err := s.oldSparseEntries(s.blk[gnuSparseOff:], gnuSparseEntries, hdrOff)
	if err != nil {
		return err
	}
	// The extension blocks are bounded by the stream, like data.
	for ext := s.blk[gnuIsExtended] != 0; ext; {
		extOff := s.off
		n, err := s.readFull(s.blk[:])
		if err != nil {
			if n > 0 || err == io.EOF {
				return fmt.Errorf("%w: header at %d: stream ends inside the sparse extension block at %d",
					ErrTruncated, hdrOff, extOff)
			}
			return s.dataErr(hdrOff, err)
		}
		if !done {
			if done, err = s.oldSparseEntries(s.blk[:], extSparseEntries, hdrOff); err != nil {
				return err
			}
		}
		ext = s.blk[extIsExtended] != 0
	}
	return nil
}

// oldSparseEntries appends the n entries at b to s.sparse. done is true
// once an empty entry ended the list.
func (s *Scanner) oldSparseEntries(b []byte, n int, hdrOff int64) (done bool, err error) {
	for i := range n {
		e := b[i*sparseEntrySize : (i+1)*sparseEntrySize]
		if e[0] == 0 && e[12] == 0 {
			return true, nil
		}
		off, ok1 := parseNumeric(e[:12])
		length, ok2 := parseNumeric(e[12:])
		if !ok1 || !ok2 {
			return false, fmt.Errorf("%w: header at %d: bad GNU sparse entry %q %q",
				ErrCorrupt, hdrOff, fieldText(e[:12]), fieldText(e[12:]))
		}
		if s.sparse = appendChunk(s.sparse, SparseChunk{Offset: off, Length: length}); len(s.sparse) > s.lim.MaxSparseChunks {
			return false, fmt.Errorf("%w: header at %d: more than %d sparse entries",
				ErrCorrupt, hdrOff, s.lim.MaxSparseChunks)
		}
	}
	return false, nil
}
