package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/fetch"
	tfs "github.com/tarmount/tarmount/fs"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/index/tarscan"
)

func defaultCacheDir() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "tarmount")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".cache", "tarmount")
	}
	return filepath.Join(os.TempDir(), "tarmount-cache")
}

// archive is an opened source with its index.
type archive struct {
	src    fetch.Source
	blocks *fetch.Blocks
	disk   *fetch.DiskCache // nil = none
	ix     *index.Index
	reader *index.Reader
	local  *os.File // the decoded copy of a stream-only archive
	// probe counts the reads that look for an embedded index: they go
	// to the source, not through blocks.
	probe *countingSource
	// indexFrom says where ix came from: indexFromFile, indexFromCache,
	// indexFromEmbedded or indexFromBuilt.
	indexFrom string

	// A mount made before its index (startPass): live serves it
	// while the pass runs in the background. ix, reader, local and
	// indexFrom are set by the pass, and may be read only once passDone
	// is closed (indexed says so). passErr is why the pass failed.
	live       *index.Live
	passLocal  *localWriter // the decoded copy the pass writes, read by live
	passDone   chan struct{}
	cancelPass context.CancelFunc
	passErr    error
}

// indexed reports whether a.ix and a.reader may be used: the index was
// there at open, or the pass that builds it has ended (with a.ix nil if
// it failed).
func (a *archive) indexed() bool {
	if a.passDone == nil {
		return true
	}
	select {
	case <-a.passDone:
		return true
	default:
		return false
	}
}

func (a *archive) Close(log *slog.Logger) {
	if a.passDone != nil {
		a.stopPass()
		a.live.Close()
		a.passLocal.closeReads()
	}
	st := a.blocks.Stats()
	log.Debug("block cache totals", "requests", st.Requests, "bytes", st.BytesFetched, "in_flight", st.InFlight,
		"hits", st.CacheHits, "misses", st.CacheMisses, "evictions", st.Evictions,
		"disk_hits", st.DiskHits, "disk_bytes", st.DiskBytes, "disk_writes", st.DiskWrites, "disk_dropped", st.DiskDropped)
	if a.reader != nil {
		a.reader.Close()
	}
	a.blocks.Close()
	if a.local != nil {
		a.local.Close()
	}
	if a.disk != nil {
		a.disk.Close()
	}
	logRetries(log, a.src)
	a.src.Close()
}

// loadIndex is index.Load with the garbage collector off: loading
// allocates the whole index at once, and at start-up, with a small heap,
// collections would run several times over memory that all stays live
// (about a quarter of the load time of a 200k-entry index). The memory
// limit, when one is set, still bounds the heap.
func loadIndex(path string) (*index.Index, error) {
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	return index.Load(path)
}

// cachePath names the saved index of the archive named name (the
// source's String) with identity id.
func cachePath(dir, name string, id fetch.Identity) string {
	return cachePrefix(dir, name) + id.Key() + ".idx"
}

// cachePrefix is what the names of the saved indexes of the archive named
// name start with.
func cachePrefix(dir, name string) string {
	h := sha256.Sum256([]byte(name))
	return filepath.Join(dir, "indexes", hex.EncodeToString(h[:8])+"-")
}

