package main

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestRateMeter: at a steady rate with bursts and a stall, the ETA
// follows the time left without jumping: within a third of it once the
// rate is known, and a 3 s stall moves it by seconds, not hours.
func TestRateMeter(t *testing.T) {
	const total, rate = 600 << 20, 20 << 20 // 30 s at 20 MiB/s
	r := rand.New(rand.NewPCG(1, 2))
	var m rateMeter
	start := time.Unix(1e9, 0)
	var done int64
	tick := 200 * time.Millisecond
	var etas []time.Duration
	for i := 0; done < total; i++ {
		now := start.Add(time.Duration(i) * tick)
		stalled := i >= 60 && i < 75 // 3 s without a byte at 12 s
		if i > 0 && !stalled {
			// Bursts: from nothing to twice the rate in a tick.
			done = min(total, done+int64(2*rate*tick.Seconds()*r.Float64()))
		}
		_, eta := m.update(now, done, total)
		if i < 5 {
			if eta >= 0 {
				t.Fatalf("tick %d: ETA %v before a second has passed, want unknown", i, eta)
			}
			continue
		}
		etas = append(etas, eta)
		left := time.Duration(float64(total-done) / rate * float64(time.Second))
		if i > 10 && !stalled && (eta < left*2/3-2*time.Second || eta > left*3/2+3*time.Second) {
			t.Errorf("tick %d: ETA %v, want about %v", i, eta, left)
		}
	}
	for i := 1; i < len(etas); i++ {
		if d := etas[i] - etas[i-1]; d > 3*time.Second {
			t.Errorf("the ETA jumped by %v in one tick (%v -> %v)", d, etas[i-1], etas[i])
		}
	}
}

func TestProgressLine(t *testing.T) {
	s := progressSample{phase: "reading archive", done: 30e6, total: 120e6, files: 12, members: 345}
	got := s.line(10e6, 9*time.Second+400*time.Millisecond)
	want := "reading archive  25%  30.0 MB of 120.0 MB  10.0 MB/s  ETA 9s  345 members read, 12 files"
	if got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	s.filesTotal, s.phase, s.members = 40, "writing", 0
	if got := s.line(0, -1); !strings.Contains(got, "ETA ?") || !strings.Contains(got, "12/40 files") {
		t.Errorf("got %q, want an unknown ETA and 12/40 files", got)
	}
}
