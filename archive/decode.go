package archive

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/tarmount/tarmount/index"
)

// The decode pass. A stream-only archive is read from its decoded copy
// (decoded.go). When the index is known but the copy is not there (a
// published or given index on a fresh machine, a saved index whose copy
// was removed), the index serves the tree at once, and the decode pass
// streams the archive once in the background to write the copy again,
// through the first pass's code (pass, decodedWriter). Reads of its
// spans wait until the copy holds them (waitingCopy); once the pass ends
// the copy is committed under its name, where later mounts find it.
//
// The pass starts with Start (a mount), or else with the first read that
// needs the copy (a cat); Close stops it and waits for it. A failed pass
// is not started again: the reads that need what it did not write fail
// with its error.

// errClosed fails the reads of a decoded copy that the Archive's Close
// stopped, or that started after it.
var errClosed = errors.New("archive closed")

// local is what reads the spans of a stream-only archive: its decoded
// copy, or the copy that the decode pass writes; nil for other archives
// and before the first pass wrote one.
func (a *Archive) local() io.ReaderAt {
	switch {
	case a.decoded != nil:
		return a.decoded
	case a.copyW != nil:
		return waitingCopy{w: a.copyW, start: a.startDecode}
	}
	return nil
}

// startDecode starts the decode pass, unless it has started or there is
// none to run. It is safe for concurrent use; after Close, it fails the
// copy's readers instead.
func (a *Archive) startDecode() {
	if a.copyW == nil {
		return
	}
	a.decodeMu.Lock()
	defer a.decodeMu.Unlock()
	if a.decodeDone != nil {
		return
	}
	done := make(chan struct{})
	a.decodeDone = done
	if a.decodeClosed {
		a.copyW.fail(errClosed)
		close(done)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	a.cancelDecode = cancel
	a.log.Info("the decoded copy of this stream-only archive is missing: decoding the archive again while the index serves",
		"src", a.String(), "path", a.decodedPath(), "index", a.from)
	go func() {
		defer close(done)
		err := a.decode(ctx)
		if err == nil {
			return
		}
		a.decodeErr = err
		a.copyW.fail(fmt.Errorf("%w: %w", index.ErrPassFailed, err))
		if ctx.Err() == nil {
			a.log.Error("decoding the archive again failed: reads of its decoded copy fail", "src", a.String(), "err", err)
		}
	}()
}

// decode runs the decode pass: it writes the decoded copy, and commits it
// when the archive decoded to the stream the index describes.
func (a *Archive) decode(ctx context.Context) error {
	w := a.copyW
	defer w.discard()
	start := time.Now()
	ix, err := a.pass(ctx, w, nil, nil, nil, true, nil)
	if err != nil {
		return fmt.Errorf("decode %s: %w", a, err)
	}
	if err := a.checkStream(ix); err != nil {
		return err
	}
	if err := w.commit(a.ix.TarSize); err != nil {
		return fmt.Errorf("decode %s: %w", a, err)
	}
	a.log.Info("decoded copy written", "path", a.decodedPath(), "len", a.ix.TarSize,
		"elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}

// checkStream fails unless ix, which a pass that decoded the archive
// again built, describes the tar stream of the archive's index.
func (a *Archive) checkStream(ix *index.Index) error {
	if !sameStream(ix, a.ix) {
		return fmt.Errorf("decode %s: %w: the archive decodes to another tar stream than its index (from %s) describes",
			a, index.ErrCorrupt, a.from)
	}
	return nil
}

// sameStream reports whether got, the index the decode pass built, and
// want, the archive's, describe the same tar stream: the same size, and
// the same digests when their spans are the same (an index built with
// another span size is checked by the reads).
func sameStream(got, want *index.Index) bool {
	if got.TarSize != want.TarSize {
		return false
	}
	if len(got.Checkpoints) != len(want.Checkpoints) || len(got.Digests) != len(want.Digests) {
		return true
	}
	for i := range got.Checkpoints {
		if got.Checkpoints[i].Out != want.Checkpoints[i].Out {
			return true
		}
	}
	for i := range got.Digests {
		if got.Digests[i] != want.Digests[i] {
			return false
		}
	}
	return true
}

// Decoding reports whether the archive's decoded copy is being written
// again by a decode pass, or was: the index was there, its copy was not.
func (a *Archive) Decoding() bool { return a.copyW != nil }

// DecodeDone is closed when the decode pass ends; nil before it started
// and without one.
func (a *Archive) DecodeDone() <-chan struct{} {
	a.decodeMu.Lock()
	defer a.decodeMu.Unlock()
	return a.decodeDone
}

// DecodeErr is why the decode pass failed; nil while it runs, when it
// succeeded, and without one.
func (a *Archive) DecodeErr() error {
	done := a.DecodeDone()
	if done == nil {
		return nil
	}
	select {
	case <-done:
		return a.decodeErr
	default:
		return nil
	}
}

// stopDecode stops the decode pass, if it runs, and waits for it; one
// asked for later fails at once. It is idempotent.
func (a *Archive) stopDecode() {
	a.decodeMu.Lock()
	a.decodeClosed = true
	done, cancel := a.decodeDone, a.cancelDecode
	a.decodeMu.Unlock()
	if cancel != nil {
		cancel()
	}
	if done != nil {
		<-done
	}
}
