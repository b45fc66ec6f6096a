package tarscan

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
)

// TestResumeAtState: a scan resumed at the State of any member returns
// that member and every later one as the whole scan did, pax global
// records included: one global header replaces another, and one with a
// path is ignored and leaves none in force.
func TestResumeAtState(t *testing.T) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	write := func(h *tar.Header, body string) {
		h.Size = int64(len(body))
		if h.Typeflag == tar.TypeXGlobalHeader || h.Typeflag == tar.TypeDir {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Size > 0 {
			tw.Write([]byte(body))
		}
	}
	write(&tar.Header{Name: "a.txt", Mode: 0o644, Typeflag: tar.TypeReg}, "alpha")
	write(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"uname": "globaluser"}}, "")
	write(&tar.Header{Name: "b.txt", Mode: 0o644, Typeflag: tar.TypeReg}, "beta")
	write(&tar.Header{Name: "d/", Mode: 0o755, Typeflag: tar.TypeDir}, "")
	write(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"path": "renamed", "gname": "pathgroup"}}, "")
	write(&tar.Header{Name: "d/" + string(bytes.Repeat([]byte("n"), 150)), Mode: 0o600, Typeflag: tar.TypeReg, Format: tar.FormatPAX}, "long name")
	write(&tar.Header{Typeflag: tar.TypeXGlobalHeader, PAXRecords: map[string]string{"gname": "globalgroup"}}, "")
	write(&tar.Header{Name: "e.txt", Mode: 0o644, Typeflag: tar.TypeReg}, "epsilon")
	tw.Close()
	data := buf.Bytes()

	var all []*Header
	var states []State
	sc := NewScanner(bytes.NewReader(data), Limits{})
	for {
		h, err := sc.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		h.PAX = nil
		all = append(all, h)
		states = append(states, sc.State())
	}
	if len(all) != 5 || states[1].Offset != all[1].HeaderOffset || len(states[1].Global) != 0 || len(states[2].Global) != 1 ||
		len(states[3].Global) != 1 || len(states[4].Global) != 0 {
		t.Fatalf("got %d members, states %+v", len(all), states)
	}
	if all[3].Name == "renamed" || all[3].Uname != "" || all[3].Gname != "" || all[4].Gname != "globalgroup" {
		t.Fatalf("got members %+v and %+v, want the global header with a path ignored", *all[3], *all[4])
	}
	for i, st := range states {
		r, err := NewScannerAt(bytes.NewReader(data[st.Offset:]), Limits{}, st)
		if err != nil {
			t.Fatal(err)
		}
		for j := i; ; j++ {
			h, err := r.Next()
			if err == io.EOF {
				if j != len(all) {
					t.Fatalf("resumed at member %d: ended after %d members, want %d", i, j, len(all))
				}
				break
			}
			if err != nil {
				t.Fatalf("resumed at member %d: %v", i, err)
			}
			h.PAX = nil
			if got, want := *h, *all[j]; got.Name != want.Name || got.Uname != want.Uname || got.Gname != want.Gname || got.DataOffset != want.DataOffset ||
				got.HeaderOffset != want.HeaderOffset || got.Size != want.Size || got.Mode != want.Mode {
				t.Fatalf("resumed at member %d: member %d is %+v, want %+v", i, j, got, want)
			}
		}
	}
}
