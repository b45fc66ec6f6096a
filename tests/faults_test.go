package tests

import (
	"bytes"
	"errors"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// flakyRates are the faults of a flaky server: 5% of ranged GETs
// answered 503, 3% cut in the middle of the body.
var flakyRates = map[shaped.Fault]float64{shaped.Fault503: 0.05, shaped.FaultCut: 0.03}

// serveFaulty serves dir on 127.0.0.1 through a shaped.Faults that
// injects nothing until told.
func serveFaulty(t *testing.T, dir string) (string, *shaped.Faults) {
	t.Helper()
	f := shaped.NewFaults(3)
	h := shaped.NewHandler(dir, shaped.Options{Faults: f})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		f.Release() // hung requests return: srv.Close waits for them
		srv.Close()
		h.Close()
	})
	return srv.URL, f
}

// readAll reads every regular file below dir and calls check with its
// path relative to dir and what the read returned.
func readAll(t *testing.T, dir string, check func(rel string, data []byte, err error)) {
	t.Helper()
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		check(rel, data, err)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readWithin runs read in a goroutine and fails the test if it does not
// return within limit: a hang must not hang the test too.
func readWithin(t *testing.T, limit time.Duration, read func() error) (time.Duration, error) {
	t.Helper()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- read() }()
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(limit):
		t.Fatalf("read still blocked after %v", limit)
		return 0, nil
	}
}

// readDirect reads the first 4 KiB of path with O_DIRECT, so that exactly
// one read reaches tarmount, with no page-cache readahead before it.
func readDirect(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_DIRECT, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf := alignedBuffer(4096)
	n, err := f.ReadAt(buf, 0)
	if err == io.EOF {
		err = nil
	}
	return buf[:n], err
}

