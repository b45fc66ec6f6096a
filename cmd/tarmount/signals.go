package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
)

// signalContext is signal.NotifyContext for SIGINT and SIGTERM that also
// tells which signal ended ctx: the one got returns, nil while none came.
// stop cancels ctx and restores the default handling, after which a
// second signal kills the process.
func signalContext(parent context.Context) (ctx context.Context, stop context.CancelFunc, got func() os.Signal) {
	ctx, cancel := context.WithCancel(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	var sig atomic.Value
	done := make(chan struct{})
	go func() {
		select {
		case s := <-ch:
			sig.Store(s) // before cancel: whoever sees ctx end sees s
			cancel()
		case <-done:
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			signal.Stop(ch)
			close(done)
		})
		cancel()
	}
	got = func() os.Signal {
		s, _ := sig.Load().(os.Signal)
		return s
	}
	return ctx, stop, got
}

// interruptedError is a command that a signal stopped before it was
// done: "CMD URL: interrupted", exit 128 plus the signal's number (130
// after SIGINT, 143 after SIGTERM).
type interruptedError struct {
	cmd, arg string
	sig      os.Signal
	err      error // what the command returned, wrapping context.Canceled
}

func (e *interruptedError) Error() string { return fmt.Sprintf("%s %s: interrupted", e.cmd, e.arg) }

func (e *interruptedError) Unwrap() error { return e.err }

// exitCode is 128 plus the signal's number.
func (e *interruptedError) exitCode() int {
	if s, ok := e.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 1
}

// interrupted turns err into an interruptedError when a signal came and
// err is the cancellation it caused; anything else it returns unchanged.
func interrupted(err error, cmd string, pos []string, got func() os.Signal) error {
	sig := got()
	if err == nil || sig == nil || !errors.Is(err, context.Canceled) {
		return err
	}
	arg := ""
	if len(pos) > 0 {
		arg = pos[0]
	}
	return &interruptedError{cmd: cmd, arg: arg, sig: sig, err: err}
}
