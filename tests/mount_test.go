// Package tests holds mount-level tests: the tarmount binary mounts real
// archives (made by GNU tar, bsdtar and Go) from a path and from a loopback
// HTTP server, and the mounted tree is compared with what tar -x extracts.
package tests

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/shaped"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// testMountName is the filesystem type of test mounts (fuse.tarmount-test),
// which scripts/test.sh detaches if a test leaves one behind.
const testMountName = "tarmount-test"

var binary string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tarmount-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binary = filepath.Join(dir, "tarmount")
	args := []string{"build", "-o", binary}
	if raceEnabled {
		args = append(args, "-race")
	}
	build := exec.Command("go", append(args, "../cmd/tarmount")...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build tarmount:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// needTools fails (under CI) or skips t when one of the commands is not
// installed.
func needTools(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			testutil.Missing(t, "%s is not installed", tool)
		}
	}
}

func needFUSE(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		testutil.Missing(t, "mount tests run as root")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		testutil.Missing(t, "no /dev/fuse")
	}
}

// syncBuffer collects a process's stderr while tests read it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// mounted is a running tarmount process.
type mounted struct {
	dir    string
	cmd    *exec.Cmd
	stderr *syncBuffer
	exited chan struct{}
	err    error // set when exited is closed
}

// mount runs `tarmount URL MNT args...` on a new directory and waits until
// it says it is ready. The cleanup sends SIGTERM and checks that the
// process unmounts and exits cleanly.
func mount(t testing.TB, url string, args ...string) *mounted {
	t.Helper()
	return mountAt(t, t.TempDir(), url, args...)
}

// mountAt is mount on the directory dir.
func mountAt(t testing.TB, dir, url string, args ...string) *mounted {
	t.Helper()
	m := startMount(t, nil, dir, url, args...)
	if err := m.waitReady(3 * time.Minute); err != nil {
		t.Fatal(err)
	}
	return m
}

// startMount runs `tarmount URL DIR args...`, through the command wrap
// (which must exec the rest of its arguments) when it is not empty, and
// returns at once. The cleanup stops it as mount's does.
func startMount(t testing.TB, wrap []string, dir, url string, args ...string) *mounted {
	t.Helper()
	m := &mounted{dir: dir, stderr: &syncBuffer{}, exited: make(chan struct{})}
	argv := append(append(append([]string(nil), wrap...), binary, url, m.dir, "--mount-name", testMountName), args...)
	m.cmd = exec.Command(argv[0], argv[1:]...)
	m.cmd.Stderr = m.stderr
	m.cmd.Env = append(os.Environ(), "GORACE=exitcode=66 halt_on_error=1")
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		m.err = m.cmd.Wait()
		close(m.exited)
	}()
	t.Cleanup(func() {
		m.stop(t)
		if t.Failed() {
			t.Logf("tarmount %s log:\n%s", m.dir, m.stderr)
		}
	})
	return m
}

// waitReady waits until m says it is ready, and fails if it exits first
// or takes longer than limit.
func (m *mounted) waitReady(limit time.Duration) error {
	deadline := time.After(limit)
	for !strings.Contains(m.stderr.String(), "msg=ready") {
		select {
		case <-m.exited:
			return fmt.Errorf("tarmount exited before the mount was ready: %v\n%s", m.err, m.stderr)
		case <-deadline:
			return fmt.Errorf("mount not ready after %v:\n%s", limit, m.stderr)
		case <-time.After(10 * time.Millisecond):
		}
	}
	return nil
}

func (m *mounted) stop(t testing.TB) {
	select {
	case <-m.exited:
		return
	default:
	}
	m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.exited:
		if m.err != nil {
			t.Errorf("tarmount exited with %v after SIGTERM:\n%s", m.err, m.stderr)
		}
		if isMounted(m.dir) {
			t.Errorf("%s still mounted after tarmount exited", m.dir)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("tarmount did not exit 30 s after SIGTERM:\n%s", m.stderr)
		m.cmd.Process.Kill()
		<-m.exited
	}
	if isMounted(m.dir) {
		exec.Command("umount", "-l", m.dir).Run()
	}
}

