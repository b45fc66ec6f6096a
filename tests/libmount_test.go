package tests

import (
	"context"
	"log/slog"
	"os/exec"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/tarmount/tarmount/archive"
	tfs "github.com/tarmount/tarmount/fs"
)

// libMounted is an archive mounted in the test's own process through the
// library (archive and fs), as the binary mounts it but without its
// flags: for tests of the engine, not of the command line.
type libMounted struct {
	dir    string
	a      *archive.Archive
	server *fuse.Server
	log    *syncBuffer // the archive's and the mount's log, at debug level
}

// libOptions are the archive options of a test mount: the command line's
// defaults, with the cache in cache.
func libOptions(cache string) archive.Options {
	o := archive.DefaultOptions()
	o.CacheDir = cache
	return o
}

// libMount opens the archive at url with opts and mounts it on a new
// directory, ready when the mount answers (during the first pass when
// there is no index). The cleanup unmounts it and closes the archive.
func libMount(t testing.TB, url string, opts archive.Options) *libMounted {
	t.Helper()
	needFUSE(t)
	m := &libMounted{dir: t.TempDir(), log: &syncBuffer{}}
	log := slog.New(slog.NewTextHandler(m.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	opts.Logger = log
	a, err := archive.Open(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	m.a = a
	if err := a.Start(context.Background(), false); err != nil {
		a.Close()
		t.Fatalf("start %s: %v", url, err)
	}
	m.server, err = tfs.Mount(m.dir, a.Tree(), tfs.Options{Logger: log, Name: testMountName, FsName: a.String()})
	if err != nil {
		a.Close()
		t.Fatalf("mount %s: %v", url, err)
	}
	t.Cleanup(func() { m.stop(t) })
	return m
}

// stop unmounts and closes the archive; it is idempotent.
func (m *libMounted) stop(t testing.TB) {
	if m.server == nil {
		return
	}
	if err := tfs.Unmount(m.dir); err != nil {
		t.Errorf("unmount %s: %v", m.dir, err)
	}
	done := make(chan struct{})
	go func() {
		m.server.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Errorf("the server of %s did not stop 30 s after the unmount", m.dir)
	}
	m.server = nil
	m.a.Close()
	if isMounted(m.dir) {
		t.Errorf("%s still mounted after stop", m.dir)
		exec.Command("umount", "-l", m.dir).Run()
	}
}

// libIndex builds and saves the index of the archive at url, as tarmount
// index does.
func libIndex(t testing.TB, url string, opts archive.Options) {
	t.Helper()
	opts.Rebuild = true
	a, err := archive.OpenIndexed(context.Background(), url, opts)
	if err != nil {
		t.Fatalf("index %s: %v", url, err)
	}
	a.Close()
}
