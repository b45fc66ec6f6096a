package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/tarmount/tarmount/archive"
	"github.com/tarmount/tarmount/index"
)

// Scenario 15, overlap: does the first extraction (no index) overlap its
// three jobs? Issue 26 asks that it take at most 1.15x the longest of
// them, each timed alone in the same run:
//
//	fetch alone   the object fetched as the first pass fetches it
//	              (archive.CopyStored: the open's first bytes, then
//	              parallel range requests of growing blocks), to nothing;
//	decode alone  the local copy of the object, from the page cache,
//	              decoded as the pass decodes it (index.NewDecoder), to
//	              nothing;
//	write alone   tarmount extract of the local plain .tar, from the page
//	              cache: the scan and the writers, on an ext4 of the
//	              round's own like the extraction's tree.
//
// Fetch and decode alone run in a process of their own (this driver,
// with -alone), since the server runs in this one. Write alone runs the
// newest build (the last of -tarmount). A fourth row, the longest of the
// three, is computed per run: the check compares medians with it.
//
// On a machine with few cores the three jobs together may need more CPU
// than the cores give in the time of the longest: then no overlap meets
// the bound. Each step's CPU time (user and system, its children's
// included) is recorded, and two more rows are computed per run: the
// CPU floor, the CPU time of the three alone over the cores, and the
// longer of the floor and the longest alone, which a second check
// (informational: the bound is the first) compares with.

// Tool names of scenario 15.
const (
	toolFetchAlone   = "fetch alone (tarmount's fetcher, to nothing)"
	toolDecodeAlone  = "decode alone (tarmount's decoder, local copy, to nothing)"
	toolWriteAlone   = "write alone (tarmount extract of the local .tar)"
	toolLongestAlone = "the longest of fetch, decode and write alone"
	toolCPUFloor     = "the CPU floor: the CPU time of fetch, decode and write alone over the cores"
	toolAloneOrCPU   = "the longest alone, or the CPU floor where it is longer"
)

// overlapMax is issue 26's bound: the first extraction over the longest
// of its three jobs alone.
const overlapMax = 1.15

// overlap is one run of scenario 15: the first extraction and its three
// jobs alone, in alternating order.
func (s *suite) overlap(ctx context.Context, cb *combo, run int) error {
	newest := s.c.builds[len(s.c.builds)-1]
	tools := append(s.tools(toolTMCold), toolFetchAlone, toolDecodeAlone, newest.tool(toolWriteAlone))
	ts := s.newTrees(ctx, cb, run, len(tools)+1)
	defer ts.close()
	local := filepath.Join(cb.d.dir, cb.d.object(cb.codec))
	// Decode and write alone read their files from the page cache.
	for _, f := range []string{local, cb.d.tarPath()} {
		if out, err := runCmd(ctx, s.c.stepTimeout, s.env, "", toDevNull("cat", f)...); err != nil {
			return fmt.Errorf("read %s: %v: %s", f, err, lastLine(out))
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	alone, cpu := map[string]float64{}, map[string]float64{}
	for _, tool := range inOrder(run, tools...) {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r := s.result(cb, scOverlap, tool, run)
		r.Payload = cb.d.facts.TarBytes
		cold := filepath.Join(s.work, "cold-cache")
		os.RemoveAll(cold)
		base, _ := splitTool(tool)
		var argv []string
		switch base {
		case toolTMCold:
			argv = []string{s.buildOf(tool).bin, "extract", cb.url, ts.dest, "--cache-dir", cold, "--cache-disk", "0", "--quiet"}
		case toolWriteAlone:
			argv = []string{newest.bin, "extract", cb.d.tarPath(), ts.dest, "--cache-dir", cold, "--cache-disk", "0", "--no-sidecar", "--quiet"}
		case toolFetchAlone:
			argv = []string{self, "-alone", "fetch", cb.url}
		case toolDecodeAlone:
			argv = []string{self, "-alone", "decode", local}
		}
		if err := ts.next(ctx); err != nil {
			return err
		}
		out, err := timeStep(cb, &r, func() (string, error) {
			return keepCPU(&r)(runCmdCPU(ctx, s.c.stepTimeout, s.env, "", argv...))
		})
		os.RemoveAll(cold)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if err == nil && (base == toolTMCold || base == toolWriteAlone) {
			var n int
			if n, err = countFiles(ts.dest); err == nil && n != cb.d.facts.Files {
				err = fmt.Errorf("%d files extracted, want %d", n, cb.d.facts.Files)
			}
		}
		if err != nil {
			s.fail(r, "%v: %s", err, lastLine(out))
			continue
		}
		r.Status = statusOK
		s.record(r)
		if base != toolTMCold {
			alone[base], cpu[base] = r.Seconds, r.CPU
		}
	}
	if len(alone) == 3 {
		longest := max(alone[toolFetchAlone], alone[toolDecodeAlone], alone[toolWriteAlone])
		type computed struct {
			tool    string
			seconds float64
		}
		rows := []computed{{toolLongestAlone, longest}}
		if cpu[toolFetchAlone] > 0 && cpu[toolDecodeAlone] > 0 && cpu[toolWriteAlone] > 0 {
			floor := cpuFloor(cpu[toolFetchAlone]+cpu[toolDecodeAlone]+cpu[toolWriteAlone], runtime.NumCPU())
			rows = append(rows, computed{toolCPUFloor, floor}, computed{toolAloneOrCPU, max(longest, floor)})
		}
		for _, row := range rows {
			r := s.result(cb, scOverlap, row.tool, run)
			r.Payload = cb.d.facts.TarBytes
			r.Seconds = row.seconds
			r.Status = statusOK
			s.record(r)
		}
	}
	return nil
}

// cpuFloor is the least wall time in which cores can give cpuSeconds of
// CPU time.
func cpuFloor(cpuSeconds float64, cores int) float64 {
	return cpuSeconds / float64(max(cores, 1))
}

// runAlone is the driver run with -alone: what (fetch or decode) of arg
// (a URL or a local file), to nothing, as scenario 15 times it.
func runAlone(what, arg string) error {
	ctx := context.Background()
	t0 := time.Now()
	var n int64
	var err error
	switch what {
	case "fetch":
		n, err = archive.CopyStored(ctx, io.Discard, arg, archive.DefaultOptions())
	case "decode":
		n, err = decodeFile(arg)
	default:
		return fmt.Errorf("-alone %q: want fetch or decode", what)
	}
	if err != nil {
		return err
	}
	fmt.Printf("%s %s: %d bytes in %.3f s\n", what, arg, n, time.Since(t0).Seconds())
	return nil
}

// decodeFile decodes the archive at path to nothing and returns the
// bytes of tar it holds.
func decodeFile(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	dec, _, err := index.NewDecoder(f)
	if err != nil {
		return 0, fmt.Errorf("decode %s: %w", path, err)
	}
	defer dec.Close()
	n, err := io.CopyBuffer(io.Discard, dec, make([]byte, 1<<20))
	if err != nil {
		return n, fmt.Errorf("decode %s: %w", path, err)
	}
	return n, nil
}
