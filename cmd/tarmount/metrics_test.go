package main

import (
	"syscall"
	"testing"
	"time"

	tfs "github.com/tarmount/tarmount/fs"
)

// BenchmarkObserve is what the mount's FUSE hook costs per request on top
// of fs's BenchmarkRead/observer: a counter and a histogram.
func BenchmarkObserve(b *testing.B) {
	m := newMetrics(&statusSource{})
	b.ReportAllocs()
	for b.Loop() {
		m.observe(tfs.OpRead, 150*time.Microsecond, 0)
	}
}

func TestErrnoName(t *testing.T) {
	for _, tc := range []struct {
		errno syscall.Errno
		want  string
	}{{syscall.ENOENT, "ENOENT"}, {syscall.EIO, "EIO"}, {syscall.Errno(4000), "4000"}} {
		if got := errnoName(tc.errno); got != tc.want {
			t.Errorf("errnoName(%d): got %q, want %q", tc.errno, got, tc.want)
		}
	}
}
