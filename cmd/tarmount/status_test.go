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
// own says how far the decode pass is, or why it failed.
func TestStatusDecodePass(t *testing.T) {
	for _, tc := range []struct {
		name string
		pass archive.PassStatus
		want []string // in printStatus's output and statusLine's
	}{
		{"running", archive.PassStatus{DecodedCopy: true, Running: true, Percent: 42, BytesTotal: 100e6, Entries: 7},
			[]string{"being written again", "42% of 100.0 MB"}},
		{"failed", archive.PassStatus{DecodedCopy: true, Error: "gone"}, []string{"failed", "gone"}},
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
				if !strings.Contains(out.String(), "decoded copy: ") || !strings.Contains(out.String(), w) {
					t.Errorf("got status\n%s\nwant a decoded copy line with %q", &out, w)
				}
				if !strings.Contains(line, w) {
					t.Errorf("got status line %q, want %q", line, w)
				}
			}
		})
	}
}
