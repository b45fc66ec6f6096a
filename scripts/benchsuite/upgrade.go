package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Scenario 11, upgrade: a machine keeps the go dataset (the toolchain of
// the Go that builds the suite) materialized in DIR, and the fleet moves
// to another Go release. `tarmount extract URL2 DIR` upgrades DIR in place
// (v1's index is in the cache, as the extraction of v1 left it; v2's too,
// as a published or saved index gives it), against `tarmount extract URL2
// EMPTY` with the same cache: time, bytes from the origin, and files
// written (the summary line's count: the upgrade writes only the files
// that changed). The second release is fetched once from the module proxy
// (GOTOOLCHAIN=upgradeRelease go version) and archived as the go dataset
// is, with the dataset's compressor.

// upgradeRelease is the Go release DIR is upgraded to.
const upgradeRelease = "go1.27.3"

// Tool names of scenario 11.
const (
	toolUpgrade      = "tarmount extract, upgrade of DIR"
	toolUpgradeFresh = "tarmount extract, fresh DIR"
)

// upgradeObject makes (once) the archive of upgradeRelease's toolchain in
// the codec of cb, beside the dataset's, and returns its file name.
func (s *suite) upgradeObject(ctx context.Context, cb *combo) (string, error) {
	obj := strings.Replace(cb.d.object(cb.codec), cb.d.name, cb.d.name+"-"+upgradeRelease, 1)
	out := filepath.Join(cb.d.dir, obj)
	if _, err := os.Stat(out); err == nil {
		return obj, nil
	}
	say("fetching %s from the module proxy (GOTOOLCHAIN=%s go version, once)", upgradeRelease, upgradeRelease)
	cmd := exec.CommandContext(ctx, "go", "version")
	cmd.Env = append(os.Environ(), "GOTOOLCHAIN="+upgradeRelease)
	if msg, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("GOTOOLCHAIN=%s go version: %v: %s", upgradeRelease, err, lastLine(string(msg)))
	}
	mc, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMODCACHE: %w", err)
	}
	tree := filepath.Join(strings.TrimSpace(string(mc)), "golang.org", "toolchain@v0.0.1-"+upgradeRelease+".linux-amd64")
	tarPath := filepath.Join(cb.d.dir, cb.d.name+"-"+upgradeRelease+".tar")
	say("making %s (once)", out)
	if err := writeFile(tarPath, func(w io.Writer) error { return writeTree(w, tree, "go") }); err != nil {
		return "", err
	}
	if cb.codec == "tar" {
		return filepath.Base(tarPath), nil
	}
	sh := map[string]string{"gz": `pigz -6 -c "$1" > "$2"`, "zst": `zstd -q -3 -c "$1" > "$2"`, "lz4": `lz4 -q -c "$1" > "$2"`,
		"seekable": `"$3" pack "$1" -o "$2"`}[cb.codec]
	tmp := out + ".tmp"
	if msg, err := runCmd(ctx, time.Hour, os.Environ(), "", "bash", "-o", "pipefail", "-c", sh, "_", tarPath, tmp,
		s.c.builds[len(s.c.builds)-1].bin); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("make %s: %v: %s", out, err, msg)
	}
	return obj, os.Rename(tmp, out)
}

// writtenRe finds the files count of tarmount extract's summary line.
var writtenRe = regexp.MustCompile(`extracted (\d+) files`)

// upgrade is scenario 11 for the go dataset in one codec.
func (s *suite) upgrade(ctx context.Context, cb *combo) error {
	obj2, err := s.upgradeObject(ctx, cb)
	if err != nil {
		return err
	}
	dir := filepath.Join(s.work, "upgrade-served")
	os.RemoveAll(dir)
	defer os.RemoveAll(dir)
	os.MkdirAll(dir, 0o755)
	for _, o := range []string{cb.d.object(cb.codec), obj2} {
		if err := os.Link(filepath.Join(cb.d.dir, o), filepath.Join(dir, o)); err != nil {
			return err
		}
	}
	srv, err := startServer(cb.srv.name, dir)
	if err != nil {
		return err
	}
	defer srv.close()
	url1, url2 := srv.base+"/"+cb.d.object(cb.codec), srv.base+"/"+obj2
	ucb := *cb
	ucb.srv = srv
	for run := 1; run <= s.c.runs; run++ {
		for _, b := range s.c.builds {
			say("%s %s %s, run %d/%d: upgrade to %s", cb.d.name, cb.codec, srv.name, run, s.c.runs, upgradeRelease)
			for _, tool := range inOrder(run, b.tool(toolUpgrade), b.tool(toolUpgradeFresh)) {
				if err := s.upgradeOne(ctx, &ucb, b, url1, url2, run, tool); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// upgradeOne runs one tool of scenario 11: untimed, v1 extracted into DIR
// (for the upgrade) and both indexes saved; timed, the extraction of v2.
func (s *suite) upgradeOne(ctx context.Context, cb *combo, b build, url1, url2 string, run int, tool string) error {
	base, _ := splitTool(tool)
	r := s.result(cb, scUpgrade, tool, run)
	cache := filepath.Join(s.work, "upgrade-cache")
	dest := filepath.Join(s.work, "upgrade-dir")
	for _, p := range []string{cache, dest, filepath.Join(s.work, ".upgrade-dir.tarmount")} {
		os.RemoveAll(p)
	}
	defer os.RemoveAll(cache)
	defer os.RemoveAll(dest)
	common := []string{"--cache-dir", cache, "--cache-disk", "0"}
	if msg, err := runCmd(ctx, s.c.stepTimeout, s.env, "", append([]string{b.bin, "index", url2}, common...)...); err != nil {
		s.fail(r, "index %s: %v: %s", url2, err, lastLine(msg))
		return ctx.Err()
	}
	if base == toolUpgrade {
		if msg, err := runCmd(ctx, s.c.stepTimeout, s.env, "", append([]string{b.bin, "extract", url1, dest, "--quiet"}, common...)...); err != nil {
			s.fail(r, "extract %s: %v: %s", url1, err, lastLine(msg))
			return ctx.Err()
		}
	}
	runCmd(ctx, time.Minute, s.env, "", "sync")
	c0 := cb.srv.counters()
	t0 := time.Now()
	msg, err := runCmd(ctx, s.c.stepTimeout, s.env, "", append([]string{b.bin, "extract", url2, dest}, common...)...)
	took := time.Since(t0)
	c1 := cb.srv.counters()
	if err != nil {
		s.fail(r, "extract %s: %v: %s", url2, err, lastLine(msg))
		return ctx.Err()
	}
	m := writtenRe.FindStringSubmatch(msg)
	if m == nil {
		s.fail(r, "no summary line: %s", lastLine(msg))
		return nil
	}
	n, _ := strconv.Atoi(m[1])
	measured(&r, c0, c1)
	r.Status, r.Seconds = statusOK, took.Seconds()
	r.Note = fmt.Sprintf("%d files written", n)
	s.record(r)
	return nil
}
