package fetch

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"net/url"
	"os"
	"path/filepath"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// ErrNotWritable means an object cannot be written where its URL points:
// over http(s), which has no standard way to store an object.
var ErrNotWritable = errors.New("fetch: cannot write there")

// Beside returns the URL of the object named like the one at rawURL with
// suffix appended: the same scheme, in the same directory (a path, a file
// URL, an http(s) URL, whose query is kept) or under the same prefix (an
// s3:// key).
func Beside(rawURL, suffix string) (string, error) {
	t, err := parseTarget(rawURL)
	if err != nil {
		return "", err
	}
	scheme, hasScheme := urlScheme(rawURL)
	switch {
	case !hasScheme:
		return rawURL + suffix, nil
	case t.bucket != "":
		return "s3://" + t.bucket + "/" + t.key + suffix, nil
	default:
		u, err := url.Parse(rawURL)
		if err != nil {
			return "", fmt.Errorf("parse URL: %w", unwrapURLError(err))
		}
		if scheme == "file" && u.Path == "" {
			return "", fmt.Errorf("file URL %s has no path", rawURL)
		}
		u.Path += suffix
		if u.RawPath != "" {
			u.RawPath += url.PathEscape(suffix)
		}
		return u.String(), nil
	}
}

// Put stores data as the object at rawURL, whole or not at all: a local
// path or file URL is written under a temporary name in its directory and
// renamed (mode 0644 under the umask); an s3:// object is written with one
// PutObject (credentials, region and endpoint as Open takes them). An
// http(s) URL fails with ErrNotWritable.
func Put(ctx context.Context, rawURL string, data []byte, opts Options) error {
	log := cmp.Or(opts.Logger, slog.New(slog.DiscardHandler))
	t, err := parseTarget(rawURL)
	if err != nil {
		return err
	}
	switch {
	case t.u != nil:
		return fmt.Errorf("put %s: %w: copy the file there with the server's own means", t.name, ErrNotWritable)
	case t.bucket != "":
		return putS3(ctx, t, data, opts, log)
	default:
		return putFile(t.name, data)
	}
}

// putFile writes data to path atomically, with the mode os.Create gives
// (0644 under the umask).
func putFile(path string, data []byte) error {
	var f *os.File
	var err error
	for range 100 {
		tmp := filepath.Join(filepath.Dir(path), fmt.Sprintf(".%s.tmp-%d", filepath.Base(path), rand.Uint64()))
		f, err = os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if !errors.Is(err, fs.ErrExist) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", path, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
		return fmt.Errorf("put %s: %w", path, err)
	}
	return nil
}

// putS3 writes data to an S3 object with one PutObject, signed for the
// bucket's region as openS3 finds it.
func putS3(ctx context.Context, t target, data []byte, opts Options, log *slog.Logger) error {
	cfg, err := loadS3Config(ctx, opts, sdkLogger{log: log, src: t.name})
	if err != nil {
		return fmt.Errorf("put %s: %w", t.name, err)
	}
	region := opts.Region
	if region == "" {
		region = cmp.Or(bucketRegion(ctx, newS3Client(cfg, opts, cmp.Or(cfg.Region, defaultS3Region)), t.bucket),
			cfg.Region, defaultS3Region)
	}
	client := newS3Client(cfg, opts, region)
	_, err = client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(t.bucket), Key: aws.String(t.key), Body: bytes.NewReader(data)})
	if err != nil {
		return fmt.Errorf("put %s: %w", t.name, s3CallError(ctx, "PutObject", err))
	}
	return nil
}
