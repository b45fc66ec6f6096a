package fs

import (
	"context"
	"sync"
	"syscall"
	"testing"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/tarmount/tarmount/index"
)

func TestStatusXattr(t *testing.T) {
	status := []byte(`{"entries":3}`)
	with := newTestRoot(t, testArchive(), Options{Status: func() []byte { return status }})
	without := newTestRoot(t, testArchive(), Options{})
	tests := []struct {
		name      string
		root      *dirNode
		path      string // "" is the root
		size      int
		wantN     uint32
		wantErrno syscall.Errno
	}{
		{"root", with, "", 100, uint32(len(status)), 0},
		{"root-size", with, "", 0, uint32(len(status)), 0},
		{"root-too-small", with, "", 4, uint32(len(status)), syscall.ERANGE},
		{"below-root", with, "dir", 100, 0, syscall.ENODATA},
		{"no-status", without, "", 100, 0, syscall.ENODATA},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var n fusefs.NodeGetxattrer = tc.root
			if tc.path != "" {
				n = mustLookup(t, tc.root, tc.path).Operations().(fusefs.NodeGetxattrer)
			}
			dest := make([]byte, tc.size)
			got, errno := n.Getxattr(context.Background(), StatusXattr, dest)
			if errno != tc.wantErrno || got != tc.wantN {
				t.Fatalf("got (%d, %v), want (%d, %v)", got, errno, tc.wantN, tc.wantErrno)
			}
			if errno == 0 && tc.size > 0 && string(dest[:got]) != string(status) {
				t.Errorf("value: got %q, want %q", dest[:got], status)
			}
		})
	}
	// Not listed: copying the tree's xattrs must not copy it.
	dest := make([]byte, 1024)
	n, errno := with.Listxattr(context.Background(), dest)
	if errno != 0 || n != 0 {
		t.Errorf("listxattr of the root: got (%q, %v), want nothing", dest[:n], errno)
	}
}

// observation is one call of an ObserveFunc.
type observation struct {
	op    string
	errno syscall.Errno
}

type recorder struct {
	mu  sync.Mutex
	got []observation
}

func (r *recorder) observe(op string, d time.Duration, errno syscall.Errno) {
	if d < 0 {
		panic("negative duration")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, observation{op, errno})
}

// rawTree returns go-fuse's raw bridge over a tree of a, observed by
// observe unless it is nil, as Mount builds it.
func rawTree(a Archive, observe ObserveFunc) fuse.RawFileSystem {
	opts := Options{Observe: observe}
	raw := fusefs.NewNodeFS(newDirNode(newTree(a, opts), index.RootID), fuseOptions(opts))
	if observe != nil {
		raw = &observedFS{RawFileSystem: raw, observe: observe}
	}
	return raw
}

// openRaw looks name up in the root and opens it through raw, returning
// its node id and file handle.
func openRaw(t testing.TB, raw fuse.RawFileSystem, name string) (node, fh uint64) {
	t.Helper()
	var entry fuse.EntryOut
	if st := raw.Lookup(nil, &fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}, name, &entry); st != fuse.OK {
		t.Fatalf("lookup %s: %v", name, st)
	}
	var open fuse.OpenOut
	if st := raw.Open(nil, &fuse.OpenIn{InHeader: fuse.InHeader{NodeId: entry.NodeId}, Flags: syscall.O_RDONLY}, &open); st != fuse.OK {
		t.Fatalf("open %s: %v", name, st)
	}
	return entry.NodeId, open.Fh
}

// TestObserve sends requests to the raw bridge as the kernel does and
// checks that each is observed once, with its errno.
func TestObserve(t *testing.T) {
	var rec recorder
	raw := rawTree(testArchive(), rec.observe)
	node, fh := openRaw(t, raw, "big.bin")
	buf := make([]byte, 4096)
	if _, st := raw.Read(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: node}, Fh: fh, Size: 4096}, buf); st != fuse.OK {
		t.Fatalf("read: %v", st)
	}
	var entry fuse.EntryOut
	raw.Lookup(nil, &fuse.InHeader{NodeId: fuse.FUSE_ROOT_ID}, "nope", &entry)
	eio, eioFh := openRaw(t, raw, "eio.bin")
	raw.Read(nil, &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: eio}, Fh: eioFh, Size: 10}, buf)
	var attr fuse.AttrOut
	raw.GetAttr(nil, &fuse.GetAttrIn{InHeader: fuse.InHeader{NodeId: node}}, &attr)
	raw.Release(nil, &fuse.ReleaseIn{InHeader: fuse.InHeader{NodeId: node}, Fh: fh})

	want := []observation{
		{OpLookup, 0}, {OpOpen, 0}, {OpRead, 0},
		{OpLookup, syscall.ENOENT},
		{OpLookup, 0}, {OpOpen, 0}, {OpRead, syscall.EIO},
		{OpGetattr, 0}, {OpRelease, 0},
	}
	if len(rec.got) != len(want) {
		t.Fatalf("got %v, want %v", rec.got, want)
	}
	for i := range want {
		if rec.got[i] != want[i] {
			t.Errorf("observation %d: got %v, want %v", i, rec.got[i], want[i])
		}
	}
}

// BenchmarkRead reads 4 KiB of a file through the raw bridge, as the
// kernel's requests do, without and with an observer, to measure what the
// hook costs on the read path.
func BenchmarkRead(b *testing.B) {
	for _, bc := range []struct {
		name    string
		observe ObserveFunc
	}{
		{"no-observer", nil},
		{"observer", func(op string, d time.Duration, errno syscall.Errno) {}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			raw := rawTree(testArchive(), bc.observe)
			node, fh := openRaw(b, raw, "big.bin")
			buf := make([]byte, 4096)
			in := &fuse.ReadIn{InHeader: fuse.InHeader{NodeId: node}, Fh: fh, Size: 4096}
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for b.Loop() {
				if _, st := raw.Read(nil, in, buf); st != fuse.OK {
					b.Fatal(st)
				}
			}
		})
	}
}
