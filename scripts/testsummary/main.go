// Command testsummary reads `go test -json` on stdin and writes what a
// plain `go test` run shows (each package's result, benchmark results,
// and the output of failed tests and of whatever ran outside a test),
// then every skipped
// test with its reason, so that a CI log says how many tests skipped and
// why. It exits 0: the caller takes the status from go test.
//
//	go test -json ./... | go run ./scripts/testsummary
package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
)

// event is one line of test2json output.
type event struct {
	Action  string
	Package string
	Test    string
	Output  string
}

type skip struct{ pkg, test, reason string }

func main() {
	skips, err := summarize(os.Stdin, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
	}
	fmt.Printf("\n%d tests skipped\n", len(skips))
	for _, s := range skips {
		fmt.Printf("SKIP %s %s: %s\n", s.pkg, s.test, s.reason)
	}
}

// summarize copies the run to w as go test without -v shows it, and
// returns the skipped tests, sorted.
func summarize(r io.Reader, w io.Writer) ([]skip, error) {
	out := map[string][]string{} // package + "\x00" + test -> output lines
	var skips []skip
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			fmt.Fprintf(w, "%s\n", line) // go test's own words: build errors
			continue
		}
		key := e.Package + "\x00" + e.Test
		switch e.Action {
		case "output":
			if e.Test == "" {
				// Package lines: "ok", "FAIL", panics and timeouts
				// outside a test; not the verbose run's own.
				if !strings.HasPrefix(e.Output, "=== ") && e.Output != "PASS\n" && e.Output != "FAIL\n" {
					fmt.Fprint(w, e.Output)
				}
				continue
			}
			if strings.HasPrefix(e.Test, "Benchmark") && strings.Contains(e.Output, "\t") {
				fmt.Fprint(w, e.Output) // a result line
				continue
			}
			out[key] = append(out[key], e.Output)
		case "fail":
			if e.Test != "" {
				fmt.Fprint(w, strings.Join(out[key], ""))
			}
			delete(out, key)
		case "skip":
			if e.Test != "" {
				skips = append(skips, skip{e.Package, e.Test, reason(out[key])})
			}
			delete(out, key)
		case "pass":
			delete(out, key)
		}
	}
	sort.Slice(skips, func(i, j int) bool {
		if skips[i].pkg != skips[j].pkg {
			return skips[i].pkg < skips[j].pkg
		}
		return skips[i].test < skips[j].test
	})
	return skips, sc.Err()
}

// reason is what a skipped test said: its output without the run's own
// lines, on one line.
func reason(lines []string) string {
	var said []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- SKIP") {
			continue
		}
		said = append(said, t)
	}
	if len(said) == 0 {
		return "(no reason given)"
	}
	return strings.Join(said, " / ")
}
