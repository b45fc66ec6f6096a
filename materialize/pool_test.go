package materialize

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
)

// TestWriterPool submits tasks to one writer, which runs them in order:
// every task runs until the first fails; that error is the pool's, and
// the tasks queued or submitted after it are dropped.
func TestWriterPool(t *testing.T) {
	errA, errB := errors.New("a"), errors.New("b")
	tests := []struct {
		name    string
		tasks   []error // what each task returns
		wantRun int
		wantErr error
	}{
		{"none", nil, 0, nil},
		{"all succeed", []error{nil, nil, nil}, 3, nil},
		{"first error wins", []error{nil, errA, nil, errB}, 2, errA},
		{"fails at once", []error{errB, nil}, 1, errB},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p writerPool
			p.init()
			p.start(1)
			var ran atomic.Int32
			for _, err := range tt.tasks {
				p.submit(func() error { ran.Add(1); return err })
			}
			p.wait()
			if got := int(ran.Load()); got != tt.wantRun {
				t.Errorf("got %d tasks run, want %d", got, tt.wantRun)
			}
			if got := p.failure(); got != tt.wantErr {
				t.Errorf("got error %v, want %v", got, tt.wantErr)
			}
			if tt.wantErr != nil {
				// Queued or refused, a task submitted after the failure
				// never runs.
				if got := p.submit(func() error { ran.Add(1); return nil }); got != nil && got != tt.wantErr {
					t.Errorf("submit after the failure: got %v, want nil or %v", got, tt.wantErr)
				}
				p.wait()
				if got := int(ran.Load()); got != tt.wantRun {
					t.Errorf("after a late submit: got %d tasks run, want %d", got, tt.wantRun)
				}
			}
			p.stop()
		})
	}
}

// TestWriterPoolCancel cancels the pool while tasks are queued behind a
// running one: the queued ones are dropped, wait returns, and the pool's
// error is the context's.
func TestWriterPoolCancel(t *testing.T) {
	for _, writers := range []int{1, 3} {
		t.Run(fmt.Sprintf("writers=%d", writers), func(t *testing.T) {
			var p writerPool
			p.init()
			p.start(writers)
			release := make(chan struct{})
			var ran atomic.Int32
			for range writers {
				p.submit(func() error { <-release; return nil })
			}
			for range 2 * writers {
				p.submit(func() error { ran.Add(1); return nil })
			}
			p.cancel()
			close(release)
			p.wait()
			if got := ran.Load(); got != 0 {
				t.Errorf("got %d queued tasks run after cancel, want 0", got)
			}
			if got := p.failure(); !errors.Is(got, context.Canceled) {
				t.Errorf("got error %v, want %v", got, context.Canceled)
			}
			p.stop()
		})
	}
}
