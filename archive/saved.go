package archive

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
)

// Saved indexes live in CACHE-DIR/indexes, one file per version of an
// archive: NAMEHASH-IDKEY.idx, where NAMEHASH is the first 8 bytes of
// the SHA-256 of the source's name (fetch.Name) in hex and IDKEY is
// fetch.Identity.Key of the version it was built for.

// loadIndex is index.Load with the garbage collector off: loading
// allocates the whole index at once, and at start-up, with a small heap,
// collections would run several times over memory that all stays live
// (about a quarter of the load time of a 200k-entry index). The memory
// limit, when one is set, still bounds the heap.
func loadIndex(path string) (*index.Index, error) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	return index.Load(path)
}

// SavedPath names the saved index of the archive named name (the
// source's String, or fetch.Name of its URL) with identity id.
func SavedPath(cacheDir, name string, id fetch.Identity) string {
	return savedPrefix(cacheDir, name) + id.Key() + ".idx"
}

// partialPath is where the first pass over the archive named name, at
// identity id, keeps its partial index while it runs, for a later pass to
// resume if it stops early (index.BuildOptions.Partial).
func partialPath(cacheDir, name string, id fetch.Identity) string {
	return savedPrefix(cacheDir, name) + id.Key() + ".partial"
}

// savedPrefix is what the names of the saved indexes of the archive
// named name start with.
func savedPrefix(dir, name string) string {
	h := sha256.Sum256([]byte(name))
	return filepath.Join(dir, "indexes", hex.EncodeToString(h[:8])+"-")
}

// saveIndex saves ix (data, its encoding, when not nil) as the saved
// index of this version of the archive, with the archive's name beside
// it for cache ls.
func (a *Archive) saveIndex(ix *index.Index, data []byte) {
	var err error
	if data == nil {
		if data, err = ix.Marshal(); err == nil {
			a.encoded.Store(&encodedIndex{ix, data})
		}
	}
	if err == nil {
		err = index.SaveFile(a.saved, data)
	}
	if err != nil {
		a.log.Warn("could not save index", "path", a.saved, "err", err)
		return
	}
	rememberName(a.opts.CacheDir, a.base.String())
}

// encodedIndex is an index and its encoding (index.Index.Marshal).
type encodedIndex struct {
	ix   *index.Index
	data []byte
}

// SaveIndex writes the index of the archive to path as index.Index.Save
// does, with the encoding it was saved with in the cache when there is
// one: the index is not encoded twice. The archive must be indexed.
func (a *Archive) SaveIndex(path string) error {
	ix := a.Index()
	if ix == nil {
		return fmt.Errorf("save the index of %s: not indexed yet", a)
	}
	if e := a.encoded.Load(); e != nil && e.ix == ix {
		return index.SaveFile(path, e.data)
	}
	return ix.Save(path)
}

// NewestSaved is the most recently saved index of the source named name
// (fetch.Name) in the cache directory dir, whatever version of the
// archive it was built for; "" when there is none. The source's identity
// decides whether it is used.
func NewestSaved(dir, name string) string {
	names, _ := filepath.Glob(savedPrefix(dir, name) + "*.idx")
	var newest string
	var at time.Time
	for _, n := range names {
		if st, err := os.Stat(n); err == nil && (newest == "" || st.ModTime().After(at)) {
			newest, at = n, st.ModTime()
		}
	}
	return newest
}

// previousIndex returns the saved index of the version of an archive
// whose identity key (fetch.Identity.Key) is key, under any source name
// (an upgrade may come from a new URL): the newest that loads, or nil.
// A materialization that upgrades a DIR made from that version compares
// it with this one's (materialize.Options.Previous).
func (a *Archive) previousIndex(key string) *index.Index {
	if !fetch.ValidKey(key) {
		// A DIR made with a selection (Extract's key has it after the
		// identity's): its names are not the archive's, and its files
		// are compared with their own digests instead.
		return nil
	}
	names, _ := filepath.Glob(filepath.Join(a.opts.CacheDir, "indexes", "*-"+key+".idx"))
	var best *index.Index
	var at time.Time
	for _, n := range names {
		st, err := os.Stat(n)
		if err != nil || best != nil && !st.ModTime().After(at) {
			continue
		}
		ix, err := loadIndex(n)
		if err != nil {
			a.log.Info("saved index of the previous version not used", "path", n, "err", err)
			continue
		}
		if ix.Source.Key() == key {
			best, at = ix, st.ModTime()
		}
	}
	return best
}

// preload is an index file read in the background (startPreload).
type preload struct {
	path string
	done chan struct{}
	ix   *index.Index // set once done is closed
	err  error
}

// startPreload starts reading the index at path; nil when path is "".
func startPreload(path string) *preload {
	if path == "" {
		return nil
	}
	p := &preload{path: path, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.ix, p.err = loadIndex(path)
	}()
	return p
}

// load is loadIndex(path), from the preload when it read that path
// (hit). Another path is read once the preload has ended: two loads at
// once would each restore the other's garbage collector setting. Safe on
// a nil preload.
func (p *preload) load(path string) (ix *index.Index, hit bool, err error) {
	p.wait()
	if p == nil || p.path != path {
		ix, err := loadIndex(path)
		return ix, false, err
	}
	return p.ix, true, p.err
}

// wait waits for the preload to end. Safe on a nil preload.
func (p *preload) wait() {
	if p != nil {
		<-p.done
	}
}
