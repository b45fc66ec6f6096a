package archive

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/atomicfile"
)

// The cache directory holds, for each version of each archive that was
// opened:
//
//	indexes/NAMEHASH-KEY.idx      its saved index (saved.go)
//	indexes/NAMEHASH-KEY.partial  the partial index of a pass that stopped
//	indexes/NAMEHASH-KEY.warned   says the stream-only warning was given
//	indexes/NAMEHASH-KEY.lock     locked by the pass that keeps the partial index (lockPass)
//	indexes/NAMEHASH.name         the archive's name (fetch.Name), for cache ls
//	blocks/KEY/...                fetched blocks, shared by every name of KEY
//	decoded/NAMEHASH-KEY.tar      the decoded copy of a stream-only archive
//	decoded/NAMEHASH-KEY.kept.tar the copy a pass is writing, or a stopped one kept (decoded.go)
//
// KEY is the version's fetch.Identity.Key. CachedVersions lists them,
// PruneCache and RemoveCached remove whole versions. Removing what a
// running mount uses is safe: it fetches again what it needs (open files
// stay readable until closed).

// CachedVersion is one version of one archive in the cache directory.
type CachedVersion struct {
	// Name is the archive's name as tarmount opened it (its URL without
	// credentials or query, or its path); "" when unknown (blocks that no
	// index names).
	Name string `json:"archive"`
	// Key is fetch.Identity.Key of the version.
	Key string `json:"key"`
	// Identity is what the index says of the version; nil without one.
	Identity *CachedIdentity `json:"identity,omitempty"`
	// Bytes of each part, and of all.
	IndexBytes   int64 `json:"index_bytes"`
	PartialBytes int64 `json:"partial_bytes,omitempty"`
	BlockBytes   int64 `json:"block_bytes"`
	DecodedBytes int64 `json:"decoded_bytes"`
	TotalBytes   int64 `json:"total_bytes"`
	// LastUsed is when a command last used it (the newest time of its
	// files: a saved index is touched as it is loaded).
	LastUsed time.Time `json:"last_used"`

	nameHash string
	paths    []string // files and directories that hold it
}

// CachedIdentity is the identity of a cached version (fetch.Identity),
// as cache ls --json writes it.
type CachedIdentity struct {
	Size         int64      `json:"size"`
	ETag         string     `json:"etag,omitempty"`
	LastModified *time.Time `json:"last_modified,omitempty"`
	VersionID    string     `json:"version_id,omitempty"`
	text         string
}

// String is the identity as fetch.Identity writes it.
func (c *CachedIdentity) String() string { return c.text }

func newCachedIdentity(id fetch.Identity) *CachedIdentity {
	c := &CachedIdentity{Size: id.Size, ETag: id.ETag, VersionID: id.VersionID, text: id.String()}
	if !id.LastModified.IsZero() {
		lm := id.LastModified.UTC()
		c.LastModified = &lm
	}
	return c
}

// nameFile is where the name of the archives saved under prefix (a
// savedPrefix) is kept.
func nameFile(prefix string) string { return strings.TrimSuffix(prefix, "-") + ".name" }

// rememberName writes the name of the archive beside its saved index, once.
func rememberName(cacheDir, name string) {
	p := nameFile(savedPrefix(cacheDir, name))
	if _, err := os.Stat(p); err == nil {
		return
	}
	f, err := atomicfile.CreateTemp(filepath.Dir(p), ".tmp-*.name")
	if err != nil {
		return
	}
	_, err = f.WriteString(name + "\n")
	if cerr := f.Close(); err == nil && cerr == nil {
		os.Rename(f.Name(), p)
	}
	os.Remove(f.Name())
}

// warnedPath is the marker beside the saved index at saved that says the
// stream-only warning was given for that version.
func warnedPath(saved string) string { return strings.TrimSuffix(saved, ".idx") + ".warned" }

