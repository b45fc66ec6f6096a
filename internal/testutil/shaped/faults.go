package shaped

import (
	"errors"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
)

// Fault is what a Faults does to one request.
type Fault int

const (
	FaultNone  Fault = iota // served as it should be
	Fault503                // 503 Service Unavailable
	Fault429                // 429 Too Many Requests, Retry-After: 1
	Fault500                // 500 Internal Server Error
	FaultCut                // a 206 cut at a random point of its body: the connection is closed
	FaultStall              // a 206 that stops at a random point of its body until the client leaves
	FaultHang               // no reply at all, not even a status line, until the client leaves
	numFaults
)

func (f Fault) String() string {
	if f < 0 || f >= numFaults {
		return "fault(" + strconv.Itoa(int(f)) + ")"
	}
	return [...]string{"none", "503", "429", "500", "cut", "stall", "hang"}[f]
}

// Faults injects faults into the requests of a Handler (Options.Faults),
// the way a failing object store does. Ranged GETs other than "bytes=0-0"
// (the identity probe of a mount, spared so that a mount can start) get
// first the faults given to Force, in order, then a fault drawn with the
// rates of SetRates. Every request but the stats gets the fault of
// SetAlways, unless it is FaultNone. Hung and stalled requests return
// when their client leaves or at Release.
//
// The zero value is not usable: make one with NewFaults. It is safe for
// concurrent use.
type Faults struct {
	release     chan struct{}
	releaseOnce sync.Once
	always      atomic.Int32 // a Fault
	injected    [numFaults]atomic.Int64

	mu sync.Mutex
	// guarded by mu
	rng    *rand.Rand
	rates  [numFaults]float64
	forced []Fault
}

// NewFaults returns a Faults that injects nothing yet; seed makes its
// draws (which requests fail, where bodies are cut) reproducible.
func NewFaults(seed uint64) *Faults {
	return &Faults{release: make(chan struct{}), rng: rand.New(rand.NewPCG(seed, seed^0x5eed))}
}

// SetRates sets the probability of each fault per ranged GET; nil or an
// empty map injects none. The probabilities should add up to at most 1.
func (f *Faults) SetRates(rates map[Fault]float64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.rates = [numFaults]float64{}
	for k, p := range rates {
		if k > FaultNone && k < numFaults {
			f.rates[k] = p
		}
	}
}

// Force makes the next ranged GETs fail as listed, whatever the rates.
func (f *Faults) Force(k ...Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forced = append(f.forced, k...)
}

// SetAlways gives every request the fault k, the identity probe
// included; FaultNone ends it.
func (f *Faults) SetAlways(k Fault) { f.always.Store(int32(k)) }

// Injected returns how many requests got fault k.
func (f *Faults) Injected(k Fault) int64 {
	if k <= FaultNone || k >= numFaults {
		return 0
	}
	return f.injected[k].Load()
}

// Release makes every hung or stalled request return, now and later; call
// it before closing the server, whose Close waits for its handlers.
func (f *Faults) Release() { f.releaseOnce.Do(func() { close(f.release) }) }

// Wrap returns next with the faults of f injected into its requests, as
// they are into a Handler's with Options.Faults: for a proxy in front of
// another server.
func (f *Faults) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if f.inject(w, r, next.ServeHTTP) {
			panic(http.ErrAbortHandler)
		}
	})
}

// inject answers r with the fault it draws, or passes it to serve (with
// a writer that breaks the body for a cut or a stall); abort reports a
// reply that must end abruptly.
func (f *Faults) inject(w http.ResponseWriter, r *http.Request, serve func(http.ResponseWriter, *http.Request)) (abort bool) {
	switch k := f.pick(r); k {
	case Fault503:
		http.Error(w, "busy", http.StatusServiceUnavailable)
	case Fault429:
		w.Header().Set("Retry-After", "1")
		http.Error(w, "slow down", http.StatusTooManyRequests)
	case Fault500:
		http.Error(w, "broken", http.StatusInternalServerError)
	case FaultHang:
		f.wait(r)
		return true
	case FaultCut, FaultStall:
		bw := &brokenWriter{ResponseWriter: w, f: f, r: r, stall: k == FaultStall}
		serve(bw, r)
		return bw.broken
	default:
		serve(w, r)
	}
	return false
}

// pick chooses the fault of r.
func (f *Faults) pick(r *http.Request) Fault {
	k := Fault(f.always.Load())
	if k == FaultNone {
		if rng := r.Header.Get("Range"); r.Method != http.MethodGet || rng == "" || rng == "bytes=0-0" {
			return FaultNone
		}
		f.mu.Lock()
		if len(f.forced) > 0 {
			k, f.forced = f.forced[0], f.forced[1:]
		} else {
			x := f.rng.Float64()
			for c := FaultNone + 1; c < numFaults; c++ {
				if x < f.rates[c] {
					k = c
					break
				}
				x -= f.rates[c]
			}
		}
		f.mu.Unlock()
	}
	if k > FaultNone && k < numFaults {
		f.injected[k].Add(1)
	}
	return k
}

// cutAt draws where a body of n bytes breaks: 0 <= at < n.
func (f *Faults) cutAt(n int) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.rng.IntN(n)
}

// wait blocks until the client of r leaves or Release.
func (f *Faults) wait(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-f.release:
	}
}

// errBroken ends the copy of a body that a fault broke.
var errBroken = errors.New("shaped: body broken by an injected fault")

// brokenWriter passes a reply through until a random point of a 206 body,
// then stalls there (FaultStall) or not, and fails every later write. The
// handler then aborts the reply (http.ErrAbortHandler), which closes the
// connection (HTTP/1.1) or resets the stream (HTTP/2).
type brokenWriter struct {
	http.ResponseWriter
	f      *Faults
	r      *http.Request
	stall  bool
	armed  bool // a 206 with a body: break it
	at     int  // body bytes to send before the break
	sent   int
	broken bool
}

func (w *brokenWriter) WriteHeader(code int) {
	if cl, err := strconv.Atoi(w.Header().Get("Content-Length")); err == nil && code == http.StatusPartialContent && cl > 1 {
		w.at = w.f.cutAt(cl)
		w.armed = true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *brokenWriter) Write(p []byte) (int, error) {
	switch {
	case w.broken:
		return 0, errBroken
	case !w.armed || w.sent+len(p) <= w.at:
		n, err := w.ResponseWriter.Write(p)
		w.sent += n
		return n, err
	}
	n, _ := w.ResponseWriter.Write(p[:w.at-w.sent])
	w.sent += n
	http.NewResponseController(w.ResponseWriter).Flush()
	w.broken = true
	if w.stall {
		w.f.wait(w.r)
	}
	return n, errBroken
}

func (w *brokenWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
