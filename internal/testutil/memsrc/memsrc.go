// Package memsrc is the in-memory source of tarmount's tests: an object
// over a byte slice with the methods of fetch.Source, that counts what it
// serves (requests, bytes, the range of each read, reads running at once)
// and can be slowed down, held at a gate, watched as reads start, or made
// to fail.
//
// It imports no tarmount package, so that package fetch's own tests can
// use it too: the identity type is a type parameter, and
// Source[fetch.Identity] is a fetch.Source. A Source is safe for
// concurrent use; set its exported fields before the first read.
package memsrc

import (
	"context"
	"io"
	"slices"
	"sync"
	"time"
)

// Source serves Data. The zero value of each hook field does nothing.
type Source[I any] struct {
	// set before the first read
	Data  []byte
	ID    I             // what Identity returns
	Delay time.Duration // per read
	// Gate, if non-nil, holds each read until it takes a token from it.
	Gate chan struct{}
	// Fail, if non-nil, is asked before each read; a non-nil error fails
	// the read with no bytes.
	Fail func(off int64) error
	// Started, if non-nil, receives the offset of each read as it starts.
	Started chan int64

	mu sync.Mutex
	// guarded by mu
	ranges    [][2]int64 // offset and length of each read, in start order
	taken     int        // ranges[:taken] were returned by TakeRanges
	bytes     int64      // bytes served
	active    int        // reads running now
	maxActive int
	cancelled int // reads that ended because their ctx did
	closed    bool
}

// New returns a Source of data with identity id.
func New[I any](data []byte, id I) *Source[I] { return &Source[I]{Data: data, ID: id} }

// ReadAt reads like io.ReaderAt: io.EOF when p reaches past the end. It
// honours ctx while it waits at the gate or sleeps.
func (s *Source[I]) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	s.mu.Lock()
	s.ranges = append(s.ranges, [2]int64{off, int64(len(p))})
	s.active++
	s.maxActive = max(s.maxActive, s.active)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.active--
		s.mu.Unlock()
	}()
	if s.Started != nil {
		s.Started <- off
	}
	if s.Gate != nil {
		select {
		case <-s.Gate:
		case <-ctx.Done():
			return 0, s.cancel(ctx)
		}
	}
	if s.Delay > 0 {
		t := time.NewTimer(s.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return 0, s.cancel(ctx)
		}
	}
	if s.Fail != nil {
		if err := s.Fail(off); err != nil {
			return 0, err
		}
	}
	if off >= int64(len(s.Data)) {
		return 0, io.EOF
	}
	n := copy(p, s.Data[off:])
	s.mu.Lock()
	s.bytes += int64(n)
	s.mu.Unlock()
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (s *Source[I]) cancel(ctx context.Context) error {
	s.mu.Lock()
	s.cancelled++
	s.mu.Unlock()
	return ctx.Err()
}

// Identity returns ID.
func (s *Source[I]) Identity() I { return s.ID }

// String returns "mem".
func (s *Source[I]) String() string { return "mem" }

// Close records that the source was closed; reads still work.
func (s *Source[I]) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	return nil
}

// Closed reports whether Close was called.
func (s *Source[I]) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Offsets returns the offsets of the reads so far, sorted.
func (s *Source[I]) Offsets() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	offs := make([]int64, len(s.ranges))
	for i, r := range s.ranges {
		offs[i] = r[0]
	}
	slices.Sort(offs)
	return offs
}

// TakeRanges returns the offset and length of each read since the last
// call, in the order they started.
func (s *Source[I]) TakeRanges() [][2]int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := slices.Clone(s.ranges[s.taken:])
	s.taken = len(s.ranges)
	return r
}

// Requests returns the number of reads so far.
func (s *Source[I]) Requests() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ranges)
}

// Bytes returns the bytes served so far.
func (s *Source[I]) Bytes() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes
}

// Stats returns the reads running now, the most that ran at once, and
// the reads that ended because their ctx was done.
func (s *Source[I]) Stats() (active, maxActive, cancelled int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active, s.maxActive, s.cancelled
}