// isMounted reports whether a FUSE filesystem is mounted on dir (a bind
// mount of dir on itself, which some tests make, does not count).
func isMounted(dir string) bool {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) <= 4 || f[4] != dir {
			continue
		}
		// The filesystem type follows the "-" that ends the optional fields.
		for i := 5; i+1 < len(f); i++ {
			if f[i] == "-" {
				if strings.HasPrefix(f[i+1], "fuse") {
					return true
				}
				break
			}
		}
	}
	return false
}

// serve serves dir over loopback HTTP and returns its base URL.
func serve(t *testing.T, dir string) (string, *shaped.Handler) {
	t.Helper()
	h := shaped.NewHandler(dir, shaped.Options{})
	srv := httptest.NewServer(h)
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	return srv.URL, h
}

// fixture is a corpus tree, an archive of it in a served directory, and
// the loopback HTTP server that serves it.
type fixture struct {
	work, src, archive string
	url                string // the archive over HTTP
	base               string // the server's base URL
	server             *shaped.Handler
}

// newFixture makes a corpus tree with opts, archives it as spec under the
// name file in a served directory, and serves that directory.
func newFixture(t *testing.T, opts corpus.TreeOptions, spec tarbuild.Spec, file string) *fixture {
	t.Helper()
	f := &fixture{work: t.TempDir()}
	f.src = filepath.Join(f.work, "src")
	corpus.MakeTree(t, f.src, opts)
	served := filepath.Join(f.work, "served")
	if err := os.Mkdir(served, 0o755); err != nil {
		t.Fatal(err)
	}
	f.archive = filepath.Join(served, file)
	tarbuild.Archive(t, f.src, f.archive, spec)
	f.base, f.server = serve(t, served)
	f.url = f.base + "/" + file
	return f
}

// TestMountMatchesTarExtract mounts archives made by GNU tar, bsdtar and
// Go, uncompressed and with every gzip flavour, from a path and over HTTP,
// and compares every entry with the tree that GNU tar extracts.
func TestMountMatchesTarExtract(t *testing.T) {
	needFUSE(t)
	cases := []struct {
		spec tarbuild.Spec
		many int
	}{
		{tarbuild.Spec{Tool: "gnutar", Format: "gnu", Codec: "gzip"}, 0},
		{tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "none"}, 0},
		{tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "pigz"}, 12000},
		{tarbuild.Spec{Tool: "gnutar", Format: "ustar", Codec: "gzip-multi"}, 0},
		{tarbuild.Spec{Tool: "bsdtar", Format: "pax", Codec: "gzip"}, 0},
		{tarbuild.Spec{Tool: "bsdtar", Format: "ustar", Codec: "none"}, 0},
		{tarbuild.Spec{Tool: "go", Format: "pax", Codec: "gzip-multi"}, 0},
		{tarbuild.Spec{Tool: "go", Format: "gnu", Codec: "pigz"}, 0},
	}
	for _, tc := range cases {
		name := tc.spec.String()
		if tc.many > 0 {
			name += fmt.Sprintf("-%dfiles", tc.many)
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			opts := corpus.TreeOptionsFor(tc.spec)
			opts.Many = tc.many
			f := newFixture(t, opts, tc.spec, "archive"+tc.spec.Ext())
			ref := f.extracted(t)
			for _, url := range []string{f.archive, f.url} {
				m := libMount(t, url, libOptions(filepath.Join(f.work, "cache")))
				treecmp.Compare(t, ref, m.dir, treecmp.Options{MaxErrors: 20})
				m.stop(t)
			}
		})
	}
}

