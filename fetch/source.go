package fetch

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Sentinel errors. Errors returned by this package wrap them with the
// source and offset; test with errors.Is.
var (
	// ErrChanged means the object is no longer the version pinned at Open:
	// the server answered 412, or a reply's size, ETag or Last-Modified
	// differ from the pinned identity, or a local file got shorter.
	ErrChanged = errors.New("fetch: source changed since it was opened")
	// ErrNotFound means the object does not exist (HTTP 404 or 410, a
	// missing file). A missing file's error reads "no such file or
	// directory" and is also fs.ErrNotExist.
	ErrNotFound = errors.New("fetch: not found")
	// ErrNoRange means the server answered a range request with the whole
	// object (200) or declared "Accept-Ranges: none".
	ErrNoRange = errors.New("fetch: server does not support range requests")
	// ErrClosed means the Blocks or stream was closed.
	ErrClosed = errors.New("fetch: closed")
	// ErrTooLarge means an object does not fit in the disk cache bound.
	ErrTooLarge = errors.New("fetch: larger than the disk cache")
)

// StatusError is an HTTP reply with an unexpected status code. 404, 410,
// 412 and 416 never produce it: they map to ErrNotFound and ErrChanged.
type StatusError struct {
	Code       int           // e.g. 503
	Status     string        // e.g. "503 Service Unavailable"
	RetryAfter time.Duration // the server's Retry-After, 0 if none
}

func (e *StatusError) Error() string {
	return "unexpected HTTP status " + e.Status
}

// connError marks a transport failure (refused, reset or cut connection,
// timeout) that a later attempt may not meet.
type connError struct{ err error }

func (e *connError) Error() string { return e.err.Error() }
func (e *connError) Unwrap() error { return e.err }

// IsRetryable reports whether err is transient, so that the same read may
// succeed if tried again: HTTP 5xx (except 501 and 505), 408 and 429,
// S3 throttling and timeout codes (SlowDown, RequestTimeout, InternalError,
// ServiceUnavailable, Throttling...) whatever their status, refused, reset
// or cut connections, timeouts and short bodies. A done context,
// ErrChanged, ErrNotFound, ErrNoRange, ErrClosed, other 4xx, an https URL
// on a server that does not speak TLS, a certificate that does not
// verify and a redirect loop are permanent.
func IsRetryable(err error) bool {
	switch {
	case err == nil,
		errors.Is(err, context.Canceled),
		errors.Is(err, context.DeadlineExceeded),
		errors.Is(err, ErrChanged),
		errors.Is(err, ErrNotFound),
		errors.Is(err, ErrNoRange),
		errors.Is(err, ErrClosed):
		return false
	}
	if se, ok := errors.AsType[*StatusError](err); ok {
		switch se.Code {
		case http.StatusRequestTimeout, http.StatusTooManyRequests:
			return true
		case http.StatusNotImplemented, http.StatusHTTPVersionNotSupported:
			return false
		}
		return se.Code >= 500 && se.Code <= 599
	}
	if retryable, ok := isRetryableS3(err); ok {
		return retryable
	}
	if _, ok := errors.AsType[*connError](err); ok {
		return true
	}
	return errors.Is(err, io.ErrUnexpectedEOF)
}

// classifyTransport wraps an error from http.Client.Do or from reading a
// body: a done ctx stays a context error, the failures that every attempt
// would meet (permanentTransport) stay permanent, and anything else
// becomes a retryable connError.
func classifyTransport(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		if errors.Is(err, ctxErr) {
			return err
		}
		return fmt.Errorf("%w (%v)", ctxErr, err)
	}
	if permanentTransport(err) {
		return err
	}
	return &connError{err: err}
}

// permanentTransport reports whether a transport error says that the
// server cannot be read as the URL asks, so that another attempt would
// fail the same way: a TLS/HTTP mismatch (an https URL on a plain HTTP
// port, or any reply that is not TLS), a certificate that does not
// verify, a redirect loop or chain too long, a host name that does not
// resolve.
func permanentTransport(err error) bool {
	if errors.Is(err, http.ErrSchemeMismatch) || errors.Is(err, errRedirects) {
		return true
	}
	if _, ok := errors.AsType[tls.RecordHeaderError](err); ok {
		return true
	}
	if _, ok := errors.AsType[*tls.CertificateVerificationError](err); ok {
		return true
	}
	// What a custom VerifyPeerCertificate may return unwrapped.
	if _, ok := errors.AsType[x509.UnknownAuthorityError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.HostnameError](err); ok {
		return true
	}
	if _, ok := errors.AsType[x509.CertificateInvalidError](err); ok {
		return true
	}
	de, ok := errors.AsType[*net.DNSError](err)
	return ok && de.IsNotFound
}

