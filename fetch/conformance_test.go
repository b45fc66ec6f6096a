package fetch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// store keeps objects in one kind of backend, for testSourceConformance.
type store interface {
	// put stores data under name, replacing what is there the way that
	// backend replaces objects, and returns the URL that opens it.
	put(t *testing.T, name string, data []byte) string
	// remove deletes the object name.
	remove(t *testing.T, name string)
	// url returns the URL of name, whether it exists or not.
	url(name string) string
	// display is what Source.String returns for the URL of name.
	display(name string) string
	// options returns what Open needs to reach the backend.
	options() Options
}

// sourceKind is a backend that the conformance suite runs against.
type sourceKind struct {
	name     string
	newStore func(t *testing.T) store
	// detectsChange: a read of an object replaced or deleted after Open
	// fails with ErrChanged or ErrNotFound. When false (local files), the
	// open descriptor keeps reading the version it opened; either way a
	// read never returns bytes of another version.
	detectsChange bool
	hasETag       bool
}

// sourceKinds are every kind of source, each over a real backend: files,
// a loopback HTTP server, and a loopback S3-compatible server (skipped
// when versitygw is not installed).
var sourceKinds = []sourceKind{
	{name: "file", newStore: newFileStore(false)},
	{name: "file-url", newStore: newFileStore(true)},
	{name: "http", newStore: newHTTPStore, detectsChange: true, hasETag: true},
	{name: "s3", newStore: newS3Store, detectsChange: true, hasETag: true},
}

func TestSourceConformance(t *testing.T) {
	for _, kind := range sourceKinds {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			testSourceConformance(t, kind)
		})
	}
}

