package index

import (
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/tarmount/tarmount/index/tarscan"
)

// Select returns an index of the members of ix that name keeps, each
// under the name it returns: what tar -x --strip-components, --exclude
// and member names make of the archive. The new index reads the same
// archive: source, codec, checkpoints, span digests and data offsets are
// ix's. A member with several names (hard links) keeps the names that
// are kept; the first of them holds the data. Names are offered in the
// order the archive has them, and a later one replaces an earlier one
// with the same new name, as tar -x does.
func Select(ix *Index, name func(p string, e *Entry) (string, bool), log *slog.Logger) (*Index, error) {
	type named struct {
		path  string
		id    EntryID
		first bool
	}
	var names []named
	err := Walk(ix, "", RootID, func(p []byte, id EntryID, _ *Entry, first bool) error {
		if len(p) > 0 {
			names = append(names, named{string(p), id, first})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	// Archive order: entries are numbered as the pass met them; a
	// member's own name comes before its hard links.
	slices.SortStableFunc(names, func(a, b named) int {
		if a.id != b.id {
			return int(a.id) - int(b.id)
		}
		if a.first != b.first {
			if a.first {
				return -1
			}
			return 1
		}
		return 0
	})
	b := newBuilder(log)
	holder := map[EntryID]string{} // the new name that holds each entry's data
	for _, n := range names {
		e := ix.Entry(n.id)
		to, ok := name(n.path, e)
		if !ok || to == "" {
			continue
		}
		h := &tarscan.Header{Name: to, Mode: int64(e.Mode), UID: int64(e.UID), GID: int64(e.GID),
			Uname: e.Uname, Gname: e.Gname, MTime: e.MTime, ATime: e.ATime, CTime: e.CTime,
			HasATime: !e.ATime.IsZero(), HasCTime: !e.CTime.IsZero(), DataOffset: int64(e.DataOffset)}
		if first, ok := holder[n.id]; ok && e.Type != TypeDir {
			h.Typeflag, h.Linkname = tarscan.TypeLink, first
		} else {
			holder[n.id] = to
			fillHeader(ix, n.id, e, h)
		}
		if err := b.add(h); err != nil {
			return nil, err
		}
	}
	if err := b.finish(); err != nil {
		return nil, err
	}
	out := b.ix
	out.Source, out.Codec, out.TarSize, out.Span, out.End = ix.Source, ix.Codec, ix.TarSize, ix.Span, ix.End
	out.Checkpoints, out.Digests = ix.Checkpoints, ix.Digests
	out.Notes = ix.Notes // what the archive's members are, whatever is selected
	if ix.memberDigests != nil {
		byData := map[UncompressedOffset]uint64{}
		for id := range EntryID(ix.Len()) {
			if d, ok := ix.MemberDigest(id); ok {
				byData[ix.Entry(id).DataOffset] = d
			}
		}
		out.memberDigests = make([]uint64, out.Len())
		for id := range EntryID(out.Len()) {
			if e := out.Entry(id); e.Type == TypeReg {
				out.memberDigests[id] = byData[e.DataOffset]
			}
		}
	}
	return out, nil
}

// typeflags are the tar type flags of the entry types (entryType's
// inverse).
var typeflags = map[Type]byte{TypeReg: tarscan.TypeReg, TypeDir: tarscan.TypeDir, TypeSymlink: tarscan.TypeSymlink,
	TypeChar: tarscan.TypeChar, TypeBlock: tarscan.TypeBlock, TypeFIFO: tarscan.TypeFIFO}

// fillHeader sets what a header says of entry id of ix beyond its owner
// and times: type, size, data, link target, device, xattrs.
func fillHeader(ix *Index, id EntryID, e *Entry, h *tarscan.Header) {
	h.Typeflag = typeflags[e.Type]
	switch e.Type {
	case TypeReg:
		h.Size, h.StoredSize = e.Size, e.Size
		if e.Sparse {
			h.Sparse, h.StoredSize = []tarscan.SparseChunk{}, 0
			for _, c := range ix.SparseMap(id) {
				h.Sparse = append(h.Sparse, tarscan.SparseChunk{Offset: c.Offset, Length: c.Length})
				h.StoredSize += c.Length
			}
		}
	case TypeSymlink:
		h.Linkname = e.Linkname
	case TypeChar, TypeBlock:
		h.Devmajor, h.Devminor = int64(e.Devmajor), int64(e.Devminor)
	}
	for _, x := range ix.Xattrs(id) {
		h.Xattrs = append(h.Xattrs, tarscan.Xattr{Name: x.Name, Value: x.Value})
	}
}

// Selection is what tar -x --strip-components, --exclude and member
// names (tarmount's --include) take out of an archive, with GNU tar's
// semantics:
//   - Exclude patterns match a name unanchored (any trailing run of its
//     components) and as a leading directory (a pattern that matches
//     "d" excludes "d/f"), with wildcards that match '/' too;
//   - Include patterns (GNU tar's member names, with --wildcards) match
//     anchored, also as a leading directory; with any, a name that none
//     matches is left out;
//   - both match the names as the archive has them; StripComponents then
//     removes that many leading components, and a name with no more is
//     left out. Hard link targets lose them too; symlink targets do not.
type Selection struct {
	StripComponents int
	Exclude         []string
	Include         []string
}

// String is s in the words of tar's options, for the record of what a
// directory was made from.
func (s Selection) String() string {
	var parts []string
	if s.StripComponents > 0 {
		parts = append(parts, fmt.Sprintf("--strip-components=%d", s.StripComponents))
	}
	for _, p := range s.Exclude {
		parts = append(parts, "--exclude="+strconv.Quote(p))
	}
	for _, p := range s.Include {
		parts = append(parts, "--include="+strconv.Quote(p))
	}
	return strings.Join(parts, " ")
}

// Empty reports whether s selects every member as it is.
func (s Selection) Empty() bool {
	return s.StripComponents == 0 && len(s.Exclude) == 0 && len(s.Include) == 0
}

// Name is s as a function for Select.
func (s Selection) Name(p string, _ *Entry) (string, bool) {
	for _, pat := range s.Exclude {
		if matchUnanchored(pat, p) {
			return "", false
		}
	}
	if len(s.Include) > 0 && !slices.ContainsFunc(s.Include, func(pat string) bool { return matchLeading(pat, p) }) {
		return "", false
	}
	for range s.StripComponents {
		_, rest, ok := strings.Cut(p, "/")
		if !ok {
			return "", false
		}
		p = rest
	}
	return p, p != ""
}

// matchLeading reports whether pattern matches name or a leading run of
// its components (fnmatch with FNM_LEADING_DIR).
func matchLeading(pattern, name string) bool {
	if wildMatch(pattern, name) {
		return true
	}
	for i := range len(name) {
		if name[i] == '/' && wildMatch(pattern, name[:i]) {
			return true
		}
	}
	return false
}

// matchUnanchored reports whether pattern matches, as matchLeading does,
// name or any trailing run of its components.
func matchUnanchored(pattern, name string) bool {
	for {
		if matchLeading(pattern, name) {
			return true
		}
		i := strings.IndexByte(name, '/')
		if i < 0 {
			return false
		}
		name = name[i+1:]
	}
}

// wildMatch is fnmatch without FNM_PATHNAME: '*' matches any run of
// bytes, '/' included, '?' any one byte, [...] a class ('!' or '^'
// negates, a-z ranges), and '\' quotes the byte after it.
func wildMatch(pattern, name string) bool {
	px, nx := 0, 0
	starP, starN := -1, -1
	for nx < len(name) {
		if px < len(pattern) {
			switch c := pattern[px]; c {
			case '*':
				starP, starN = px, nx
				px++
				continue
			case '?':
				px++
				nx++
				continue
			case '[':
				if ok, n, valid := matchClass(pattern[px:], name[nx]); valid {
					if ok {
						px += n
						nx++
						continue
					}
				} else if name[nx] == '[' {
					px++
					nx++
					continue
				}
			case '\\':
				if px+1 < len(pattern) && pattern[px+1] == name[nx] {
					px += 2
					nx++
					continue
				}
			default:
				if c == name[nx] {
					px++
					nx++
					continue
				}
			}
		}
		if starP < 0 {
			return false
		}
		starN++
		px, nx = starP+1, starN
	}
	for px < len(pattern) && pattern[px] == '*' {
		px++
	}
	return px == len(pattern)
}

// matchClass matches c against the class that pattern starts with ("[");
// n is the class's length; valid is false when it is not closed.
func matchClass(pattern string, c byte) (ok bool, n int, valid bool) {
	i := 1
	neg := i < len(pattern) && (pattern[i] == '!' || pattern[i] == '^')
	if neg {
		i++
	}
	for first := true; i < len(pattern); first = false {
		if pattern[i] == ']' && !first {
			return ok != neg, i + 1, true
		}
		lo := pattern[i]
		if lo == '\\' && i+1 < len(pattern) {
			i++
			lo = pattern[i]
		}
		hi := lo
		if i+2 < len(pattern) && pattern[i+1] == '-' && pattern[i+2] != ']' {
			hi = pattern[i+2]
			i += 2
		}
		if lo <= c && c <= hi {
			ok = true
		}
		i++
	}
	return false, 0, false
}
