package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/tarmount/tarmount/archive"
)

// TestStatusDecodePass prints the status of a mount whose index was
// found without the decoded copy of its stream-only archive: the index
// line says where it came from, not that it was built, and a line of its
// own says how far the decode pass (or the pass that decodes it into the
// materialized directory) is, or why it failed.
func TestStatusDecodePass(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pass  archive.PassStatus
		label string   // of printStatus's line
		want  []string // in printStatus's output and statusLine's
	}{
		{"running", archive.PassStatus{DecodedCopy: true, Running: true, Percent: 42, BytesTotal: 100e6, Entries: 7},
			"decoded copy: ", []string{"being written again", "42% of 100.0 MB"}},
		{"failed", archive.PassStatus{DecodedCopy: true, Error: "gone"}, "decoded copy: ", []string{"failed", "gone"}},
		{"into DIR", archive.PassStatus{IntoDir: true, Running: true, Percent: 42, BytesTotal: 100e6, Entries: 7},
			"decoding: ", []string{"into the materialized directory", "42% of 100.0 MB"}},
		{"into DIR failed", archive.PassStatus{IntoDir: true, Error: "gone"}, "decoding: ", []string{"failed", "gone"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &archive.Status{Source: "https://example.com/a.tar.zst"}
			st.Index.Source, st.Index.Entries, st.Index.StreamOnly = archive.FromSidecar, 15000, true
			st.Index.Pass = &tc.pass
			var out bytes.Buffer
			printStatus(&out, st)
			line := statusLine(st)
			if !strings.Contains(out.String(), "index:        published beside the archive, 15000 entries") {
				t.Errorf("got status\n%s\nwant the index published beside the archive", &out)
			}
			for _, w := range tc.want {
				if !strings.Contains(out.String(), tc.label) || !strings.Contains(out.String(), w) {
					t.Errorf("got status\n%s\nwant a %q line with %q", &out, tc.label, w)
				}
				if !strings.Contains(line, w) {
					t.Errorf("got status line %q, want %q", line, w)
				}
			}
		})
	}
}
