package tests

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"strings"
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
	bg     *archive.Materializer // nil without libMountOptions.materialize
	server *fuse.Server
	log    *syncBuffer // the archive's and the mount's log, at debug level
}

// libMountOptions are what a mount does beyond its archive options.
type libMountOptions struct {
	// wait makes the mount wait for the first pass, if any, to end
	// before it answers (--wait-index).
	wait bool
	// materialize, when not empty, is the directory that the archive is
	// materialized into behind the mount (--materialize), with mat.
	materialize string
	mat         archive.MaterializeOptions
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
	return libMountWith(t, url, opts, libMountOptions{})
}

// libMountWith is libMount, doing what mo says too.
func libMountWith(t testing.TB, url string, opts archive.Options, mo libMountOptions) *libMounted {
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
	fsOpts := tfs.Options{Logger: log, Name: testMountName, FsName: a.String()}
	if mo.materialize != "" {
		if m.bg, err = a.Materialize(mo.materialize, mo.mat); err != nil {
			a.Close()
			t.Fatalf("materialize %s into %s: %v", url, mo.materialize, err)
		}
		fsOpts.Local = m.bg
	}
	if err := a.Start(context.Background(), mo.wait); err != nil {
		a.Close()
		t.Fatalf("start %s: %v\n%s", url, err, m.log)
	}
	m.server, err = tfs.Mount(m.dir, a.Tree(), fsOpts)
	if err != nil {
		a.Close()
		t.Fatalf("mount %s: %v", url, err)
	}
	if m.bg != nil {
		m.bg.Run()
	}
	t.Cleanup(func() {
		m.stop(t)
		if t.Failed() {
			t.Logf("mount %s log:\n%s", m.dir, m.log)
		}
	})
	return m
}

// waitMaterialized waits until the materialization behind m has ended,
// and fails unless it made its directory complete.
func (m *libMounted) waitMaterialized(t testing.TB) {
	t.Helper()
	select {
	case <-m.bg.Done():
	case <-time.After(3 * time.Minute):
		t.Fatalf("materialization of %s not done after 3 minutes:\n%s", m.bg.Dir(), m.log)
	}
	if complete, stopped := m.bg.State(); !complete {
		t.Fatalf("materialization of %s stopped: %s\n%s", m.bg.Dir(), stopped, m.log)
	}
}

// waitLog waits until m's log has s, at most 3 minutes.
func (m *libMounted) waitLog(t testing.TB, s string) {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for !strings.Contains(m.log.String(), s) {
		select {
		case <-deadline:
			t.Fatalf("no %q after 3 minutes:\n%s", s, m.log)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// libStartErr opens and starts the archive at url with opts, as a mount
// does before it mounts, and returns why that failed (nil if it did not).
func libStartErr(t testing.TB, url string, opts archive.Options) error {
	t.Helper()
	a, err := archive.Open(context.Background(), url, opts)
	if err != nil {
		return err
	}
	defer a.Close()
	return a.Start(context.Background(), false)
}

// stop unmounts and closes the archive; it is idempotent.
func (m *libMounted) stop(t testing.TB) {
	if m.server == nil {
		return
	}
	// Busy is no failure, as for tarmount: an open file of the mount
	// that a fork of the test process (the binary run by a parallel
	// test) holds until its exec. The mount is detached and released
	// when its last user lets go, which the wait below bounds.
	if err := tfs.Unmount(m.dir); errors.Is(err, tfs.ErrBusy) {
		t.Logf("unmount %s: %v", m.dir, err)
	} else if err != nil {
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

// libExtract extracts the archive at url into dir, as tarmount extract
// does, and returns what it did; nil when dir was already complete.
func libExtract(t testing.TB, url, dir string, opts archive.Options, mo archive.MaterializeOptions) *archive.ExtractSummary {
	t.Helper()
	log := &syncBuffer{}
	opts.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	x, err := archive.Extract(context.Background(), url, dir, opts, mo)
	if err != nil {
		t.Fatalf("extract %s: %v\n%s", url, err, log)
	}
	defer x.Close()
	if x.Complete() {
		return nil
	}
	s, err := x.Run(context.Background())
	if err != nil {
		t.Fatalf("extract %s: %v\n%s", url, err, log)
	}
	return s
}
