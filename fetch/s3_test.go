package fetch

import (
	"bytes"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"github.com/stretchr/testify/require"

	"github.com/tarmount/tarmount/internal/testutil"
	"github.com/tarmount/tarmount/internal/testutil/s3server"
)

// Profiles of the shared credentials file that TestMain writes.
const (
	profileWrongSecret = "wrong-secret" // the root access key with another secret
	profileUnknownKey  = "unknown-key"  // an access key the server does not know
)

// awsDir holds the AWS config and credentials files of this test binary.
var awsDir string

// TestMain gives the tests an AWS environment of their own: no AWS_*
// variable of the caller, IMDS off, and shared files whose default profile
// holds the test server's root credentials.
func TestMain(m *testing.M) {
	code := func() int {
		for _, kv := range os.Environ() {
			if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "AWS_") {
				os.Unsetenv(k)
			}
		}
		dir, err := os.MkdirTemp("", "tarmount-aws-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		awsDir = dir
		creds := fmt.Sprintf("[default]\naws_access_key_id = %s\naws_secret_access_key = %s\n\n"+
			"[%s]\naws_access_key_id = %s\naws_secret_access_key = not-the-secret\n\n"+
			"[%s]\naws_access_key_id = nobody\naws_secret_access_key = whatever\n",
			s3server.AccessKey, s3server.SecretKey, profileWrongSecret, s3server.AccessKey, profileUnknownKey)
		for name, content := range map[string]string{"credentials": creds, "config": "", "empty": ""} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		os.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
		os.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
		os.Setenv("AWS_EC2_METADATA_DISABLED", "true")
		defer stopSharedS3()
		return m.Run()
	}()
	os.Exit(code)
}

var shared struct {
	once    sync.Once
	srv     *s3server.Server
	err     error
	buckets atomic.Int64
}

// sharedS3 returns the versitygw server that the tests of this package
// share, started on first use; it skips t when versitygw is not installed.
func sharedS3(t testing.TB) *s3server.Server {
	t.Helper()
	shared.once.Do(func() {
		bin, err := s3server.Binary()
		if err != nil {
			shared.err = err
			return
		}
		dir, err := os.MkdirTemp("", "tarmount-versitygw-")
		if err != nil {
			shared.err = err
			return
		}
		shared.srv, shared.err = s3server.Start(bin, dir, s3server.Options{})
	})
	if shared.srv == nil {
		testutil.Missing(t, "no S3 server: %v", shared.err)
	}
	return shared.srv
}

func stopSharedS3() {
	if shared.srv != nil {
		shared.srv.Close()
		os.RemoveAll(filepath.Dir(shared.srv.Dir))
	}
}

// newBucket creates a bucket with a name no other test uses.
func newBucket(t testing.TB, srv *s3server.Server) string {
	t.Helper()
	b := fmt.Sprintf("test-%d", shared.buckets.Add(1))
	srv.CreateBucket(t, b)
	return b
}

// s3Store keeps objects in a bucket of the shared server; put is a
// PutObject, so a replaced object has a new ETag.
type s3Store struct {
	srv    *s3server.Server
	bucket string
}

func newS3Store(t *testing.T) store {
	srv := sharedS3(t)
	return &s3Store{srv: srv, bucket: newBucket(t, srv)}
}

func (s *s3Store) put(t *testing.T, name string, data []byte) string {
	s.srv.Put(t, s.bucket, name, data)
	return s.url(name)
}

func (s *s3Store) remove(t *testing.T, name string) { s.srv.Delete(t, s.bucket, name) }
func (s *s3Store) url(name string) string           { return "s3://" + s.bucket + "/" + name }
func (s *s3Store) display(name string) string       { return s.url(name) }
func (s *s3Store) options() Options                 { return Options{EndpointURL: s.srv.URL} }

// recorder is a RoundTripper that records the requests it sends.
type recorder struct {
	mu   sync.Mutex
	reqs []*http.Request
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.reqs = append(r.reqs, req.Clone(req.Context()))
	r.mu.Unlock()
	return http.DefaultTransport.RoundTrip(req)
}

// roundTripFunc is a RoundTripper of a function.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// take returns the requests recorded since the last call as "METHOD path?query".
func (r *recorder) take() ([]string, []*http.Request) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var lines []string
	for _, q := range r.reqs {
		line := q.Method + " " + q.URL.Path
		if q.URL.RawQuery != "" {
			line += "?" + q.URL.RawQuery
		}
		lines = append(lines, line)
	}
	reqs := r.reqs
	r.reqs = nil
	return lines, reqs
}

