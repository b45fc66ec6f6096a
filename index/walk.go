package index

// Walk calls fn for every name under dir (whose path is p), depth first in
// name order, dir itself first, with the name's path, its entry, and
// whether it is the entry's first name (p == ix.Path(id)). fn must keep
// neither the path nor the entry: Walk reuses them.
func Walk(ix *Index, p string, dir EntryID, fn func(p []byte, id EntryID, e *Entry, first bool) error) error {
	w := walker{ix: ix, fn: fn, buf: append(make([]byte, 0, 4096), p...)}
	ix.FillEntry(dir, &w.e)
	return w.walk(dir, ix.Path(dir) == p)
}

// walker is the state of one walk: the path and the entry it is at.
type walker struct {
	ix  *Index
	fn  func(p []byte, id EntryID, e *Entry, first bool) error
	buf []byte // the path being walked
	e   Entry  // of the name at buf
}

// walk lists dir (at w.buf, w.e) and what it holds.
func (w *walker) walk(dir EntryID, first bool) error {
	if err := w.fn(w.buf, dir, &w.e, first); err != nil {
		return err
	}
	n := len(w.buf)
	for _, d := range w.ix.Children(dir) {
		w.buf = w.buf[:n]
		if n > 0 {
			w.buf = append(w.buf, '/')
		}
		w.buf = append(w.buf, d.Name...) // names in the index are single clean components
		// Ids in an index are in range: Load checks them.
		w.ix.FillEntry(d.ID, &w.e)
		// A name is the entry's first one when the entry says it is in
		// this directory under this name, and this directory is listed
		// under its own first name; else (hard links) compare in full.
		cfirst := (first && w.e.Parent == dir && w.e.Name == d.Name) || w.ix.Path(d.ID) == string(w.buf)
		var err error
		if w.e.Type == TypeDir && cfirst {
			err = w.walk(d.ID, cfirst)
		} else {
			err = w.fn(w.buf, d.ID, &w.e, cfirst)
		}
		if err != nil {
			return err
		}
	}
	w.buf = w.buf[:n]
	return nil
}
