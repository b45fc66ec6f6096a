package archive

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tarmount/tarmount/fetch"
	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil/s3server"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// publishLocal builds the index of the archive at path (a local file) and
// publishes it beside it, as tarmount index PATH --publish does.
func publishLocal(t *testing.T, path string) string {
	t.Helper()
	a, err := OpenIndexed(context.Background(), path, testOptions(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	to, err := a.Publish(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := path + SidecarSuffix; to != want {
		t.Fatalf("published at %q, want %q", to, want)
	}
	st, err := os.Stat(to)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm()&0o044 != 0o044 {
		t.Errorf("published index mode %v, want readable by all (0644 under the umask)", st.Mode().Perm())
	}
	return to
}

// TestPublishedIndex serves an archive over HTTP with its index published
// beside it, built from the local copy it was served from: a machine with
// an empty cache uses it (no pass), unless told not to look; one for
// another version of the archive is ignored; an index given by URL is
// used like a file.
func TestPublishedIndex(t *testing.T) {
	ctx := context.Background()
	served := t.TempDir()
	tree := testTree(30)
	archivePath := filepath.Join(served, "a.tar.gz")
	if err := os.WriteFile(archivePath, tarGz(t, tree), 0o644); err != nil {
		t.Fatal(err)
	}
	sidecar := publishLocal(t, archivePath)
	if err := os.MkdirAll(filepath.Join(served, "idx"), 0o755); err != nil {
		t.Fatal(err)
	}
	data, _ := os.ReadFile(sidecar)
	if err := os.WriteFile(filepath.Join(served, "idx", "given.idx"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := newFlakyServer(t, served)
	url := srv.url + "/a.tar.gz"
	size := int64(len(tarGz(t, tree)))
	for _, tc := range []struct {
		name string
		opts func(o *Options)
		from string
	}{
		{"published", nil, FromSidecar},
		{"not looked for", func(o *Options) { o.NoSidecar = true }, FromBuilt},
		{"given by URL", func(o *Options) { o.IndexFile = srv.url + "/idx/given.idx" }, FromFile},
		{"rebuilt", func(o *Options) { o.Rebuild = true }, FromBuilt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			logBuf := newSyncBuffer()
			o := testOptions(t, logBuf) // an empty cache
			if tc.opts != nil {
				tc.opts(&o)
			}
			a, err := Open(ctx, url, o)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if tc.from != FromBuilt {
				if a.Index() == nil {
					t.Fatalf("got no index at open, want one %s; log:\n%s", tc.from, logBuf)
				}
				if got, _ := a.Fetched(); got > size/4 {
					t.Errorf("open fetched %d bytes of the %d-byte archive, want no pass", got, size)
				}
			}
			if err := a.Build(ctx); err != nil {
				t.Fatal(err)
			}
			if a.IndexFrom() != tc.from {
				t.Errorf("got an index from %q, want from %q; log:\n%s", a.IndexFrom(), tc.from, logBuf)
			}
			var got bytes.Buffer
			if err := a.Cat(ctx, &got, "d3/f008.txt"); err != nil || !bytes.Equal(got.Bytes(), tree["d3/f008.txt"]) {
				t.Errorf("cat: got %d bytes (err %v), want %d", got.Len(), err, len(tree["d3/f008.txt"]))
			}
			if tc.from == FromSidecar && !strings.Contains(logBuf.String(), "copy=true") {
				t.Errorf("the log does not say the index was built from a copy of the archive:\n%s", logBuf)
			}
		})
	}

	t.Run("published, then saved", func(t *testing.T) {
		o := testOptions(t, nil)
		a, err := Open(ctx, url, o)
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
		// A remount finds the published index saved in its cache.
		logBuf := newSyncBuffer()
		o.Logger = slog.New(slog.NewTextHandler(logBuf, &slog.HandlerOptions{Level: slog.LevelDebug}))
		if a, err = Open(ctx, url, o); err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if a.IndexFrom() != FromCache || strings.Contains(logBuf.String(), SidecarSuffix) {
			t.Errorf("got an index from %q, want the saved one and no look for the published one; log:\n%s", a.IndexFrom(), logBuf)
		}
	})

	t.Run("another version", func(t *testing.T) {
		other := testTree(31)
		if err := os.WriteFile(archivePath, tarGz(t, other), 0o644); err != nil {
			t.Fatal(err)
		}
		logBuf := newSyncBuffer()
		a, err := OpenIndexed(ctx, url, testOptions(t, logBuf))
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		if a.IndexFrom() != FromBuilt {
			t.Errorf("got an index from %q, want one built for this version", a.IndexFrom())
		}
		if n := strings.Count(logBuf.String(), "published index is for another version"); n != 1 {
			t.Errorf("got %d log lines about the published index of another version, want 1:\n%s", n, logBuf)
		}
	})

	t.Run("given by URL, another version", func(t *testing.T) {
		o := testOptions(t, nil)
		o.IndexFile = srv.url + "/idx/given.idx"
		_, err := Open(ctx, url, o)
		if !errors.Is(err, index.ErrIdentity) {
			t.Errorf("got %v, want index.ErrIdentity", err)
		}
	})
}

// TestSidecarAskedWithTheOpen: the published index is asked for while
// the archive is opened, not after: the server holds the archive's first
// request until the sidecar's arrives, which fails the open if the two
// were made one after the other.
func TestSidecarAskedWithTheOpen(t *testing.T) {
	served := t.TempDir()
	if err := os.WriteFile(filepath.Join(served, "a.tar.gz"), tarGz(t, testTree(3)), 0o644); err != nil {
		t.Fatal(err)
	}
	files := http.FileServer(http.Dir(served))
	asked := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasSuffix(r.URL.Path, SidecarSuffix):
			once.Do(func() { close(asked) })
		case r.URL.Path == "/a.tar.gz":
			select {
			case <-asked:
			case <-time.After(5 * time.Second):
				http.Error(w, "the sidecar was not asked for while the archive opened", http.StatusInternalServerError)
				return
			}
		}
		files.ServeHTTP(w, r)
	}))
	defer srv.Close()
	o := testOptions(t, nil)
	o.Retries = 0
	a, err := Open(context.Background(), srv.URL+"/a.tar.gz", o)
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
}