// Identity pins one version of an object. Fields a source cannot know stay
// zero.
type Identity struct {
	Size         int64
	ETag         string    // strong or weak as sent by the server; "" if none
	LastModified time.Time // zero if unknown
	VersionID    string    // S3 version id when the bucket is versioned
}

// Equal reports whether id and o name the same version of an object:
// the same size, ETag, version id and modification time.
func (id Identity) Equal(o Identity) bool {
	return id.Size == o.Size && id.ETag == o.ETag && id.VersionID == o.VersionID && id.LastModified.Equal(o.LastModified)
}

// sameVersion reports whether id, the identity that a reply sent without
// a precondition gives, is of the version o that the open pinned: the
// same size, and the same version id, else ETag, else modification time
// (as the open's precondition pins it). With none of these, it is not.
func (id Identity) sameVersion(o Identity) bool {
	switch {
	case id.Size != o.Size:
		return false
	case o.VersionID != "":
		return id.VersionID == o.VersionID
	case o.ETag != "":
		return id.ETag == o.ETag
	case !o.LastModified.IsZero():
		return id.LastModified.Equal(o.LastModified)
	}
	return false
}

// Key returns a short stable string (32 hex digits of a SHA-256 over all
// fields) used to key caches and saved indexes. It does not depend on the
// process, the machine or the time zone of LastModified.
func (id Identity) Key() string {
	buf := make([]byte, 0, 64+len(id.ETag)+len(id.VersionID))
	buf = append(buf, "tarmount identity v1\x00"...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(id.Size))
	buf = appendString(buf, id.ETag)
	if id.LastModified.IsZero() {
		buf = append(buf, 0)
	} else {
		buf = append(buf, 1)
		buf = binary.BigEndian.AppendUint64(buf, uint64(id.LastModified.Unix()))
		buf = binary.BigEndian.AppendUint32(buf, uint32(id.LastModified.Nanosecond()))
	}
	buf = appendString(buf, id.VersionID)
	sum := sha256.Sum256(buf)
	return hex.EncodeToString(sum[:16])
}

func appendString(buf []byte, s string) []byte {
	buf = binary.BigEndian.AppendUint64(buf, uint64(len(s)))
	return append(buf, s...)
}

// String formats the identity for logs and error messages.
func (id Identity) String() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "size=%d", id.Size)
	if id.ETag != "" {
		fmt.Fprintf(&sb, " etag=%s", id.ETag)
	}
	if !id.LastModified.IsZero() {
		fmt.Fprintf(&sb, " mtime=%s", id.LastModified.UTC().Format(time.RFC3339Nano))
	}
	if id.VersionID != "" {
		fmt.Fprintf(&sb, " version=%s", id.VersionID)
	}
	return sb.String()
}

// Source is a pinned, immutable view of one object. Safe for concurrent
// use.
type Source interface {
	// ReadAt reads len(p) bytes at off, like io.ReaderAt (n < len(p) only
	// with an error; io.EOF at the end of the object). It writes only into
	// p and does not keep p after it returns. Whatever the error, p[:n]
	// holds the object's bytes at off: WithRetry keeps them and asks only
	// for the rest (a source that cannot vouch for them returns n = 0).
	ReadAt(ctx context.Context, p []byte, off int64) (int, error)
	// Identity returns the identity pinned at Open.
	Identity() Identity
	// String returns the URL for logs, without userinfo or query.
	String() string
	// Close releases the source. ReadAt fails after Close.
	Close() error
}

// IsLocal reports whether src reads a file on this machine (a path, a
// file:// URL, or the local copy of an object whose server ignores range
// requests): caching its bytes on disk again would gain nothing.
func IsLocal(src Source) bool {
	l, ok := src.(interface{ Local() bool })
	return ok && l.Local()
}

