package archive

import (
	"context"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/materialize"
)

// Tree is the archive as a read-only tree of entries: what a mount
// serves (it is an fs.Archive). The one a pass serves is also an
// fs.Growing until the pass ends.
type Tree interface {
	Entry(id index.EntryID) *index.Entry
	Children(dir index.EntryID) []index.Dirent
	Lookup(dir index.EntryID, name string) (index.EntryID, bool)
	Xattrs(id index.EntryID) []index.Xattr
	ReadAt(ctx context.Context, id index.EntryID, p []byte, off int64) (int, error)
	Len() int
}

// Tree returns the tree to serve, once Start (or Build) has returned:
// the pass's live tree while it runs, and after it, through the reader
// it opens; else the reader, or while a staging pass decodes the archive
// into the materialized directory, that directory (staging.go). With a
// materialization, every read through it is a foreground read, which the
// materialization yields to.
func (a *Archive) Tree() Tree {
	var gate *materialize.Gate
	if a.bg != nil {
		gate = a.bg.gate
	}
	switch {
	case a.live != nil && gate != nil:
		return gatedLive{a.live, gate, gateTrace(gate)}
	case a.live != nil:
		return a.live
	case a.stage != nil:
		return stagedTree{gatedReader{a.reader, gate, gateTrace(gate)}, a.stage}
	case gate != nil:
		return gatedReader{a.reader, gate, gateTrace(gate)}
	default:
		return a.reader
	}
}

// gatedReader marks every read of the archive through the mount as a
// foreground read, which background materialization yields to.
type gatedReader struct {
	*index.Reader
	gate  *materialize.Gate
	trace *index.ReadTrace
}

func (r gatedReader) ReadAt(ctx context.Context, id index.EntryID, p []byte, off int64) (int, error) {
	defer r.gate.Enter()()
	return r.Reader.ReadAt(index.WithReadTrace(ctx, r.trace), id, p, off)
}

// gateTrace returns the trace that tells gate when a read it marks waits
// for archive bytes in flight: the materialization may use the cores
// meanwhile.
func gateTrace(gate *materialize.Gate) *index.ReadTrace {
	return &index.ReadTrace{FetchWait: gate.FetchWait}
}

// gatedLive is gatedReader for a mount served during its index pass.
type gatedLive struct {
	*index.Live
	gate  *materialize.Gate
	trace *index.ReadTrace
}

func (r gatedLive) ReadAt(ctx context.Context, id index.EntryID, p []byte, off int64) (int, error) {
	defer r.gate.Enter()()
	return r.Live.ReadAt(index.WithReadTrace(ctx, r.trace), id, p, off)
}
