package index

import "context"

// ReadTrace holds hooks that a Reader calls during one read, as
// net/http/httptrace does for a request. A caller attaches it to the
// read's ctx with WithReadTrace.
type ReadTrace struct {
	// FetchWait, if not nil, is called when the read is about to wait for
	// a span whose compressed bytes are still being fetched (or, for a
	// plain tar, for the bytes themselves): the read needs no CPU until
	// they arrive. The function it returns is called when that wait ends,
	// before the read waits for the span's decode or returns.
	FetchWait func() (resume func())
}

type readTraceKey struct{}

// WithReadTrace returns ctx carrying t, for reads through a Reader.
func WithReadTrace(ctx context.Context, t *ReadTrace) context.Context {
	return context.WithValue(ctx, readTraceKey{}, t)
}

// readTraceFrom returns the ReadTrace of ctx, or nil.
func readTraceFrom(ctx context.Context) *ReadTrace {
	t, _ := ctx.Value(readTraceKey{}).(*ReadTrace)
	return t
}
