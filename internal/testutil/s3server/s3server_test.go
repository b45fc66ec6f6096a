package s3server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// TestServer checks what the s3:// tests rely on the server for.
func TestServer(t *testing.T) {
	s := ForTest(t, Options{})
	ctx := context.Background()
	c := s.Client()
	s.CreateBucket(t, "bkt")
	etag, version := s.Put(t, "bkt", "k", []byte("0123456789"))
	if etag == "" || version != "" {
		t.Fatalf("put: got etag %q version %q, want an etag and no version", etag, version)
	}

	head, err := c.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String("bkt"), Key: aws.String("k")})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(head.ETag); got != etag {
		t.Errorf("head: got etag %q, want %q", got, etag)
	}
	if got := aws.ToInt64(head.ContentLength); got != 10 {
		t.Errorf("head: got size %d, want 10", got)
	}

	get := func(in *s3.GetObjectInput, optFns ...func(*s3.Options)) (string, int) {
		t.Helper()
		in.Bucket, in.Key = aws.String("bkt"), aws.String("k")
		out, err := c.GetObject(ctx, in, optFns...)
		if err != nil {
			if re, ok := errors.AsType[*smithyhttp.ResponseError](err); ok {
				return "", re.HTTPStatusCode()
			}
			t.Fatal(err)
		}
		defer out.Body.Close()
		b, err := io.ReadAll(out.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b), http.StatusOK
	}
	if got, code := get(&s3.GetObjectInput{Range: aws.String("bytes=2-4"), IfMatch: &etag}); got != "234" {
		t.Errorf("ranged get: got %q (%d), want 234", got, code)
	}
	if _, code := get(&s3.GetObjectInput{Range: aws.String("bytes=2-4"), IfMatch: aws.String(`"other"`)}); code != http.StatusPreconditionFailed {
		t.Errorf("get with a wrong IfMatch: got %d, want 412", code)
	}
	if _, code := get(&s3.GetObjectInput{Range: aws.String("bytes=20-30")}); code != http.StatusRequestedRangeNotSatisfiable {
		t.Errorf("get past the end: got %d, want 416", code)
	}
	anonymous := func(o *s3.Options) { o.Credentials = nil }
	if _, code := get(&s3.GetObjectInput{}, anonymous); code != http.StatusForbidden {
		t.Errorf("anonymous get of a private bucket: got %d, want 403", code)
	}
	s.AllowPublicRead(t, "bkt")
	if got, code := get(&s3.GetObjectInput{}, anonymous); got != "0123456789" {
		t.Errorf("anonymous get of a public bucket: got %q (%d)", got, code)
	}

	s.CreateBucket(t, "vbkt")
	s.EnableVersioning(t, "vbkt")
	_, v1 := s.Put(t, "vbkt", "k", []byte("one"))
	_, v2 := s.Put(t, "vbkt", "k", []byte("two"))
	if v1 == "" || v1 == v2 {
		t.Fatalf("versioned puts: got versions %q and %q, want two ids", v1, v2)
	}
	out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("vbkt"), Key: aws.String("k"), VersionId: &v1})
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(out.Body)
	out.Body.Close()
	if string(b) != "one" {
		t.Errorf("get of the first version: got %q, want one", b)
	}
}
