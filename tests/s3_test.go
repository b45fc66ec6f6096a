package tests

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tarmount/tarmount/internal/testutil/corpus"
	"github.com/tarmount/tarmount/internal/testutil/s3server"
	"github.com/tarmount/tarmount/internal/testutil/tarbuild"
	"github.com/tarmount/tarmount/internal/testutil/treecmp"
)

// s3Env gives the archives that t opens, and the tarmount processes it
// starts, the server's root credentials through the standard AWS chain,
// and nothing of the caller's AWS setup (profiles, regions, endpoints,
// instance roles).
func s3Env(t *testing.T, srv *s3server.Server) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	none := filepath.Join(t.TempDir(), "none")
	t.Setenv("AWS_CONFIG_FILE", none)
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", none)
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
	for _, kv := range srv.Env() {
		k, v, _ := strings.Cut(kv, "=")
		t.Setenv(k, v)
	}
}

// TestMountS3 mounts a .tar.gz from a real S3-compatible server at an
// endpoint URL with credentials from the environment, and compares the
// tree with what GNU tar extracts; tarmount refuses wrong credentials
// with one line.
func TestMountS3(t *testing.T) {
	needFUSE(t)
	srv := s3server.ForTest(t, s3server.Options{})
	s3Env(t, srv)
	spec := tarbuild.Spec{Tool: "gnutar", Format: "posix", Codec: "gzip"}
	work := t.TempDir()
	src, ref := filepath.Join(work, "src"), filepath.Join(work, "ref")
	if err := os.Mkdir(ref, 0o755); err != nil {
		t.Fatal(err)
	}
	corpus.MakeTree(t, src, corpus.TreeOptionsFor(spec))
	archive := filepath.Join(work, "a.tar.gz")
	tarbuild.Archive(t, src, archive, spec)
	tarbuild.Extract(t, archive, ref)
	srv.CreateBucket(t, "archives")
	srv.PutFile(t, "archives", "dir/a.tar.gz", archive)
	url := "s3://archives/dir/a.tar.gz"
	cache := filepath.Join(work, "cache")

	opts := libOptions(cache)
	opts.EndpointURL = srv.URL
	m := libMount(t, url, opts)
	treecmp.Compare(t, ref, m.dir, treecmp.Options{MaxErrors: 20})
	m.stop(t)

	// The saved index is found again for the same object.
	again := libMount(t, url, opts)
	if strings.Contains(again.log.String(), "msg=indexing") {
		t.Errorf("second mount indexed again:\n%s", again.log)
	}
	if data, err := os.ReadFile(filepath.Join(again.dir, corpus.PathReadme)); err != nil || len(data) == 0 {
		t.Errorf("read through remount: %v", err)
	}
	again.stop(t)

	// Wrong credentials fail tarmount at once with the server's reason
	// (--endpoint-url, and the one-line error).
	t.Setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
	mnt := t.TempDir()
	out, err := exec.Command(binary, url, mnt, "--endpoint-url", srv.URL, "--mount-name", testMountName,
		"--cache-dir", filepath.Join(work, "cache2")).CombinedOutput()
	last := strings.TrimSpace(string(out))
	if i := strings.LastIndex(last, "\n"); i >= 0 {
		last = last[i+1:]
	}
	if err == nil || !strings.HasPrefix(last, "tarmount: open "+url+": ") || !strings.Contains(last, "SignatureDoesNotMatch") {
		t.Errorf("wrong secret: got err %v, last line %q; want a tarmount: error naming SignatureDoesNotMatch", err, last)
	}
	if isMounted(mnt) {
		t.Errorf("%s is mounted after a failed mount", mnt)
	}
}
