package archive

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/tarmount/tarmount/fetch"
)

// Defaults of Options, for flags that print them.
const (
	DefaultFetchWorkers = 8
	DefaultBlockSize    = 4 << 20
	DefaultCacheMem     = 256 << 20
	DefaultCacheDisk    = 10 << 30
	DefaultCacheDecoded = 20 << 30
	// DefaultFrameResumeMin: the Go toolchain's .tar.zst (63 MB) starts
	// over; a 2 GiB one resumes.
	DefaultFrameResumeMin = 256 << 20
	DefaultRetries        = 7
	DefaultReadTimeout    = fetch.DefaultReadTimeout
	DefaultMinSpeed       = fetch.DefaultMinBytesPerSec
)

// Options configure Open. DefaultOptions gives the defaults of the
// command line; in a zero Options, sizes and counts that cannot be zero
// take those defaults, and the others (CacheDisk, Retries, MinSpeed) mean
// none.
type Options struct {
	// CacheDir holds saved indexes (indexes/), cached blocks (blocks/)
	// and the decoded copies of stream-only archives (decoded/).
	// Default DefaultCacheDir().
	CacheDir string
	// IndexFile is an index to use, refused when it was built for
	// another version of the archive.
	IndexFile string
	// IndexFile may also be a URL (http(s)://, s3://, file://), fetched
	// with the archive's options; see published.go for which archive an
	// index fits.

	// Rebuild ignores the saved and the published index: the first pass
	// runs again (an index embedded in the archive is still used, and a
	// pass over this version that stopped early is resumed: it ends
	// with the same index).
	Rebuild bool
	// NoSidecar does not look for an index published beside the archive.
	NoSidecar bool

	// Span is the decoded bytes between gzip checkpoints (0: the index
	// package's default).
	Span int64
	// FetchWorkers is the number of parallel range requests.
	FetchWorkers int
	// BlockSize is the size of a fetched block.
	BlockSize int64
	// CacheMem bounds the decoded data and fetched blocks held in
	// memory, half each.
	CacheMem int64
	// CacheDisk bounds the fetched data kept under CacheDir/blocks; 0:
	// no disk cache.
	CacheDisk int64
	// CacheDecoded bounds the decoded copies of stream-only archives, in
	// all.
	CacheDecoded int64
	// FrameResumeMin: a one-pass extraction or a staging pass (which
	// keep no decoded copy) follow the decoder's state inside the
	// frame of a remote single-frame zstd archive at least this big, so
	// that a run stopped or killed resumes inside it. Following it costs
	// about a tenth of the pass's CPU. 0: at any size.
	FrameResumeMin int64
	// IndexOnly says that only the index is read (ls, stat): a pass over
	// a stream-only archive writes no decoded copy.
	IndexOnly bool
	// LocalDecodedTemp keeps the decoded copy of a local stream-only
	// archive in a temporary file that Close removes, not in the cache
	// (cat, get: the archive is at hand; only a mount's remounts gain
	// from a lasting copy).
	LocalDecodedTemp bool
	// Readahead is the most spans decoded ahead of a sequential reader
	// (0: the index package's default; -1 disables).
	Readahead int

	// Header is sent with every HTTP request (auth tokens).
	Header http.Header
	// HTTP1 never uses HTTP/2.
	HTTP1 bool
	// S3 settings; what they leave empty comes from the environment and
	// the shared AWS files.
	Region, EndpointURL, Profile string
	NoSignRequest                bool

	// ReadTimeout bounds a read of the source, retries included.
	ReadTimeout time.Duration
	// Retries is the number of retries of a read that failed
	// transiently.
	Retries int
	// MinSpeed is the stall watchdog's bytes per second; 0 disables it.
	MinSpeed int64

	// Logger gets the archive's log; nil discards it.
	Logger *slog.Logger
}

// DefaultCacheDir is $XDG_CACHE_HOME/tarmount, else ~/.cache/tarmount.
func DefaultCacheDir() string {
	if d := os.Getenv("XDG_CACHE_HOME"); d != "" {
		return filepath.Join(d, "tarmount")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".cache", "tarmount")
	}
	return filepath.Join(os.TempDir(), "tarmount-cache")
}

