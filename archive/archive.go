package archive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
)

// Where an archive's index came from (Archive.IndexFrom, Status).
const (
	FromFile     = "file"     // Options.IndexFile
	FromCache    = "cache"    // saved in the cache directory by an earlier run
	FromEmbedded = "embedded" // in the archive (tarmount pack)
	FromSidecar  = "sidecar"  // published beside the archive (tarmount index --publish)
	FromBuilt    = "built"    // by the first pass of this Archive
	Building     = "building" // by the first pass of this Archive, still running (or failed)
)

// Archive is an opened source with its index, or with the first pass
// that builds it. Its methods are safe for concurrent use, except where
// their doc says otherwise; Close waits for everything it started.
type Archive struct {
	// set once by Open
	url    string // as given to Open
	opts   Options
	log    *slog.Logger
	base   fetch.Source    // the source with retries
	src    *countingSource // base, counting every read
	blocks *fetch.Blocks
	disk   *fetch.DiskCache // nil = none
	// probe counts the reads that look for an embedded index: they go
	// to the source, not through blocks.
	probe *countingSource
	saved string // where the index of this version is saved
	// encoded is the index saveIndex last encoded, for SaveIndex.
	encoded atomic.Pointer[encodedIndex]
	// tempDecoded is the temporary directory of the decoded copy of a
	// local stream-only archive (Options.LocalDecodedTemp); "" when none.
	tempDecoded string

	// The index. Set by Open when it found one; else by the first pass
	// (Build, or StartPass: then they may be read only once passDone is
	// closed; indexed says so).
	ix      *index.Index
	reader  *index.Reader
	decoded *os.File // the decoded copy of a stream-only archive
	from    string   // FromFile, FromCache, FromEmbedded or FromBuilt

	// A pass in the background (StartPass): live serves the archive
	// while it runs. passErr is why it failed, set before passDone is
	// closed.
	live       *index.Live
	passCopy   *decodedWriter // the decoded copy the pass writes, read by live
	passDone   chan struct{}
	cancelPass context.CancelFunc
	passErr    error
	// passProg counts the progress of the first pass (Build's or
	// StartPass's), atomically.
	passProg passProgress
	// building is set while Build runs the pass in the foreground:
	// a.ix and a.reader may not be read meanwhile.
	building atomic.Bool

	// The decode pass (decode.go): copyW is set by Open when the index
	// is stream-only and its decoded copy is missing; the pass writes
	// the copy through it.
	copyW    *decodedWriter
	decodeMu sync.Mutex
	// guarded by decodeMu
	decodeDone   chan struct{} // nil until the pass started; closed when it ends
	cancelDecode context.CancelFunc
	decodeClosed bool  // Close stopped it, or will: none may start
	decodeErr    error // why it failed, set before decodeDone is closed
	// stage is the staging pass (staging.go), set by Start; nil without one.
	stage *staging

	bg        *Materializer // nil without Materialize
	closeOnce sync.Once
}

// countingSource counts the bytes and requests read from a Source.
type countingSource struct {
	fetch.Source
	n, requests atomic.Int64
	prefixed    atomic.Bool // Prefix's bytes are counted in n
}

func (s *countingSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	n, err := s.Source.ReadAt(ctx, p, off)
	s.n.Add(int64(n))
	s.requests.Add(1)
	return n, err
}

// Prefix returns the first bytes of the object that the source's open
// fetched (fetch.Prefixer), counted as fetched when first handed out.
func (s *countingSource) Prefix() []byte {
	pf, ok := s.Source.(fetch.Prefixer)
	if !ok {
		return nil
	}
	p := pf.Prefix()
	if s.prefixed.CompareAndSwap(false, true) {
		s.n.Add(int64(len(p)))
	}
	return p
}

// Local reports whether the counted source is a local file (fetch.IsLocal).
func (s *countingSource) Local() bool { return fetch.IsLocal(s.Source) }