// newestSaved is the most recently saved index of the source named name
// (fetch.Name) in the cache directory dir, whatever version of the
// archive it was built for; "" when there is none. The source's identity
// decides whether it is used.
func newestSaved(dir, name string) string {
	names, _ := filepath.Glob(cachePrefix(dir, name) + "*.idx")
	var newest string
	var at time.Time
	for _, n := range names {
		if st, err := os.Stat(n); err == nil && (newest == "" || st.ModTime().After(at)) {
			newest, at = n, st.ModTime()
		}
	}
	return newest
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

// openArchive opens url and finds its index: the file given with --index
// (refused when built for another version of the archive), else the saved
// one in the cache directory, else it builds one in a single streamed pass
// and saves it.
func openArchive(ctx context.Context, url string, c *config, log *slog.Logger, rebuild bool) (*archive, error) {
	a, cached, err := findArchiveIndex(ctx, url, c, log, rebuild)
	if err != nil {
		return nil, err
	}
	if a.ix == nil {
		if err := a.build(ctx, c, log, cached, nil, nil); err != nil {
			a.Close(log)
			return nil, err
		}
	}
	a.openReader(c, log, localCopyPath(c.cacheDir, cached))
	return a, nil
}

// startPass starts the index pass of an archive that has no index yet in
// the background, and returns at once: a.live serves what the pass has
// seen (index.Live). The pass hands each member to stage when it is not
// nil (one pass feeding --materialize), then saves the index and makes
// a.reader as openArchive would, and a.live serves through it.
func (a *archive) startPass(ctx context.Context, c *config, log *slog.Logger, cached string, stage func(*tarscan.Header, io.Reader) error) {
	// Reads during the pass find most of what they need in the blocks
	// the pass brought in.
	// A stream-only archive's spans are read from its decoded copy as
	// the pass writes it.
	a.passLocal = &localWriter{path: localCopyPath(c.cacheDir, cached), limit: c.cacheDecoded, log: log}
	a.live = index.NewLive(a.blocks, index.ReaderOptions{CacheBytes: c.cacheMem / 2, Logger: log, Local: a.passLocal})
	ctx, a.cancelPass = context.WithCancel(ctx)
	a.passDone = make(chan struct{})
	go func() {
		defer close(a.passDone)
		if err := a.build(ctx, c, log, cached, a.live, stage); err != nil {
			a.passErr = err
			a.live.Fail(err)
			if ctx.Err() == nil {
				log.Error("index pass failed: reads that need it fail", "src", a.src.String(), "err", err)
			}
			return
		}
		a.openReader(c, log, localCopyPath(c.cacheDir, cached))
		a.live.Serve(a.reader)
	}()
}

// stopPass cancels the index pass started by startPass, if it still
// runs, and waits for it. It is idempotent.
func (a *archive) stopPass() {
	if a.passDone != nil {
		a.cancelPass()
		<-a.passDone
	}
}

// findArchiveIndex opens url and looks for its index (see openArchive):
// a.ix is nil when there is none. cached is where the index of this
// version of the archive is saved.
func findArchiveIndex(ctx context.Context, url string, c *config, log *slog.Logger, rebuild bool) (a *archive, cached string, err error) {
	// The index most likely wanted is read while the source is opened,
	// which takes a round trip or more (HEAD): a remount is ready after
	// the longer of the two, not their sum.
	var pre *preload
	switch {
	case c.indexFile != "":
		pre = startPreload(c.indexFile)
	case !rebuild:
		if name, err := fetch.Name(url); err == nil {
			pre = startPreload(newestSaved(c.cacheDir, name))
		}
	}
	defer pre.wait()
	disk := openDiskCache(c, log)
	src, err := openSource(ctx, url, c, disk, log)
	if err != nil {
		if disk != nil {
			disk.Close()
		}
		return nil, "", err
	}
	a = &archive{src: src, disk: disk, probe: &countingSource{Source: src}}
	a.blocks = fetch.NewBlocks(src, fetch.BlocksOptions{BlockSize: c.blockSize, Workers: c.workers, CacheBytes: c.cacheMem / 2, Logger: log, Disk: a.disk})
	id := src.Identity()
	cached = cachePath(c.cacheDir, src.String(), id)
	switch {
	case c.indexFile != "":
		ix, _, err := pre.load(c.indexFile)
		if err != nil {
			a.Close(log)
			return nil, "", err
		}
		if !sameIdentity(ix.Source, id) {
			a.Close(log)
			return nil, "", fmt.Errorf("%w: %s was built for %s, the source is now %s",
				index.ErrIdentity, c.indexFile, ix.Source, id)
		}
		a.ix, a.indexFrom = ix, indexFromFile
	case !rebuild:
		if ix, hit, err := pre.load(cached); err == nil && sameIdentity(ix.Source, id) {
			log.Debug("index loaded", "path", cached, "preloaded", hit)
			a.ix, a.indexFrom = ix, indexFromCache
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			log.Warn("saved index unusable, rebuilding", "path", cached, "err", err)
		}
	}
	if a.ix == nil {
		// A packed archive carries its index: no pass at all.
		ix, err := index.LoadEmbedded(ctx, a.probe, id)
		switch {
		case err == nil:
			log.Info("index embedded in the archive", "src", src.String(), "entries", ix.Len())
			a.ix, a.indexFrom = ix, indexFromEmbedded
			if err := a.ix.Save(cached); err != nil {
				log.Warn("could not save index", "path", cached, "err", err)
			}
		case !errors.Is(err, index.ErrNoEmbeddedIndex):
			log.Warn("embedded index unusable, indexing", "src", src.String(), "err", err)
		}
	}
	localPath := localCopyPath(c.cacheDir, cached)
	if a.ix != nil && a.ix.StreamOnly() {
		if a.local = openLocalCopy(localPath, a.ix.TarSize); a.local == nil {
			log.Info("the decoded copy of this stream-only archive is gone: decoding it again", "path", localPath)
			a.ix = nil
		}
	}
	return a, cached, nil
}

// build runs the index pass (publishing to live and handing members to
// stage, when not nil), keeps the decoded copy of a stream-only archive,
// and saves the index at cached.
func (a *archive) build(ctx context.Context, c *config, log *slog.Logger, cached string, live *index.Live, stage func(*tarscan.Header, io.Reader) error) error {
	localPath := localCopyPath(c.cacheDir, cached)
	lw := a.passLocal
	if lw == nil {
		lw = &localWriter{path: localPath, limit: c.cacheDecoded, log: log}
		defer lw.closeReads()
	}
	defer lw.discard()
	ix, err := buildIndex(ctx, a, c, log, lw, live, stage)
	if err != nil {
		return err
	}
	if ix.StreamOnly() {
		if err := lw.commit(ix.TarSize); err != nil {
			return err
		}
		if a.local = openLocalCopy(localPath, ix.TarSize); a.local == nil {
			return fmt.Errorf("decoded copy %s vanished", localPath)
		}
	}
	a.ix, a.indexFrom = ix, indexFromBuilt
	if err := ix.Save(cached); err != nil {
		log.Warn("could not save index", "path", cached, "err", err)
	}
	return nil
}

// openReader makes a.reader, which reads a.ix's entries.
func (a *archive) openReader(c *config, log *slog.Logger, localPath string) {
	if a.ix.StreamOnly() {
		log.Warn("stream-only archive: "+streamOnlyReason(a.ix.Codec)+"; reads are served from its decoded copy on disk. "+
			"For random access from the archive itself, make a seekable one: tarmount pack URL -o OUT.tar.zst",
			"src", a.src.String(), "path", localPath, "len", a.ix.TarSize)
	}
	// Through the blocks (index.BlockSource): a compressed span is
	// fetched with one exact range request (kept on disk when there is a
	// disk cache); plain tar reads choose between the blocks, with
	// prefetch, and exact ranges.
	ropts := index.ReaderOptions{CacheBytes: c.cacheMem / 2, Readahead: c.readahead, Logger: log}
	if a.local != nil {
		ropts.Local = a.local
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

// openDiskCache opens the cache on disk of fetched blocks and of whole
// copies of objects whose server ignores ranges (local archives use
// neither), or returns nil: when --cache-disk is 0, or when the directory
// cannot be made (logged; the mount goes on without it).
func openDiskCache(c *config, log *slog.Logger) *fetch.DiskCache {
	if c.cacheDisk <= 0 {
		return nil
	}
	dir := filepath.Join(c.cacheDir, "blocks")
	d, err := fetch.OpenDiskCache(dir, fetch.DiskCacheOptions{MaxBytes: c.cacheDisk, Logger: log})
	if err != nil {
		log.Warn("disk cache unusable, going on without it", "path", dir, "err", err)
		return nil
	}
	return d
}

func sameIdentity(a, b fetch.Identity) bool {
	return a.Size == b.Size && a.ETag == b.ETag && a.VersionID == b.VersionID && a.LastModified.Equal(b.LastModified)
}

func buildIndex(ctx context.Context, a *archive, c *config, log *slog.Logger, local *localWriter, live *index.Live, stage func(*tarscan.Header, io.Reader) error) (*index.Index, error) {
	start := time.Now()
	size := a.src.Identity().Size
	log.Info("indexing", "src", a.src.String(), "size", size)
	stream := a.blocks.Stream(ctx, 0)
	defer stream.Close()
	last := start
	ix, err := index.Build(ctx, stream, a.src.Identity(), index.BuildOptions{
		Span:     c.span,
		Logger:   log,
		Local:    local,
		Live:     live,
		OnMember: stage,
		OnProgress: func(consumed int64) {
			if now := time.Now(); now.Sub(last) >= 2*time.Second {
				last = now
				log.Info("indexing", "done", fmt.Sprintf("%.0f%%", 100*float64(consumed)/float64(max(size, 1))),
					"rate_mbps", fmt.Sprintf("%.0f", float64(consumed)/now.Sub(start).Seconds()/1e6))
			}
		},
	})
	if err != nil {
		return nil, fmt.Errorf("index %s: %w", a.src, err)
	}
	st := a.blocks.Stats()
	log.Info("indexed", "entries", ix.Len(), "codec", ix.Codec.String(), "checkpoints", len(ix.Checkpoints),
		"elapsed", time.Since(start).Round(time.Millisecond), "fetched", st.BytesFetched)
	return ix, nil
}

func indexCmd(ctx context.Context, url string, c *config, log *slog.Logger) error {
	a, err := openArchive(ctx, url, c, log, true)
	if err != nil {
		return err
	}
	defer a.Close(log)
	if c.output != "" {
		if err := a.ix.Save(c.output); err != nil {
			return err
		}
		log.Info("index written", "path", c.output)
	}
	return nil
}

// memoryReserve is the heap a mount may hold beyond its caches: FUSE
// request buffers (at most fs.MaxInflightRequestBytes), spans being
// decoded, the index and the runtime's own.
const memoryReserve = 48 << 20

// mount serves the archive at url on mountpoint until it is unmounted or
// ctx is done, and tells ready (systemd, a --daemon parent) when the mount
// answers, how materialization goes, and when it stops.
func mount(ctx context.Context, stop context.CancelFunc, url, mountpoint string, c *config, log *slog.Logger, ready *readiness) error {
	// Check the mountpoint before the index pass, which may take long.
	if st, err := os.Stat(mountpoint); err != nil {
		return fmt.Errorf("mountpoint: %w", err)
	} else if !st.IsDir() {
		return fmt.Errorf("mountpoint %s is not a directory", mountpoint)
	}
	// The caches hold cache-mem bytes; a soft limit a little above keeps
	// the garbage collector from letting the heap grow to twice that, so
	// that the whole process stays within cache-mem plus about 80 MiB.
	debug.SetMemoryLimit(c.cacheMem + memoryReserve)
	start := time.Now()
	a, cached, err := findArchiveIndex(ctx, url, c, log, false)
	if err != nil {
		return err
	}
	defer a.Close(log)
	var bg *background
	if c.mat.dir != "" {
		// DIR is refused if it is not ours before anything is mounted.
		if bg, err = openMaterialize(a, c, log); err != nil {
			return err
		}
		defer bg.stop()
	}
	switch {
	case a.ix == nil && !c.waitIndex:
		var stage func(*tarscan.Header, io.Reader) error
		if bg != nil {
			stage = bg.job.Load().Stage
		}
		a.startPass(ctx, c, log, cached, stage)
		defer a.stopPass() // before bg.stop: the pass stages into its job
		// Ready once the pass has read the first member, which gives
		// the root its attributes; an object that is no tar archive is
		// refused here.
		if err := a.live.WaitStarted(ctx); err != nil {
			a.stopPass()
			if a.passErr != nil {
				return a.passErr
			}
			return err
		}
	case a.ix == nil:
		if err := a.build(ctx, c, log, cached, nil, nil); err != nil {
			return err
		}
		fallthrough
	default:
		a.openReader(c, log, localCopyPath(c.cacheDir, cached))
	}
	fsOpts := tfs.Options{
		Logger: log, Name: c.mountName, FsName: a.src.String(), AllowOther: c.allowOther, Debug: c.debugFUSE,
		UID: c.uid, GID: c.gid, PartialListings: c.partialListings,
	}
	// While the pass runs, a.reader belongs to it: only a.live is read.
	var archive tfs.Archive
	switch {
	case a.live != nil && bg != nil:
		archive = gatedLive{a.live, bg.gate}
	case a.live != nil:
		archive = a.live
	case bg != nil:
		archive = gatedReader{a.reader, bg.gate}
	default:
		archive = a.reader
	}
	if bg != nil {
		fsOpts.Local = bg
	}
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return err
	}
	status := &statusSource{a: a, bg: bg, c: c, mountpoint: abs, started: start}
	fsOpts.Status = status.json
	if c.metricsAddr != "" {
		m := newMetrics(status)
		stopMetrics, err := serveMetrics(c.metricsAddr, m.reg, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
		fsOpts.Observe = m.observe
	}
	server, err := tfs.Mount(mountpoint, archive, fsOpts)
	if err != nil {
		return fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	if bg != nil {
		bg.run()
	}
	if a.live != nil {
		log.Info("ready", "path", mountpoint, "indexing", true, "elapsed", time.Since(start).Round(time.Millisecond))
		ready.ready(fmt.Sprintf("serving %s while indexing it", a.src))
	} else {
		log.Info("ready", "path", mountpoint, "entries", a.ix.Len(), "elapsed", time.Since(start).Round(time.Millisecond))
		ready.ready(fmt.Sprintf("serving %d entries of %s", a.ix.Len(), a.src))
	}
	done := make(chan struct{})
	go func() {
		server.Wait()
		close(done)
	}()
	if bg != nil {
		go bg.report(ready, done)
	}
	// A pass that fails after the mount answered ends the mount, as it
	// would have refused it: reads waiting for it have failed with EIO,
	// and the server exits with the reason.
	var passErr error
	passDone := a.passDone
	for wait := true; wait; {
		select {
		case <-done:
			ready.stopping()
			log.Info("unmounted", "path", mountpoint)
			return nil
		case <-passDone:
			passDone = nil
			if a.passErr != nil && ctx.Err() == nil {
				passErr, wait = a.passErr, false
			}
		case <-ctx.Done():
			wait = false
		}
	}
	ready.stopping()
	stop() // a second signal kills the process
	if err := tfs.Unmount(mountpoint); err != nil {
		if !errors.Is(err, tfs.ErrBusy) {
			return fmt.Errorf("unmount %s: %w", mountpoint, err)
		}
		log.Warn("mount busy: detached lazily; it goes away when the last file is closed", "path", mountpoint)
	}
	<-done
	log.Info("unmounted", "path", mountpoint)
	return passErr
}

func unmount(mountpoint string, log *slog.Logger) error {
	dead := deadMount(mountpoint)
	err := tfs.Unmount(mountpoint)
	switch {
	case errors.Is(err, tfs.ErrBusy) && dead:
		log.Warn("dead mount (its server is gone) in use: detached lazily; it goes away when the last file is closed", "path", mountpoint)
		return nil
	case errors.Is(err, tfs.ErrBusy):
		log.Warn("mount busy: detached lazily; it goes away when the last file is closed", "path", mountpoint)
		return nil
	case err == nil && dead:
		log.Info("cleared a dead mount (its server was gone)", "path", mountpoint)
	}
	return err
}

// deadMount reports whether the mount at mountpoint has lost its server:
// statfs, which the kernel never answers from its caches, fails with
// ENOTCONN. A server that does not answer within a second is taken for
// alive; the statfs is then left to return on its own, as the command
// goes on to unmount and exit.
func deadMount(mountpoint string) bool {
	done := make(chan error, 1)
	go func() {
		var st unix.Statfs_t
		done <- unix.Statfs(mountpoint, &st)
	}()
	select {
	case err := <-done:
		return errors.Is(err, unix.ENOTCONN)
	case <-time.After(time.Second):
		return false
	}
}