// TestRemountUsesSavedIndex checks that a second mount of the same archive
// loads the saved index instead of reading the archive again, that an
// index file can be given (--index), and that an index of another
// archive is refused.
func TestRemountUsesSavedIndex(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{NoBigFiles: true}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	work, src, url, base, h := f.work, f.src, f.url, f.base, f.server
	cache := filepath.Join(work, "cache")

	first := libMount(t, url, libOptions(cache))
	if !strings.Contains(first.log.String(), "msg=indexing") {
		t.Errorf("first mount did not index:\n%s", first.log)
	}
	first.stop(t)

	h.ResetStats()
	second := libMount(t, url, libOptions(cache))
	if strings.Contains(second.log.String(), "msg=indexing") {
		t.Errorf("second mount indexed again:\n%s", second.log)
	}
	if got, want := h.Stats().Bytes, int64(1); got > want {
		t.Errorf("second mount fetched %d bytes before any read, want at most %d (the identity probe)", got, want)
	}
	if data, err := os.ReadFile(filepath.Join(second.dir, corpus.PathReadme)); err != nil || len(data) == 0 {
		t.Errorf("read through remount: %v", err)
	}
	second.stop(t)

	libIndex(t, url, libOptions(filepath.Join(work, "other")))
	idx := savedIndex(t, filepath.Join(work, "other"))
	withIndex := libOptions(filepath.Join(work, "empty"))
	withIndex.IndexFile = idx
	third := libMount(t, url, withIndex)
	if strings.Contains(third.log.String(), "msg=indexing") {
		t.Errorf("mount with an index file indexed:\n%s", third.log)
	}
	third.stop(t)

	// The same index for another archive is refused (TestDamagedSavedIndex
	// checks tarmount's one-line error with --index).
	other := filepath.Join(filepath.Dir(f.archive), "b.tar.gz")
	tarbuild.Archive(t, src, other, tarbuild.Spec{Tool: "go", Format: "pax", Codec: "gzip"})
	withIndex.CacheDir = filepath.Join(work, "empty-b")
	if err := libStartErr(t, base+"/b.tar.gz", withIndex); !errors.Is(err, index.ErrIdentity) || !strings.Contains(err.Error(), "another version") {
		t.Errorf("mismatched index: got err %v; want a refusal naming the mismatch (index.ErrIdentity)", err)
	}
}

// TestCorruptSpanGivesEIO changes bytes of the served archive behind the
// server's back (same size, mtime and ETag) after the index was built: a
// read of the damaged span fails with EIO and never returns wrong bytes.
func TestCorruptSpanGivesEIO(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{NoSparse: true}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	work, src, archive := f.work, f.src, f.archive
	// The first mount builds and saves the index; its block cache still
	// holds the archive as streamed, so damage is read by a second mount
	// that loads the saved index and fetches spans anew (without the disk
	// cache, which holds the undamaged bytes under the unchanged identity).
	cache := filepath.Join(work, "cache")
	opts := libOptions(cache)
	opts.Span = 262144
	libMountWith(t, f.url, opts, libMountOptions{wait: true}).stop(t) // builds and saves the index

	st, err := os.Stat(archive)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	for _, frac := range []int{3, 5, 7} {
		data[len(data)*frac/10] ^= 0xff
	}
	if err := os.WriteFile(archive, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(archive, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}

	opts.CacheDisk = 0
	m := libMount(t, f.url, opts)
	if strings.Contains(m.log.String(), "msg=indexing") {
		t.Fatal("the second mount indexed the damaged archive instead of loading the saved index")
	}
	if !readTreeOrEIO(t, m.dir, src) {
		t.Error("no read failed with EIO after the archive was damaged")
	}
}

// readTreeOrEIO reads every regular file under mnt: each must give the
// bytes of the same file under src or fail with EIO. It reports whether
// any failed.
func readTreeOrEIO(t *testing.T, mnt, src string) (sawEIO bool) {
	t.Helper()
	filepath.Walk(mnt, func(p string, info os.FileInfo, err error) error {
		if err != nil || !info.Mode().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(mnt, p)
		got, err := os.ReadFile(p)
		if err != nil {
			if !errors.Is(err, syscall.EIO) {
				t.Errorf("%s: got %v, want EIO", rel, err)
			}
			sawEIO = true
			return nil
		}
		want, err := os.ReadFile(filepath.Join(src, rel))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: read returned wrong bytes", rel)
		}
		return nil
	})
	return sawEIO
}

