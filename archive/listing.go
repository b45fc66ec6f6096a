package archive

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/tarmount/tarmount/index"
)

// Listing: how tarmount ls and stat describe a name of the archive, as a
// JSON line (ls --json, stat --json: for scripts and pipelines) or a line
// like tar -tv's, written without allocating per name.

// EntryJSON is one line of ls --json and stat --json as a Go value:
// EntryView.AppendJSON writes what encoding/json makes of it.
type EntryJSON struct {
	Path string `json:"path"`
	Type string `json:"type"` // file, dir, symlink, hardlink, char, block, fifo
	// Size is the member's size as tar -tv shows it: the file's size for
	// the name that stores the data (a sparse file's real size), 0 for
	// its other names (hard links), symlinks, directories and devices.
	Size  int64  `json:"size"`
	Mode  string `json:"mode"` // octal permission bits with setuid/setgid/sticky, e.g. "0755"
	UID   uint32 `json:"uid"`
	GID   uint32 `json:"gid"`
	Uname string `json:"uname,omitempty"`
	Gname string `json:"gname,omitempty"`
	// MTime is RFC 3339 with nanoseconds, in UTC; MTimeNs the same in
	// nanoseconds since the epoch, an exact integer also past 2262 where
	// it outgrows an int64 (so are ATimeNs and CTimeNs).
	MTime   string      `json:"mtime"`
	MTimeNs json.Number `json:"mtime_ns"`
	// Link is a symlink's target, or for a hard link the path of the
	// name it links to (the member stored with the data).
	Link string `json:"link,omitempty"`
	// Offset is where the member's data starts in the decoded tar stream
	// (regular files with data only).
	Offset  *int64            `json:"offset,omitempty"`
	Devmaj  uint32            `json:"devmajor,omitempty"`
	Devmin  uint32            `json:"devminor,omitempty"`
	Inode   uint32            `json:"inode"`
	Nlink   uint32            `json:"nlink"`
	Sparse  bool              `json:"sparse,omitempty"`
	Stored  *int64            `json:"stored_size,omitempty"` // bytes of data stored in the archive, when it differs from size (sparse)
	Xattrs  map[string]string `json:"xattrs,omitempty"`
	ATimeNs json.Number       `json:"atime_ns,omitempty"`
	CTimeNs json.Number       `json:"ctime_ns,omitempty"`
}

// EntryView is one name of the archive as ls and stat describe it: an
// index entry, the path it is listed under, and what tar -tv shows for it.
// The encoders below write it without building a string for it, so that
// listing a million names allocates next to nothing per name; json gives
// it as an EntryJSON.
type EntryView struct {
	path []byte // valid only while the view is being written
	id   index.EntryID
	e    *index.Entry
	typ  string // as EntryJSON.Type
	size int64  // as EntryJSON.Size
	link string // as EntryJSON.Link
	// offset and stored are set when hasOffset and hasStored are.
	offset, stored       int64
	hasOffset, hasStored bool
	// xattrs are sorted by name, one per name (the last the archive gave).
	xattrs []index.Xattr
}

// ViewEntry describes entry id (e) listed as p. first says whether p is
// the entry's first name (ix.Path(id)): a regular file's other names are
// hard links to it.
func ViewEntry(ix *index.Index, p []byte, id index.EntryID, e *index.Entry, first bool) EntryView {
	v := EntryView{path: p, id: id, e: e, typ: e.Type.String(), size: e.Size}
	switch {
	case e.Type == index.TypeSymlink:
		v.link, v.size = e.Linkname, 0
	case e.Type == index.TypeReg && !first:
		v.typ, v.link, v.size = "hardlink", ix.Path(id), 0
	case e.Type != index.TypeReg:
		v.size = 0
	}
	if e.Type == index.TypeReg && e.Size > 0 {
		v.offset, v.hasOffset = int64(e.DataOffset), true
		if e.Sparse {
			v.stored, v.hasStored = ix.StoredSize(id), true
		}
	}
	if xs := ix.Xattrs(id); len(xs) > 0 {
		// As a map would hold them: the last value of each name.
		slices.SortStableFunc(xs, func(a, b index.Xattr) int { return strings.Compare(a.Name, b.Name) })
		n := 0
		for i, x := range xs {
			if i+1 < len(xs) && xs[i+1].Name == x.Name {
				continue
			}
			xs[n] = x
			n++
		}
		v.xattrs = xs[:n]
	}
	return v
}

