package main

import (
	"bytes"
	"math"
	"reflect"
	"strings"
	"testing"
)

func TestParseBuilds(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []build
		bad  bool
	}{
		{in: "bin/tarmount", want: []build{{bin: "bin/tarmount"}}},
		{in: "old=a/tarmount,new=b/tarmount", want: []build{{"old", "a/tarmount"}, {"new", "b/tarmount"}}},
		{in: "d42b5bc=x, HEAD+dirty=y", want: []build{{"d42b5bc", "x"}, {"HEAD+dirty", "y"}}},
		{in: "", bad: true},
		{in: "old=a,old=b", bad: true},
		{in: "old=a,b", bad: true},
		{in: "o ld=a", bad: true},
		{in: "old=", bad: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseBuilds(tc.in)
			if (err != nil) != tc.bad {
				t.Fatalf("error %v, want error %v", err, tc.bad)
			}
			if !tc.bad && !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestToolNames(t *testing.T) {
	for _, tc := range []struct{ b, base, tool string }{
		{"", toolTMIndex, toolTMIndex},
		{"old", toolTMIndex, "tarmount extract (saved index) [old]"},
		{"new", toolTM, "tarmount [new]"},
	} {
		got := build{name: tc.b}.tool(tc.base)
		if got != tc.tool {
			t.Errorf("tool(%q) of build %q = %q, want %q", tc.base, tc.b, got, tc.tool)
		}
		base, name := splitTool(got)
		if base != tc.base || name != tc.b {
			t.Errorf("splitTool(%q) = %q, %q; want %q, %q", got, base, name, tc.base, tc.b)
		}
	}
	if base, name := splitTool(toolAria); base != toolAria || name != "" {
		t.Errorf("splitTool(%q) = %q, %q; want it whole", toolAria, base, name)
	}
}

func TestParseScenarios(t *testing.T) {
	got, err := parseScenarios([]string{"extract", "3"})
	if err != nil || !reflect.DeepEqual(got, map[string]bool{"5": true, "3": true}) {
		t.Errorf("got %v, %v; want 3 and 5", got, err)
	}
	if _, err := parseScenarios([]string{"nine"}); err == nil {
		t.Errorf("scenario nine: got no error")
	}
}

func TestReportBaseline(t *testing.T) {
	mk := func(tool string, run int, secs float64) Result {
		return Result{Scenario: scExtract, Dataset: "go", Codec: "gz", Profile: "objstore", Tool: tool, Run: run,
			Status: statusOK, Seconds: secs, Fetched: 100, Requests: 1}
	}
	old, cur := build{name: "old"}, build{name: "new"}
	rs := []Result{
		mk(old.tool(toolTMIndex), 1, 1.0), mk(cur.tool(toolTMIndex), 1, 0.9),
		mk(cur.tool(toolTMIndex), 2, 0.7), mk(old.tool(toolTMIndex), 2, 1.0),
	}
	s := summarize(rs, nil, nil)
	if s.Baseline != "old" {
		t.Fatalf("baseline %q, want old", s.Baseline)
	}
	rows := s.Groups[0].Rows
	if rows[0].VsBase != 0 || math.Abs(rows[1].VsBase-0.8) > 1e-9 {
		t.Errorf("vs baseline %v and %v, want none and 0.8", rows[0].VsBase, rows[1].VsBase)
	}
	var md bytes.Buffer
	if err := writeMarkdown(&md, s); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| vs old |", "[new] | 0.8 s |", "| 0.80x |"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

func TestProgressOrder(t *testing.T) {
	order := []string{"file at 10%", "file at 50%", "file at 90%", "go version", "all of them", "index pass ended"}
	for i := 1; i < len(order); i++ {
		if a, b := progressSc(order[i-1]), progressSc(order[i]); a >= b {
			t.Errorf("%q sorts after %q", a, b)
		}
	}
}