// TestMountFaults serves a .tar.gz through a server that fails, cuts and
// hangs, and checks that the mount never returns wrong bytes and never
// hangs: reads through 503s and cut connections return the exact bytes; a
// dead or silent server makes a read fail with EIO within the read timeout;
// the mount works again once the server recovers; and an archive replaced
// while mounted makes reads of spans not yet cached fail, never return
// bytes of the new archive.
func TestMountFaults(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	base, h := serveFaulty(t, filepath.Dir(f.archive))
	url := base + "/" + filepath.Base(f.archive)
	cache := filepath.Join(f.work, "cache")
	const readTimeout = 3 * time.Second
	// No disk cache: every mount must read through the faulty server, not
	// from the blocks an earlier mount kept.
	opts := libOptions(cache)
	opts.CacheDisk, opts.ReadTimeout = 0, readTimeout

	want := func(rel string) []byte {
		t.Helper()
		data, err := os.ReadFile(filepath.Join(f.src, rel))
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	readme := corpus.PathReadme

	// 1. The index pass, then reads of every file, through 503s and cuts.
	// Small spans make many range requests; the second mount loads the
	// saved index, so that its reads fetch spans instead of finding them
	// in the block cache of the index pass.
	h.SetRates(flakyRates)
	h.Force(shaped.Fault503, shaped.FaultCut)
	spans := opts
	spans.Span = 262144
	first := libMount(t, url, spans)
	if !strings.Contains(first.log.String(), "msg=indexing") {
		t.Fatalf("first mount did not index:\n%s", first.log)
	}
	first.stop(t)

	h.Force(shaped.Fault503, shaped.FaultCut, shaped.FaultCut)
	m := libMount(t, url, opts)
	files := 0
	readAll(t, m.dir, func(rel string, data []byte, err error) {
		files++
		if err != nil {
			t.Errorf("%s: %v", rel, err)
		} else if !bytes.Equal(data, want(rel)) {
			t.Errorf("%s: wrong bytes through faults", rel)
		}
	})
	if files < 10 {
		t.Fatalf("read only %d files", files)
	}
	m.stop(t)
	if !strings.Contains(m.log.String(), "msg=retry") {
		t.Errorf("no retry logged although faults were injected:\n%s", m.log)
	}
	t.Logf("injected %d 503s and %d cuts over %d files", h.Injected(shaped.Fault503), h.Injected(shaped.FaultCut), files)

	// 2. A dead server, then a silent one: EIO within the read timeout.
	// 3. The server recovers: the same file reads (failed spans are not
	// cached).
	h.SetRates(nil)
	m = libMount(t, url, opts)
	readmePath := filepath.Join(m.dir, readme)
	bound := readTimeout + 10*time.Second // slack for a loaded machine and the race detector
	for _, mode := range []shaped.Fault{shaped.Fault500, shaped.FaultHang} {
		h.SetAlways(mode)
		elapsed, err := readWithin(t, time.Minute, func() error {
			_, err := readDirect(readmePath)
			return err
		})
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("%v: O_DIRECT read: got %v, want EIO", mode, err)
		}
		if elapsed > bound {
			t.Errorf("%v: EIO after %v, want within the read timeout %v (+ slack)", mode, elapsed, readTimeout)
		}
		// A buffered read may reach the mount more than once (readahead,
		// then the page itself); it fails too, and does not hang.
		_, err = readWithin(t, time.Minute, func() error {
			_, err := os.ReadFile(readmePath)
			return err
		})
		if !errors.Is(err, syscall.EIO) {
			t.Errorf("%v: buffered read: got %v, want EIO", mode, err)
		}
		t.Logf("%v: EIO after %v", mode, elapsed)
	}
	h.SetAlways(shaped.FaultNone)
	got, err := readDirect(readmePath)
	if err != nil {
		t.Fatalf("read after the server recovered: %v", err)
	}
	if w := want(readme); !bytes.Equal(got, w[:min(len(w), len(got))]) || len(got) != min(len(w), 4096) {
		t.Error("read after the server recovered: wrong bytes")
	}
	readAll(t, m.dir, func(rel string, data []byte, err error) {
		if err != nil {
			t.Errorf("%s after the server recovered: %v", rel, err)
		} else if !bytes.Equal(data, want(rel)) {
			t.Errorf("%s after the server recovered: wrong bytes", rel)
		}
	})
	m.stop(t)
	if !regexp.MustCompile(`msg="fetch retries" .* timeouts=[1-9]`).MatchString(m.log.String()) {
		t.Errorf("no read timed out while the server hung:\n%s", m.log)
	}

	// 4. The archive is replaced while mounted (new content, new ETag):
	// spans cached before still read; the others fail with ESTALE (a
	// stale file handle, as NFS says of a file replaced on the server)
	// and never return bytes of the new archive.
	m = libMount(t, url, opts)
	if got, err := os.ReadFile(filepath.Join(m.dir, readme)); err != nil || !bytes.Equal(got, want(readme)) {
		t.Fatalf("read before the replacement: %v", err)
	}
	replaceArchive(t, f.archive)
	failed := 0
	readAll(t, m.dir, func(rel string, data []byte, err error) {
		switch {
		case err != nil && errors.Is(err, syscall.ESTALE):
			failed++
		case err != nil:
			t.Errorf("%s after the replacement: got %v, want ESTALE", rel, err)
		case !bytes.Equal(data, want(rel)):
			t.Errorf("%s after the replacement: bytes that are not the first archive's", rel)
		}
	})
	if failed == 0 {
		t.Error("no read failed after the archive was replaced")
	}
	m.stop(t)
	log := m.log.String()
	if !strings.Contains(log, "source changed") {
		t.Errorf("no error names the changed source:\n%s", log)
	}
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "msg=retry") && strings.Contains(line, "changed") {
			t.Errorf("a changed source was retried: %s", line)
		}
	}
}

// replaceArchive overwrites the archive with different bytes of the same
// size and a later mtime, so that the server sends a new ETag.
func replaceArchive(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range data {
		data[i] ^= 0xff
	}
	tmp := path + ".new"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	if err := os.Chtimes(tmp, later, later); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}