// testSourceConformance checks the Source contract against one backend:
// identity, exact bytes for edge and random ranges, io.EOF at the end,
// ErrNotFound, and that an object replaced or deleted after Open never
// yields bytes of another version.
func testSourceConformance(t *testing.T, kind sourceKind) {
	st := kind.newStore(t)
	open := func(t *testing.T, url string) (Source, error) {
		src, err := Open(t.Context(), url, st.options())
		if err == nil {
			t.Cleanup(func() { src.Close() })
		}
		return src, err
	}
	mustOpen := func(t *testing.T, url string) Source {
		t.Helper()
		src, err := open(t, url)
		require.NoError(t, err)
		return src
	}

	for _, size := range []int{0, 1, 4095, 4096, 4097, 100_003} {
		t.Run(fmt.Sprintf("read/size=%d", size), func(t *testing.T) {
			t.Parallel()
			data := randomBytes(size, uint64(size))
			src := mustOpen(t, st.put(t, fmt.Sprintf("read-%d.tar", size), data))
			require.Equal(t, int64(size), src.Identity().Size)
			ctx := t.Context()
			checkRanges(t, func(p []byte, off int64) (int, error) { return src.ReadAt(ctx, p, off) }, data, 4096, uint64(size))

			n, err := src.ReadAt(ctx, nil, 0)
			require.NoError(t, err)
			require.Zero(t, n)
			_, err = src.ReadAt(ctx, make([]byte, 1), -1)
			require.ErrorContains(t, err, "negative offset")
		})
	}

	t.Run("identity", func(t *testing.T) {
		t.Parallel()
		url := st.put(t, "identity.tar", randomBytes(1000, 1))
		a, b := mustOpen(t, url), mustOpen(t, url)
		id := a.Identity()
		require.Equal(t, normalize(id), normalize(b.Identity()), "two opens of one version")
		require.Equal(t, id.Key(), b.Identity().Key())
		require.Equal(t, int64(1000), id.Size)
		require.False(t, id.LastModified.IsZero(), "LastModified")
		if kind.hasETag {
			require.NotEmpty(t, id.ETag)
		}
		require.Equal(t, st.display("identity.tar"), a.String())
		name, err := Name(url)
		require.NoError(t, err)
		require.Equal(t, a.String(), name, "Name gives the String without opening")

		st.put(t, "identity.tar", randomBytes(1000, 2))
		c := mustOpen(t, url)
		if kind.hasETag {
			require.NotEqual(t, id.Key(), c.Identity().Key(), "a new version must have a new key")
		}
	})

	t.Run("not found", func(t *testing.T) {
		t.Parallel()
		src, err := open(t, st.url("missing.tar"))
		require.ErrorIs(t, err, ErrNotFound)
		require.Nil(t, src)
		require.False(t, IsRetryable(err))
	})

	changes := []struct {
		name   string
		change func(t *testing.T, name string)
		want   error
	}{
		{"replaced", func(t *testing.T, name string) { st.put(t, name, randomBytes(64<<10, 99)) }, ErrChanged},
		{"replaced by a longer one", func(t *testing.T, name string) { st.put(t, name, randomBytes(80<<10, 99)) }, ErrChanged},
		{"replaced by a shorter one", func(t *testing.T, name string) { st.put(t, name, randomBytes(100, 99)) }, ErrChanged},
		{"deleted", func(t *testing.T, name string) { st.remove(t, name) }, ErrNotFound},
	}
	for i, ch := range changes {
		t.Run(ch.name, func(t *testing.T) {
			t.Parallel()
			name := fmt.Sprintf("change-%d.tar", i)
			data := randomBytes(64<<10, 1)
			src := mustOpen(t, st.put(t, name, data))
			p := make([]byte, 1000)
			_, err := src.ReadAt(t.Context(), p, 0)
			require.NoError(t, err)

			ch.change(t, name)
			for _, off := range []int64{0, 5000, 64<<10 - 1000} {
				clear(p)
				n, err := src.ReadAt(t.Context(), p, off)
				if !kind.detectsChange {
					require.NoError(t, err)
					require.True(t, bytes.Equal(data[off:off+int64(n)], p[:n]), "bytes of the opened version")
					continue
				}
				if !errors.Is(err, ErrChanged) && !errors.Is(err, ErrNotFound) {
					t.Fatalf("read at %d: got %v, want %v", off, err, ch.want)
				}
				require.ErrorIs(t, err, ch.want)
				require.Zero(t, n)
				require.Equal(t, make([]byte, len(p)), p, "no bytes of the new version")
				require.False(t, IsRetryable(err), "IsRetryable(%v)", err)
				require.ErrorContains(t, err, fmt.Sprintf("%s at %d", st.display(name), off))
			}
		})
	}

	t.Run("parallel reads", func(t *testing.T) {
		t.Parallel()
		data := randomBytes(1<<20, 7)
		src := mustOpen(t, st.put(t, "parallel.tar", data))
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for g := range 16 {
			wg.Go(func() {
				r := rand.New(rand.NewPCG(uint64(g), 3))
				for range 20 {
					off := r.Int64N(int64(len(data)))
					p := make([]byte, 1+r.IntN(100<<10))
					n, err := src.ReadAt(t.Context(), p, off)
					if err != nil && !(err == io.EOF && off+int64(n) == int64(len(data))) {
						errs <- fmt.Errorf("read at %d: %w", off, err)
						return
					}
					if !bytes.Equal(data[off:off+int64(n)], p[:n]) {
						errs <- fmt.Errorf("read at %d: wrong bytes", off)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})

	t.Run("canceled", func(t *testing.T) {
		t.Parallel()
		src := mustOpen(t, st.put(t, "canceled.tar", randomBytes(100, 5)))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := src.ReadAt(ctx, make([]byte, 10), 0)
		require.ErrorIs(t, err, context.Canceled)
		require.False(t, IsRetryable(err))
	})
}

// fileStore keeps objects as files in a directory; put replaces a file by
// renaming a new one over it, as deployments do.
type fileStore struct {
	dir    string
	prefix string // "file://" for file URLs, "" for plain paths
}

func newFileStore(asURL bool) func(t *testing.T) store {
	return func(t *testing.T) store {
		s := &fileStore{dir: t.TempDir()}
		if asURL {
			s.prefix = "file://"
		}
		return s
	}
}

func (s *fileStore) put(t *testing.T, name string, data []byte) string {
	t.Helper()
	tmp, err := os.CreateTemp(s.dir, ".tmp-")
	require.NoError(t, err)
	require.NoError(t, tmp.Close())
	require.NoError(t, os.WriteFile(tmp.Name(), data, 0o644))
	require.NoError(t, os.Rename(tmp.Name(), filepath.Join(s.dir, name)))
	return s.url(name)
}

func (s *fileStore) remove(t *testing.T, name string) {
	require.NoError(t, os.Remove(filepath.Join(s.dir, name)))
}

func (s *fileStore) url(name string) string     { return s.prefix + filepath.Join(s.dir, name) }
func (s *fileStore) display(name string) string { return filepath.Join(s.dir, name) }
func (s *fileStore) options() Options           { return Options{} }

// httpStore serves objects from a loopback HTTP server; each put makes a
// new version with a new ETag and Last-Modified.
type httpStore struct {
	base string

	mu sync.Mutex
	// guarded by mu
	objects map[string]*object
	version int
}

func newHTTPStore(t *testing.T) store {
	s := &httpStore{objects: map[string]*object{}}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	s.base = srv.URL
	return s
}

func (s *httpStore) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	o := s.objects[strings.TrimPrefix(r.URL.Path, "/")]
	s.mu.Unlock()
	if o == nil {
		http.NotFound(w, r)
		return
	}
	o.ServeHTTP(w, r)
}

func (s *httpStore) put(t *testing.T, name string, data []byte) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.version++
	o := s.objects[name]
	if o == nil {
		o = &object{}
		s.objects[name] = o
	}
	o.set(func(o *object) {
		o.data = data
		o.etag = fmt.Sprintf(`"v%d"`, s.version)
		o.modtime = testModTime.Add(time.Duration(s.version) * time.Second)
	})
	return s.url(name)
}

func (s *httpStore) remove(t *testing.T, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.objects, name)
}

func (s *httpStore) url(name string) string     { return s.base + "/" + name }
func (s *httpStore) display(name string) string { return s.url(name) }
func (s *httpStore) options() Options           { return Options{} }