// touchSaved marks the saved index at path used now (at most once an
// hour), for cache ls and prune.
func touchSaved(path string) {
	if st, err := os.Stat(path); err == nil && time.Since(st.ModTime()) > time.Hour {
		now := time.Now()
		os.Chtimes(path, now, now)
	}
}

// CachedVersions lists what the cache directory holds, one entry per
// version of an archive, least recently used first.
func CachedVersions(cacheDir string) ([]CachedVersion, error) {
	byID := map[string]*CachedVersion{} // NAMEHASH-KEY
	keysNamed := map[string]bool{}
	get := func(nameHash, key string) *CachedVersion {
		id := nameHash + "-" + key
		v := byID[id]
		if v == nil {
			v = &CachedVersion{Key: key, nameHash: nameHash}
			byID[id] = v
		}
		return v
	}
	add := func(v *CachedVersion, path string, mod time.Time) {
		v.paths = append(v.paths, path)
		if mod.After(v.LastUsed) {
			v.LastUsed = mod
		}
	}
	dir := filepath.Join(cacheDir, "indexes")
	ents, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	for _, e := range ents {
		nameHash, key, ext, ok := splitCacheName(e.Name())
		if !ok || (ext != ".idx" && ext != ".partial" && ext != ".warned" && ext != ".lock") {
			continue
		}
		st, err := e.Info()
		if err != nil {
			continue
		}
		v := get(nameHash, key)
		p := filepath.Join(dir, e.Name())
		add(v, p, st.ModTime())
		keysNamed[key] = true
		if ext == ".warned" || ext == ".lock" {
			continue
		}
		if ext == ".partial" {
			v.PartialBytes = st.Size()
			continue
		}
		v.IndexBytes = st.Size()
		if h, err := index.ReadHead(p); err == nil {
			v.Identity = newCachedIdentity(h.Source)
		}
	}
	ents, _ = os.ReadDir(filepath.Join(cacheDir, "decoded"))
	for _, e := range ents {
		// A kept copy (keptPath) counts with its version.
		nameHash, key, ext, ok := splitCacheName(strings.Replace(e.Name(), ".kept.tar", ".tar", 1))
		if !ok || ext != ".tar" {
			continue
		}
		if st, err := e.Info(); err == nil {
			v := get(nameHash, key)
			v.DecodedBytes += st.Size()
			add(v, filepath.Join(cacheDir, "decoded", e.Name()), st.ModTime())
		}
	}
	// Blocks are kept by KEY alone: each version that has KEY shows them;
	// blocks no index names are a version of their own, without a name.
	ents, _ = os.ReadDir(filepath.Join(cacheDir, "blocks"))
	for _, e := range ents {
		key := e.Name()
		if !e.IsDir() || !fetch.ValidKey(key) {
			continue
		}
		p := filepath.Join(cacheDir, "blocks", key)
		size, mod := treeSize(p)
		var owners []*CachedVersion
		for _, v := range byID {
			if v.Key == key {
				owners = append(owners, v)
			}
		}
		if !keysNamed[key] && len(owners) == 0 {
			owners = append(owners, get("", key))
		}
		for _, v := range owners {
			v.BlockBytes = size
			add(v, p, mod)
		}
	}
	names := map[string]string{}
	out := make([]CachedVersion, 0, len(byID))
	for _, v := range byID {
		if v.nameHash != "" {
			n, ok := names[v.nameHash]
			if !ok {
				b, _ := os.ReadFile(filepath.Join(dir, v.nameHash+".name"))
				n = strings.TrimSpace(string(b))
				names[v.nameHash] = n
			}
			v.Name = n
		}
		v.TotalBytes = v.IndexBytes + v.PartialBytes + v.BlockBytes + v.DecodedBytes
		out = append(out, *v)
	}
	slices.SortFunc(out, func(a, b CachedVersion) int {
		if c := a.LastUsed.Compare(b.LastUsed); c != 0 {
			return c
		}
		return strings.Compare(a.nameHash+a.Key, b.nameHash+b.Key)
	})
	return out, nil
}