// DefaultOptions are the defaults of the command line.
func DefaultOptions() Options {
	return Options{
		CacheDir: DefaultCacheDir(), FetchWorkers: DefaultFetchWorkers, BlockSize: DefaultBlockSize,
		CacheMem: DefaultCacheMem, CacheDisk: DefaultCacheDisk, CacheDecoded: DefaultCacheDecoded, FrameResumeMin: DefaultFrameResumeMin,
		ReadTimeout: DefaultReadTimeout, Retries: DefaultRetries, MinSpeed: DefaultMinSpeed,
	}
}

// withDefaults returns o with the defaults of the fields that cannot be
// zero.
func (o Options) withDefaults() Options {
	d := DefaultOptions()
	if o.CacheDir == "" {
		o.CacheDir = d.CacheDir
	}
	if o.FetchWorkers <= 0 {
		o.FetchWorkers = d.FetchWorkers
	}
	if o.BlockSize <= 0 {
		o.BlockSize = d.BlockSize
	}
	if o.CacheMem <= 0 {
		o.CacheMem = d.CacheMem
	}
	if o.CacheDecoded <= 0 {
		o.CacheDecoded = d.CacheDecoded
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = d.ReadTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return o
}

// retryOptions is fetch's retry policy for reads of the source.
func (o *Options) retryOptions() fetch.RetryOptions {
	r := fetch.RetryOptions{MaxAttempts: max(o.Retries, 0) + 1, Deadline: o.ReadTimeout, MinSpeed: o.MinSpeed, Logger: o.Logger}
	if o.MinSpeed <= 0 {
		r.MinSpeed = -1 // fetch's default is a watchdog
	}
	return r
}

// openSource opens url with the retry policy, so that the block cache,
// the index pass and span reads all see a source whose reads are retried
// and bounded in time. disk, when not nil, keeps whole copies of objects
// whose server ignores ranges. pass says that a pass from the start of
// the archive is likely to follow: the open then brings its first bytes
// (fetch.Options.Prefix). tail says that a look for an index embedded at
// its end follows: the open brings its last bytes too
// (fetch.Options.Suffix), so that the look costs no round trip before
// the pass starts.
func (o *Options) openSource(ctx context.Context, url string, disk *fetch.DiskCache, pass, tail bool) (fetch.Source, error) {
	fo := o.fetchOptions(disk)
	fo.Prefix, fo.Suffix = pass, tail
	return fetch.OpenWithRetry(ctx, url, fo, o.retryOptions())
}

// openCached opens the disk cache (nil when there is none) and the source
// at url with it (openSource), which keeps whole copies of objects whose
// server ignores ranges; it closes the cache again when the source fails.
func (o *Options) openCached(ctx context.Context, url string, pass, tail bool) (fetch.Source, *fetch.DiskCache, error) {
	disk := o.openDiskCache()
	src, err := o.openSource(ctx, url, disk, pass, tail)
	if err != nil {
		if disk != nil {
			disk.Close()
		}
		return nil, nil, err
	}
	return src, disk, nil
}

// blocksOptions are the options of the block cache over the source;
// disk, when not nil, keeps the blocks on disk too.
func (o *Options) blocksOptions(disk *fetch.DiskCache) fetch.BlocksOptions {
	return fetch.BlocksOptions{BlockSize: o.BlockSize, Workers: o.FetchWorkers, CacheBytes: o.CacheMem / 2, Logger: o.Logger, Disk: disk}
}

// fetchOptions are the options of fetch.Open (and fetch.Put) for the
// archive's source and the objects beside it.
func (o *Options) fetchOptions(disk *fetch.DiskCache) fetch.Options {
	return fetch.Options{
		Logger:        o.Logger,
		Header:        o.Header,
		Region:        o.Region,
		EndpointURL:   o.EndpointURL,
		Profile:       o.Profile,
		NoSignRequest: o.NoSignRequest,
		Copies:        disk,
		Conns:         o.FetchWorkers,
		HTTP1:         o.HTTP1,
	}
}

// openDiskCache opens the cache on disk of fetched blocks and of whole
// copies of objects whose server ignores ranges (local archives use
// neither), or returns nil: when CacheDisk is 0, or when the
// directory cannot be made (logged; the archive goes on without it).
func (o *Options) openDiskCache() *fetch.DiskCache {
	if o.CacheDisk <= 0 {
		return nil
	}
	dir := filepath.Join(o.CacheDir, "blocks")
	d, err := fetch.OpenDiskCache(dir, fetch.DiskCacheOptions{MaxBytes: o.CacheDisk, Logger: o.Logger})
	if err != nil {
		o.Logger.Warn("disk cache unusable, going on without it", "path", dir, "err", err)
		return nil
	}
	return d
}
