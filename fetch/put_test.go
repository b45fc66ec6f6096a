package fetch

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestBeside(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"rt/a.tar.gz", "rt/a.tar.gz.idx"},
		{"/srv/a.tar.gz", "/srv/a.tar.gz.idx"},
		{"file:///srv/a.tar.gz", "file:///srv/a.tar.gz.idx"},
		{"https://h/dir/a.tar.gz", "https://h/dir/a.tar.gz.idx"},
		{"https://h/dir/a.tar.gz?token=x", "https://h/dir/a.tar.gz.idx?token=x"},
		{"https://h/dir/a%20b.tar.gz", "https://h/dir/a%20b.tar.gz.idx"},
		{"s3://bucket/prefix/a.tar.gz", "s3://bucket/prefix/a.tar.gz.idx"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := Beside(tc.in, ".idx")
			if err != nil || got != tc.want {
				t.Errorf("got %q (err %v), want %q", got, err, tc.want)
			}
		})
	}
	if _, err := Beside("ftp://h/a", ".idx"); err == nil {
		t.Error("Beside of an ftp URL: got no error, want the scheme refused")
	}
}

func TestPutFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.idx")
	for _, data := range []string{"first", "second, longer"} {
		if err := Put(context.Background(), path, []byte(data), Options{}); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(path)
		if err != nil || string(got) != data {
			t.Errorf("got %q (err %v), want %q", got, err, data)
		}
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 {
		t.Errorf("got %d files in the directory, want only the one written (no temporary left)", len(ents))
	}
	if err := Put(context.Background(), "https://example.com/a.idx", []byte("x"), Options{}); !errors.Is(err, ErrNotWritable) {
		t.Errorf("put over https: got %v, want ErrNotWritable", err)
	}
}