func TestS3Requests(t *testing.T) {
	srv := sharedS3(t)
	bucket := newBucket(t, srv)
	etag, _ := srv.Put(t, bucket, "a.tar", randomBytes(1000, 1))
	url := "s3://" + bucket + "/a.tar"

	t.Run("region given", func(t *testing.T) {
		rec := &recorder{}
		src, err := Open(t.Context(), url, Options{EndpointURL: srv.URL, Region: "us-east-1", Client: &http.Client{Transport: rec}})
		require.NoError(t, err)
		defer src.Close()
		lines, _ := rec.take()
		require.Equal(t, []string{"HEAD /" + bucket + "/a.tar"}, lines, "one HeadObject, path-style")
		require.Equal(t, etag, src.Identity().ETag)
		require.Equal(t, url, src.String())

		_, err = src.ReadAt(t.Context(), make([]byte, 100), 900)
		require.NoError(t, err)
		lines, reqs := rec.take()
		require.Equal(t, []string{"GET /" + bucket + "/a.tar?x-id=GetObject"}, lines, "one GetObject")
		h := reqs[0].Header
		require.Equal(t, "bytes=900-999", h.Get("Range"))
		require.Equal(t, etag, h.Get("If-Match"))
		require.Contains(t, h.Get("Authorization"), "/us-east-1/s3/aws4_request")
		require.Empty(t, h.Get("X-Amz-Checksum-Mode"), "ranged GETs must not ask for checksums")
	})

	t.Run("region discovered", func(t *testing.T) {
		// The open cancels the region probe once the HeadObject
		// succeeds, which may be before the probe's request is sent:
		// the HeadObject waits here until the probe's HeadBucket is.
		rec := &recorder{}
		probed := make(chan struct{})
		var once sync.Once
		tr := roundTripFunc(func(req *http.Request) (*http.Response, error) {
			if req.URL.Path == "/"+bucket {
				once.Do(func() { close(probed) })
			} else {
				select {
				case <-probed:
				case <-time.After(10 * time.Second): // the check below fails
				}
			}
			return rec.RoundTrip(req)
		})
		src, err := Open(t.Context(), url, Options{EndpointURL: srv.URL, Client: &http.Client{Transport: tr}})
		require.NoError(t, err)
		defer src.Close()
		lines, reqs := rec.take()
		require.ElementsMatch(t, []string{"HEAD /" + bucket, "HEAD /" + bucket + "/a.tar"}, lines)
		for _, r := range reqs {
			if r.URL.Path == "/"+bucket {
				require.Empty(t, r.Header.Get("Authorization"), "HeadBucket for the region is anonymous")
			}
		}
	})
}

func TestS3Versioned(t *testing.T) {
	srv := sharedS3(t)
	bucket := newBucket(t, srv)
	srv.EnableVersioning(t, bucket)
	v1 := randomBytes(10_000, 1)
	_, version := srv.Put(t, bucket, "a.tar", v1)
	require.NotEmpty(t, version)

	rec := &recorder{}
	src, err := Open(t.Context(), "s3://"+bucket+"/a.tar", Options{EndpointURL: srv.URL, Region: "us-east-1", Client: &http.Client{Transport: rec}})
	require.NoError(t, err)
	defer src.Close()
	require.Equal(t, version, src.Identity().VersionID)
	rec.take()

	// The pinned version outlives a new one: reads go on returning its
	// bytes, not an error.
	srv.Put(t, bucket, "a.tar", randomBytes(10_000, 2))
	got := make([]byte, 5000)
	_, err = src.ReadAt(t.Context(), got, 1000)
	require.NoError(t, err)
	require.True(t, bytes.Equal(v1[1000:6000], got), "bytes of the pinned version")
	_, reqs := rec.take()
	require.Len(t, reqs, 1)
	require.Equal(t, version, reqs[0].URL.Query().Get("versionId"))
	require.Empty(t, reqs[0].Header.Get("If-Match"), "a version id pins by itself")
}

