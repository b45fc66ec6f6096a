package fetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func writeTemp(t *testing.T, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "a.tar")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	return path
}

func mustOpen(t *testing.T, rawURL string) Source {
	t.Helper()
	src, err := Open(t.Context(), rawURL, Options{})
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	return src
}

func TestSourceIdentity(t *testing.T) {
	data := randomBytes(1000, 1)
	path := writeTemp(t, data)
	mtime := time.Date(2023, 5, 6, 7, 8, 9, 123456789, time.UTC)
	require.NoError(t, os.Chtimes(path, mtime, mtime))

	src := mustOpen(t, path)
	require.Equal(t, Identity{Size: 1000, LastModified: mtime}, normalize(src.Identity()))
	require.Equal(t, path, src.String())

	srv := newTestServer(t, &object{data: data, etag: `"abc"`, modtime: testModTime})
	src = mustOpen(t, srv.URL+"/a.tar")
	require.Equal(t, Identity{Size: 1000, ETag: `"abc"`, LastModified: testModTime}, normalize(src.Identity()))
	require.Equal(t, srv.URL+"/a.tar", src.String())

	// Credentials, a presigned URL's query and a fragment are not part
	// of the name, whether opened or not.
	signed := strings.Replace(srv.URL, "http://", "http://u:pw@", 1) + "/a.tar?X-Amz-Signature=s#f"
	src = mustOpen(t, signed)
	require.Equal(t, srv.URL+"/a.tar", src.String())
	name, err := Name(signed)
	require.NoError(t, err)
	require.Equal(t, src.String(), name)
}

// normalize makes times comparable with require.Equal.
func normalize(id Identity) Identity {
	id.LastModified = id.LastModified.UTC()
	return id
}

func TestOpenURLForms(t *testing.T) {
	data := randomBytes(10, 2)
	dir := t.TempDir()
	path := filepath.Join(dir, "x y.tar")
	require.NoError(t, os.WriteFile(path, data, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "c:d.tar"), data, 0o644))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "fifo"), 0o644))

	tests := []struct {
		name    string
		url     string
		wantErr string // "" for success
		is      error
	}{
		{name: "absolute path", url: path},
		{name: "relative path", url: "x y.tar"},
		{name: "relative path with colon", url: "c:d.tar"},
		{name: "file URL", url: "file://" + strings.ReplaceAll(path, " ", "%20")},
		{name: "file URL localhost", url: "file://localhost" + path},
		{name: "missing file", url: filepath.Join(dir, "nope.tar"), wantErr: "no such file", is: ErrNotFound},
		{name: "missing file URL", url: "file://" + filepath.Join(dir, "nope.tar"), is: ErrNotFound},
		{name: "directory", url: dir, wantErr: "is a directory"},
		{name: "fifo", url: filepath.Join(dir, "fifo"), wantErr: "not a regular file"},
		{name: "file URL with host", url: "file://otherhost" + path, wantErr: "only local files"},
		{name: "unknown scheme", url: "ftp://host/a.tar", wantErr: `unsupported URL scheme "ftp"`},
		{name: "empty", url: "", wantErr: "empty URL"},
		{name: "http without host", url: "http:///a.tar", wantErr: "no host"},
	}
	t.Chdir(dir)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := Open(t.Context(), tt.url, Options{})
			if tt.wantErr == "" && tt.is == nil {
				require.NoError(t, err)
				defer src.Close()
				name, err := Name(tt.url)
				require.NoError(t, err)
				require.Equal(t, src.String(), name)
				got := make([]byte, 10)
				_, err = src.ReadAt(t.Context(), got, 0)
				require.NoError(t, err)
				require.Equal(t, data, got)
				return
			}
			require.Error(t, err)
			require.Nil(t, src)
			// Name refuses what Open refuses before opening, with
			// the same error.
			if _, nerr := Name(tt.url); nerr != nil {
				require.EqualError(t, nerr, err.Error())
			}
			if tt.is != nil {
				require.ErrorIs(t, err, tt.is)
			}
			require.ErrorContains(t, err, tt.wantErr)
		})
	}
}

// TestOpenMissingFile checks that a missing file is named with its path
// and the system's words, and is both ErrNotFound and fs.ErrNotExist.
func TestOpenMissingFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope.tar.gz")
	for _, tt := range []struct{ name, url string }{
		{"path", path},
		{"file URL", "file://" + path},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Open(t.Context(), tt.url, Options{})
			if want := "open " + path + ": no such file or directory"; err == nil || err.Error() != want {
				t.Errorf("got %v, want %s", err, want)
			}
			for _, target := range []error{ErrNotFound, fs.ErrNotExist} {
				if !errors.Is(err, target) {
					t.Errorf("got errors.Is(%v, %v) false, want true", err, target)
				}
			}
		})
	}
}

func TestFileSourceClosed(t *testing.T) {
	src := mustOpen(t, writeTemp(t, randomBytes(10, 3)))
	require.NoError(t, src.Close())
	require.NoError(t, src.Close())
	_, err := src.ReadAt(t.Context(), make([]byte, 1), 0)
	require.ErrorIs(t, err, os.ErrClosed)
}

