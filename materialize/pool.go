package materialize

import (
	"context"
	"sync"
	"sync/atomic"
)

// writerPool is the job's writers: a fixed number of goroutines that run
// the tasks submitted to them (a piece of file data, a file to finish, a
// special file to make), and the job's first error.
//
// It owns the job's context: the first failing task cancels it (fail), as
// do Close and the end of Run's ctx; every blocking step of the job waits
// on it. Once it is cancelled, no task starts: those still queued and
// those submitted later are dropped (or submit fails with the error).
//
// submit, fail and failure are safe for concurrent use; start and stop are
// called once each, by Open and Close. err is written once, under errOnce,
// before the context is cancelled, and read atomically: a task may fail
// while another goroutine asks for the job's failure.
type writerPool struct {
	// set once, by newWriterPool and start
	ctx    context.Context
	cancel context.CancelFunc
	tasks  chan func() error // nil until start

	workers sync.WaitGroup
	pending sync.WaitGroup // submitted tasks not done
	errOnce sync.Once
	err     atomic.Pointer[error] // first task error; set before ctx is cancelled
}

// init gives the pool the job's context; no writer runs until start.
func (p *writerPool) init() {
	p.ctx, p.cancel = context.WithCancel(context.Background())
}

// start starts n writers, whose queue holds 4 tasks per writer.
func (p *writerPool) start(n int) {
	p.tasks = make(chan func() error, 4*n)
	for range n {
		p.workers.Go(p.worker)
	}
}

func (p *writerPool) worker() {
	for fn := range p.tasks {
		if p.ctx.Err() == nil {
			if err := fn(); err != nil {
				p.fail(err)
			}
		}
		p.pending.Done()
	}
}

// fail records err as the job's error unless one was recorded, and
// cancels the job.
func (p *writerPool) fail(err error) {
	p.errOnce.Do(func() {
		p.err.Store(&err)
		p.cancel()
	})
}

// submit queues fn for a writer. Once the job has failed it fails, or
// queues fn to be dropped (select picks either when both are ready).
func (p *writerPool) submit(fn func() error) error {
	p.pending.Add(1)
	select {
	case p.tasks <- fn:
		return nil
	case <-p.ctx.Done():
		p.pending.Done()
		return p.failure()
	}
}

// wait returns once every submitted task is done (or dropped).
func (p *writerPool) wait() { p.pending.Wait() }

// failure returns the job's first error, or its context's.
func (p *writerPool) failure() error {
	if err := p.err.Load(); err != nil {
		return *err
	}
	return p.ctx.Err()
}

// stop cancels the job and waits for the writers to return; tasks still
// queued are dropped. It is called once, by Close.
func (p *writerPool) stop() {
	p.cancel()
	if p.tasks != nil {
		close(p.tasks)
		p.workers.Wait()
	}
}
