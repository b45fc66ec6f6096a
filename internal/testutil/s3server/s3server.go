// Package s3server runs versitygw, a real S3-compatible server, on
// 127.0.0.1 for tests: signature checks, ETags, ranged and conditional
// GETs, bucket policies and versioning behave as on S3.
//
// The binary comes from $TARMOUNT_VERSITYGW, else from the tool cache that
// scripts/versitygw.sh fills (${XDG_CACHE_HOME:-$HOME/.cache}/tarmount-tools/bin);
// scripts/deps.sh installs it, so test runs through scripts/test.sh have
// it. Tests skip when it is absent.
//
// Objects are uploaded with PutObject: a file copied into the server's
// directory would be served without an ETag.
package s3server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/tarmount/tarmount/internal/testutil"
)

// Root credentials of every server started here.
const (
	AccessKey = "tarmounttestroot"
	SecretKey = "tarmount-test-root-secret-key"
)

// DefaultRegion is the region a server signs for unless Options say.
const DefaultRegion = "us-east-1"

// Options configure a server.
type Options struct {
	Region string // "" = DefaultRegion
}

// Server is a running versitygw.
type Server struct {
	URL    string // http://127.0.0.1:PORT
	Region string
	Dir    string // the posix backend's root

	cmd    *exec.Cmd
	exited chan struct{}
	health string // the health check's path, this server's own
	client *s3.Client

	closeOnce sync.Once
}

// Binary returns the path of the versitygw binary, or an error that says
// how to get it.
func Binary() (string, error) {
	if p := os.Getenv("TARMOUNT_VERSITYGW"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("TARMOUNT_VERSITYGW: %w", err)
		}
		return p, nil
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("versitygw: no cache dir: %w", err)
		}
		cache = filepath.Join(home, ".cache")
	}
	p := filepath.Join(cache, "tarmount-tools", "bin", "versitygw")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("versitygw not found at %s and TARMOUNT_VERSITYGW not set (bash scripts/versitygw.sh installs it)", p)
	}
	return p, nil
}

// ForTest starts a server for t and stops it when t ends. It skips t when
// the binary is absent.
func ForTest(t testing.TB, opts Options) *Server {
	t.Helper()
	bin, err := Binary()
	if err != nil {
		testutil.Missing(t, "%v", err)
	}
	s, err := Start(bin, t.TempDir(), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// Start runs bin on a free port of 127.0.0.1, serving buckets under dir
// (with versioning available: see EnableVersioning), and waits until its
// health check answers.
func Start(bin, dir string, opts Options) (*Server, error) {
	region := opts.Region
	if region == "" {
		region = DefaultRegion
	}
	data := filepath.Join(dir, "data")
	versions := filepath.Join(dir, "versions")
	for _, d := range []string{data, versions} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, err
		}
	}
	var last error
	// The port is free when picked and taken by versitygw a moment later;
	// another process may take it in between, so try a few.
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		// A health path of its own: if another test's server took the
		// port first (this one then fails to bind and exits), that
		// server does not answer it, and this one is not taken for it.
		s := &Server{URL: "http://" + port, Region: region, Dir: data, exited: make(chan struct{}),
			health: fmt.Sprintf("/health-%d-%d", os.Getpid(), healthSeq.Add(1))}
		var out bytes.Buffer
		s.cmd = exec.Command(bin, "--port", port, "--region", region, "--health", s.health, "--quiet",
			// Keep connections open between requests, as S3 does.
			"--keep-alive",
			"posix", "--versioning-dir", versions, data)
		s.cmd.Env = append(cleanEnv(), "ROOT_ACCESS_KEY="+AccessKey, "ROOT_SECRET_KEY="+SecretKey)
		s.cmd.Stdout, s.cmd.Stderr = &out, &out
		if err := s.cmd.Start(); err != nil {
			return nil, fmt.Errorf("start versitygw: %w", err)
		}
		go func() {
			s.cmd.Wait()
			close(s.exited)
		}()
		if err := s.waitHealthy(10 * time.Second); err != nil {
			s.Close()
			last = fmt.Errorf("versitygw on %s: %w\n%s", port, err, out.String())
			continue
		}
		s.client = s.newClient()
		return s, nil
	}
	return nil, last
}

