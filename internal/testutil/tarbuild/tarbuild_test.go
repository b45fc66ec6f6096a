package tarbuild

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
)

// readTar reads b with archive/tar: each member's header and content.
func readTar(t *testing.T, b []byte) ([]*tar.Header, [][]byte) {
	t.Helper()
	var hs []*tar.Header
	var bodies [][]byte
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return hs, bodies
		}
		if err != nil {
			t.Fatalf("archive/tar: %v", err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("archive/tar: %s: %v", h.Name, err)
		}
		hs, bodies = append(hs, h), append(bodies, body)
	}
}

func TestGo(t *testing.T) {
	for _, f := range []tar.Format{tar.FormatUSTAR, tar.FormatPAX, tar.FormatGNU} {
		t.Run(f.String(), func(t *testing.T) {
			raw := Members(Member{Name: "raw", Body: "crafted"})
			b := Go(t, f,
				Entry{Name: "d/", Type: tar.TypeDir},
				Entry{Name: "d/f", Body: []byte("data"), Uid: 7},
				Entry{Raw: raw},
				Entry{Name: "d/l", Type: tar.TypeSymlink, Link: "f", Body: []byte("ignored")},
				Entry{Name: "zero", Tweak: func(h *tar.Header) { h.Mode = 0 }},
			)
			hs, bodies := readTar(t, b)
			want := []struct {
				name string
				mode int64
				body string
			}{{"d/", 0o755, ""}, {"d/f", 0o644, "data"}, {"raw", 0o644, "crafted"}, {"d/l", 0o644, ""}, {"zero", 0, ""}}
			if len(hs) != len(want) {
				t.Fatalf("got %d members, want %d", len(hs), len(want))
			}
			for i, w := range want {
				if hs[i].Name != w.name || hs[i].Mode != w.mode || string(bodies[i]) != w.body {
					t.Errorf("member %d: got %q mode %o body %q, want %q mode %o body %q",
						i, hs[i].Name, hs[i].Mode, bodies[i], w.name, w.mode, w.body)
				}
				if !hs[i].ModTime.Equal(DefaultModTime) {
					t.Errorf("%s: got mtime %v, want %v", hs[i].Name, hs[i].ModTime, DefaultModTime)
				}
			}
			if hs[1].Uid != 7 {
				t.Errorf("d/f: got uid %d, want 7", hs[1].Uid)
			}
		})
	}
}

func TestGoRefuses(t *testing.T) {
	_, err := GoErr(tar.FormatUSTAR, Entry{Name: "x", Xattrs: map[string]string{"user.a": "b"}})
	if err == nil {
		t.Error("xattrs in ustar: got no error, want one")
	}
}

func TestTar(t *testing.T) {
	long := string(bytes.Repeat([]byte("n"), 150))
	b, pos := TarPos(
		Member{Name: long, Body: "long name"},
		Member{Name: "dir", Type: TypeDir},
		Member{Name: "pax", Body: "x", PAX: []string{"SCHILY.xattr.user.k=v"}, Uid: 3, Mtime: 1000},
	)
	hs, bodies := readTar(t, b)
	if len(hs) != 3 || hs[0].Name != long || string(bodies[0]) != "long name" {
		t.Fatalf("got %d members, first %q", len(hs), hs[0].Name)
	}
	if hs[1].Mode != 0o755 || hs[1].Typeflag != TypeDir {
		t.Errorf("dir: got mode %o type %q, want 755 '5'", hs[1].Mode, hs[1].Typeflag)
	}
	if hs[2].PAXRecords["SCHILY.xattr.user.k"] != "v" || hs[2].Uid != 3 || hs[2].ModTime.Unix() != 1000 || hs[2].Uname != "root" {
		t.Errorf("pax: got %v uid %d mtime %d uname %q", hs[2].PAXRecords, hs[2].Uid, hs[2].ModTime.Unix(), hs[2].Uname)
	}
	if got := string(b[pos[0].Data : pos[0].Data+9]); got != "long name" {
		t.Errorf("Pos of the first member's data: got %q, want %q", got, "long name")
	}
	bad := Tar(Member{Name: "bad", BadSum: true})
	if _, err := tar.NewReader(bytes.NewReader(bad)).Next(); err == nil {
		t.Error("BadSum: archive/tar read it without an error")
	}
}

func TestBlockLayouts(t *testing.T) {
	for _, tc := range []struct {
		layout Layout
		want   tar.Format
	}{{USTAR, tar.FormatUSTAR}, {GNU, tar.FormatGNU}, {Star, tar.FormatUSTAR}} {
		b := append(Block{Name: "f", Typeflag: TypeReg, Mode: 0o600, Layout: tc.layout, SignedSum: true}.Bytes(), make([]byte, 2*BlockSize)...)
		hs, _ := readTar(t, b)
		if len(hs) != 1 || hs[0].Name != "f" || hs[0].Mode != 0o600 {
			t.Errorf("layout %d: got %v", tc.layout, hs)
		}
	}
}

func TestCompressors(t *testing.T) {
	data := bytes.Repeat([]byte("tarbuild "), 50000)
	zr, _ := zstd.NewReader(nil)
	defer zr.Close()
	unzstd := func(b []byte) []byte {
		out, err := zr.DecodeAll(b, nil)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	gunzip := func(b []byte) []byte {
		r, err := gzip.NewReader(bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		out, err := io.ReadAll(r)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	unlz4 := func(b []byte) []byte {
		out, err := io.ReadAll(lz4.NewReader(bytes.NewReader(b)))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	frames, starts := ZstdFrames(data, 100000)
	for _, tc := range []struct {
		name string
		got  []byte
	}{
		{"Gzip", gunzip(Gzip(data))},
		{"GzipMembers", gunzip(GzipMembers(data, 100000, 1))},
		{"ZstdFrames", unzstd(frames)},
		{"ZstdStream", unzstd(ZstdStream(data))},
		{"ZstdSeekable", unzstd(ZstdSeekable(data, 100000))},
		{"LZ4", unlz4(LZ4(data, true))},
	} {
		if !bytes.Equal(tc.got, data) {
			t.Errorf("%s: got %d bytes back, want the %d given", tc.name, len(tc.got), len(data))
		}
	}
	if len(starts) != 5 || starts[0] != 0 {
		t.Errorf("ZstdFrames: got frame starts %v, want 5 from 0", starts)
	}
}
