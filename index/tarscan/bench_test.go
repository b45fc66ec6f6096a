package tarscan

import (
	"archive/tar"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
)

const benchMembers = 100_000

var benchArchives sync.Map // tar.Format -> []byte

// benchArchive returns an in-memory tar of benchMembers small files (0 to
// 400 bytes) in 100 directories. For FormatPAX every member carries a pax
// header with sub-second times, as GNU tar --format=posix writes.
func benchArchive(b *testing.B, f tar.Format) []byte {
	if v, ok := benchArchives.Load(f); ok {
		return v.([]byte)
	}
	content := bytes.Repeat([]byte("0123456789abcdef"), 25)
	base := time.Unix(1_700_000_000, 0)
	entries := make([]tarbuild.Entry, benchMembers)
	for i := range benchMembers {
		size := (i * 37) % 401
		h := &tar.Header{
			Name: fmt.Sprintf("dir%03d/file%06d.txt", i%100, i), Typeflag: tar.TypeReg, Mode: 0o644,
			ModTime: base, Uid: 1000, Gid: 1000, Uname: "builder", Gname: "staff", Format: f,
		}
		if f == tar.FormatPAX {
			h.ModTime = base.Add(time.Duration(i) * 1234567)
			h.AccessTime, h.ChangeTime = h.ModTime, h.ModTime
		}
		entries[i] = tarbuild.Entry{Hdr: h, Body: content[:size]}
	}
	data := tarbuild.Go(b, f, entries...)
	benchArchives.Store(f, data)
	return data
}

// BenchmarkScan scans an archive of 100k small files.
func BenchmarkScan(b *testing.B) {
	for _, bc := range []struct {
		name   string
		format tar.Format
		wrap   func([]byte) io.Reader
	}{
		{"ustar/read", tar.FormatUSTAR, func(d []byte) io.Reader { return bytes.NewReader(d) }},
		{"ustar/discard", tar.FormatUSTAR, func(d []byte) io.Reader { return bufio.NewReaderSize(bytes.NewReader(d), 64<<10) }},
		{"pax/read", tar.FormatPAX, func(d []byte) io.Reader { return bytes.NewReader(d) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			data := benchArchive(b, bc.format)
			b.SetBytes(int64(len(data)))
			b.ReportAllocs()
			for b.Loop() {
				s := NewScanner(bc.wrap(data), Limits{})
				n := 0
				for {
					_, err := s.Next()
					if err == io.EOF {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					n++
				}
				if n != benchMembers {
					b.Fatalf("got %d members, want %d", n, benchMembers)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchMembers), "ns/member")
		})
	}
}
