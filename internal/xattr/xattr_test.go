package xattr

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/internal/testutil"
)

// TestUser sets user.* attributes on a file (one longer than the first
// read buffer, one empty) and a trusted.* one, and reads back the user.*
// ones only, not following a symlink to the file.
func TestUser(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"user.a": "1", "user.long": strings.Repeat("x", 4000), "user.empty": ""}
	for k, v := range want {
		if err := unix.Setxattr(p, k, []byte(v), 0); err != nil {
			testutil.Missing(t, "no user xattrs on this filesystem: %v", err)
		}
	}
	unix.Setxattr(p, "trusted.t", []byte("root only"), 0) // ignored when not root
	got, err := User(p)
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %q (err %v), want %q", got, err, want)
	}
	link := filepath.Join(dir, "l")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	if got, err := User(link); err != nil || len(got) != 0 {
		t.Errorf("through a symlink: got %q (err %v), want none (the link's own)", got, err)
	}
}
