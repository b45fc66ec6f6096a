package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/fetch"
	tfs "github.com/tarmount/tarmount/fs"
	"github.com/tarmount/tarmount/index"
)

// tarmount status MNT asks the server of a mount how it is doing. The
// server answers through the mount itself: the root of every mount has
// the extended attribute fs.StatusXattr, whose value is a mountStatus as
// JSON, made at the time of the getxattr. Compared with a control socket
// beside the mount, nothing is created or left behind (no stale socket
// after a kill -9, no runtime directory to choose), the path is the
// mountpoint whatever symlinks, bind mounts or mount namespaces lead to
// it, a dead server is told apart by the kernel (ENOTCONN), and who may
// read the status is who may use the mount.

// Sources of an index, in mountStatus.Index.Source.
const (
	indexFromFile     = "file"     // --index FILE
	indexFromCache    = "cache"    // saved in the cache directory by an earlier run
	indexFromEmbedded = "embedded" // in the archive (tarmount pack)
	indexFromBuilt    = "built"    // by the index pass of this mount
	indexBuilding     = "building" // by the index pass of this mount, still running (or failed: Index.Error)
)

// mountStatus is what `tarmount status --json` prints. Its field names
// are stable (README, "Status and metrics"); new fields may be added.
// Byte counts are bytes; counters count since the server started.
type mountStatus struct {
	Source        string    `json:"source"` // the archive's URL, without credentials or query
	Mountpoint    string    `json:"mountpoint"`
	PID           int       `json:"pid"`
	Started       time.Time `json:"started"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Archive       struct {
		Size         int64     `json:"size"`
		ETag         string    `json:"etag,omitempty"`
		VersionID    string    `json:"version_id,omitempty"`
		LastModified time.Time `json:"last_modified,omitzero"`
		Codec        string    `json:"codec"`
	} `json:"archive"`
	Index struct {
		Source      string `json:"source"`  // file, cache, embedded, built or building
		Entries     int    `json:"entries"` // so far, while building
		Checkpoints int    `json:"checkpoints"`
		StreamOnly  bool   `json:"stream_only"`
		Error       string `json:"error,omitempty"` // why the index pass failed
	} `json:"index"`
	Fetch struct {
		Requests      int64 `json:"requests"`
		Bytes         int64 `json:"bytes"` // of the archive: the mount's and materialization's
		InFlightBytes int64 `json:"in_flight_bytes"`
		Retries       int64 `json:"retries"`
		Resumes       int64 `json:"resumes"`
		Stalls        int64 `json:"stalls"`
		Timeouts      int64 `json:"timeouts"`
	} `json:"fetch"`
	Cache struct {
		MemoryBytes      int64 `json:"memory_bytes"`       // blocks and decoded spans held now
		MemoryLimitBytes int64 `json:"memory_limit_bytes"` // --cache-mem
		BlockHits        int64 `json:"block_hits"`
		BlockMisses      int64 `json:"block_misses"`
		SpanHits         int64 `json:"span_hits"`
		SpanMisses       int64 `json:"span_misses"`
		SpanDecodes      int64 `json:"span_decodes"`
		DiskEnabled      bool  `json:"disk_enabled"`
		DiskHits         int64 `json:"disk_hits"`
		DiskReadBytes    int64 `json:"disk_read_bytes"`
		DiskUsedBytes    int64 `json:"disk_used_bytes"`  // the whole cache directory, shared by mounts
		DiskLimitBytes   int64 `json:"disk_limit_bytes"` // --cache-disk
	} `json:"cache"`
	// Materialize is present with --materialize.
	Materialize *materializeStatus `json:"materialize,omitempty"`
}

type materializeStatus struct {
	Dir string `json:"dir"`
	// Files and Bytes were written by this run; the totals are what this
	// run writes (files complete before a restart are in neither).
	Files        int64   `json:"files"`
	FilesTotal   int64   `json:"files_total"`
	Bytes        int64   `json:"bytes"`
	BytesTotal   int64   `json:"bytes_total"`
	Percent      float64 `json:"percent"`
	FetchedBytes int64   `json:"fetched_bytes"`
	Complete     bool    `json:"complete"`
	Error        string  `json:"error,omitempty"` // why it stopped, if it did
}

// statusSource gathers a mount's status from the counters of its parts.
type statusSource struct {
	a          *archive
	bg         *background // nil without --materialize
	c          *config
	mountpoint string
	started    time.Time
}

func (s *statusSource) status() *mountStatus {
	var st mountStatus
	a := s.a
	st.Source = a.src.String()
	st.Mountpoint = s.mountpoint
	st.PID = os.Getpid()
	st.Started = s.started.UTC()
	st.UptimeSeconds = time.Since(s.started).Seconds()
	id := a.src.Identity()
	st.Archive.Size, st.Archive.ETag, st.Archive.VersionID = id.Size, id.ETag, id.VersionID
	if !id.LastModified.IsZero() {
		st.Archive.LastModified = id.LastModified.UTC()
	}
	var rs index.ReaderStats
	if a.live != nil {
		rs = a.live.Stats() // reads served while the pass ran
	}
	switch {
	case !a.indexed() || a.ix == nil:
		st.Index.Source, st.Index.Entries = indexBuilding, a.live.Len()
		if a.indexed() {
			st.Index.Error = a.passErr.Error()
		}
	default:
		st.Archive.Codec = a.ix.Codec.String()
		st.Index.Source, st.Index.Entries = a.indexFrom, a.ix.Len()
		st.Index.Checkpoints, st.Index.StreamOnly = len(a.ix.Checkpoints), a.ix.StreamOnly()
		r := a.reader.Stats()
		rs.SpanHits, rs.SpanMisses, rs.SpanDecodes = rs.SpanHits+r.SpanHits, rs.SpanMisses+r.SpanMisses, rs.SpanDecodes+r.SpanDecodes
		rs.CachedBytes += r.CachedBytes
	}

	bs := a.blocks.Stats()
	st.Fetch.Requests = bs.Requests + a.probe.requests.Load()
	st.Fetch.Bytes = bs.BytesFetched + a.probe.n.Load()
	st.Fetch.InFlightBytes = bs.InFlight
	if rs, ok := a.src.(interface{ RetryStats() fetch.RetryStats }); ok {
		r := rs.RetryStats()
		st.Fetch.Retries, st.Fetch.Resumes, st.Fetch.Stalls, st.Fetch.Timeouts = r.Retries, r.Resumes, r.Stalls, r.Timeouts
	}
	st.Cache.MemoryBytes = bs.CachedBytes + rs.CachedBytes
	st.Cache.MemoryLimitBytes = s.c.cacheMem
	st.Cache.BlockHits, st.Cache.BlockMisses = bs.CacheHits, bs.CacheMisses
	st.Cache.SpanHits, st.Cache.SpanMisses, st.Cache.SpanDecodes = rs.SpanHits, rs.SpanMisses, rs.SpanDecodes
	st.Cache.DiskHits, st.Cache.DiskReadBytes = bs.DiskHits, bs.DiskBytes
	if a.disk != nil {
		st.Cache.DiskEnabled = true
		st.Cache.DiskUsedBytes = a.disk.Stats().UsedBytes
		st.Cache.DiskLimitBytes = s.c.cacheDisk
	}
	if b := s.bg; b != nil {
		p := b.prog
		m := &materializeStatus{
			Dir:   b.dir,
			Files: p.Files.Load(), FilesTotal: p.FilesTotal.Load(),
			Bytes: p.Bytes.Load(), BytesTotal: p.BytesTotal.Load(),
			FetchedBytes: b.src.n.Load(),
		}
		m.Complete, m.Error = b.state()
		switch {
		case m.Complete:
			m.Percent = 100
		case m.BytesTotal > 0:
			m.Percent = 100 * float64(m.Bytes) / float64(m.BytesTotal)
		}
		st.Materialize = m
		st.Fetch.Requests += b.src.requests.Load()
		st.Fetch.Bytes += m.FetchedBytes
		st.Cache.SpanDecodes += b.reader.Stats().SpanDecodes
	}
	return &st
}

// json is the value of the mount's status attribute.
func (s *statusSource) json() []byte {
	data, err := json.Marshal(s.status())
	if err != nil {
		return fmt.Appendf(nil, `{"error":%q}`, err.Error())
	}
	return data
}

// maxStatusBytes is the most an extended attribute value can be
// (XATTR_SIZE_MAX): one getxattr with a buffer that large never races
// with a status growing between a size query and the read.
const maxStatusBytes = 64 << 10

// errNotMount is returned by readStatus for a path that is not the root of a
// running tarmount mount.
var errNotMount = errors.New("not a tarmount mount")

// readStatus reads the status attribute of the mount at path.
func readStatus(path string) ([]byte, error) {
	buf := make([]byte, maxStatusBytes)
	n, err := unix.Getxattr(path, tfs.StatusXattr, buf)
	switch {
	case err == nil:
		return buf[:n], nil
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
		return nil, fmt.Errorf("%s: %w (no tarmount status there; give the mountpoint itself)", path, errNotMount)
	case errors.Is(err, unix.ENOTCONN):
		return nil, fmt.Errorf("%s: the server of this mount is gone; tarmount unmount %s clears it", path, path)
	default:
		return nil, fmt.Errorf("status of %s: %w", path, err)
	}
}

// statusCmd prints the status of the mount at path: the server's JSON
// as it is with asJSON, else a few lines for people.
func statusCmd(path string, asJSON bool, w io.Writer) error {
	data, err := readStatus(path)
	if err != nil {
		return err
	}
	if asJSON {
		_, err := fmt.Fprintf(w, "%s\n", data)
		return err
	}
	var st mountStatus
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("status of %s: %w", path, err)
	}
	printStatus(w, &st)
	return nil
}

var indexSourceText = map[string]string{
	indexFromFile:     "from --index",
	indexFromCache:    "loaded from the cache",
	indexFromEmbedded: "embedded in the archive",
	indexFromBuilt:    "built by this mount",
	indexBuilding:     "being built by this mount",
}

func printStatus(w io.Writer, st *mountStatus) {
	line := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-13s %s\n", name+":", fmt.Sprintf(format, args...))
	}
	line("source", "%s", st.Source)
	line("mountpoint", "%s (server pid %d, up %s)", st.Mountpoint, st.PID,
		(time.Duration(st.UptimeSeconds) * time.Second).String())
	etag := ""
	if st.Archive.ETag != "" {
		etag = ", ETag " + st.Archive.ETag
	}
	line("archive", "%s%s, %s", mb(st.Archive.Size), etag, st.Archive.Codec)
	switch {
	case st.Index.Error != "":
		line("index", "pass failed after %d entries: %s", st.Index.Entries, st.Index.Error)
	case st.Index.Source == indexBuilding:
		line("index", "%s, %d entries so far", indexSourceText[st.Index.Source], st.Index.Entries)
	default:
		line("index", "%s, %d entries, %d checkpoints", indexSourceText[st.Index.Source], st.Index.Entries, st.Index.Checkpoints)
	}
	f := st.Fetch
	line("fetched", "%s in %d requests (%s in flight), %d retries", mb(f.Bytes), f.Requests, mb(f.InFlightBytes), f.Retries)
	c := st.Cache
	line("memory cache", "%s of %s; blocks %d hits, %d misses; spans %d hits, %d misses, %d decodes",
		mb(c.MemoryBytes), mb(c.MemoryLimitBytes), c.BlockHits, c.BlockMisses, c.SpanHits, c.SpanMisses, c.SpanDecodes)
	if c.DiskEnabled {
		line("disk cache", "%d hits (%s read); %s of %s used", c.DiskHits, mb(c.DiskReadBytes), mb(c.DiskUsedBytes), mb(c.DiskLimitBytes))
	} else {
		line("disk cache", "none")
	}
	if m := st.Materialize; m != nil {
		switch {
		case m.Complete:
			line("materialize", "%s: complete (%d files, %s written by this run)", m.Dir, m.Files, mb(m.Bytes))
		case m.Error != "":
			line("materialize", "%s: stopped at %d of %d files: %s", m.Dir, m.Files, m.FilesTotal, m.Error)
		default:
			line("materialize", "%s: %.0f%%, %d of %d files, %s of %s", m.Dir, m.Percent, m.Files, m.FilesTotal, mb(m.Bytes), mb(m.BytesTotal))
		}
	}
}