// JSON returns v as a Go value.
func (v *EntryView) JSON() EntryJSON {
	e := v.e
	j := EntryJSON{
		Path: string(v.path), Type: v.typ, Size: v.size, Mode: fmt.Sprintf("%04o", e.Mode),
		UID: e.UID, GID: e.GID, Uname: e.Uname, Gname: e.Gname,
		MTime: string(appendRFC3339Nano(nil, e.MTime)), MTimeNs: unixNano(e.MTime), Link: v.link,
		Devmaj: e.Devmajor, Devmin: e.Devminor, Inode: uint32(v.id) + 1, Nlink: e.Nlink, Sparse: e.Sparse,
	}
	if !e.ATime.IsZero() {
		j.ATimeNs = unixNano(e.ATime)
	}
	if !e.CTime.IsZero() {
		j.CTimeNs = unixNano(e.CTime)
	}
	if v.hasOffset {
		off := v.offset
		j.Offset = &off
	}
	if v.hasStored {
		st := v.stored
		j.Stored = &st
	}
	if len(v.xattrs) > 0 {
		j.Xattrs = make(map[string]string, len(v.xattrs))
		for _, x := range v.xattrs {
			j.Xattrs[x.Name] = x.Value
		}
	}
	return j
}

// AppendJSON appends v as encoding/json would marshal v.JSON() (fields in
// order, omitempty, map keys sorted, no HTML escaping), then a newline,
// with no reflection and no allocation.
func (v *EntryView) AppendJSON(b []byte) []byte {
	e := v.e
	key := func(k string) {
		b = append(b, ',', '"')
		b = append(b, k...)
		b = append(b, '"', ':')
	}
	str := func(k, s string) {
		if s != "" {
			key(k)
			b = appendJSONString(b, s)
		}
	}
	num := func(k string, n int64) {
		key(k)
		b = strconv.AppendInt(b, n, 10)
	}
	b = append(b, `{"path":`...)
	b = appendJSONString(b, v.path)
	key("type")
	b = appendJSONString(b, v.typ)
	num("size", v.size)
	key("mode")
	b = append(b, '"')
	b = appendOctal4(b, e.Mode)
	b = append(b, '"')
	num("uid", int64(e.UID))
	num("gid", int64(e.GID))
	str("uname", e.Uname)
	str("gname", e.Gname)
	key("mtime")
	b = append(b, '"') // RFC 3339 needs no escaping
	b = appendRFC3339Nano(b, e.MTime)
	b = append(b, '"')
	key("mtime_ns")
	b = appendUnixNano(b, e.MTime)
	str("link", v.link)
	if v.hasOffset {
		num("offset", v.offset)
	}
	if e.Devmajor != 0 {
		num("devmajor", int64(e.Devmajor))
	}
	if e.Devminor != 0 {
		num("devminor", int64(e.Devminor))
	}
	num("inode", int64(v.id)+1)
	num("nlink", int64(e.Nlink))
	if e.Sparse {
		b = append(b, `,"sparse":true`...)
	}
	if v.hasStored {
		num("stored_size", v.stored)
	}
	if len(v.xattrs) > 0 {
		b = append(b, `,"xattrs":{`...)
		for i, x := range v.xattrs {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, x.Name)
			b = append(b, ':')
			b = appendJSONString(b, x.Value)
		}
		b = append(b, '}')
	}
	if !e.ATime.IsZero() {
		key("atime_ns")
		b = appendUnixNano(b, e.ATime)
	}
	if !e.CTime.IsZero() {
		key("ctime_ns")
		b = appendUnixNano(b, e.CTime)
	}
	return append(b, '}', '\n')
}

// appendOctal4 appends m as fmt's %04o does.
func appendOctal4(b []byte, m uint32) []byte {
	if m > 0o7777 {
		return strconv.AppendUint(b, uint64(m), 8)
	}
	return append(b, '0'+byte(m>>9), '0'+byte(m>>6&7), '0'+byte(m>>3&7), '0'+byte(m&7))
}

// unixNano returns t in nanoseconds since the epoch, exactly.
func unixNano(t index.Time) json.Number { return json.Number(appendUnixNano(nil, t)) }

