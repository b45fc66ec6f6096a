package main

import (
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	in := strings.Join([]string{
		`{"Action":"start","Package":"p"}`,
		`{"Action":"run","Package":"p","Test":"TestOK"}`,
		`{"Action":"output","Package":"p","Test":"TestOK","Output":"=== RUN   TestOK\n"}`,
		`{"Action":"output","Package":"p","Test":"TestOK","Output":"    ok_test.go:1: quiet\n"}`,
		`{"Action":"pass","Package":"p","Test":"TestOK"}`,
		`{"Action":"output","Package":"p","Test":"TestBad","Output":"    bad_test.go:9: got 1, want 2\n"}`,
		`{"Action":"output","Package":"p","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}`,
		`{"Action":"fail","Package":"p","Test":"TestBad"}`,
		`{"Action":"output","Package":"p","Test":"TestSkip/sub","Output":"=== RUN   TestSkip/sub\n"}`,
		`{"Action":"output","Package":"p","Test":"TestSkip/sub","Output":"    skip_test.go:3: no /dev/fuse\n"}`,
		`{"Action":"output","Package":"p","Test":"TestSkip/sub","Output":"--- SKIP: TestSkip/sub (0.00s)\n"}`,
		`{"Action":"skip","Package":"p","Test":"TestSkip/sub"}`,
		`{"Action":"output","Package":"p","Test":"BenchmarkX","Output":"BenchmarkX\n"}`,
		`{"Action":"output","Package":"p","Test":"BenchmarkX","Output":"BenchmarkX-2   \t       1\t 17 ns/op\n"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\n"}`,
		`{"Action":"output","Package":"p","Output":"FAIL\tp\t0.1s\n"}`,
		`{"Action":"skip","Package":"q"}`,
		`# p [p.test]`,
	}, "\n")
	var out strings.Builder
	skips, err := summarize(strings.NewReader(in), &out)
	if err != nil {
		t.Fatal(err)
	}
	want := "    bad_test.go:9: got 1, want 2\n--- FAIL: TestBad (0.00s)\nBenchmarkX-2   \t       1\t 17 ns/op\nFAIL\tp\t0.1s\n# p [p.test]\n"
	if out.String() != want {
		t.Errorf("output:\n got %q\nwant %q", out.String(), want)
	}
	if len(skips) != 1 || skips[0] != (skip{"p", "TestSkip/sub", "skip_test.go:3: no /dev/fuse"}) {
		t.Errorf("skips: got %+v, want TestSkip/sub with its reason", skips)
	}
}