func TestFileSourceShrunk(t *testing.T) {
	path := writeTemp(t, randomBytes(100, 4))
	src := mustOpen(t, path)
	require.NoError(t, os.Truncate(path, 50))
	n, err := src.ReadAt(t.Context(), make([]byte, 100), 0)
	require.ErrorIs(t, err, ErrChanged)
	require.Equal(t, 50, n)
}

func TestFileSourceCanceled(t *testing.T) {
	src := mustOpen(t, writeTemp(t, randomBytes(10, 5)))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := src.ReadAt(ctx, make([]byte, 1), 0)
	require.ErrorIs(t, err, context.Canceled)
}

func TestIdentityKey(t *testing.T) {
	base := Identity{
		Size:         123456,
		ETag:         `"abc"`,
		LastModified: time.Date(2024, 1, 2, 3, 4, 5, 6, time.UTC),
		VersionID:    "v7",
	}
	// A saved index is keyed by this string: it must never change for a
	// given identity. Changing the encoding means renaming every cache.
	require.Equal(t, "e05664fedf736d2eb55128148b332e76", base.Key())
	require.Len(t, Identity{}.Key(), 32)

	berlin := time.FixedZone("CET", 3600)
	same := base
	same.LastModified = base.LastModified.In(berlin)
	require.Equal(t, base.Key(), same.Key(), "time zone must not matter")

	variants := map[string]Identity{}
	v := base
	v.Size++
	variants["size"] = v
	v = base
	v.ETag = `W/"abc"`
	variants["etag"] = v
	v = base
	v.LastModified = v.LastModified.Add(time.Nanosecond)
	variants["mtime ns"] = v
	v = base
	v.LastModified = time.Time{}
	variants["no mtime"] = v
	v = base
	v.VersionID = ""
	variants["version"] = v
	// Field boundaries are length-prefixed: moving bytes between fields
	// changes the key.
	variants["shifted"] = Identity{Size: base.Size, ETag: `"abc"v7`, LastModified: base.LastModified}
	keys := map[string]string{base.Key(): "base"}
	for name, id := range variants {
		k := id.Key()
		if prev, dup := keys[k]; dup {
			t.Errorf("%s: got the key of %s", name, prev)
		}
		keys[k] = name
	}
}

func TestIsRetryable(t *testing.T) {
	tests := []struct {
		err  error
		want bool
	}{
		{nil, false},
		{&StatusError{Code: 500, Status: "500 Internal Server Error"}, true},
		{fmt.Errorf("read x: %w", &StatusError{Code: 503}), true},
		{&StatusError{Code: 429}, true},
		{&StatusError{Code: 408}, true},
		{&StatusError{Code: 501}, false},
		{&StatusError{Code: 403}, false},
		{&StatusError{Code: 400}, false},
		{fmt.Errorf("read x: %w", io.ErrUnexpectedEOF), true},
		{&connError{err: syscall.ECONNRESET}, true},
		{fmt.Errorf("x: %w", ErrChanged), false},
		{fmt.Errorf("x: %w", ErrNotFound), false},
		{fmt.Errorf("x: %w", ErrNoRange), false},
		{ErrClosed, false},
		{context.Canceled, false},
		{&connError{err: context.DeadlineExceeded}, false},
		{errors.New("other"), false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.err), func(t *testing.T) {
			if got := IsRetryable(tt.err); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// TestClassifyTransport checks which transport errors are retried: those
// every attempt would meet are permanent, cut connections and timeouts
// are not.
func TestClassifyTransport(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"server gave HTTP response to HTTPS client", http.ErrSchemeMismatch, false},
		{"not a TLS handshake", tls.RecordHeaderError{Msg: "tls: first record does not look like a TLS handshake"}, false},
		{"certificate verification", &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, false},
		{"unknown authority", x509.UnknownAuthorityError{}, false},
		{"wrong host name", x509.HostnameError{Certificate: &x509.Certificate{}, Host: "example.com"}, false},
		{"expired", x509.CertificateInvalidError{Reason: x509.Expired}, false},
		{"redirect loop", fmt.Errorf("%w: a redirect loop", errRedirects), false},
		{"no such host", &net.DNSError{Err: "no such host", Name: "nope.invalid", IsNotFound: true}, false},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"refused", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}, true},
		{"timeout", &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{"cut", io.ErrUnexpectedEOF, true},
		{"DNS outage", &net.DNSError{Err: "server misbehaving", Name: "example.com", IsTemporary: true}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := IsRetryable(classifyTransport(t.Context(), tt.err)); got != tt.want {
				t.Errorf("got IsRetryable %v, want %v", got, tt.want)
			}
		})
	}
}

var testModTime = time.Date(2024, 3, 4, 5, 6, 7, 0, time.UTC)

func TestStatusErrorMessage(t *testing.T) {
	err := error(&StatusError{Code: http.StatusBadGateway, Status: "502 Bad Gateway"})
	require.Equal(t, "unexpected HTTP status 502 Bad Gateway", err.Error())
}