// Open opens the archive at url (http(s)://, s3://, file:// or a path)
// and finds its index: Options.IndexFile, a path or a URL (refused when
// it was built for another version of the archive), else the saved one in
// the cache directory, else the one embedded in the archive or the one
// published beside it (published.go): both describe the same bytes, and
// the published one is taken first when it was asked for with the open
// (no saved index), which spares the round trip of looking for an
// embedded one. That round trip is spared too when the archive's first
// byte, which the open learned, says it cannot hold one. Without an
// index, Index is nil: Build or StartPass makes it.
func Open(ctx context.Context, url string, opts Options) (*Archive, error) {
	return open(ctx, url, opts, true)
}

// OpenIndexed is Open, then Build when the archive has no index yet.
func OpenIndexed(ctx context.Context, url string, opts Options) (*Archive, error) {
	a, err := Open(ctx, url, opts)
	if err != nil {
		return nil, err
	}
	if err := a.Build(ctx); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// open is Open; blocksOnDisk says whether fetched blocks are kept in the
// disk cache (a one-pass extraction reads each block once).
func open(ctx context.Context, url string, opts Options, blocksOnDisk bool) (*Archive, error) {
	opts = opts.withDefaults()
	log := opts.Logger
	// The index most likely wanted is read while the source is opened,
	// which takes a round trip or more (HEAD): a remount is ready after
	// the longer of the two, not their sum.
	var pre *preload
	var remote, side *remoteIndex
	switch {
	case fetch.IsURL(opts.IndexFile):
		remote = opts.fetchIndex(ctx, opts.IndexFile)
	case opts.IndexFile != "":
		pre = startPreload(opts.IndexFile)
	case !opts.Rebuild:
		if name, err := fetch.Name(url); err == nil {
			pre = startPreload(NewestSaved(opts.CacheDir, name))
		}
		// Without a saved index of this archive, the published one is
		// likely what it uses: asked for now, it costs no round trip.
		if pre == nil {
			side = opts.fetchSidecar(ctx, url)
		}
	}
	defer pre.wait()
	defer remote.stop()
	defer func() { side.stop() }() // lookup may start it
	// Without an index at hand, a first pass from the start will most
	// likely follow (unless a published or embedded index turns up).
	// A zstd archive is looked at for an embedded index before the pass
	// (lookup): its name hints at that (index.MayEmbedName).
	pass := pre == nil && remote == nil && opts.IndexFile == ""
	base, disk, err := opts.openCached(ctx, url, pass, pass && index.MayEmbedName(url))
	if err != nil {
		return nil, err
	}
	a := &Archive{url: url, opts: opts, log: log, base: base, src: &countingSource{Source: base}, disk: disk}
	a.probe = &countingSource{Source: a.src}
	var blocksDisk *fetch.DiskCache
	if blocksOnDisk {
		blocksDisk = disk
	}
	a.blocks = fetch.NewBlocks(a.src, opts.blocksOptions(blocksDisk))
	id := base.Identity()
	a.saved = SavedPath(opts.CacheDir, base.String(), id)
	if opts.LocalDecodedTemp && fetch.IsLocal(base) {
		if a.tempDecoded, err = os.MkdirTemp("", "tarmount-decoded-"); err != nil {
			a.Close()
			return nil, fmt.Errorf("open %s: temporary decoded copy: %w", base, err)
		}
	}
	if err := a.lookup(ctx, pre, remote, &side, id); err != nil {
		a.Close()
		return nil, err
	}
	return a, nil
}

// lookup is the one index lookup (see Open): pre is the index file or
// the newest saved index being read, remote the index URL being fetched,
// side the published index being fetched (lookup starts it when it is
// needed and Open did not; Open stops it).
func (a *Archive) lookup(ctx context.Context, pre *preload, remote *remoteIndex, side **remoteIndex, id fetch.Identity) error {
	log, opts := a.log, a.opts
	switch {
	case opts.IndexFile != "":
		var ix *index.Index
		var err error
		if remote != nil {
			ix, err = remote.load()
		} else {
			ix, _, err = pre.load(opts.IndexFile)
		}
		if err != nil {
			return err
		}
		ok, copied := sameBytes(ix.Source, id, fetch.IsLocal(a.base))
		if !ok {
			return fmt.Errorf("%w: %s was built for %s, the source is now %s",
				index.ErrIdentity, opts.IndexFile, ix.Source, id)
		}
		if copied {
			log.Info("index built from a copy of the archive (same size): every span's digest is checked", "path", opts.IndexFile)
		}
		a.ix, a.from = ix, FromFile
	case !opts.Rebuild:
		// Saved under this version's name after the same check as
		// when it was taken: a published index built from a local
		// copy of these bytes records that copy's identity.
		if ix, hit, err := pre.load(a.saved); err == nil && fits(ix.Source, id, fetch.IsLocal(a.base)) {
			log.Debug("index loaded", "path", a.saved, "preloaded", hit)
			a.ix, a.from = ix, FromCache
			touchSaved(a.saved)
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warn("saved index unusable, rebuilding", "path", a.saved, "err", err)
		}
	}
	if a.ix == nil && *side != nil {
		// Asked for with the open: at hand now. An index published
		// for these bytes is as good as one embedded in them, and
		// saves the round trip that looking for that one costs.
		a.useSidecar(*side, id)
	}
	if a.ix == nil && mayEmbed(a.base) {
		// A packed archive carries its index: no pass at all.
		ix, err := index.LoadEmbedded(ctx, a.probe, id)
		switch {
		case err == nil:
			log.Info("index embedded in the archive", "src", a.base.String(), "entries", ix.Len())
			a.ix, a.from = ix, FromEmbedded
			a.saveIndex(ix, nil)
		case !errors.Is(err, index.ErrNoEmbeddedIndex):
			log.Warn("embedded index unusable, indexing", "src", a.base.String(), "err", err)
		}
	}
	if a.ix == nil && *side == nil && opts.IndexFile == "" && !opts.Rebuild {
		if *side = opts.fetchSidecar(ctx, a.url); *side != nil {
			a.useSidecar(*side, id)
		}
	}
	if a.ix != nil {
		a.ix.LogNotes(log) // as the pass that built it did
	}
	if a.ix != nil && a.ix.StreamOnly() {
		if a.decoded = openDecoded(a.decodedPath(), a.ix.TarSize); a.decoded == nil {
			// The index serves while the decode pass writes the
			// copy again (decode.go).
			a.copyW = &decodedWriter{path: a.decodedPath(), limit: opts.CacheDecoded, log: log}
		}
	}
	return nil
}

// decodedPath is where the decoded copy of this version of the archive
// is kept when it is stream-only: in the cache, or in a temporary
// directory that Close removes (Options.LocalDecodedTemp).
func (a *Archive) decodedPath() string {
	if a.tempDecoded != "" {
		return filepath.Join(a.tempDecoded, "decoded.tar")
	}
	return decodedPath(a.opts.CacheDir, a.saved)
}

// String is the source's name: its URL without credentials or query, or
// its path.
func (a *Archive) String() string { return a.base.String() }

// Identity is the version of the archive that was opened.
func (a *Archive) Identity() fetch.Identity { return a.base.Identity() }

// Index is the archive's index: nil before Build, and while a pass
// started by StartPass runs (Indexed says when it may be read).
func (a *Archive) Index() *index.Index {
	if !a.indexed() {
		return nil
	}
	return a.ix
}

// Reader reads the members of an indexed archive (nil before Build or
// while StartPass's pass runs).
func (a *Archive) Reader() *index.Reader {
	if !a.indexed() {
		return nil
	}
	return a.reader
}

// IndexFrom says where the index came from: FromFile, FromCache,
// FromEmbedded, FromBuilt, or Building while the pass runs or when it
// failed.
func (a *Archive) IndexFrom() string {
	if !a.indexed() || a.ix == nil {
		return Building
	}
	return a.from
}

// SavedIndex is the path where the index of this version of the archive
// is saved in the cache directory.
func (a *Archive) SavedIndex() string { return a.saved }

// Fetched is the bytes and requests read from the source so far.
func (a *Archive) Fetched() (bytes, requests int64) { return a.src.n.Load(), a.src.requests.Load() }

// indexed reports whether a.ix and a.reader may be used: the index was
// there at open, or the pass that builds it has ended (with a.ix nil if
// it failed).
func (a *Archive) indexed() bool {
	if a.passDone == nil {
		return !a.building.Load()
	}
	select {
	case <-a.passDone:
		return true
	default:
		return false
	}
}

// Close stops the pass and the materialization, if any, and waits for
// them, then closes the readers, caches and source. It is idempotent.
func (a *Archive) Close() {
	a.closeOnce.Do(a.close)
}

func (a *Archive) close() {
	log := a.log
	a.stopDecode()
	if a.stage != nil {
		a.stage.stop()
	}
	a.stopPass()
	if a.bg != nil {
		a.bg.stop()
	}
	if a.live != nil {
		a.live.Close()
		a.passCopy.closeReads()
	}
	st := a.blocks.Stats()
	log.Debug("block cache totals", "requests", st.Requests, "bytes", st.BytesFetched, "in_flight", st.InFlight,
		"hits", st.CacheHits, "misses", st.CacheMisses, "evictions", st.Evictions,
		"disk_hits", st.DiskHits, "disk_bytes", st.DiskBytes, "disk_writes", st.DiskWrites, "disk_dropped", st.DiskDropped)
	if a.reader != nil {
		a.reader.Close()
	}
	a.blocks.Close()
	if a.decoded != nil {
		a.decoded.Close()
	}
	if a.copyW != nil {
		a.copyW.closeReads()
	}
	if a.disk != nil {
		a.disk.Close()
	}
	if a.tempDecoded != "" {
		os.RemoveAll(a.tempDecoded)
	}
	if rs, ok := a.base.(interface{ RetryStats() fetch.RetryStats }); ok {
		if st := rs.RetryStats(); st != (fetch.RetryStats{}) {
			log.Info("fetch retries", "src", a.base.String(), "retries", st.Retries, "resumes", st.Resumes,
				"stalls", st.Stalls, "timeouts", st.Timeouts)
		}
	}
	a.base.Close()
}

// openReader makes a.reader, which reads a.ix's entries.
func (a *Archive) openReader() {
	log := a.log
	localPath := a.decodedPath()
	if a.ix.StreamOnly() {
		// Once per version of the archive: later opens say it at Debug.
		level, marker := slog.LevelWarn, warnedPath(a.saved)
		if _, err := os.Stat(marker); err == nil {
			level = slog.LevelDebug
		} else if f, err := os.Create(marker); err == nil {
			f.Close()
		}
		log.Log(context.Background(), level, "stream-only archive: reads come from a local copy (its decoded copy, or the materialized directory); tarmount pack makes one that is seekable",
			"why", a.ix.Codec.StreamOnlyReason(), "src", a.base.String(), "path", localPath)
	}
	// Through the blocks (index.BlockSource): a compressed span is
	// fetched with one exact range request (kept on disk when there is a
	// disk cache); plain tar reads choose between the blocks, with
	// prefetch, and exact ranges.
	ropts := index.ReaderOptions{CacheBytes: a.opts.CacheMem / 2, Readahead: a.opts.Readahead, Logger: log}
	if ropts.Local = a.local(); ropts.Local != nil {
		var once sync.Once
		ropts.LocalDamaged = func(int) {
			// Drop the name of the damaged copy, so that the next
			// mount decodes the archive again; this one keeps the
			// open file for the spans that are intact.
			once.Do(func() {
				if err := os.Remove(localPath); err != nil && !errors.Is(err, os.ErrNotExist) {
					log.Warn("decoded copy damaged, and could not be removed", "path", localPath, "err", err)
					return
				}
				log.Warn("decoded copy damaged: removed; the next mount decodes the archive again", "path", localPath)
			})
		}
	}
	a.reader = index.NewReader(a.ix, a.blocks, ropts)
}

// mayEmbed reports whether src may hold an embedded index (Pack): not
// when the first byte that its open learned rules it out (only a zstd
// stream can), which spares reading its end.
func mayEmbed(src fetch.Source) bool {
	if fb, ok := src.(fetch.FirstByter); ok {
		if b, ok := fb.FirstByte(); ok {
			return index.MayEmbed(b)
		}
	}
	return true
}

// fits reports whether an index built for version ix fits the archive
// version src (sameBytes).
func fits(ix, src fetch.Identity, local bool) bool {
	ok, _ := sameBytes(ix, src, local)
	return ok
}