// appendUnixNano appends t in nanoseconds since the epoch as a decimal
// integer, exact also where it outgrows an int64.
func appendUnixNano(b []byte, t index.Time) []byte {
	if ns, ok := t.UnixNano(); ok {
		return strconv.AppendInt(b, ns, 10)
	}
	sec, nsec := t.Sec, int64(t.Nsec)
	if sec < 0 { // -(|sec|*1e9 - nsec), written as its magnitude
		b = append(b, '-')
		u := uint64(-(sec + 1)) // |sec| - 1, safe for MinInt64
		if nsec == 0 {
			u, nsec = u+1, 0
		} else {
			nsec = 1e9 - nsec
		}
		b = strconv.AppendUint(b, u, 10)
	} else {
		b = strconv.AppendInt(b, sec, 10)
	}
	return appendPadded(b, int(nsec), 9)
}

// appendRFC3339Nano appends t in UTC as time.RFC3339Nano formats it (a
// fraction without trailing zeros, none for whole seconds).
func appendRFC3339Nano(b []byte, t index.Time) []byte {
	year, month, day, sod, frac := civilTime(t)
	b = appendPadded(b, int(year), 4)
	b = append(b, '-', '0'+byte(month/10), '0'+byte(month%10), '-', '0'+byte(day/10), '0'+byte(day%10), 'T')
	h, m, s := sod/3600, sod/60%60, sod%60
	b = append(b, '0'+byte(h/10), '0'+byte(h%10), ':', '0'+byte(m/10), '0'+byte(m%10), ':', '0'+byte(s/10), '0'+byte(s%10))
	if frac != 0 {
		var d [10]byte
		d[0] = '.'
		for i := 9; i > 0; i-- {
			d[i] = '0' + byte(frac%10)
			frac /= 10
		}
		n := 10
		for d[n-1] == '0' {
			n--
		}
		b = append(b, d[:n]...)
	}
	return append(b, 'Z')
}

// civilTime splits t into its date in UTC, the second of that day and the
// nanosecond of that second, with integer arithmetic only: the time
// package's formatting was a fifth of ls --json.
func civilTime(t index.Time) (year, month, day, sod, frac int64) {
	sec, frac := t.Sec, int64(t.Nsec)
	days, sod := sec/86400, sec%86400
	if sod < 0 {
		days, sod = days-1, sod+86400
	}
	// Howard Hinnant's civil_from_days ("chrono-Compatible Low-Level
	// Date Algorithms"): eras of 400 years, whose years start on March 1st
	// so that a leap day ends its year.
	z := days + 719468
	era := z / 146097
	if z < 0 && z%146097 != 0 {
		era--
	}
	doe := z - era*146097                                  // day of the era, [0, 146096]
	yoe := (doe - doe/1460 + doe/36524 - doe/146096) / 365 // year of the era, [0, 399]
	doy := doe - (365*yoe + yoe/4 - yoe/100)               // day of the year from March 1st, [0, 365]
	mp := (5*doy + 2) / 153                                // month from March, [0, 11]
	day = doy - (153*mp+2)/5 + 1
	month = mp + 3
	if month > 12 {
		month -= 12
	}
	year = yoe + era*400
	if month <= 2 {
		year++
	}
	return year, month, day, sod, frac
}

// appendJSONString appends s as a JSON string, as encoding/json writes
// it without HTML escaping: invalid UTF-8 becomes U+FFFD.
func appendJSONString[S ~string | ~[]byte](b []byte, s S) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		// At most 4 bytes: the conversion of a []byte stays on the stack.
		r, size := utf8.DecodeRuneInString(string(s[i:min(i+utf8.UTFMax, len(s))]))
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendLong appends v as tar -tv lists it, then a newline: mode,
// owner/group, size, mtime (UTC, to the minute), name, and where it
// points.
func (v *EntryView) AppendLong(b []byte) []byte {
	e := v.e
	b = appendModeString(b, v.typ, e.Mode)
	b = append(b, ' ')
	if e.Uname != "" {
		b = append(b, e.Uname...)
	} else {
		b = strconv.AppendUint(b, uint64(e.UID), 10)
	}
	b = append(b, '/')
	if e.Gname != "" {
		b = append(b, e.Gname...)
	} else {
		b = strconv.AppendUint(b, uint64(e.GID), 10)
	}
	// The size (a device's major,minor) right-aligned in 9 columns.
	var num [32]byte
	size := num[:0]
	if v.typ == "char" || v.typ == "block" {
		size = strconv.AppendUint(size, uint64(e.Devmajor), 10)
		size = append(size, ',')
		size = strconv.AppendUint(size, uint64(e.Devminor), 10)
	} else {
		size = strconv.AppendInt(size, v.size, 10)
	}
	b = append(b, ' ')
	for i := len(size); i < 9; i++ {
		b = append(b, ' ')
	}
	b = append(b, size...)
	b = append(b, ' ')
	year, month, day, sod, _ := civilTime(e.MTime)
	h, m := sod/3600, sod/60%60
	b = appendPadded(b, int(year), 4)
	b = append(b, '-', '0'+byte(month/10), '0'+byte(month%10), '-', '0'+byte(day/10), '0'+byte(day%10),
		' ', '0'+byte(h/10), '0'+byte(h%10), ':', '0'+byte(m/10), '0'+byte(m%10), ' ')
	b = append(b, v.path...)
	switch v.typ {
	case "dir":
		b = append(b, '/')
	case "symlink":
		b = append(b, " -> "...)
		b = append(b, v.link...)
	case "hardlink":
		b = append(b, " link to "...)
		b = append(b, v.link...)
	}
	return append(b, '\n')
}