// splitCacheName splits NAMEHASH-KEY.EXT.
func splitCacheName(name string) (nameHash, key, ext string, ok bool) {
	ext = filepath.Ext(name)
	nameHash, key, found := strings.Cut(strings.TrimSuffix(name, ext), "-")
	return nameHash, key, ext, found && len(nameHash) == 16 && fetch.ValidKey(key)
}

// treeSize is the size of the files under dir and the newest time among
// them.
func treeSize(dir string) (size int64, newest time.Time) {
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		if st, err := d.Info(); err == nil {
			size += st.Size()
			if st.ModTime().After(newest) {
				newest = st.ModTime()
			}
		}
		return nil
	})
	return size, newest
}

// remove deletes the files of v; blocks stay while another version of
// the same key (another name of the same bytes) keeps them.
func (v *CachedVersion) remove(keep map[string]int) error {
	var errs []error
	for _, p := range v.paths {
		if filepath.Base(filepath.Dir(p)) == "blocks" && keep[v.Key] > 1 {
			continue
		}
		if err := os.RemoveAll(p); err != nil {
			errs = append(errs, err)
		}
	}
	keep[v.Key]--
	return errors.Join(errs...)
}

// keyCounts counts the versions of each key.
func keyCounts(vs []CachedVersion) map[string]int {
	n := map[string]int{}
	for _, v := range vs {
		n[v.Key]++
	}
	return n
}

// PruneCache removes the versions of archives not used for olderThan (0:
// none for that reason), then, least recently used first, as many as it
// takes to bring the cache within maxBytes (0: no bound). It returns what
// it removed.
func PruneCache(cacheDir string, olderThan time.Duration, maxBytes int64, now time.Time) ([]CachedVersion, error) {
	vs, err := CachedVersions(cacheDir)
	if err != nil {
		return nil, err
	}
	var total int64
	for _, v := range vs {
		total += v.TotalBytes
	}
	keep := keyCounts(vs)
	var removed []CachedVersion
	var errs []error
	named := map[string]int{} // versions left of each name
	for _, v := range vs {
		named[v.nameHash]++
	}
	for _, v := range vs { // least recently used first
		old := olderThan > 0 && now.Sub(v.LastUsed) > olderThan
		over := maxBytes > 0 && total > maxBytes
		if !old && !over {
			continue
		}
		if err := v.remove(keep); err != nil {
			errs = append(errs, err)
			continue
		}
		total -= v.TotalBytes
		removed = append(removed, v)
		if named[v.nameHash]--; named[v.nameHash] == 0 && v.nameHash != "" {
			// The last version of this archive: its name goes too.
			os.Remove(filepath.Join(cacheDir, "indexes", v.nameHash+".name"))
		}
	}
	return removed, errors.Join(errs...)
}

// RemoveCached removes every version of the archive at url (by its name,
// as tarmount opens it) from the cache, and returns what it removed.
func RemoveCached(cacheDir, url string) ([]CachedVersion, error) {
	name, err := fetch.Name(url)
	if err != nil {
		return nil, err
	}
	vs, err := CachedVersions(cacheDir)
	if err != nil {
		return nil, err
	}
	prefix := filepath.Base(savedPrefix(cacheDir, name))
	keep := keyCounts(vs)
	var removed []CachedVersion
	var errs []error
	for _, v := range vs {
		if v.nameHash+"-" != prefix {
			continue
		}
		if err := v.remove(keep); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, v)
	}
	if len(removed) == 0 && len(errs) == 0 {
		return nil, fmt.Errorf("%s: %w in %s", url, ErrNotCached, cacheDir)
	}
	os.Remove(nameFile(savedPrefix(cacheDir, name)))
	return removed, errors.Join(errs...)
}

// ErrNotCached says that the cache holds nothing of an archive.
var ErrNotCached = errors.New("archive: nothing cached")
