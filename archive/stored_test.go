package archive

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// TestCopyStored: the archive as stored comes whole and unchanged, over
// loopback HTTP in many blocks (each asked for once) and from a local
// path; a missing object is an error.
func TestCopyStored(t *testing.T) {
	ctx := context.Background()
	served := t.TempDir()
	obj := make([]byte, 3<<20+12345)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range obj {
		obj[i] = byte(rng.Uint32())
	}
	path := filepath.Join(served, "a.tar.gz")
	if err := os.WriteFile(path, obj, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := newFlakyServer(t, served)
	opts := testOptions(t, nil)
	opts.CacheDisk = 0
	opts.BlockSize = 256 << 10
	for _, c := range []struct{ name, url string }{{"http", srv.url + "/a.tar.gz"}, {"path", path}} {
		t.Run(c.name, func(t *testing.T) {
			before := srv.requests.Load()
			var got bytes.Buffer
			n, err := CopyStored(ctx, &got, c.url, opts)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(obj)) || !bytes.Equal(got.Bytes(), obj) {
				t.Fatalf("got %d bytes (equal: %v), want the %d stored", n, bytes.Equal(got.Bytes(), obj), len(obj))
			}
			// The open (with the first bytes), then each block once: the
			// blocks ramp up to BlockSize, so no more than one request
			// per 64 KiB.
			if c.name == "http" {
				if reqs, most := srv.requests.Load()-before, int64(len(obj)>>16)+2; reqs < 3 || reqs > most {
					t.Errorf("got %d requests, want between 3 and %d", reqs, most)
				}
			}
		})
	}
	if _, err := CopyStored(ctx, &bytes.Buffer{}, srv.url+"/missing.tar.gz", opts); err == nil {
		t.Error("CopyStored of a missing object: no error")
	}
}