// cleanEnv is the environment without versitygw's own settings, which
// would change what the tests rely on.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "VGW_") || strings.HasPrefix(kv, "ROOT_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// healthSeq numbers the servers this process starts, for their health
// paths.
var healthSeq atomic.Int64

func freePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	l.Close()
	return addr, nil
}

func (s *Server) waitHealthy(limit time.Duration) error {
	deadline := time.Now().Add(limit)
	client := &http.Client{Timeout: time.Second}
	for {
		select {
		case <-s.exited:
			return errors.New("exited before its health check answered")
		default:
		}
		resp, err := client.Get(s.URL + s.health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("health check did not answer within %v (last: %v)", limit, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Close stops the server (the process this package started, by its PID)
// and waits for it. It is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.cmd.Process.Kill()
		<-s.exited
	})
}

func (s *Server) newClient() *s3.Client {
	return s3.New(s3.Options{
		Region:                     s.Region,
		BaseEndpoint:               aws.String(s.URL),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(AccessKey, SecretKey, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// Client returns a client signed with the root credentials.
func (s *Server) Client() *s3.Client { return s.client }

// Env returns the environment variables that give a process the root
// credentials through the standard AWS chain.
func (s *Server) Env() []string {
	return []string{"AWS_ACCESS_KEY_ID=" + AccessKey, "AWS_SECRET_ACCESS_KEY=" + SecretKey}
}

func ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), time.Minute)
}

// CreateBucket creates bucket.
func (s *Server) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	c, cancel := ctx()
	defer cancel()
	if _, err := s.client.CreateBucket(c, &s3.CreateBucketInput{Bucket: &bucket}); err != nil {
		t.Fatalf("create bucket %s: %v", bucket, err)
	}
}

// EnableVersioning turns versioning on for bucket: every PutObject then
// makes a new version with its own id.
func (s *Server) EnableVersioning(t testing.TB, bucket string) {
	t.Helper()
	c, cancel := ctx()
	defer cancel()
	_, err := s.client.PutBucketVersioning(c, &s3.PutBucketVersioningInput{
		Bucket:                  &bucket,
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled},
	})
	if err != nil {
		t.Fatalf("enable versioning on %s: %v", bucket, err)
	}
}

// AllowPublicRead sets a bucket policy that lets anyone, unsigned, get
// the objects of bucket.
func (s *Server) AllowPublicRead(t testing.TB, bucket string) {
	t.Helper()
	policy := fmt.Sprintf(`{
  "Version": "2012-10-17",
  "Statement": [{
    "Effect": "Allow",
    "Principal": "*",
    "Action": ["s3:GetObject"],
    "Resource": ["arn:aws:s3:::%s/*"]
  }]
}`, bucket)
	c, cancel := ctx()
	defer cancel()
	if _, err := s.client.PutBucketPolicy(c, &s3.PutBucketPolicyInput{Bucket: &bucket, Policy: &policy}); err != nil {
		t.Fatalf("put bucket policy on %s: %v", bucket, err)
	}
}

// Put stores data under bucket/key with PutObject and returns the ETag and
// version id ("" unless the bucket is versioned) of the new object.
func (s *Server) Put(t testing.TB, bucket, key string, data []byte) (etag, versionID string) {
	t.Helper()
	c, cancel := ctx()
	defer cancel()
	out, err := s.client.PutObject(c, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: bytes.NewReader(data)})
	if err != nil {
		t.Fatalf("put %s/%s: %v", bucket, key, err)
	}
	return aws.ToString(out.ETag), aws.ToString(out.VersionId)
}

// PutFile stores the file at path under bucket/key with PutObject.
func (s *Server) PutFile(t testing.TB, bucket, key, path string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, cancel := ctx()
	defer cancel()
	if _, err := s.client.PutObject(c, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: f}); err != nil {
		t.Fatalf("put %s/%s: %v", bucket, key, err)
	}
}

// Delete removes bucket/key.
func (s *Server) Delete(t testing.TB, bucket, key string) {
	t.Helper()
	c, cancel := ctx()
	defer cancel()
	if _, err := s.client.DeleteObject(c, &s3.DeleteObjectInput{Bucket: &bucket, Key: &key}); err != nil {
		t.Fatalf("delete %s/%s: %v", bucket, key, err)
	}
}
