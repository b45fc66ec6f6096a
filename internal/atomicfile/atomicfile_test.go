package atomicfile

import (
	"strings"
	"syscall"
	"testing"
)

// TestCreateTempMode: the file has mode 0644 less the umask, and the
// pattern's prefix and suffix.
func TestCreateTempMode(t *testing.T) {
	for _, umask := range []int{0o022, 0o077, 0o002} {
		old := syscall.Umask(umask)
		f, err := CreateTemp(t.TempDir(), ".tmp-*.idx")
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		st, err := f.Stat()
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := st.Mode().Perm(), 0o644&^uint32(umask); uint32(got) != want {
			t.Errorf("umask %03o: got mode %03o, want %03o", umask, got, want)
		}
		if n := st.Name(); !strings.HasPrefix(n, ".tmp-") || !strings.HasSuffix(n, ".idx") || len(n) <= len(".tmp-.idx") {
			t.Errorf("name %q: want .tmp-RANDOM.idx", n)
		}
	}
}
