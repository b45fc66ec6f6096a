package index

// recentOutput keeps the latest decoded bytes of an index pass, so that
// a Live serves a member as soon as the pass has decoded it, without
// waiting for the checkpoint that completes its span.
//
// It is a ring over buf: it holds the decoded bytes [start, end) of the
// tar stream, end-start <= len(buf), the newest overwriting the oldest.
//
//	     start%len            end%len
//	         v                   v
//	buf: |...|=== held bytes ====|.........|   (or wrapped around)
//
// It is not safe for concurrent use: Live guards it with its mutex.
type recentOutput struct {
	buf        []byte // nil until the first write
	size       int    // len(buf) once allocated
	start, end int64  // decoded offsets held
}

// Bounds of the ring: twice the span, so that the bytes of the span being
// decoded and of the one before stay while the pass completes the next
// checkpoint; not more than a few blocks of memory for long spans.
const (
	minRecentBytes = 1 << 20
	maxRecentBytes = 16 << 20
)

func newRecentOutput(span int64) recentOutput {
	return recentOutput{size: int(min(max(2*span, minRecentBytes), maxRecentBytes))}
}

// write appends p, the decoded bytes at offset at. A write that does not
// follow the last one starts the ring afresh.
func (r *recentOutput) write(p []byte, at int64) {
	if r.size == 0 {
		return
	}
	if r.buf == nil {
		r.buf = make([]byte, r.size)
	}
	if at != r.end {
		r.start, r.end = at, at
	}
	if len(p) > r.size {
		skip := len(p) - r.size
		p = p[skip:]
		r.start = at + int64(skip)
		r.end = r.start
	}
	for len(p) > 0 {
		i := int(r.end % int64(r.size))
		n := copy(r.buf[i:], p)
		p = p[n:]
		r.end += int64(n)
	}
	r.start = max(r.start, r.end-int64(r.size))
}

// holds reports whether the ring holds the bytes [off, off+n).
func (r *recentOutput) holds(off, n int64) bool {
	return n > 0 && off >= r.start && off+n <= r.end
}

// readAt copies the held bytes at off into p, which holds must have
// allowed.
func (r *recentOutput) readAt(p []byte, off int64) {
	for len(p) > 0 {
		i := int(off % int64(r.size))
		n := copy(p, r.buf[i:])
		p = p[n:]
		off += int64(n)
	}
}

// release frees the ring's memory.
func (r *recentOutput) release() {
	r.buf, r.size = nil, 0
	r.start, r.end = 0, 0
}