// TestBadInputs checks that broken input fails at mount time with one clear
// line, without a panic or a hang, and leaves nothing mounted.
func TestBadInputs(t *testing.T) {
	needFUSE(t)
	work := t.TempDir()
	src := filepath.Join(work, "src")
	corpus.MakeTree(t, src, corpus.TreeOptions{NoBigFiles: true})
	good := filepath.Join(work, "good.tar.gz")
	tarbuild.Archive(t, src, good, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"})
	data, _ := os.ReadFile(good)
	write := func(name string, b []byte) string {
		p := filepath.Join(work, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	plain := filepath.Join(work, "good.tar")
	tarbuild.Archive(t, src, plain, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "none"})
	plainData, _ := os.ReadFile(plain)
	mnt := t.TempDir()
	cases := []struct {
		name, url, mountpoint, want string
	}{
		{"truncated gzip", write("trunc.tar.gz", data[:len(data)/2]), mnt, "truncated"},
		{"truncated tar", write("trunc.tar", plainData[:len(plainData)/2+700]), mnt, "truncated"},
		{"text", write("notes.txt", []byte("hello, this is not an archive\n")), mnt, "not a tar archive"},
		{"gzip of text", write("text.gz", tarbuild.Gzip(bytes.Repeat([]byte("text "), 1000))), mnt, "does not hold a tar archive"},
		{"empty", write("empty", nil), mnt, "empty"},
		{"missing file", filepath.Join(work, "nope.tar.gz"), mnt, "nope.tar.gz: no such file"},
		{"bad scheme", "ftp://example.com/a.tar", mnt, "ftp"},
		{"missing mountpoint", good, filepath.Join(work, "no-such-dir"), "mountpoint"},
		{"mountpoint is a file", good, good, "not a directory"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(binary, tc.url, tc.mountpoint, "--mount-name", testMountName, "--cache-dir", filepath.Join(work, "cache"))
			done := make(chan struct{})
			var out []byte
			var err error
			go func() {
				out, err = cmd.CombinedOutput()
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(time.Minute):
				cmd.Process.Kill()
				t.Fatal("tarmount hung on bad input")
			}
			if err == nil {
				t.Fatalf("got success, want an error; output:\n%s", out)
			}
			last := strings.TrimSpace(string(out))
			if i := strings.LastIndex(last, "\n"); i >= 0 {
				last = last[i+1:]
			}
			if !strings.HasPrefix(last, "tarmount: ") || !strings.Contains(strings.ToLower(last), tc.want) {
				t.Errorf("got last line %q, want a tarmount: error mentioning %q", last, tc.want)
			}
			if p := repeatedPart(last); p != "" {
				t.Errorf("got last line %q, which says %q twice, want each part once", last, p)
			}
			if strings.Contains(string(out), "goroutine ") || strings.Contains(string(out), "panic") {
				t.Errorf("output has a Go stack:\n%s", out)
			}
			if isMounted(tc.mountpoint) {
				t.Errorf("%s is mounted after a failed mount", tc.mountpoint)
			}
		})
	}
}

// repeatedPart returns a part of an error line, as ": " separates them,
// that the line holds more than once ("mount m: fs: mount m: fs: ..."
// holds "mount m" and "fs" twice), or "".
func repeatedPart(line string) string {
	seen := make(map[string]bool)
	for _, p := range strings.Split(line, ": ") {
		if seen[p] {
			return p
		}
		seen[p] = true
	}
	return ""
}

// TestMountpointInUse checks that mounting over a live mount is refused,
// in a message that says each part once.
func TestMountpointInUse(t *testing.T) {
	needFUSE(t)
	work := t.TempDir()
	src := filepath.Join(work, "src")
	corpus.MakeTree(t, src, corpus.TreeOptions{NoBigFiles: true})
	archive := filepath.Join(work, "a.tar")
	tarbuild.Archive(t, src, archive, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "none"})
	m := mount(t, archive, "--cache-dir", filepath.Join(work, "cache"))
	out, err := exec.Command(binary, archive, m.dir, "--mount-name", testMountName, "--cache-dir", filepath.Join(work, "cache")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "already mounted") {
		t.Errorf("second mount on a live mountpoint: err %v, output %q; want it refused", err, out)
	}
	outLines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := outLines[len(outLines)-1]
	if p := repeatedPart(last); p != "" {
		t.Errorf("second mount on a live mountpoint: got %q, which says %q twice, want each part once", last, p)
	}
	if _, err := os.Stat(filepath.Join(m.dir, corpus.PathReadme)); err != nil {
		t.Errorf("first mount damaged: %v", err)
	}
}