// Options configure Open. The zero value is ready to use.
type Options struct {
	Logger *slog.Logger // nil = discard
	Header http.Header  // extra request headers (auth tokens); copied by Open
	// Client sends HTTP requests; nil means a client of the source's own
	// that spreads requests over Conns connections and keeps them alive,
	// with no transparent decompression. S3 requests use it too, or else a
	// shared client with the same settings (HTTP/1.1, which is what S3
	// speaks); leave it nil there when a custom CA bundle is configured
	// (AWS_CA_BUNDLE), which the AWS SDK adds only to its own client.
	Client *http.Client
	// Conns is how many connections an HTTP(S) source's requests are
	// spread over when the server speaks HTTP/2, which carries many
	// requests on one connection; parallel range requests then get past a
	// per-connection bandwidth cap, as they do over HTTP/1.1 with one
	// connection each. Zero means 8, the default number of fetch workers.
	Conns int
	// HTTP1 keeps HTTP(S) sources on HTTP/1.1 even when the server offers
	// HTTP/2, for proxies that handle HTTP/2 badly.
	HTTP1 bool
	// Prefix says that a stream from the start of the object is likely
	// to follow the open (a first pass): the open of an HTTP(S) source
	// then asks for the first ProbeBytes with the identity (ProbeRange)
	// rather than the first byte, and keeps them (Prefixer), so that the
	// stream's first bytes come one round trip after the open starts.
	Prefix bool
	// Suffix says that a read of the object's end is likely to follow
	// the open (an index embedded at the end of the archive): the open
	// of an HTTP(S) or S3 source then also asks for the last ProbeBytes,
	// beside its identity request (SuffixRange), and reads inside them
	// need no request of their own once they came from the version the
	// open pinned (tail.go).
	Suffix bool

	// s3:// only. Credentials come from the standard AWS chain
	// (environment, shared config and credentials files, web identity,
	// IMDS), as the AWS CLI finds them.

	// Region signs S3 requests; "" means the bucket's own region, asked
	// from the server, else AWS_REGION or the profile's, else us-east-1.
	Region string
	// EndpointURL is an S3-compatible server, e.g. http://127.0.0.1:7070;
	// "" means AWS_ENDPOINT_URL(_S3), the profile's, else AWS S3. With any
	// custom endpoint, buckets are addressed by path.
	EndpointURL string
	// Profile names a profile of the shared AWS config files; "" means
	// AWS_PROFILE, else "default".
	Profile string
	// NoSignRequest sends S3 requests unsigned, for public buckets.
	NoSignRequest bool
	// Copies, if set, keeps the whole object when its HTTP server ignores
	// range requests: the probe's reply is then the whole object, which
	// is saved there once (keyed by identity, reused by later opens,
	// counted in the cache's bound) and read as a local file. An object
	// larger than the bound fails with ErrNoRange and ErrTooLarge. Nil:
	// such a server makes reads fail with ErrNoRange.
	Copies *DiskCache
}

// FirstByter is a Source that knows the object's first byte without a
// request: what its open fetched (HTTP; S3 with Options.Prefix), or a
// local read. ok is false when it does not (S3 opened with a HEAD). It lets a caller sniff
// what the object cannot be before asking for more of it.
type FirstByter interface {
	FirstByte() (b byte, ok bool)
}

// Prefixer is a Source that holds the object's first bytes, which its
// open fetched with the identity (HTTP and S3 with Options.Prefix:
// ProbeRange). A stream from the
// start of the object takes them from there instead of asking again
// (Blocks.Stream). The slice is shared: callers must not modify it.
type Prefixer interface {
	Prefix() []byte
}

// Open parses rawURL, fetches the object's identity with one request and
// returns a Source pinned to it.
//
// URL forms: http://…, https://…, s3://bucket/key, file:///path (or
// file://localhost/path) and plain paths, relative or absolute. Userinfo in
// an HTTP URL is sent as basic auth. An S3 key is taken verbatim, as the
// AWS CLI takes it (no percent-decoding).
func Open(ctx context.Context, rawURL string, opts Options) (Source, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	t, err := parseTarget(rawURL)
	if err != nil {
		return nil, err
	}
	switch {
	case t.u != nil:
		return openHTTP(ctx, t.u, opts, log)
	case t.bucket != "":
		return openS3(ctx, t, opts, log)
	default:
		return openFile(ctx, t.name, log)
	}
}

