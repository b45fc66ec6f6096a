package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Scenarios 12 and 13 measure tarmount's gzip decoding against the best C
// decoders, on the local .tar.gz of each dataset (no server, no network):
//
//	12. gzip-decode: `tarmount index FILE` with an empty cache against
//	    libdeflate-gunzip -c, igzip -dc, rapidgzip -P1 -d -c and gzip -dc,
//	    each to /dev/null;
//	13. extract-tmpfs: `tarmount extract FILE DIR` with a saved index and
//	    without one, against tar -x of the plain .tar (the write floor)
//	    and pigz -dc | tar -x, each run of each tool into a tmpfs of its
//	    own, mounted before and unmounted after;
//	14. seq-read-local: a read of the largest member, whole and in order,
//	    through a mount of the .tar.gz with a saved index, against gzip -dc
//	    of the whole archive to /dev/null: rates (MB/s) compared, each of
//	    its own payload.
//
// Their rows carry the profile "local". The tools of one run go in
// alternating order, as in every scenario.

// Tool names of scenarios 12 and 13 (and scenario 5's zstd pipe).
const (
	toolLibdeflate = "libdeflate-gunzip -c"
	toolIgzip      = "igzip -dc"
	toolRapidP1    = "rapidgzip -P1 -d -c"
	toolGzip       = "gzip -dc"
	toolTarPlain   = "tar -x of the plain .tar"
	toolPigzTar    = "pigz -dc | tar -x"
	toolCurlZstd   = "curl | zstd -d | tar -x"
	toolTMSeqLocal = "tarmount mount (saved index)"
)

// profileLocal is the profile of the rows of scenarios 12, 13 and 14.
const profileLocal = "local"

// localScenarios are the scenarios that read the dataset's local files.
var localScenarios = []string{"12", "13", "14"}

// localResult is a Result of scenario sc on the local files of d.
func localResult(d *dataset, sc, tool string, run int) Result {
	return Result{Scenario: sc, Dataset: d.name, Codec: "gz", Profile: profileLocal, Tool: tool, Run: run,
		Fetched: -1, Requests: -1, Payload: d.facts.TarBytes}
}