// TestNonemptyMountpoint: a mount over a directory that holds something
// warns, naming it, and mounts; --nonempty mounts without the warning.
func TestNonemptyMountpoint(t *testing.T) {
	needFUSE(t)
	work := t.TempDir()
	archive := filepath.Join(work, "a.tar")
	if err := os.WriteFile(archive, tarbuild.Tar(tarbuild.Member{Name: "f", Body: "in the archive"}), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		warn bool
	}{{nil, true}, {[]string{"--nonempty"}, false}} {
		dir := filepath.Join(t.TempDir(), "mnt")
		os.Mkdir(dir, 0o755)
		if err := os.WriteFile(filepath.Join(dir, "hidden"), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
		m := startMount(t, nil, dir, archive, append([]string{"--cache-dir", filepath.Join(work, "cache")}, tc.args...)...)
		if err := m.waitReady(time.Minute); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dir, "f")); err != nil || string(b) != "in the archive" {
			t.Errorf("%v: the mount does not serve the archive: %q, %v", tc.args, b, err)
		}
		log := m.stderr.String()
		warned := strings.Contains(log, "mountpoint is not empty") && strings.Contains(log, "path="+dir)
		if warned != tc.warn {
			t.Errorf("%v: warned %v, want %v:\n%s", tc.args, warned, tc.warn, log)
		}
		m.stop(t)
	}
}

// TestParallelReads reads random ranges of the big files through the mount
// from 64 goroutines at once, with O_DIRECT for half of them so that the
// reads reach tarmount instead of the page cache, and compares every byte.
func TestParallelReads(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	src := f.src
	// A small span and cache so that spans are decoded, evicted and
	// decoded again while other readers wait for them.
	opts := libOptions(filepath.Join(f.work, "cache"))
	opts.Span, opts.CacheMem = 131072, 1048576
	m := libMount(t, f.url, opts)
	files := []string{corpus.PathBig, corpus.PathBig2, corpus.PathSparse}
	want := map[string][]byte{}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		want[f] = data
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			name := files[g%len(files)]
			flags := os.O_RDONLY
			if g%2 == 0 {
				flags |= syscall.O_DIRECT
			}
			f, err := os.OpenFile(filepath.Join(m.dir, name), flags, 0)
			if err != nil {
				errs <- err
				return
			}
			defer f.Close()
			data := want[name]
			// O_DIRECT wants aligned buffers, offsets and lengths.
			buf := alignedBuffer(64 << 10)
			for i := 0; i < 40; i++ {
				off := int64((g*7919+i*104729)%(len(data)/4096)) * 4096
				n, err := f.ReadAt(buf, off)
				if err != nil && !errors.Is(err, io.EOF) {
					errs <- fmt.Errorf("%s at %d: %w", name, off, err)
					return
				}
				if !bytes.Equal(buf[:n], data[off:off+int64(n)]) {
					errs <- fmt.Errorf("%s at %d: wrong bytes", name, off)
					return
				}
			}
		}(g)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// alignedBuffer returns n bytes aligned to 4096, as O_DIRECT needs.
func alignedBuffer(n int) []byte {
	b := make([]byte, n+4096)
	off := 4096 - int(uintptr(unsafe.Pointer(&b[0]))%4096)
	return b[off%4096 : off%4096+n]
}

// TestNoRangeServer mounts an archive from a server that ignores Range
// requests: the archive keeps one whole copy under its cache directory,
// says so, and the tree matches tar -x; a copy larger than the disk cache
// is refused.
func TestNoRangeServer(t *testing.T) {
	needFUSE(t)
	f := newFixture(t, corpus.TreeOptions{NoBigFiles: true}, tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}, "a.tar.gz")
	data, err := os.ReadFile(f.archive)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"whole"`)
		w.Header().Set("Content-Length", strconv.Itoa(len(data)))
		w.Write(data) // 200 with the whole object, whatever the Range
	}))
	defer srv.Close()
	ref := f.extracted(t)
	m := libMount(t, srv.URL+"/a.tar.gz", libOptions(filepath.Join(f.work, "cache")))
	if !strings.Contains(m.log.String(), "ignores range requests") {
		t.Errorf("no message about the server ignoring ranges:\n%s", m.log)
	}
	treecmp.Compare(t, ref, m.dir, treecmp.Options{MaxErrors: 20})
	m.stop(t)

	// The copy counts in CacheDisk: one that does not fit is refused.
	small := libOptions(filepath.Join(f.work, "cache2"))
	small.CacheDisk = int64(len(data) / 2)
	if err := libStartErr(t, srv.URL+"/a.tar.gz", small); err == nil || !strings.Contains(err.Error(), "--cache-disk") {
		t.Errorf("archive larger than the disk cache: got %v, want an error naming --cache-disk", err)
	}
}
