package fetch

import (
	"context"
	"fmt"
	"io"
	"time"
)

// The object's last bytes, asked for beside the open's identity request
// (Options.Suffix). A suffix range ("bytes=-65536") needs no size, so it
// goes out at the same time as the request that learns the size: a
// reader of the object's end that follows the open (an index embedded at
// the end) finds them without a round trip of its own.
//
// The request carries no precondition, since the identity is not known
// when it is sent: its reply is used only when it names the identity
// the open pinned (size, and ETag or version id, else Last-Modified);
// otherwise, or when it fails or is late, a read asks for its bytes as
// usual, under the precondition.

// SuffixRange is the Range header of the request for the object's last
// ProbeBytes (Options.Suffix).
var SuffixRange = fmt.Sprintf("bytes=-%d", ProbeBytes)

const (
	// tailTimeout bounds the tail's request: it is a hint, never worth
	// a read's whole budget.
	tailTimeout = 10 * time.Second
	// tailWait is how long a read waits for a tail still on its way
	// (sent with the open, it is normally in by then) before it asks
	// for its bytes itself.
	tailWait = 2 * time.Second
)

// tailReply is what the tail's request got: its bytes, where they lie,
// and whether the reply was of the version with identity id.
type tailReply struct {
	data    []byte
	off     int64
	matches func(id Identity) bool
}

// tailFetch is the tail's request in flight, and then its reply.
type tailFetch struct {
	done   chan struct{}
	cancel context.CancelFunc
	reply  tailReply // set before done is closed
	err    error
}

// startTail sends get on a goroutine of its own, under tailTimeout; the
// caller calls close. The request outlives ctx, which may be only the
// open's (an attempt of OpenWithRetry ends with its open): close ends it.
func startTail(ctx context.Context, get func(ctx context.Context) (tailReply, error)) *tailFetch {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), tailTimeout)
	t := &tailFetch{done: make(chan struct{}), cancel: cancel}
	go func() {
		defer close(t.done)
		t.reply, t.err = get(ctx)
	}()
	return t
}

// readAt copies the object's bytes at off into p from the tail, when it
// holds them all and came from the version id, and reports whether it
// did. Only a read within the object's last ProbeBytes, where the tail
// lies, waits for a tail on its way, and at most tailWait: every other
// read goes its own way at once.
func (t *tailFetch) readAt(ctx context.Context, p []byte, off int64, id Identity) bool {
	if t == nil || len(p) == 0 || off < id.Size-ProbeBytes || off+int64(len(p)) > id.Size {
		return false
	}
	timer := time.NewTimer(tailWait)
	defer timer.Stop()
	select {
	case <-t.done:
	case <-timer.C:
		return false
	case <-ctx.Done():
		return false
	}
	r := t.reply
	if t.err != nil || r.matches == nil || !r.matches(id) || off < r.off || off+int64(len(p)) > r.off+int64(len(r.data)) {
		return false
	}
	copy(p, r.data[off-r.off:])
	return true
}

// close stops the tail's request and waits for its goroutine.
func (t *tailFetch) close() {
	if t == nil {
		return
	}
	t.cancel()
	<-t.done
}

// readTailBody reads the body of a reply to SuffixRange whose
// Content-Range header is crh; it returns the bytes and where they lie
// in an object of cr.size bytes.
func readTailBody(body io.Reader, crh string) ([]byte, contentRange, error) {
	cr, ok := parseContentRange(crh)
	if !ok || cr.size < 0 || cr.first < 0 || cr.last != cr.size-1 || cr.last-cr.first+1 > ProbeBytes {
		return nil, cr, fmt.Errorf("bad Content-Range %q for %s", crh, SuffixRange)
	}
	data := make([]byte, cr.last-cr.first+1)
	if _, err := io.ReadFull(body, data); err != nil {
		return nil, cr, err
	}
	return data, cr, nil
}
