package index

import (
	"cmp"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/tarmount/tarmount/index/tarscan"
)

// builder turns scanned headers into entries, as tar -x would lay them out:
// a later member with the same path replaces an earlier one, parents that
// have no member of their own are implied, hard links become second names.
//
// Names are kept per directory, one component each, so that a member
// costs the number of its components, however deep: a member of a 1 MiB
// name of a million components would otherwise make a million paths of
// up to 1 MiB each.
type builder struct {
	ix      *Index
	log     *slog.Logger
	entries []bentry
	names   map[dirName]EntryID // every live name -> entry
	full    map[EntryID]bool    // directories that have children
	notes   map[noteKey]*Note
	// now is when the build started, as tar -x compares times with the
	// start of the extraction.
	now int64
	// newID maps entries to their ids in the finished index (noEntry for
	// those it leaves out); set by finish.
	newID []EntryID
}

// dirName is one name in a directory.
type dirName struct {
	dir  EntryID
	name string
}

// bentry is an entry while the index is built.
type bentry struct {
	Entry
	xattrs []Xattr
	sparse []SparseChunk
}

type noteKey struct{ msg, reason string }

func newBuilder(log *slog.Logger) *builder {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &builder{
		ix:    &Index{},
		log:   log,
		names: map[dirName]EntryID{},
		full:  map[EntryID]bool{},
		notes: map[noteKey]*Note{},
		now:   time.Now().Unix(),
	}
	b.entries = append(b.entries, bentry{Entry: Entry{Type: TypeDir, Mode: 0o755}})
	return b
}

// skip notes a member left out of the tree, as tar -x leaves it out.
func (b *builder) skip(reason, name string) { b.note(noteSkipped, reason, name) }

// note counts one member of a kind; the first is the example.
func (b *builder) note(msg, reason, name string) {
	k := noteKey{msg, reason}
	n := b.notes[k]
	if n == nil {
		n = &Note{Message: msg, Reason: reason, Example: name}
		b.notes[k] = n
	}
	n.Count++
}

// report puts the notes in the index, and logs them if say.
func (b *builder) report(say bool) {
	b.ix.Notes = b.ix.Notes[:0]
	for _, n := range b.notes {
		b.ix.Notes = append(b.ix.Notes, *n)
	}
	slices.SortFunc(b.ix.Notes, func(x, y Note) int {
		return cmp.Or(strings.Compare(x.Message, y.Message), strings.Compare(x.Reason, y.Reason))
	})
	if say {
		b.ix.LogNotes(b.log)
	}
}

// CleanName returns the path relative to the root where the index puts a
// member named name (cleanName's components joined), or false when the
// index refuses the name.
func CleanName(name string) (string, bool) {
	parts, ok := cleanName(name)
	return strings.Join(parts, "/"), ok
}

// cleanName turns a member name into the components of a path relative to
// the root, as tar -x does: leading slashes and "." components are
// dropped (no components: the root). Names with ".." components are
// refused.
func cleanName(name string) ([]string, bool) {
	parts := strings.Split(name, "/")
	out := parts[:0]
	for _, p := range parts {
		switch p {
		case "", ".":
		case "..":
			return nil, false
		default:
			out = append(out, p)
		}
	}
	return out, true
}

// gnuKeywords are the pax keywords GNU tar 1.34 knows (xheader.c) that
// tarscan leaves in Header.PAX; it ignores any other with a warning.
var gnuKeywords = map[string]bool{
	"comment": true, "charset": true, "SCHILY.acl.access": true, "SCHILY.acl.default": true,
	"RHT.security.selinux": true, "GNU.dumpdir": true, "GNU.volume.label": true,
	"GNU.volume.filename": true, "GNU.volume.size": true, "GNU.volume.offset": true,
}

// gnuSuffix splits name as GNU tar's safer_name_suffix does: prefix is
// everything up to its last ".." component and the slashes after it (or
// just the leading slashes), rest the name tar -x uses.
func gnuSuffix(name string) (rest, prefix string) {
	start := 0
	for i := 0; i < len(name); {
		end := strings.IndexByte(name[i:], '/')
		if end < 0 {
			end = len(name)
		} else {
			end += i
		}
		if name[i:end] == ".." {
			start = end
		}
		i = end + 1
	}
	for start < len(name) && name[start] == '/' {
		start++
	}
	return name[start:], name[:start]
}

func clampID(v int64) uint32 {
	if v < 0 || v > math.MaxUint32 {
		return 65534 // nobody
	}
	return uint32(v)
}

