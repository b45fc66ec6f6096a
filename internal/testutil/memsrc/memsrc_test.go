package memsrc

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
)

func TestSource(t *testing.T) {
	s := New([]byte("0123456789"), "id")
	p := make([]byte, 4)
	if n, err := s.ReadAt(t.Context(), p, 2); n != 4 || err != nil || string(p) != "2345" {
		t.Fatalf("ReadAt 2: got %d %v %q, want 4 <nil> 2345", n, err, p)
	}
	if n, err := s.ReadAt(t.Context(), p, 8); n != 2 || !errors.Is(err, io.EOF) {
		t.Fatalf("ReadAt 8: got %d %v, want 2 EOF", n, err)
	}
	if _, err := s.ReadAt(t.Context(), p, 10); !errors.Is(err, io.EOF) {
		t.Fatalf("ReadAt 10: got %v, want EOF", err)
	}
	if got, want := s.TakeRanges(), [][2]int64{{2, 4}, {8, 4}, {10, 4}}; !slices.Equal(got, want) {
		t.Errorf("TakeRanges: got %v, want %v", got, want)
	}
	if got := s.TakeRanges(); len(got) != 0 {
		t.Errorf("TakeRanges again: got %v, want none", got)
	}
	if s.Requests() != 3 || s.Bytes() != 6 {
		t.Errorf("got %d requests and %d bytes, want 3 and 6", s.Requests(), s.Bytes())
	}
	if got := s.Offsets(); !slices.Equal(got, []int64{2, 8, 10}) {
		t.Errorf("Offsets: got %v", got)
	}
	if s.Identity() != "id" || s.Closed() {
		t.Errorf("got identity %q closed %v, want id false", s.Identity(), s.Closed())
	}
	s.Close()
	if !s.Closed() {
		t.Error("Closed after Close: got false")
	}
}

func TestHooks(t *testing.T) {
	boom := errors.New("boom")
	s := New([]byte("data"), 0)
	s.Fail = func(off int64) error {
		if off == 1 {
			return boom
		}
		return nil
	}
	if _, err := s.ReadAt(t.Context(), make([]byte, 1), 1); !errors.Is(err, boom) {
		t.Errorf("Fail: got %v, want boom", err)
	}
	s.Gate, s.Started = make(chan struct{}), make(chan int64, 1)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() {
		_, err := s.ReadAt(ctx, make([]byte, 1), 0)
		done <- err
	}()
	if off := <-s.Started; off != 0 {
		t.Errorf("Started: got %d, want 0", off)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("read held at the gate: got %v, want context.Canceled", err)
	}
	if active, maxActive, cancelled := s.Stats(); active != 0 || maxActive != 1 || cancelled != 1 {
		t.Errorf("Stats: got %d %d %d, want 0 1 1", active, maxActive, cancelled)
	}
}
