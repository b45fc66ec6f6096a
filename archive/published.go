package archive

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
)

// A published index is an index file beside its archive, named like it
// with SidecarSuffix (https://host/dir/a.tar.gz.tarmount-index,
// s3://bucket/prefix/a.tar.gz.tarmount-index, /srv/a.tar.gz.tarmount-index),
// written by `tarmount index URL --publish` (Publish). Open asks for it
// while it opens the archive, so that a missing one costs no round trip,
// and uses it when no index was given or saved and none is embedded. An
// index given with Options.IndexFile may be a URL too. Both are fetched
// with the archive's options: credentials, headers, retries and timeouts.
//
// Which archive an index fits: the one whose identity it records (size,
// ETag, version id, modification time), or a remote copy of the same
// bytes: an index built from a local file (it records a size and a time,
// no ETag or version id) fits a remote archive of the same size, whatever
// the server says of its time and ETag (sameBytes). Such an index is used
// with a log line that says so; the digest of every span it records still
// guards each read, so an index of other bytes of the same size gives
// EIO, never wrong bytes. An index built from a remote archive fits only
// that archive (a copy on another server has another ETag: build or
// publish the index from the copy, or from a local file), and a local
// archive only its own index. The index saved in the cache directory,
// under the name of the archive version it was taken for, is matched the
// same way, so that a published index built from a local copy is found
// there by the next mount.

// SidecarSuffix ends the name of an index published beside its archive.
const SidecarSuffix = ".tarmount-index"

// maxIndexBytes bounds an index file fetched from a URL.
const maxIndexBytes = 1 << 30

// sameBytes reports whether an index built for the archive version ix
// fits the archive version src (local says the archive is a local file):
// the same version, or a remote copy of the local file it was built from
// (see above); copy says it is the latter.
func sameBytes(ix, src fetch.Identity, local bool) (ok, copy bool) {
	switch {
	case ix.Equal(src):
		return true, false
	case !local && ix.ETag == "" && ix.VersionID == "" && ix.Size == src.Size:
		return true, true
	}
	return false, false
}

// remoteIndex is an index file being fetched in the background.
type remoteIndex struct {
	url    string
	cancel context.CancelFunc
	done   chan struct{}
	data   []byte // set once done is closed
	err    error
}

// fetchIndex starts fetching the index file at url with the archive's
// options.
func (o *Options) fetchIndex(ctx context.Context, url string) *remoteIndex {
	ctx, cancel := context.WithCancel(ctx)
	r := &remoteIndex{url: url, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.data, r.err = o.readObject(ctx, url)
	}()
	return r
}

// fetchSidecar starts fetching the index published beside the archive at
// url; nil when the lookup is off (NoSidecar) or url has no place beside
// it.
func (o *Options) fetchSidecar(ctx context.Context, url string) *remoteIndex {
	if o.NoSidecar {
		return nil
	}
	u, err := fetch.Beside(url, SidecarSuffix)
	if err != nil {
		return nil
	}
	return o.fetchIndex(ctx, u)
}

// readObject reads the whole object at url, of at most maxIndexBytes:
// with one request, over HTTP(S).
func (o *Options) readObject(ctx context.Context, url string) ([]byte, error) {
	return fetch.ReadAll(ctx, url, maxIndexBytes, o.fetchOptions(nil), o.retryOptions())
}

// load waits for the fetch and decodes the index, with the garbage
// collector off as loadIndex has it. Safe on nil (no fetch): it returns
// fetch.ErrNotFound.
func (r *remoteIndex) load() (*index.Index, error) {
	if r == nil {
		return nil, fetch.ErrNotFound
	}
	<-r.done
	if r.err != nil {
		return nil, r.err
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	ix, err := index.Unmarshal(r.data)
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", r.url, err)
	}
	return ix, nil
}

// stop cancels the fetch if it still runs and waits for it. Safe on nil.
func (r *remoteIndex) stop() {
	if r != nil {
		r.cancel()
		<-r.done
	}
}

// useSidecar takes the published index of the archive, if there is one
// for this version: a missing one is silent, one for another version or
// one that cannot be read is ignored with one log line.
func (a *Archive) useSidecar(side *remoteIndex, id fetch.Identity) {
	ix, err := side.load()
	log := a.log
	switch {
	case errors.Is(err, fetch.ErrNotFound):
		log.Debug("no published index", "path", side.url)
		return
	case err != nil:
		log.Warn("published index unusable, ignored", "path", side.url, "err", err)
		return
	}
	ok, copied := sameBytes(ix.Source, id, fetch.IsLocal(a.base))
	if !ok {
		log.Info("published index is for another version of the archive, ignored", "path", side.url,
			"built_for", ix.Source.String(), "src", id.String())
		return
	}
	log.Info("index published beside the archive", "path", side.url, "entries", ix.Len(), "copy", copied)
	a.ix, a.from = ix, FromSidecar
	// Saved as fetched: encoding it again would cost the boot tens of
	// milliseconds.
	a.saveIndex(ix, side.data)
}

// Publish writes the archive's index beside it, as its published index
// (SidecarSuffix), in one piece: a local path by rename, s3:// with one
// PutObject. http(s) archives cannot be published to (fetch.ErrNotWritable):
// copy the index there by the server's own means. It returns where it
// wrote.
func (a *Archive) Publish(ctx context.Context) (string, error) {
	ix := a.Index()
	if ix == nil {
		return "", fmt.Errorf("publish %s: no index yet", a)
	}
	to, err := fetch.Beside(a.url, SidecarSuffix)
	if err != nil {
		return "", err
	}
	data, err := ix.Marshal()
	if err != nil {
		return "", err
	}
	if err := fetch.Put(ctx, to, data, a.opts.fetchOptions(nil)); err != nil {
		return "", err
	}
	return to, nil
}
