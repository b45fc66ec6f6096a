package archive

import (
	"os"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
)

// Status is a snapshot of an archive served by a mount: what `tarmount
// status --json` prints (the mount fills Mountpoint, PID, Started and
// UptimeSeconds). Its field names
// are stable (docs/status.md); new fields may be added.
// Byte counts are bytes; counters count since the server started.
type Status struct {
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
		// Pass is present when this server ran the first pass, or the
		// decode pass (Pass.DecodedCopy): its progress while it runs,
		// its final counts after.
		Pass *PassStatus `json:"pass,omitempty"`
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
	Materialize *MaterializeStatus `json:"materialize,omitempty"`
}

// PassStatus is the progress of the first pass, which reads the whole
// archive once to build its index, or of the decode pass, which reads it
// once to write the decoded copy of a stream-only archive whose index was
// found without it (Status.Index.Pass).
type PassStatus struct {
	// DecodedCopy says that this is the decode pass: the index was
	// found (Status.Index.Source), the mount serves it, and reads of
	// data the copy does not hold yet wait for the pass.
	DecodedCopy bool `json:"decoded_copy,omitempty"`
	// IntoDir says that this is the staging pass: the index was found,
	// the mount serves it, and the pass decodes the archive into the
	// materialized directory, where reads of the files it has not
	// placed yet wait for it.
	IntoDir    bool   `json:"into_dir,omitempty"`
	Error      string `json:"error,omitempty"` // why the decode pass failed
	BytesRead  int64  `json:"bytes_read"`      // of the archive as stored
	BytesTotal int64  `json:"bytes_total"`     // the archive's size
	// Percent is BytesRead of BytesTotal; 100 once the pass succeeded.
	Percent float64 `json:"percent"`
	// RateBytesPerSecond is BytesRead over the pass's time so far;
	// ETASeconds the time left at that rate (0 once it ended).
	RateBytesPerSecond float64 `json:"rate_bytes_per_second"`
	ETASeconds         float64 `json:"eta_seconds"`
	ElapsedSeconds     float64 `json:"elapsed_seconds"`
	Entries            int64   `json:"entries"` // archive members read so far
	// ResumedFrom is where the pass resumed fetching, in the archive as
	// stored, from the partial index of an earlier pass that stopped
	// early: its latest checkpoint, past the bytes it kept from there (0:
	// it started at the beginning).
	ResumedFrom int64 `json:"resumed_from,omitempty"`
	Running     bool  `json:"running"`
}

type MaterializeStatus struct {
	Dir string `json:"dir"`
	// Files and Bytes were written by this run; the totals are what this
	// run writes (files complete before a restart are in neither).
	// While the first pass stages the files into DIR, the totals are
	// what it has seen so far, and grow: TotalsFinal is false until
	// they are what the run writes, and Percent is 0 meanwhile.
	Files        int64   `json:"files"`
	FilesTotal   int64   `json:"files_total"`
	Bytes        int64   `json:"bytes"`
	BytesTotal   int64   `json:"bytes_total"`
	TotalsFinal  bool    `json:"totals_final"`
	Percent      float64 `json:"percent"`
	FetchedBytes int64   `json:"fetched_bytes"`
	Complete     bool    `json:"complete"`
	Error        string  `json:"error,omitempty"` // why it stopped, if it did
}