func TestS3Credentials(t *testing.T) {
	srv := sharedS3(t)
	bucket := newBucket(t, srv)
	srv.Put(t, bucket, "a.tar", randomBytes(100, 1))
	url := "s3://" + bucket + "/a.tar"
	tests := []struct {
		name    string
		profile string
		want    []string
	}{
		{"wrong secret", profileWrongSecret, []string{"HTTP 403 SignatureDoesNotMatch", "check the AWS credentials"}},
		// S3 answers 403 InvalidAccessKeyId; versitygw 404 XAdminUserNotFound.
		{"unknown key", profileUnknownKey, []string{"access key"}},
		{"missing profile", "no-such-profile", []string{"no-such-profile"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := Open(t.Context(), url, Options{EndpointURL: srv.URL, Profile: tt.profile})
			require.Error(t, err)
			require.Nil(t, src)
			require.ErrorContains(t, err, "open "+url+": ")
			for _, w := range tt.want {
				require.ErrorContains(t, err, w)
			}
			require.False(t, IsRetryable(err), "IsRetryable(%v)", err)
			require.NotErrorIs(t, err, ErrNotFound)
		})
	}

	t.Run("none", func(t *testing.T) {
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(awsDir, "empty"))
		_, err := Open(t.Context(), url, Options{EndpointURL: srv.URL})
		require.ErrorContains(t, err, "no usable AWS credentials")
	})

	t.Run("environment", func(t *testing.T) {
		t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(awsDir, "empty"))
		t.Setenv("AWS_ACCESS_KEY_ID", s3server.AccessKey)
		t.Setenv("AWS_SECRET_ACCESS_KEY", s3server.SecretKey)
		src, err := Open(t.Context(), url, Options{EndpointURL: srv.URL})
		require.NoError(t, err)
		src.Close()
	})

	t.Run("AWS_PROFILE", func(t *testing.T) {
		t.Setenv("AWS_PROFILE", profileWrongSecret)
		_, err := Open(t.Context(), url, Options{EndpointURL: srv.URL})
		require.ErrorContains(t, err, "SignatureDoesNotMatch")
	})
}

func TestS3PublicBucket(t *testing.T) {
	srv := sharedS3(t)
	private, public := newBucket(t, srv), newBucket(t, srv)
	data := randomBytes(5000, 1)
	for _, b := range []string{private, public} {
		srv.Put(t, b, "a.tar", data)
	}
	srv.AllowPublicRead(t, public)
	// Unsigned requests must work without any credentials around.
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(awsDir, "empty"))

	rec := &recorder{}
	src, err := Open(t.Context(), "s3://"+public+"/a.tar", Options{EndpointURL: srv.URL, NoSignRequest: true, Client: &http.Client{Transport: rec}})
	require.NoError(t, err)
	defer src.Close()
	got := make([]byte, len(data))
	_, err = src.ReadAt(t.Context(), got, 0)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got))
	_, reqs := rec.take()
	for _, r := range reqs {
		require.Empty(t, r.Header.Get("Authorization"), "%s %s is signed", r.Method, r.URL)
	}

	_, err = Open(t.Context(), "s3://"+private+"/a.tar", Options{EndpointURL: srv.URL, NoSignRequest: true})
	require.ErrorContains(t, err, "HTTP 403 AccessDenied")
}

func TestS3Region(t *testing.T) {
	srv := s3server.ForTest(t, s3server.Options{Region: "eu-west-3"})
	srv.CreateBucket(t, "paris")
	data := randomBytes(3000, 1)
	srv.Put(t, "paris", "a.tar", data)
	url := "s3://paris/a.tar"
	read := func(t *testing.T, opts Options) error {
		src, err := Open(t.Context(), url, opts)
		if err != nil {
			return err
		}
		defer src.Close()
		got := make([]byte, len(data))
		if _, err := src.ReadAt(t.Context(), got, 0); err != nil {
			return err
		}
		require.True(t, bytes.Equal(data, got))
		return nil
	}
	// versitygw checks the region of each signature, so a read that works
	// was signed for the right one.
	t.Run("given", func(t *testing.T) {
		require.NoError(t, read(t, Options{EndpointURL: srv.URL, Region: "eu-west-3"}))
	})
	t.Run("discovered", func(t *testing.T) {
		require.NoError(t, read(t, Options{EndpointURL: srv.URL}))
	})
	t.Run("discovered over AWS_REGION", func(t *testing.T) {
		t.Setenv("AWS_REGION", "ap-south-1")
		require.NoError(t, read(t, Options{EndpointURL: srv.URL}))
	})
	t.Run("wrong", func(t *testing.T) {
		err := read(t, Options{EndpointURL: srv.URL, Region: "us-west-2"})
		require.ErrorContains(t, err, "AuthorizationHeaderMalformed")
		require.ErrorContains(t, err, "eu-west-3")
	})
}