func entryType(flag byte) Type {
	switch flag {
	case tarscan.TypeDir:
		return TypeDir
	case tarscan.TypeSymlink:
		return TypeSymlink
	case tarscan.TypeChar:
		return TypeChar
	case tarscan.TypeBlock:
		return TypeBlock
	case tarscan.TypeFIFO:
		return TypeFIFO
	}
	return TypeReg
}

// HeaderEntry returns what the index records of member h, apart from its
// place in the tree (Parent, Name) and what a hard link takes from its
// target: a one-pass consumer of BuildOptions.OnMember can rely on the
// index's Entry for h to say the same.
func HeaderEntry(h *tarscan.Header) Entry {
	e := Entry{
		Type:       entryType(h.Typeflag),
		Mode:       uint32(h.Mode & 0o7777),
		UID:        clampID(h.UID),
		GID:        clampID(h.GID),
		Uname:      h.Uname,
		Gname:      h.Gname,
		MTime:      h.MTime,
		ATime:      h.ATime,
		CTime:      h.CTime,
		DataOffset: UncompressedOffset(h.DataOffset),
	}
	switch e.Type {
	case TypeReg:
		e.Size = h.Size
		e.Sparse = h.Sparse != nil
	case TypeSymlink:
		e.Linkname = h.Linkname
		e.Size = int64(len(h.Linkname))
	case TypeChar, TypeBlock:
		e.Devmajor, e.Devminor = clampID(h.Devmajor), clampID(h.Devminor)
	}
	return e
}

// HeaderXattrs returns the extended attributes the index records of
// member h (nil when none), as Index.Xattrs returns them.
func HeaderXattrs(h *tarscan.Header) []Xattr {
	var out []Xattr
	for _, x := range h.Xattrs {
		out = append(out, Xattr{Name: x.Name, Value: x.Value})
	}
	return out
}

func (b *builder) add(h *tarscan.Header) error {
	for k := range h.PAX {
		if !gnuKeywords[k] && !strings.HasPrefix(k, "GNU.sparse.") {
			b.note(noteIgnored, "ignoring unknown extended header keyword `"+k+"'", h.Name)
		}
	}
	parts, ok := cleanName(h.Name)
	if !ok {
		b.skip("name contains ..", h.Name)
		return nil
	}
	// The time tar -x warns of as it sets it: GNU tar checks the mtime
	// alone (the atime only when it extracts an incremental dump).
	switch {
	case h.MTime.Sec < 0:
		b.note(noteDated, "implausibly old time stamp", h.Name)
	case h.MTime.Sec > b.now:
		b.note(noteDated, "time stamp in the future", h.Name)
	}
	if _, prefix := gnuSuffix(h.Name); prefix != "" {
		b.note(noteRenamed, "removing leading `"+prefix+"' from member names", h.Name)
	}
	if len(b.entries) >= maxEntries {
		return errTooManyEntries
	}
	if h.Typeflag == tarscan.TypeLink {
		return b.addLink(parts, h)
	}
	e := bentry{Entry: HeaderEntry(h), xattrs: HeaderXattrs(h)}
	if e.Type == TypeReg && h.Sparse != nil {
		e.sparse = make([]SparseChunk, len(h.Sparse))
		for i, c := range h.Sparse {
			e.sparse[i] = SparseChunk{Offset: c.Offset, Length: c.Length}
		}
	}
	if len(parts) == 0 {
		if e.Type == TypeDir {
			b.entries[RootID] = e
		} else {
			b.skip("non-directory member for the archive root", h.Name)
		}
		return nil
	}
	parent, ok := b.parentDir(parts[:len(parts)-1], e.MTime, h.Name)
	if !ok {
		return nil
	}
	// A copy: the name is a piece of h.Name, which may be long.
	key := dirName{parent, strings.Clone(parts[len(parts)-1])}
	if old, exists := b.names[key]; exists {
		oe := &b.entries[old]
		switch {
		case oe.Type == TypeDir && e.Type == TypeDir:
			// A directory listed again: its metadata is updated.
			e.Parent, e.Name = oe.Parent, oe.Name
			*oe = e
			return nil
		case oe.Type == TypeDir && b.full[old]:
			b.skip("non-directory member over a non-empty directory", h.Name)
			return nil
		}
	}
	e.Parent = parent
	e.Name = key.name
	id := EntryID(len(b.entries))
	b.entries = append(b.entries, e)
	b.names[key] = id
	b.full[parent] = true
	return nil
}