// Name is the String of the Source that Open(rawURL) returns, found
// without opening it: a file's path, an HTTP URL without userinfo, query
// and fragment, s3://bucket/key.
func Name(rawURL string) (string, error) {
	t, err := parseTarget(rawURL)
	return t.name, err
}

// target is a parsed source URL: one of an HTTP URL (u), an S3 object
// (bucket and key) or a local file (name is its path).
type target struct {
	name        string // the Source's String
	u           *url.URL
	bucket, key string
}

// parseTarget parses the URL forms that Open takes.
func parseTarget(rawURL string) (target, error) {
	scheme, ok := urlScheme(rawURL)
	switch {
	case rawURL == "":
		return target{}, errors.New("open: empty URL")
	case !ok:
		return target{name: rawURL}, nil
	case scheme == "http" || scheme == "https":
		u, err := url.Parse(rawURL)
		if err != nil {
			return target{}, fmt.Errorf("open: parse URL: %w", unwrapURLError(err))
		}
		if u.Host == "" {
			return target{}, fmt.Errorf("open %s: URL has no host", redactURL(u))
		}
		return target{name: redactURL(u), u: u}, nil
	case scheme == "file":
		u, err := url.Parse(rawURL)
		if err != nil {
			return target{}, fmt.Errorf("open: parse URL: %w", unwrapURLError(err))
		}
		if u.Host != "" && u.Host != "localhost" {
			return target{}, fmt.Errorf("open %s: file URL names host %q: only local files are supported", rawURL, u.Host)
		}
		if u.Path == "" {
			return target{}, fmt.Errorf("open %s: file URL has no path", rawURL)
		}
		return target{name: u.Path}, nil
	case scheme == "s3":
		bucket, key, err := parseS3URL(rawURL)
		if err != nil {
			return target{}, err
		}
		return target{name: "s3://" + bucket + "/" + key, bucket: bucket, key: key}, nil
	default:
		return target{}, fmt.Errorf("open: unsupported URL scheme %q (want http, https, s3, file or a path)", scheme)
	}
}

// IsURL reports whether s is a URL (scheme://…) rather than a path, as
// Open tells them apart.
func IsURL(s string) bool {
	_, ok := urlScheme(s)
	return ok
}

// urlScheme returns the lower-cased scheme of a "scheme://..." string, and
// false for anything else (a path, even one containing a colon).
func urlScheme(s string) (string, bool) {
	i := strings.Index(s, "://")
	if i <= 0 {
		return "", false
	}
	for j := range i {
		c := s[j]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case j > 0 && ('0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'):
		default:
			return "", false
		}
	}
	return strings.ToLower(s[:i]), true
}

// unwrapURLError drops the operation and URL that url.Parse and
// http.Client.Do put in their errors: the caller names the source, and
// the URL may hold a password or a signed query.
func unwrapURLError(err error) error {
	if ue, ok := errors.AsType[*url.Error](err); ok {
		return ue.Err
	}
	return err
}

// redactURL returns u without userinfo, query and fragment, which may hold
// credentials (presigned URLs carry their signature in the query).
func redactURL(u *url.URL) string {
	r := *u
	r.User = nil
	r.RawQuery = ""
	r.ForceQuery = false
	r.Fragment = ""
	r.RawFragment = ""
	return r.String()
}

// readRanged gives a source that fetches exact ranges the io.ReaderAt
// behaviour of Source.ReadAt: p is clamped to the object's size, and a read
// that reaches its end returns io.EOF. readRange fetches exactly len(p)
// bytes at off, all within the object.
func readRanged(ctx context.Context, p []byte, off, size int64, name string,
	readRange func(ctx context.Context, p []byte, off int64) (int, error)) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s at %d: negative offset", name, off)
	}
	if len(p) == 0 {
		return 0, nil
	}
	if off >= size {
		return 0, io.EOF
	}
	want := int(min(int64(len(p)), size-off))
	n, err := readRange(ctx, p[:want], off)
	if errors.Is(err, ErrNotFound) {
		// It was there at open: say so, or "not found" reads like a
		// wrong URL.
		err = fmt.Errorf("%w: deleted since it was opened", err)
	}
	if err != nil {
		return n, fmt.Errorf("read %s at %d: %w", name, off, err)
	}
	if want < len(p) {
		return n, io.EOF
	}
	return n, nil
}
