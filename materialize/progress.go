package materialize

import "sync/atomic"

// Progress counts what a job has done, for progress reports. Every field
// is updated atomically by the job and may be read at any time.
type Progress struct {
	// FilesTotal and BytesTotal are the regular files and their stored
	// data bytes that the job writes; zero until known (a one-pass
	// extraction knows them only at its end).
	FilesTotal, BytesTotal atomic.Int64
	// Files and Bytes are what has been written so far (Bytes counts
	// stored data: holes of sparse files are not written).
	Files, Bytes atomic.Int64
	// Input is the bytes of the archive as stored that were decoded so
	// far, when the job decodes spans itself; Decoded is the bytes of tar
	// stream those spans held.
	Input, Decoded atomic.Int64
	// Entries is the number of entries (every type) placed under DIR.
	Entries atomic.Int64
	// Kept and Removed count, in a DIR that held another tree (an
	// upgrade, or Options.Overwrite), the entries found as the archive
	// has them and left alone (Kept; their metadata was corrected in
	// place when only it differed: Retouched), and the names DIR had and
	// the archive lacks, removed with what they held.
	Kept, Retouched, Removed atomic.Int64
	// TotalsKnown is set once FilesTotal and BytesTotal hold what the
	// job writes (a reader that sees it sees them).
	TotalsKnown atomic.Bool
}
