package tarscan

import (
	"flag"
	"os"
	"testing"
)

// defaultFuzzMinimizeTime caps how long the fuzzer minimizes each new
// input unless -fuzzminimizetime is given. Go's minimizer has a quadratic
// pass, and tar inputs are kilobytes long, so with the default of 60s a
// short run such as -fuzztime=30s would spend all its time minimizing the
// first new input instead of fuzzing.
const defaultFuzzMinimizeTime = "1s"

func TestMain(m *testing.M) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.fuzzminimizetime" })
	if !set {
		if err := flag.Set("test.fuzzminimizetime", defaultFuzzMinimizeTime); err != nil {
			panic(err)
		}
	}
	os.Exit(m.Run())
}
