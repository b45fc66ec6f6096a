package index

import (
	"archive/tar"
	"bytes"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

// TestMemberDigests checks that the pass of a compressed archive records
// the digest of each regular file's data (the same as DigestOf gives for
// a copy), shared by its hard links, and none for other entries; that a
// plain tar's pass, which reads no member data, records none; and that
// the digests survive Marshal and Unmarshal.
func TestMemberDigests(t *testing.T) {
	a, b := randomData(1, 300<<10), randomData(2, 5000)
	raw := tarBytes(t, []member{
		{name: "d/", typ: tar.TypeDir, mode: 0o755},
		{name: "d/a", data: a, mode: 0o644},
		{name: "d/b", data: b, mode: 0o644},
		{name: "d/same-as-a", data: a, mode: 0o600},
		{name: "d/empty", mode: 0o644},
		{name: "d/link", typ: tar.TypeLink, link: "d/b"},
		{name: "d/sym", typ: tar.TypeSymlink, link: "a"},
	})
	for _, c := range []struct {
		name string
		obj  []byte
	}{
		{"gzip", tarbuild.GzipLevel(raw, 6)},
		{"zstd-frames", tarbuild.ZstdSeekable(raw, 64<<10)},
	} {
		t.Run(c.name, func(t *testing.T) {
			ix := build(t, c.obj, 64<<10)
			for _, x := range []*Index{ix, roundTrip(t, ix)} {
				if !x.HasMemberDigests() {
					t.Fatal("got no member digests, want them")
				}
				want := map[string][]byte{"d/a": a, "d/b": b, "d/same-as-a": a, "d/empty": nil, "d/link": b}
				for p, content := range want {
					id, ok := x.LookupPath(p)
					if !ok {
						t.Fatalf("%s missing", p)
					}
					got, ok := x.MemberDigest(id)
					w, _ := DigestOf(bytes.NewReader(content))
					if !ok || got != w {
						t.Errorf("%s: got %x (%v), want %x", p, got, ok, w)
					}
				}
				for _, p := range []string{"d", "d/sym"} {
					id, _ := x.LookupPath(p)
					if _, ok := x.MemberDigest(id); ok {
						t.Errorf("%s: got a digest, want none", p)
					}
				}
			}
		})
	}
	t.Run("plain", func(t *testing.T) {
		ix := build(t, raw, 64<<10)
		if ix.HasMemberDigests() {
			t.Fatal("a plain tar's index has member digests, want none (its pass reads no data)")
		}
	})
}

// roundTrip returns ix marshaled and unmarshaled.
func roundTrip(t *testing.T, ix *Index) *Index {
	t.Helper()
	data, err := ix.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	loaded, err := Unmarshal(data)
	if err != nil {
		t.Fatal(err)
	}
	return loaded
}