// parentDir returns the directory that holds the components dirs from the
// root, creating implied directories. It fails when a component is not a
// directory; name is the member's, for the message.
func (b *builder) parentDir(dirs []string, mtime Time, name string) (EntryID, bool) {
	id := RootID
	for _, c := range dirs {
		key := dirName{id, c}
		next, ok := b.names[key]
		if ok && b.entries[next].Type != TypeDir {
			b.skip("a parent is not a directory", name)
			return 0, false
		}
		if !ok {
			key.name = strings.Clone(c)
			next = EntryID(len(b.entries))
			b.entries = append(b.entries, bentry{Entry: Entry{
				Parent: id, Name: key.name, Type: TypeDir, Mode: 0o755, MTime: mtime,
			}})
			b.names[key] = next
			b.full[id] = true
		}
		id = next
	}
	return id, true
}

// lookup returns the entry that the components parts name, without
// creating anything.
func (b *builder) lookup(parts []string) (EntryID, bool) {
	id := RootID
	for _, c := range parts {
		if b.entries[id].Type != TypeDir {
			return 0, false
		}
		next, ok := b.names[dirName{id, c}]
		if !ok {
			return 0, false
		}
		id = next
	}
	return id, true
}

func (b *builder) addLink(parts []string, h *tarscan.Header) error {
	// As GNU tar, the target loses what leads up to its last ".."
	// (never a way out of the tree).
	rest, prefix := gnuSuffix(h.Linkname)
	if prefix != "" {
		b.note(noteRenamed, "removing leading `"+prefix+"' from hard link targets", h.Name)
	}
	target, _ := cleanName(rest)
	id, ok := b.lookup(target)
	if !ok {
		b.skip("hard link to a missing member", h.Name)
		return nil
	}
	if b.entries[id].Type == TypeDir {
		b.skip("hard link to a directory", h.Name)
		return nil
	}
	if len(parts) == 0 || slices.Equal(parts, target) {
		return nil
	}
	parent, ok := b.parentDir(parts[:len(parts)-1], h.MTime, h.Name)
	if !ok {
		return nil
	}
	key := dirName{parent, strings.Clone(parts[len(parts)-1])}
	if old, exists := b.names[key]; exists && b.entries[old].Type == TypeDir && b.full[old] {
		b.skip("hard link over a non-empty directory", h.Name)
		return nil
	}
	b.names[key] = id
	b.full[parent] = true
	return nil
}

