// Command stress mounts an archive with tarmount and loads the mount with
// concurrent readers that verify every byte, watching the server for
// deadlocks, descriptor and goroutine leaks and its memory budget (see
// package load). scripts/stress.sh builds it and runs it on a big archive;
// run it by hand as:
//
//	stress -tarmount BIN -url URL -ref DIR -work DIR [-duration 10m] [-readers 64] [-- TARMOUNT FLAGS...]
//
// It prints progress on standard error, the summary table on standard
// output (and as JSON with -json FILE), and exits 1 when a phase broke a
// rule, 2 when the run could not start. SIGINT or SIGTERM ends the
// current phase early (its mount is unmounted) and skips the rest.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/tarmount/tarmount/scripts/stress/load"
)

func main() {
	os.Exit(run())
}

func run() int {
	var c load.Config
	var phases, jsonOut string
	var total time.Duration
	flag.StringVar(&c.Binary, "tarmount", "", "the tarmount binary (required)")
	flag.StringVar(&c.URL, "url", "", "the archive to mount (required)")
	flag.StringVar(&c.Ref, "ref", "", "a tree equal to the archive's contents, read to verify every byte (required)")
	flag.StringVar(&c.Work, "work", "", "directory for mountpoints, the cache directory, the materialized tree and logs (required)")
	flag.DurationVar(&total, "duration", 10*time.Minute, "time under load, in all: split evenly between the phases")
	flag.StringVar(&phases, "phases", load.PhaseLazy+","+load.PhaseMaterialize, "phases, in order")
	flag.IntVar(&c.Readers, "readers", 64, "concurrent readers")
	flag.DurationVar(&c.Stall, "stall", 30*time.Second, "a reader whose call has not returned for this long is a deadlock")
	flag.Int64Var(&c.CacheMem, "cache-mem", 64<<20, "tarmount --cache-mem")
	flag.Int64Var(&c.MemAllowance, "mem-allowance", 80<<20, "resident memory allowed beyond --cache-mem (0: not checked)")
	flag.Uint64Var(&c.Seed, "seed", uint64(time.Now().UnixNano()), "random seed of the readers (printed)")
	flag.StringVar(&jsonOut, "json", "", "also write the reports as JSON to this file")
	flag.Parse()
	c.Args = flag.Args()
	c.Phases = strings.Split(phases, ",")
	if c.Binary == "" || c.URL == "" || c.Ref == "" || c.Work == "" || len(c.Phases) == 0 {
		flag.Usage()
		return 2
	}
	c.Duration = total / time.Duration(len(c.Phases))
	c.Log = os.Stderr
	fmt.Fprintf(os.Stderr, "stress: %d readers, %v per phase (%s), --cache-mem %d MiB, seed %d\n",
		c.Readers, c.Duration, phases, c.CacheMem>>20, c.Seed)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	reports, err := load.Run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "stress:", err)
		return 2
	}
	load.WriteTable(os.Stdout, reports)
	if jsonOut != "" {
		data, err := json.MarshalIndent(reports, "", "  ")
		if err == nil {
			err = os.WriteFile(jsonOut, append(data, '\n'), 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "stress:", err)
			return 2
		}
	}
	code := 0
	for _, r := range reports {
		if r.Failed() {
			code = 1
		}
	}
	if len(reports) < len(c.Phases) {
		fmt.Fprintln(os.Stderr, "stress: interrupted before every phase ran")
		code = 1
	}
	return code
}