// TestS3RegionProbeNotWaited: the anonymous request that asks the
// bucket's region goes out beside the HeadObject; once the HeadObject has
// answered, the open does not wait for it. Here a proxy in front of the
// server holds every HeadBucket until the client goes.
func TestS3RegionProbeNotWaited(t *testing.T) {
	srv := s3server.ForTest(t, s3server.Options{Region: "eu-west-3"})
	srv.CreateBucket(t, "slowprobe")
	data := randomBytes(3000, 2)
	srv.Put(t, "slowprobe", "a.tar", data)
	target, err := url.Parse(srv.URL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var held atomic.Int64
	arrived := make(chan struct{})
	var once sync.Once
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodHead && strings.Trim(r.URL.Path, "/") == "slowprobe" {
			held.Add(1)
			once.Do(func() { close(arrived) })
			<-r.Context().Done()
			return
		}
		if r.Method == http.MethodHead {
			// The HeadObject answers only once the probe is held, so
			// that the probe is surely in flight when the open could
			// end: else a fast reply cancels it before it is sent.
			select {
			case <-arrived:
			case <-time.After(5 * time.Second):
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	t.Setenv("AWS_REGION", "eu-west-3") // the HeadObject is signed right
	start := time.Now()
	src, err := Open(t.Context(), "s3://slowprobe/a.tar", Options{EndpointURL: front.URL})
	require.NoError(t, err)
	defer src.Close()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("open took %v with the region probe held, want it not to wait for the probe", d)
	}
	require.Equal(t, int64(len(data)), src.Identity().Size)
	require.Equal(t, int64(1), held.Load(), "region probes held")
}

func TestS3EndpointFromEnvironment(t *testing.T) {
	srv := sharedS3(t)
	bucket := newBucket(t, srv)
	srv.Put(t, bucket, "a.tar", randomBytes(100, 1))
	url := "s3://" + bucket + "/a.tar"

	t.Setenv("AWS_ENDPOINT_URL", srv.URL)
	src, err := Open(t.Context(), url, Options{})
	require.NoError(t, err, "AWS_ENDPOINT_URL must be used, with path-style addressing")
	src.Close()

	// The option wins over the environment.
	t.Setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
	t.Setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:1")
	src, err = Open(t.Context(), url, Options{EndpointURL: srv.URL})
	require.NoError(t, err)
	src.Close()
}

// TestS3ConfigFromEnvironment checks, without a server, that what the S3
// options leave empty comes from the variables and the profile that the
// AWS CLI reads, in its order, and that the options win over them.
func TestS3ConfigFromEnvironment(t *testing.T) {
	config := filepath.Join(t.TempDir(), "config")
	err := os.WriteFile(config, []byte(`[profile west]
region = us-west-2
endpoint_url = http://west.example:9000
aws_access_key_id = k
aws_secret_access_key = s

[profile north]
region = eu-north-1
aws_access_key_id = k
aws_secret_access_key = s
`), 0o600)
	require.NoError(t, err)
	const (
		all   = "http://all.example:1" // AWS_ENDPOINT_URL
		s3    = "http://s3.example:2"  // AWS_ENDPOINT_URL_S3
		given = "http://given.example:3"
		west  = "http://west.example:9000"
	)
	tests := []struct {
		name     string
		env      map[string]string
		opts     Options
		region   string // the configured one; "" when none
		endpoint string // "" for AWS
	}{
		{"nothing", nil, Options{}, "", ""},
		{"AWS_REGION", map[string]string{"AWS_REGION": "eu-west-1"}, Options{}, "eu-west-1", ""},
		{"AWS_DEFAULT_REGION", map[string]string{"AWS_DEFAULT_REGION": "eu-west-2"}, Options{}, "eu-west-2", ""},
		{"AWS_REGION first", map[string]string{"AWS_REGION": "eu-west-1", "AWS_DEFAULT_REGION": "eu-west-2"}, Options{}, "eu-west-1", ""},
		{"region given", map[string]string{"AWS_REGION": "eu-west-1"}, Options{Region: "ap-south-1"}, "ap-south-1", ""},
		{"AWS_PROFILE", map[string]string{"AWS_PROFILE": "west"}, Options{}, "us-west-2", west},
		{"AWS_DEFAULT_PROFILE", map[string]string{"AWS_DEFAULT_PROFILE": "north"}, Options{}, "eu-north-1", ""},
		{"profile given", map[string]string{"AWS_PROFILE": "west"}, Options{Profile: "north"}, "eu-north-1", ""},
		{"AWS_REGION over the profile", map[string]string{"AWS_PROFILE": "west", "AWS_REGION": "eu-west-1"}, Options{}, "eu-west-1", west},
		{"AWS_ENDPOINT_URL", map[string]string{"AWS_ENDPOINT_URL": all}, Options{}, "", all},
		{"AWS_ENDPOINT_URL_S3", map[string]string{"AWS_ENDPOINT_URL_S3": s3}, Options{}, "", s3},
		{"AWS_ENDPOINT_URL_S3 first", map[string]string{"AWS_ENDPOINT_URL": all, "AWS_ENDPOINT_URL_S3": s3}, Options{}, "", s3},
		{"AWS_ENDPOINT_URL over the profile", map[string]string{"AWS_PROFILE": "west", "AWS_ENDPOINT_URL": all}, Options{}, "us-west-2", all},
		{"endpoint given", map[string]string{"AWS_PROFILE": "west", "AWS_ENDPOINT_URL": all, "AWS_ENDPOINT_URL_S3": s3}, Options{EndpointURL: given}, "us-west-2", given},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("AWS_CONFIG_FILE", config)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			cfg, err := loadS3Config(t.Context(), tt.opts, sdkLogger{log: slog.New(slog.DiscardHandler)})
			require.NoError(t, err)
			require.Equal(t, tt.region, cfg.Region, "region")
			o := newS3Client(cfg, tt.opts, defaultS3Region).Options()
			require.Equal(t, tt.endpoint, aws.ToString(o.BaseEndpoint), "endpoint")
			require.Equal(t, tt.endpoint != "", o.UsePathStyle, "path-style addressing")
		})
	}
}