// appendPadded appends n (0 or more) with leading zeros to width digits.
func appendPadded(b []byte, n, width int) []byte {
	if n < 0 { // a year before 1 AD, as the time package writes it
		b = append(b, '-')
		n = -n
	}
	for d := 10; width > 1; d, width = d*10, width-1 {
		if n < d {
			b = append(b, '0')
		}
	}
	return strconv.AppendInt(b, int64(n), 10)
}

// DescribeEntry says what name p (of entry id) is.
func DescribeEntry(ix *index.Index, p string, id index.EntryID) EntryView {
	return ViewEntry(ix, []byte(p), id, ix.Entry(id), ix.Path(id) == p)
}

// ModeString is the ls/tar letter form of a type and mode: drwxr-sr-x.
func ModeString(typ string, mode uint32) string {
	return string(appendModeString(nil, typ, mode))
}

// appendModeString appends the ls/tar letter form of a type and mode.
func appendModeString(b []byte, typ string, mode uint32) []byte {
	n := len(b)
	b = append(b, "-rwxrwxrwx"...)
	m := b[n:]
	switch typ {
	case "dir":
		m[0] = 'd'
	case "symlink":
		m[0] = 'l'
	case "hardlink":
		m[0] = 'h'
	case "char":
		m[0] = 'c'
	case "block":
		m[0] = 'b'
	case "fifo":
		m[0] = 'p'
	}
	for i := 0; i < 9; i++ {
		if mode&(1<<(8-i)) == 0 {
			m[i+1] = '-'
		}
	}
	special := func(bit uint32, at int, set, unset byte) {
		if mode&bit != 0 {
			if m[at] == '-' {
				m[at] = unset
			} else {
				m[at] = set
			}
		}
	}
	special(0o4000, 3, 's', 'S')
	special(0o2000, 6, 's', 'S')
	special(0o1000, 9, 't', 'T')
	return b
}

// ListFormat is how List writes each name.
type ListFormat int

// List formats.
const (
	ListNames ListFormat = iota // the path, with a slash after directories
	ListLong                    // like tar -tv (EntryView.AppendLong)
	ListJSON                    // one JSON object per line (EntryView.AppendJSON)
)

// List writes every name of the archive (or of the subtrees at paths) to
// w in format, depth first in name order, as tarmount ls does. It needs
// an indexed archive.
func (a *Archive) List(ctx context.Context, w io.Writer, format ListFormat, paths ...string) error {
	// Lines are appended to one buffer, written out a megabyte at a time.
	const flushBytes = 1 << 20
	buf := make([]byte, 0, flushBytes+64<<10)
	if len(paths) == 0 {
		paths = []string{""}
	}
	ix := a.Index()
	for _, p := range paths {
		root, err := a.Lookup(p)
		if err != nil {
			w.Write(buf) // what was listed before
			return err
		}
		err = index.Walk(ix, CleanMember(p), root, func(p []byte, id index.EntryID, e *index.Entry, first bool) error {
			if len(p) == 0 {
				return nil // the root has no name of its own
			}
			switch {
			case format == ListJSON:
				v := ViewEntry(ix, p, id, e, first)
				buf = v.AppendJSON(buf)
			case format == ListLong:
				v := ViewEntry(ix, p, id, e, first)
				buf = v.AppendLong(buf)
			default:
				// Names only: no need to describe the entry.
				buf = append(buf, p...)
				if e.Type == index.TypeDir {
					buf = append(buf, '/')
				}
				buf = append(buf, '\n')
			}
			if len(buf) < flushBytes {
				return nil
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			_, err := w.Write(buf)
			buf = buf[:0]
			return err
		})
		if err != nil {
			return err
		}
	}
	_, err := w.Write(buf)
	return err
}