// finish drops entries no name reaches, numbers the rest densely in
// archive order, and lays out the compact records: sorted directory
// listings, link counts, one string table.
func (b *builder) finish() error {
	// A directory is live when its name still leads to it and its
	// parent is live. Decided walking up, without recursion: trees may
	// be deep.
	const (
		unknown = iota
		dead
		liveDir
	)
	dirState := make([]uint8, len(b.entries))
	dirState[RootID] = liveDir
	var chain []EntryID
	isLiveDir := func(d EntryID) bool {
		chain = chain[:0]
		state := uint8(dead)
		for {
			if dirState[d] != unknown {
				state = dirState[d]
				break
			}
			e := &b.entries[d]
			if e.Type != TypeDir || b.names[dirName{e.Parent, e.Name}] != d {
				dirState[d] = dead
				break
			}
			chain = append(chain, d)
			d = e.Parent
		}
		for _, c := range chain {
			dirState[c] = state
		}
		return state == liveDir
	}
	type link struct {
		parent EntryID
		name   string
		id     EntryID
	}
	links := make([]link, 0, len(b.names))
	live := make([]bool, len(b.entries))
	live[RootID] = true
	for k, id := range b.names {
		if !isLiveDir(k.dir) {
			continue
		}
		links = append(links, link{k.dir, k.name, id})
		live[id] = true
	}
	newID := make([]EntryID, len(b.entries))
	entries := make([]bentry, 0, len(b.entries))
	for id := range b.entries {
		newID[id] = noEntry
		if live[id] {
			newID[id] = EntryID(len(entries))
			entries = append(entries, b.entries[id])
		}
	}
	b.newID = newID
	for i := range links {
		links[i].parent = newID[links[i].parent]
		links[i].id = newID[links[i].id]
	}
	sort.Slice(links, func(i, j int) bool {
		if links[i].parent != links[j].parent {
			return links[i].parent < links[j].parent
		}
		return links[i].name < links[j].name
	})

	ix := b.ix
	st := &strtab{at: make(map[string]uint64)}
	owners := map[[2]string]uint32{}
	ix.recs = make([]rec, len(entries))
	for i := range entries {
		e := &entries[i]
		r := &ix.recs[i]
		*r = rec{typ: e.Type, sparse: e.Sparse, mode: uint16(e.Mode), uid: e.UID, gid: e.GID,
			size: e.Size, mtime: e.MTime.Sec, mtimeNsec: uint32(e.MTime.Nsec), dataOff: int64(e.DataOffset)}
		if e.Type == TypeDir {
			r.nlink = 2
		}
		key := [2]string{e.Uname, e.Gname}
		o, ok := owners[key]
		if !ok {
			o = uint32(len(ix.owners))
			owners[key] = o
			ix.owners = append(ix.owners, ownerRec{st.ref(e.Uname), st.ref(e.Gname)})
		}
		r.owner = o
		if !e.ATime.IsZero() || !e.CTime.IsZero() || e.Linkname != "" || e.Devmajor != 0 || e.Devminor != 0 ||
			len(e.xattrs) > 0 || len(e.sparse) > 0 {
			x := extraRec{atime: e.ATime.Sec, atimeNsec: uint32(e.ATime.Nsec), ctime: e.CTime.Sec, ctimeNsec: uint32(e.CTime.Nsec), link: st.ref(e.Linkname), devmajor: e.Devmajor, devminor: e.Devminor,
				xattrFirst: uint32(len(ix.xattrs)), xattrCount: uint32(len(e.xattrs)),
				sparseFirst: uint32(len(ix.sparse)), sparseCount: uint32(len(e.sparse))}
			for _, a := range e.xattrs {
				ix.xattrs = append(ix.xattrs, xattrRec{st.ref(a.Name), st.ref(a.Value)})
			}
			ix.sparse = append(ix.sparse, e.sparse...)
			ix.extras = append(ix.extras, x)
			r.extra = uint32(len(ix.extras))
		}
	}
	named := make([]bool, len(entries))
	named[RootID] = true
	// An entry's first name is the member that stored it when that name
	// is still live (so that a listing says which names are hard links
	// as tar -tv does), else the first live name in listing order.
	orig := make([]int, len(entries)) // the link that is that name, +1
	for i, l := range links {
		e := &entries[l.id]
		if e.Type != TypeDir && live[e.Parent] && newID[e.Parent] == l.parent && e.Name == l.name {
			orig[l.id] = i + 1
		}
	}
	ix.dirents = make([]direntRec, len(links))
	for i, l := range links {
		name := st.ref(l.name)
		ix.dirents[i] = direntRec{name: name, id: l.id}
		p := &ix.recs[l.parent]
		if p.childCount == 0 {
			p.childFirst = uint32(i)
		}
		p.childCount++
		c := &ix.recs[l.id]
		if orig[l.id] == i+1 || (orig[l.id] == 0 && !named[l.id]) {
			c.parent, c.name = l.parent, name
			named[l.id] = true
		}
		if c.typ == TypeDir {
			p.nlink++
		} else {
			c.nlink++
		}
	}
	if st.overflow {
		return fmt.Errorf("%w: names of more than 4 GiB in all", ErrUnsupported)
	}
	ix.strtab = string(st.data)
	return nil
}

// Note is one kind of member that the index left out or renamed, as tar -x
// does and warns of: how many there were, and the first.
type Note struct {
	// Message says what happened: noteSkipped, noteRenamed, noteIgnored
	// or noteDated.
	Message string
	// Reason is why, in tar's words ("name contains ..", "removing
	// leading `/' from member names").
	Reason  string
	Count   int
	Example string
}

// Messages of Notes.
const (
	noteSkipped = "skipped archive members"
	noteRenamed = "renamed archive members"
	noteIgnored = "ignored archive records"
	noteDated   = "archive members dated oddly"
)

// maxNotes bounds the notes an index file may hold (one per kind).
const maxNotes = 1 << 10

// Skipped returns how many members the index left out of the tree.
func (ix *Index) Skipped() int {
	n := 0
	for _, x := range ix.Notes {
		if x.Message == noteSkipped {
			n += x.Count
		}
	}
	return n
}

// LogNotes logs each of the index's notes once, as a warning: a command
// that opens an archive says what tar -x would warn of, whether its
// index was built just now or long ago.
func (ix *Index) LogNotes(log *slog.Logger) {
	for _, n := range ix.Notes {
		log.Warn(n.Message, "reason", n.Reason, "count", n.Count, "path", n.Example)
	}
}