// TestPublishS3 publishes an index beside an archive in a real
// S3-compatible server, and a machine with an empty cache mounts the
// archive with it; an http(s) archive cannot be published to.
func TestPublishS3(t *testing.T) {
	ctx := context.Background()
	srv := s3server.ForTest(t, s3server.Options{})
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	t.Setenv("AWS_PROFILE", "")
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	tree := testTree(20)
	srv.CreateBucket(t, "archives")
	srv.Put(t, "archives", "rt/a.tar.gz", tarGz(t, tree))
	url := "s3://archives/rt/a.tar.gz"
	s3opts := func() Options {
		o := testOptions(t, nil)
		o.EndpointURL = srv.URL
		return o
	}
	a, err := OpenIndexed(ctx, url, s3opts())
	if err != nil {
		t.Fatal(err)
	}
	to, err := a.Publish(ctx)
	a.Close()
	if err != nil {
		t.Fatal(err)
	}
	if to != url+SidecarSuffix {
		t.Errorf("published at %q, want %q", to, url+SidecarSuffix)
	}
	b, err := OpenIndexed(ctx, url, s3opts())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.IndexFrom() != FromSidecar {
		t.Errorf("got an index from %q, want the published one", b.IndexFrom())
	}
	var got bytes.Buffer
	if err := b.Cat(ctx, &got, "d0/f005.txt"); err != nil || !bytes.Equal(got.Bytes(), tree["d0/f005.txt"]) {
		t.Errorf("cat: got %d bytes (err %v)", got.Len(), err)
	}

	// Over http(s) there is nothing to write with.
	served := t.TempDir()
	if err := os.WriteFile(filepath.Join(served, "a.tar.gz"), tarGz(t, tree), 0o644); err != nil {
		t.Fatal(err)
	}
	hs := newFlakyServer(t, served)
	h, err := OpenIndexed(ctx, hs.url+"/a.tar.gz", testOptions(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.Publish(ctx); !errors.Is(err, fetch.ErrNotWritable) {
		t.Errorf("publish over http: got %v, want fetch.ErrNotWritable", err)
	}
}

// TestOpenRoundTrips: opening an archive without any index costs the
// identity probe and the published index's GET, sent together; the
// archive's end is read for an embedded index only when its first byte
// says it may hold one (a zstd stream), and a published index found
// with the open is used without reading it at all. When the archive's
// name says zstd, the open asks for its end beside the probe
// (fetch.SuffixRange), and the search for an embedded index reads it
// from there: no request after the open's.
func TestOpenRoundTrips(t *testing.T) {
	// Random bytes: every archive is larger than the end that the
	// search for an embedded index reads.
	body := make([]byte, 300_000)
	rng := rand.NewChaCha8([32]byte{3, 4})
	rng.Read(body)
	raw := tarbuild.Go(t, tar.FormatPAX, tarbuild.Entry{Name: "a.bin", Body: body})
	for _, c := range []struct {
		name     string
		file     string
		obj      []byte
		publish  bool
		wantTail bool // the end of the archive is read after the open
		suffix   bool // the open asks for the end
	}{
		{"gzip", "a.tar", tarbuild.Gzip(raw), false, false, false},
		{"plain tar", "a.tar", raw, false, false, false},
		{"zstd", "a.tar", tarbuild.ZstdStream(raw), false, true, false},
		{"zstd, published index", "a.tar", tarbuild.ZstdStream(raw), true, false, false},
		{"zstd named so", "a.tar.zst", tarbuild.ZstdStream(raw), false, false, true},
		{"zstd named so, published index", "a.tar.zst", tarbuild.ZstdStream(raw), true, false, true},
		{"gzip named zstd", "a.tar.zst", tarbuild.Gzip(raw), false, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			served := t.TempDir()
			path := filepath.Join(served, c.file)
			if err := os.WriteFile(path, c.obj, 0o644); err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if c.publish {
				a, err := OpenIndexed(ctx, path, testOptions(t, nil))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := a.Publish(ctx); err != nil {
					t.Fatal(err)
				}
				a.Close()
			}
			files := http.FileServer(http.Dir(served))
			var mu sync.Mutex
			var ranges []string
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/"+c.file {
					mu.Lock()
					ranges = append(ranges, r.Header.Get("Range"))
					mu.Unlock()
				}
				files.ServeHTTP(w, r)
			}))
			defer srv.Close()
			a, err := Open(ctx, srv.URL+"/"+c.file, testOptions(t, nil))
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			if c.suffix {
				// Asked for beside the probe, it may still be on its way
				// when the open returns with a published index.
				deadline := time.Now().Add(10 * time.Second)
				for time.Now().Before(deadline) {
					mu.Lock()
					seen := slices.Contains(ranges, fetch.SuffixRange)
					mu.Unlock()
					if seen {
						break
					}
					time.Sleep(time.Millisecond)
				}
			}
			mu.Lock()
			defer mu.Unlock()
			probe, suffix, tail := false, false, false
			for _, r := range ranges {
				switch {
				case r == fetch.ProbeRange:
					probe = true
				case r == fetch.SuffixRange:
					suffix = true
				default:
					tail = tail || !strings.HasPrefix(r, "bytes=0-")
				}
			}
			if !probe || suffix != c.suffix || tail != c.wantTail {
				t.Errorf("got requests for %q while opening, want the probe, %s, and %s", ranges,
					map[bool]string{true: "the end with it", false: "nothing with it"}[c.suffix],
					map[bool]string{true: "the end after it", false: "nothing after it"}[c.wantTail])
			}
			if got, want := a.IndexFrom(), map[bool]string{true: FromSidecar, false: Building}[c.publish]; got != want {
				t.Errorf("got an index from %q, want %q", got, want)
			}
		})
	}
}