func TestS3URLForms(t *testing.T) {
	tests := []struct{ url, want string }{
		{"s3://", "no bucket"},
		{"s3:///key", "no bucket"},
		{"s3://bucket", "no object key"},
		{"s3://bucket/", "no object key"},
		{"s3://user@bucket/key", "invalid bucket name"},
		{"s3://bucket:9000/key", "invalid bucket name"},
	}
	for _, tt := range tests {
		t.Run(tt.url, func(t *testing.T) {
			_, err := Open(t.Context(), tt.url, Options{})
			require.ErrorContains(t, err, tt.want)
		})
	}
	_, err := Open(t.Context(), "s3://bucket/key", Options{EndpointURL: "127.0.0.1:9000"})
	require.ErrorContains(t, err, "want http://host")

	bucket, key, err := parseS3URL("S3://bkt/dir/a b%20c?x#y")
	require.NoError(t, err)
	require.Equal(t, "bkt", bucket)
	require.Equal(t, "dir/a b%20c?x#y", key, "keys are taken verbatim")
}

// fakeS3 answers HeadObject for one object and lets a test choose the
// answer to each GetObject: what no real server can be made to do.
type fakeS3 struct {
	data []byte
	etag string
	get  func(w http.ResponseWriter, r *http.Request) // nil serves the range
}

func (f *fakeS3) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("ETag", f.etag)
	w.Header().Set("Last-Modified", testModTime.Format(http.TimeFormat))
	if r.Method == http.MethodHead {
		w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
		return
	}
	if f.get != nil {
		f.get(w, r)
		return
	}
	http.ServeContent(w, r, "", testModTime, bytes.NewReader(f.data))
}