// Status returns a snapshot of the archive's counters. It is safe to
// call at any time, during the first pass and after Close included.
func (a *Archive) Status() *Status {
	var st Status
	st.Source = a.String()
	st.PID = os.Getpid()
	id := a.Identity()
	st.Archive.Size, st.Archive.ETag, st.Archive.VersionID = id.Size, id.ETag, id.VersionID
	if !id.LastModified.IsZero() {
		st.Archive.LastModified = id.LastModified.UTC()
	}
	st.Index.Pass = a.passProg.status(id.Size)
	switch p := st.Index.Pass; {
	case p != nil && a.stage != nil && a.stage.pass && a.DecodeDone() == nil:
		p.IntoDir = true
		if err := a.stage.failed(); err != nil {
			p.Error = err.Error()
		}
	case p != nil && a.Decoding():
		p.DecodedCopy = true
		if err := a.DecodeErr(); err != nil {
			p.Error = err.Error()
		}
	}
	var rs index.ReaderStats
	if a.live != nil {
		rs = a.live.Stats() // reads served while the pass ran
	}
	switch {
	case !a.indexed() || a.ix == nil:
		st.Index.Source = Building
		if a.live != nil {
			st.Index.Entries = a.live.Len()
		}
		if a.indexed() && a.passErr != nil {
			st.Index.Error = a.passErr.Error()
		}
	default:
		st.Archive.Codec = a.ix.Codec.String()
		st.Index.Source, st.Index.Entries = a.from, a.ix.Len()
		st.Index.Checkpoints, st.Index.StreamOnly = len(a.ix.Checkpoints), a.ix.StreamOnly()
		if a.reader != nil {
			r := a.reader.Stats()
			rs.SpanHits, rs.SpanMisses, rs.SpanDecodes = rs.SpanHits+r.SpanHits, rs.SpanMisses+r.SpanMisses, rs.SpanDecodes+r.SpanDecodes
			rs.CachedBytes += r.CachedBytes
		}
	}

	bs := a.blocks.Stats()
	st.Fetch.Requests = bs.Requests + a.probe.requests.Load()
	st.Fetch.Bytes = bs.BytesFetched + a.probe.n.Load()
	st.Fetch.InFlightBytes = bs.InFlight
	if rs, ok := a.base.(interface{ RetryStats() fetch.RetryStats }); ok {
		r := rs.RetryStats()
		st.Fetch.Retries, st.Fetch.Resumes, st.Fetch.Stalls, st.Fetch.Timeouts = r.Retries, r.Resumes, r.Stalls, r.Timeouts
	}
	st.Cache.MemoryBytes = bs.CachedBytes + rs.CachedBytes
	st.Cache.MemoryLimitBytes = a.opts.CacheMem
	st.Cache.BlockHits, st.Cache.BlockMisses = bs.CacheHits, bs.CacheMisses
	st.Cache.SpanHits, st.Cache.SpanMisses, st.Cache.SpanDecodes = rs.SpanHits, rs.SpanMisses, rs.SpanDecodes
	st.Cache.DiskHits, st.Cache.DiskReadBytes = bs.DiskHits, bs.DiskBytes
	if a.disk != nil {
		st.Cache.DiskEnabled = true
		st.Cache.DiskUsedBytes = a.disk.Stats().UsedBytes
		st.Cache.DiskLimitBytes = a.opts.CacheDisk
	}
	if m := a.bg; m != nil {
		p := m.prog
		ms := &MaterializeStatus{Dir: m.dir}
		// Known before the counts: totals seen final are final.
		if ms.TotalsFinal = p.TotalsKnown.Load(); ms.TotalsFinal {
			ms.FilesTotal, ms.BytesTotal = p.FilesTotal.Load(), p.BytesTotal.Load()
		} else {
			ms.FilesTotal, ms.BytesTotal = m.seenFiles.Load(), m.seenBytes.Load()
		}
		ms.Files, ms.Bytes = p.Files.Load(), p.Bytes.Load()
		var requests int64
		ms.FetchedBytes, requests = m.Fetched()
		ms.Complete, ms.Error = m.State()
		switch {
		case ms.Complete:
			ms.Percent = 100
			ms.TotalsFinal = true
		case ms.TotalsFinal && ms.BytesTotal > 0:
			ms.Percent = min(100, 100*float64(ms.Bytes)/float64(ms.BytesTotal))
		}
		st.Materialize = ms
		st.Fetch.Requests += requests
		st.Fetch.Bytes += ms.FetchedBytes
		st.Cache.SpanDecodes += m.SpanDecodes()
	}
	return &st
}