// gzipLocal runs scenarios 12 and 13, whichever are chosen, on the local
// .tar.gz of d: RUNS rounds of each.
func (s *suite) gzipLocal(ctx context.Context, d *dataset) error {
	sc := s.c.scenarios
	if !s.c.anyLocal() {
		return nil
	}
	gz := filepath.Join(d.dir, d.object("gz"))
	// Every tool reads the archive from the page cache: read it once,
	// untimed.
	if out, err := runCmd(ctx, s.c.stepTimeout, s.env, "", toDevNull("cat", gz, d.tarPath())...); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("read %s: %v: %s", gz, err, lastLine(out))
	}
	var idx map[string]string
	if sc["13"] || sc["14"] {
		idx = s.saveLocalIndexes(ctx, d, gz)
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	for run := 1; run <= s.c.runs; run++ {
		if sc["12"] {
			say("%s gz %s, run %d/%d: gzip decode to /dev/null", d.name, profileLocal, run, s.c.runs)
			tools := s.withPeers(s.tools(toolTMIndexPass), toolLibdeflate, toolIgzip, toolRapidP1, toolGzip)
			for _, t := range inOrder(run, tools...) {
				if err := s.gzipDecode(ctx, d, gz, run, t); err != nil {
					return err
				}
			}
		}
		if sc["13"] {
			say("%s gz %s, run %d/%d: extraction to tmpfs", d.name, profileLocal, run, s.c.runs)
			tools := append(s.tools(toolTMCold), s.tools(toolTMIndex)...)
			for _, t := range inOrder(run, s.withPeers(tools, toolTarPlain, toolPigzTar)...) {
				if err := s.extractTmpfs(ctx, d, gz, idx, run, t); err != nil {
					return err
				}
			}
		}
		if sc["14"] {
			say("%s gz %s, run %d/%d: sequential read through a mount", d.name, profileLocal, run, s.c.runs)
			for _, t := range inOrder(run, s.withPeers(s.tools(toolTMSeqLocal), toolGzip)...) {
				if err := s.seqLocal(ctx, d, gz, idx, run, t); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// savedIndex returns the cache dir holding build bn's saved index of gz
// (saveLocalIndexes), or "" after failing r when that index failed.
func (s *suite) savedIndex(r Result, idx map[string]string, bn, gz string) string {
	cache := idx[bn]
	if cache == "" {
		s.fail(r, "%s index %s failed", s.buildOf(r.Tool).tool(toolTM), filepath.Base(gz))
	}
	return cache
}

// saveLocalIndexes saves each build's index of the local archive gz
// (untimed) and returns their cache dirs by build name; a build whose
// index failed has none.
func (s *suite) saveLocalIndexes(ctx context.Context, d *dataset, gz string) map[string]string {
	idx := map[string]string{}
	for _, b := range s.c.builds {
		dir := filepath.Join(s.work, "idx", "tm-"+d.name+"-gz-"+profileLocal)
		if b.name != "" {
			dir += "-" + b.name
		}
		info("saving %s's index of %s (tarmount index FILE --cache-dir D)", b.tool(toolTM), filepath.Base(gz))
		out, err := runCmd(ctx, s.c.indexTimeout, s.env, "", b.bin, "index", gz, "--cache-dir", dir, "--cache-disk", "0", "--no-sidecar")
		if err != nil {
			warnf("%s index %s failed: %v: %s", b.tool(toolTM), gz, err, lastLine(out))
			continue
		}
		idx[b.name] = dir
	}
	return idx
}

// decodeCmd returns the command line of a scenario-12 decoder that
// writes the tar of gz to /dev/null, or why it cannot run here.
func (s *suite) decodeCmd(tool, gz string) (argv []string, na string) {
	var cmd []string
	switch tool {
	case toolLibdeflate:
		cmd = []string{"libdeflate-gunzip", "-c", gz}
	case toolIgzip:
		cmd = []string{"igzip", "-dc", gz}
	case toolRapidP1:
		if s.c.rapidgzip == "" {
			return nil, "rapidgzip is not installed"
		}
		cmd = []string{s.c.rapidgzip, "-P", "1", "-d", "-c", gz}
	case toolGzip:
		cmd = []string{"gzip", "-dc", gz}
	default:
		return nil, fmt.Sprintf("no decoder %q", tool)
	}
	if _, err := exec.LookPath(cmd[0]); err != nil {
		return nil, cmd[0] + " is not installed"
	}
	return toDevNull(cmd...), ""
}

// toDevNull returns argv with its standard output sent to /dev/null.
func toDevNull(argv ...string) []string {
	return append([]string{"/bin/sh", "-c", `exec "$0" "$@" >/dev/null`}, argv...)
}

// gzipDecode is one run of scenario 12 for one tool.
func (s *suite) gzipDecode(ctx context.Context, d *dataset, gz string, run int, tool string) error {
	r := localResult(d, scGzipDecode, tool, run)
	if base, _ := splitTool(tool); base != toolTMIndexPass {
		return s.runDecoder(ctx, r, tool, gz, run)
	}
	cache := filepath.Join(s.work, "cold-cache")
	os.RemoveAll(cache)
	defer os.RemoveAll(cache)
	argv := []string{s.buildOf(tool).bin, "index", gz, "--cache-dir", cache, "--cache-disk", "0", "--no-sidecar"}
	out, err := s.runTimed(ctx, &r, argv)
	return s.settle(ctx, r, out, err)
}

// runDecoder runs a peer decoder of scenario 12 (decodeCmd) as r's timed
// step, or records once that it cannot run here.
func (s *suite) runDecoder(ctx context.Context, r Result, tool, gz string, run int) error {
	argv, na := s.decodeCmd(tool, gz)
	if na != "" {
		if run == 1 {
			r.Status, r.Note = statusNA, na
			s.record(r)
		}
		return nil
	}
	out, err := s.runTimed(ctx, &r, argv)
	return s.settle(ctx, r, out, err)
}

// runTimed runs argv as r's timed step: it sets r's seconds and returns
// argv's output and error.
func (s *suite) runTimed(ctx context.Context, r *Result, argv []string) (string, error) {
	t0 := time.Now()
	out, err := runCmd(ctx, s.c.stepTimeout, s.env, "", argv...)
	r.Seconds = time.Since(t0).Seconds()
	return out, err
}

// extractTmpfs is one run of scenario 13 for one tool: its tree goes to
// a tmpfs mounted for it alone.
func (s *suite) extractTmpfs(ctx context.Context, d *dataset, gz string, idx map[string]string, run int, tool string) error {
	r := localResult(d, scTmpfs, tool, run)
	mnt := filepath.Join(s.work, "tmpfs")
	dest := filepath.Join(mnt, "x")
	base, bn := splitTool(tool)
	var argv []string
	switch base {
	case toolTMCold, toolTMIndex:
		var cache string
		if base == toolTMCold {
			cache = filepath.Join(s.work, "cold-cache")
			os.RemoveAll(cache)
			defer os.RemoveAll(cache)
		} else if cache = s.savedIndex(r, idx, bn, gz); cache == "" {
			return nil
		}
		argv = []string{s.buildOf(tool).bin, "extract", gz, dest, "--cache-dir", cache, "--cache-disk", "0", "--no-sidecar", "--quiet"}
	case toolTarPlain:
		argv = []string{"tar", "-x", "-f", d.tarPath(), "-C", dest}
	case toolPigzTar:
		argv = []string{"bash", "-o", "pipefail", "-c", `pigz -dc "$1" | tar -x -C "$2"`, "_", gz, dest}
	default:
		return fmt.Errorf("no extracting tool %q for tmpfs", tool)
	}
	f := d.facts
	size := f.TarBytes*5/4 + int64(f.Files+f.Dirs)*4096 + 64<<20
	if err := mountTmpfs(ctx, mnt, size); err != nil {
		return err
	}
	defer unmountTmpfs(mnt)
	if err := os.MkdirAll(dest, 0o755); err != nil {
		return err
	}
	out, err := s.runTimed(ctx, &r, argv)
	if err == nil {
		// The check, as in scenario 5: the count of regular files.
		var n int
		if n, err = countFiles(dest); err == nil && n != f.Files {
			err = fmt.Errorf("%d files extracted, want %d", n, f.Files)
		}
		out = ""
	}
	return s.settle(ctx, r, out, err)
}

// mountTmpfs mounts a new tmpfs of size bytes at dir (registered for the
// final cleanup); the suite's tmpfs mounts are named tarmount-suite.
func mountTmpfs(ctx context.Context, dir string, size int64) error {
	if err := useMountpoint(dir); err != nil {
		return err
	}
	if out, err := runCmd(ctx, time.Minute, nil, "", "mount", "-t", "tmpfs", "-o", "size="+strconv.FormatInt(size, 10)+",mode=0755",
		"tarmount-suite", dir); err != nil {
		return fmt.Errorf("mount a tmpfs at %s: %v: %s", dir, err, lastLine(out))
	}
	return nil
}

// unmountTmpfs unmounts the tmpfs at dir, which frees its files.
func unmountTmpfs(dir string) {
	if out, err := runCmd(context.Background(), time.Minute, nil, "", "umount", dir); err != nil {
		warnf("umount %s: %v: %s", dir, err, lastLine(out))
		detach(dir)
	}
}

// seqLocal is one run of scenario 14 for one tool: tarmount mounts the
// local .tar.gz with its saved index and the largest member is read
// whole, in order, with 1 MiB reads (timed from the first read to the
// last; the mount is ready before), then checked from the page cache;
// gzip -dc decodes the whole archive. Each row's payload is what it read,
// so that its MB/s are comparable.
func (s *suite) seqLocal(ctx context.Context, d *dataset, gz string, idx map[string]string, run int, tool string) error {
	r := localResult(d, scSeqLocal, tool, run)
	base, bn := splitTool(tool)
	if base != toolTMSeqLocal {
		return s.runDecoder(ctx, r, tool, gz, run)
	}
	cache := s.savedIndex(r, idx, bn, gz)
	if cache == "" {
		return nil
	}
	m := d.facts.Largest
	r.Payload = m.Size
	mnt := s.mountpoint(tool)
	if err := useMountpoint(mnt); err != nil {
		return err
	}
	log := s.logFile(d.name, "gz", profileLocal, tool, run)
	p, err := startProc([]string{s.buildOf(tool).bin, gz, mnt, "--cache-dir", cache, "--cache-disk", "0", "--no-sidecar"}, s.env, log)
	if err != nil {
		return err
	}
	defer stopMount(p, mnt)
	path := filepath.Join(mnt, m.Path)
	if _, err := waitPath(ctx, p, mnt, path, s.c.indexTimeout); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		s.fail(r, "%v", err)
		return nil
	}
	err = func() error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		t0 := time.Now()
		n, err := io.CopyBuffer(io.Discard, f, make([]byte, 1<<20))
		r.Seconds = time.Since(t0).Seconds()
		if err == nil && n != m.Size {
			err = fmt.Errorf("%s: read %d bytes, want %d", m.Path, n, m.Size)
		}
		return err
	}()
	if err == nil {
		err = checkMember(path, m)
	}
	return s.settle(ctx, r, "", err)
}