func s3ErrorReply(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	fmt.Fprintf(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>%s</Code><Message>injected %s</Message><RequestId>r1</RequestId></Error>`, code, code)
}

func TestS3Errors(t *testing.T) {
	const size = 1000
	tests := []struct {
		name      string
		get       func(w http.ResponseWriter, r *http.Request)
		is        error
		contains  string
		retryable bool
	}{
		{name: "slow down", get: func(w http.ResponseWriter, r *http.Request) { s3ErrorReply(w, 503, "SlowDown") },
			contains: "S3 GetObject: HTTP 503 SlowDown: injected SlowDown", retryable: true},
		{name: "internal error", get: func(w http.ResponseWriter, r *http.Request) { s3ErrorReply(w, 500, "InternalError") },
			retryable: true},
		{name: "request timeout 400", get: func(w http.ResponseWriter, r *http.Request) { s3ErrorReply(w, 400, "RequestTimeout") },
			retryable: true},
		{name: "throttling 400", get: func(w http.ResponseWriter, r *http.Request) { s3ErrorReply(w, 400, "Throttling") },
			retryable: true},
		{name: "502 without body", get: func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(502) },
			retryable: true},
		{name: "not implemented", get: func(w http.ResponseWriter, r *http.Request) { s3ErrorReply(w, 501, "NotImplemented") }},
		{name: "access denied", get: func(w http.ResponseWriter, r *http.Request) { s3ErrorReply(w, 403, "AccessDenied") },
			contains: "HTTP 403 AccessDenied"},
		{name: "no such key", get: func(w http.ResponseWriter, r *http.Request) { s3ErrorReply(w, 404, "NoSuchKey") },
			is: ErrNotFound, contains: "fetch: not found (S3 GetObject: HTTP 404 NoSuchKey"},
		{name: "precondition failed", get: func(w http.ResponseWriter, r *http.Request) { s3ErrorReply(w, 412, "PreconditionFailed") },
			is: ErrChanged, contains: "HTTP 412 PreconditionFailed"},
		{name: "invalid range", get: func(w http.ResponseWriter, r *http.Request) { s3ErrorReply(w, 416, "InvalidRange") },
			is: ErrChanged},
		{name: "IfMatch ignored, new ETag", get: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("ETag", `"other"`)
			r.Header.Del("If-Match")
			http.ServeContent(w, r, "", testModTime, bytes.NewReader(make([]byte, size)))
		}, is: ErrChanged, contains: `ETag "other", was "e1"`},
		{name: "IfMatch ignored, new size", get: func(w http.ResponseWriter, r *http.Request) {
			r.Header.Del("If-Match")
			http.ServeContent(w, r, "", testModTime, bytes.NewReader(make([]byte, size+1)))
		}, is: ErrChanged, contains: "size 1001, was 1000"},
		{name: "range ignored", get: func(w http.ResponseWriter, r *http.Request) {
			r.Header.Del("Range")
			http.ServeContent(w, r, "", testModTime, bytes.NewReader(make([]byte, size)))
		}, is: ErrNoRange},
		{name: "short body", get: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Range", "bytes 10-19/1000")
			w.Header().Set("Content-Length", "10")
			w.WriteHeader(http.StatusPartialContent)
			w.Write([]byte("01234"))
		}, is: io.ErrUnexpectedEOF, retryable: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeS3{data: randomBytes(size, 1), etag: `"e1"`, get: tt.get}
			srv := httptest.NewServer(f)
			defer srv.Close()
			src, err := Open(t.Context(), "s3://bkt/a.tar", Options{EndpointURL: srv.URL, Region: "us-east-1"})
			require.NoError(t, err)
			defer src.Close()
			p := make([]byte, 10)
			n, err := src.ReadAt(t.Context(), p, 10)
			require.Error(t, err)
			if !errors.Is(err, io.ErrUnexpectedEOF) {
				require.Zero(t, n)
				require.Equal(t, make([]byte, 10), p, "no bytes from a failed read")
			}
			require.ErrorContains(t, err, "read s3://bkt/a.tar at 10: ")
			if tt.is != nil {
				require.ErrorIs(t, err, tt.is)
			}
			if tt.contains != "" {
				require.ErrorContains(t, err, tt.contains)
			}
			require.Equal(t, tt.retryable, IsRetryable(err), "IsRetryable(%v)", err)
		})
	}

	t.Run("connection refused", func(t *testing.T) {
		f := &fakeS3{data: randomBytes(size, 1), etag: `"e1"`}
		srv := httptest.NewServer(f)
		src, err := Open(t.Context(), "s3://bkt/a.tar", Options{EndpointURL: srv.URL, Region: "us-east-1"})
		require.NoError(t, err)
		srv.Close()
		_, err = src.ReadAt(t.Context(), make([]byte, 10), 0)
		require.Error(t, err)
		require.True(t, IsRetryable(err), "IsRetryable(%v)", err)
	})

	t.Run("one attempt per call", func(t *testing.T) {
		t.Setenv("AWS_MAX_ATTEMPTS", "5")
		var gets atomic.Int64
		f := &fakeS3{data: randomBytes(size, 1), etag: `"e1"`, get: func(w http.ResponseWriter, r *http.Request) {
			gets.Add(1)
			s3ErrorReply(w, 503, "SlowDown")
		}}
		srv := httptest.NewServer(f)
		defer srv.Close()
		src, err := Open(t.Context(), "s3://bkt/a.tar", Options{EndpointURL: srv.URL, Region: "us-east-1"})
		require.NoError(t, err)
		start := time.Now()
		_, err = src.ReadAt(t.Context(), make([]byte, 10), 0)
		require.True(t, IsRetryable(err))
		require.Equal(t, int64(1), gets.Load(), "the SDK must not retry")
		require.Less(t, time.Since(start), 5*time.Second)
	})
}

func TestIsRetryableS3(t *testing.T) {
	reply := func(status int, code string) error {
		resp := &smithyhttp.Response{Response: &http.Response{StatusCode: status, Header: http.Header{}}}
		var err error = &smithy.GenericAPIError{Code: code, Message: "m"}
		err = &smithyhttp.ResponseError{Response: resp, Err: err}
		return &smithy.OperationError{ServiceID: "S3", OperationName: "GetObject", Err: err}
	}
	tests := []struct {
		err  error
		want bool
	}{
		{reply(503, "SlowDown"), true},
		{reply(503, "ServiceUnavailable"), true},
		{reply(500, "InternalError"), true},
		{reply(400, "RequestTimeout"), true},
		{reply(400, "ThrottlingException"), true},
		{reply(403, "RequestTimeTooSkewed"), true},
		{reply(504, ""), true},
		{reply(429, ""), true},
		{reply(403, "AccessDenied"), false},
		{reply(400, "InvalidArgument"), false},
		{reply(501, "NotImplemented"), false},
		{fmt.Errorf("read: %w", reply(503, "SlowDown")), true},
		{&smithy.GenericAPIError{Code: "SlowDown"}, true},
		{errors.New("SlowDown"), false},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			if got := IsRetryable(tt.err); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestS3NotFound(t *testing.T) {
	srv := sharedS3(t)
	bucket := newBucket(t, srv)
	tests := []struct{ url, want string }{
		{"s3://" + bucket + "/missing.tar", "HTTP 404 NoSuchKey"},
		{"s3://no-such-bucket/a.tar", "HTTP 404 NoSuchBucket"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			_, err := Open(t.Context(), tt.url, Options{EndpointURL: srv.URL, Region: "us-east-1"})
			require.ErrorIs(t, err, ErrNotFound)
			require.ErrorContains(t, err, "open "+tt.url+": fetch: not found (S3 GetObject: "+tt.want)
		})
	}
}

// TestS3CABundle checks that a custom CA bundle (AWS_CA_BUNDLE) reaches
// the HTTP client that fetch makes for S3: without it, the test server's
// certificate is refused, for good; with it, reads work, over HTTP/1.1.
func TestS3CABundle(t *testing.T) {
	data := randomBytes(1000, 1)
	var protos sync.Map
	f := &fakeS3{data: data, etag: `"e1"`}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		protos.Store(r.Proto, true)
		f.ServeHTTP(w, r)
	}))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake
	srv.StartTLS()
	defer srv.Close()
	opts := Options{EndpointURL: srv.URL, Region: "us-east-1"}

	_, err := Open(t.Context(), "s3://bkt/a.tar", opts)
	require.ErrorContains(t, err, "certificate")
	require.False(t, IsRetryable(err), "IsRetryable(%v)", err)

	bundle := filepath.Join(t.TempDir(), "ca.pem")
	pemData := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	require.NoError(t, os.WriteFile(bundle, pemData, 0o644))
	t.Setenv("AWS_CA_BUNDLE", bundle)
	src, err := Open(t.Context(), "s3://bkt/a.tar", opts)
	require.NoError(t, err)
	defer src.Close()
	got := make([]byte, 100)
	_, err = src.ReadAt(t.Context(), got, 900)
	require.NoError(t, err)
	require.Equal(t, data[900:], got)
	protos.Range(func(k, _ any) bool {
		require.Equal(t, "HTTP/1.1", k, "parallel range requests need separate connections")
		return true
	})
}

// BenchmarkSourceReadAt reads one range per op from a loopback HTTP
// server and from versitygw: small reads show the cost of a request (the
// SDK's signing and middleware on the S3 side), large ones the throughput
// of one connection.
func BenchmarkSourceReadAt(b *testing.B) {
	data := randomBytes(8<<20, 1)
	for _, kind := range []string{"http", "s3"} {
		var url string
		var opts Options
		switch kind {
		case "http":
			srv := newTestServer(b, &object{data: data, etag: `"e"`, modtime: testModTime})
			url = srv.URL + "/a.tar"
		case "s3":
			srv := sharedS3(b)
			bucket := newBucket(b, srv)
			srv.Put(b, bucket, "a.tar", data)
			url, opts = "s3://"+bucket+"/a.tar", Options{EndpointURL: srv.URL, Region: "us-east-1"}
		}
		src, err := Open(b.Context(), url, opts)
		if err != nil {
			b.Fatal(err)
		}
		for _, n := range []int{4 << 10, 4 << 20} {
			b.Run(fmt.Sprintf("%s/len=%d", kind, n), func(b *testing.B) {
				p := make([]byte, n)
				b.SetBytes(int64(n))
				b.ReportAllocs()
				for b.Loop() {
					if _, err := src.ReadAt(b.Context(), p, 12345); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
		src.Close()
	}
}

// TestS3Prefix: an open with Options.Prefix learns the identity with one
// GetObject of the first ProbeBytes (no HeadObject) and keeps them; a
// stream from the start of the object then asks for none of them again.
// An empty object, which has no first bytes, still opens.
func TestS3Prefix(t *testing.T) {
	srv := sharedS3(t)
	bucket := newBucket(t, srv)
	data := randomBytes(3<<20, 4)
	srv.Put(t, bucket, "a.tar", data)
	srv.Put(t, bucket, "empty.tar", nil)
	front, seen := s3Front(t, srv)
	opts := Options{EndpointURL: front, Region: "us-east-1", Prefix: true}
	src, err := Open(t.Context(), "s3://"+bucket+"/a.tar", opts)
	require.NoError(t, err)
	defer src.Close()
	require.Equal(t, []string{"GET " + ProbeRange}, seen(), "requests of the open")
	require.Equal(t, int64(len(data)), src.Identity().Size)
	require.NotEmpty(t, src.Identity().ETag)
	require.True(t, bytes.Equal(data[:ProbeBytes], src.(Prefixer).Prefix()), "prefix")

	b := newTestBlocks(t, src, BlocksOptions{BlockSize: 1 << 20})
	s := b.Stream(t.Context(), 0)
	got, err := io.ReadAll(s)
	s.Close()
	require.NoError(t, err)
	require.True(t, bytes.Equal(data, got), "streamed bytes")
	after := seen()
	for _, r := range after {
		if strings.HasPrefix(r, "GET bytes=0-") {
			t.Errorf("got requests %q after the open, want none from 0", after)
		}
	}

	empty, err := Open(t.Context(), "s3://"+bucket+"/empty.tar", opts)
	require.NoError(t, err)
	require.Zero(t, empty.Identity().Size)
	empty.Close()
}

// TestS3Suffix: with Options.Suffix the open of an S3 object also asks
// for its last ProbeBytes, beside its GetObject of the first; a read
// inside them then sends no request. An empty object still opens.
func TestS3Suffix(t *testing.T) {
	srv := sharedS3(t)
	bucket := newBucket(t, srv)
	data := randomBytes(3<<20, 6)
	srv.Put(t, bucket, "a.tar.zst", data)
	srv.Put(t, bucket, "empty.tar.zst", nil)
	front, seen := s3Front(t, srv)
	opts := Options{EndpointURL: front, Region: "us-east-1", Prefix: true, Suffix: true}
	src, err := Open(t.Context(), "s3://"+bucket+"/a.tar.zst", opts)
	require.NoError(t, err)
	defer src.Close()
	got := make([]byte, 30000)
	off := int64(len(data) - len(got))
	_, err = src.ReadAt(t.Context(), got, off)
	require.NoError(t, err)
	require.True(t, bytes.Equal(data[off:], got), "the tail's bytes")
	require.ElementsMatch(t, []string{"GET " + ProbeRange, "GET " + SuffixRange}, seen(), "requests of the open and the read")

	empty, err := Open(t.Context(), "s3://"+bucket+"/empty.tar.zst", opts)
	require.NoError(t, err)
	require.Zero(t, empty.Identity().Size)
	empty.Close()
}

// s3Front serves srv's API through a proxy that records the requests
// for objects: seen returns the method and Range of each since its last
// call.
func s3Front(t *testing.T, srv *s3server.Server) (string, func() []string) {
	t.Helper()
	target, err := url.Parse(srv.URL)
	require.NoError(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	var mu sync.Mutex
	var reqs []string
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Count(strings.Trim(r.URL.Path, "/"), "/") == 1 {
			mu.Lock()
			reqs = append(reqs, r.Method+" "+r.Header.Get("Range"))
			mu.Unlock()
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	return front.URL, func() []string {
		mu.Lock()
		defer mu.Unlock()
		r := reqs
		reqs = nil
		return r
	}
}
