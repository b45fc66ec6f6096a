package fetch

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// defaultS3Region signs requests when neither the options, the
// environment, the shared config nor the server name a region.
const defaultS3Region = "us-east-1"

// s3RegionProbeTimeout bounds the anonymous request that asks a bucket's
// region (bucketRegion).
const s3RegionProbeTimeout = 15 * time.Second

// s3Source reads ranges of one version of an S3 object with ranged
// GetObject calls.
//
// The SDK's own retryer is off (aws.NopRetryer, whatever AWS_MAX_ATTEMPTS
// says): every call is one attempt, and its error tells IsRetryable
// whether to try again. Retrying belongs to this package's retry layer
// over any Source, so that S3, HTTP and files share one policy (backoff,
// budget, stall watchdog, one log line per retry) instead of an SDK loop
// of 3 attempts nested inside each of ours.
type s3Source struct {
	// set once
	client      *s3.Client
	bucket, key string
	name        string // "s3://bucket/key", for logs and errors
	region      string // that requests are signed for
	id          Identity
	// etag is sent as IfMatch when the object has no version id; a reply
	// with another ETag is refused either way.
	etag   string
	prefix []byte     // the object's first bytes, which the open fetched (Options.Prefix)
	tail   *tailFetch // the object's last bytes, asked for with the identity (Options.Suffix); nil: not asked
}

var _ Source = (*s3Source)(nil)

// parseS3URL splits "s3://bucket/key". The key is taken verbatim, as the
// AWS CLI takes it: no percent-decoding, and '?', '#' and '%' belong to
// the key.
func parseS3URL(raw string) (bucket, key string, err error) {
	i := strings.Index(raw, "://")
	rest := raw[i+3:]
	bucket, key, _ = strings.Cut(rest, "/")
	switch {
	case bucket == "":
		return "", "", fmt.Errorf("open %s: URL has no bucket (want s3://bucket/key)", raw)
	case strings.ContainsAny(bucket, "@:?#%"):
		return "", "", fmt.Errorf("open %s: invalid bucket name %q", raw, bucket)
	case key == "":
		return "", "", fmt.Errorf("open %s: URL has no object key (want s3://bucket/key)", raw)
	}
	return bucket, key, nil
}

func openS3(ctx context.Context, t target, opts Options, log *slog.Logger) (Source, error) {
	bucket, key, name := t.bucket, t.key, t.name
	cfg, err := loadS3Config(ctx, opts, sdkLogger{log: log, src: name})
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", name, err)
	}
	s := &s3Source{bucket: bucket, key: key, name: name}

	// Which region signs: the one given, else the one the server names
	// for the bucket, else the configured one, else us-east-1. The bucket's
	// region is asked while the identity is fetched with the configured
	// region, which is usually right; only when it is not does the
	// HeadObject go again. A HeadObject that succeeds was signed for the
	// right region: then the probe is cancelled, not waited for (a server
	// may be slow to answer it, or never answer anonymous requests); and
	// it gets s3RegionProbeTimeout at most.
	region := opts.Region
	var found chan string
	if region == "" {
		region = cmp.Or(cfg.Region, defaultS3Region)
		found = make(chan string, 1)
		probe := newS3Client(cfg, opts, region)
		pctx, cancel := context.WithTimeout(ctx, s3RegionProbeTimeout)
		defer func() {
			cancel()
			if found != nil {
				<-found // the probe's goroutine ends
			}
		}()
		go func() { found <- bucketRegion(pctx, probe, bucket) }()
	}
	s.client, s.region = newS3Client(cfg, opts, region), region
	if opts.Suffix {
		s.tail = startTail(ctx, s.getTail)
	}
	id, headErr := s.identify(ctx, opts.Prefix)
	if found != nil && headErr != nil {
		r := <-found
		found = nil
		if r != "" && r != region {
			log.Debug("bucket region", "src", name, "region", r, "was", region)
			region = r
			s.client, s.region = newS3Client(cfg, opts, region), region
			id, headErr = s.identify(ctx, opts.Prefix)
		}
	}
	if headErr != nil {
		s.tail.close()
		return nil, fmt.Errorf("open %s: %w", name, s.explainHead(ctx, headErr))
	}
	s.id = id
	if id.VersionID == "" {
		s.etag = id.ETag
	}
	log.Debug("open", "src", name, "len", id.Size, "region", region)
	return s, nil
}

// loadS3Config loads the standard AWS configuration: credentials from the
// environment, the shared files (Options.Profile, else AWS_PROFILE), web
// identity or IMDS; region and endpoint from the options, else the
// environment (AWS_REGION, AWS_ENDPOINT_URL) and the profile.
func loadS3Config(ctx context.Context, opts Options, logger sdkLogger) (aws.Config, error) {
	var client config.HTTPClient = defaultS3Client()
	if opts.Client != nil {
		client = opts.Client
	}
	lo := []func(*config.LoadOptions) error{
		config.WithHTTPClient(client),
		config.WithLogger(logger),
		config.WithRetryer(func() aws.Retryer { return aws.NopRetryer{} }),
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired),
	}
	if opts.Profile != "" {
		lo = append(lo, config.WithSharedConfigProfile(opts.Profile))
	}
	if opts.Region != "" {
		lo = append(lo, config.WithRegion(opts.Region))
	}
	if opts.NoSignRequest {
		lo = append(lo, config.WithCredentialsProvider(aws.AnonymousCredentials{}))
	}
	if opts.EndpointURL != "" {
		u, err := url.Parse(opts.EndpointURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return aws.Config{}, fmt.Errorf("endpoint URL %q: want http://host[:port] or https://host[:port]", opts.EndpointURL)
		}
	}
	cfg, err := config.LoadDefaultConfig(ctx, lo...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("load AWS config: %w", err)
	}
	if opts.NoSignRequest || cfg.Credentials == nil {
		return cfg, nil
	}
	// Fetch the credentials now (they are cached) so that a missing or
	// broken chain reads as such, not as a failed HeadObject.
	if _, err := cfg.Credentials.Retrieve(ctx); err != nil {
		if ctx.Err() != nil {
			return aws.Config{}, fmt.Errorf("get AWS credentials: %w", ctx.Err())
		}
		return aws.Config{}, fmt.Errorf("no usable AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile; a public bucket is read without them with no-sign-request): %w", err)
	}
	return cfg, nil
}

// sdkLogger takes the SDK's own log lines (such as a fallback to IMDSv1
// while looking for credentials) at debug level: what matters reaches the
// caller as an error.
type sdkLogger struct {
	log *slog.Logger
	src string
}

func (l sdkLogger) Logf(c logging.Classification, format string, v ...any) {
	l.log.Debug("aws sdk", "src", l.src, "class", string(c), "err", fmt.Sprintf(format, v...))
}

// defaultS3Client is the SDK's buildable HTTP client with the transport
// settings of baseTransport (many idle connections per host, no
// transparent decompression), on HTTP/1.1, which is what S3 speaks. It must stay the SDK's type: the
// SDK adds a custom CA bundle (AWS_CA_BUNDLE, ca_bundle in a profile) to
// its transport, and refuses any other client when one is configured.
var defaultS3Client = sync.OnceValue(func() *awshttp.BuildableClient {
	return awshttp.NewBuildableClient().WithTransportOptions(func(tr *http.Transport) {
		d := baseTransport()
		keepHTTP1(tr)
		tr.MaxIdleConns = d.MaxIdleConns
		tr.MaxIdleConnsPerHost = d.MaxIdleConnsPerHost
		tr.DisableCompression = d.DisableCompression
		tr.ResponseHeaderTimeout = d.ResponseHeaderTimeout
	})
})

// newS3Client makes a client that signs for region. An endpoint given in
// opts wins over AWS_ENDPOINT_URL(_S3) and the profile's; with any custom
// endpoint, buckets are addressed by path (http://host/bucket/key), which
// every S3-compatible server understands.
func newS3Client(cfg aws.Config, opts Options, region string) *s3.Client {
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.Region = region
		if opts.EndpointURL != "" {
			o.BaseEndpoint = aws.String(opts.EndpointURL)
		}
		if o.BaseEndpoint != nil {
			o.UsePathStyle = true
		}
		// One attempt per call, whatever AWS_MAX_ATTEMPTS says: see
		// s3Source.
		o.Retryer = aws.NopRetryer{}
		o.RetryMaxAttempts = 0
		// Ranged replies carry no checksum of their bytes (some servers
		// send the whole object's); never ask for or check one.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
	})
}

// bucketRegion asks the server where bucket lives with an anonymous
// HeadBucket, as the SDK's manager.GetBucketRegion does: S3 names the
// region in x-amz-bucket-region even when it denies the request, so no
// permission and no right signing region are needed. "" when the reply
// names none.
func bucketRegion(ctx context.Context, client *s3.Client, bucket string) string {
	out, err := client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(bucket)}, func(o *s3.Options) {
		o.Credentials = nil // anonymous
	})
	if err == nil {
		return aws.ToString(out.BucketRegion)
	}
	if re, ok := errors.AsType[*smithyhttp.ResponseError](err); ok && re.Response != nil && re.Response.Response != nil {
		return re.Response.Header.Get("X-Amz-Bucket-Region")
	}
	return ""
}

// identify learns the identity: with a GetObject of the first
// ProbeBytes, which it keeps (Prefixer), when prefix is set and that
// works, else with a HeadObject (whose error the open explains).
func (s *s3Source) identify(ctx context.Context, prefix bool) (Identity, error) {
	if prefix {
		if id, err := s.getFirst(ctx); err == nil {
			return id, nil
		}
	}
	return s.head(ctx)
}

// getFirst learns the identity from a GetObject of the first ProbeBytes,
// and keeps them.
func (s *s3Source) getFirst(ctx context.Context) (Identity, error) {
	m := meterFrom(ctx) // the stall watchdog's, if any: as a read's
	m.arm()
	rng := ProbeRange
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &s.key, Range: &rng})
	if err != nil {
		return Identity{}, err
	}
	defer drainClose(out.Body)
	cr, ok := parseContentRange(aws.ToString(out.ContentRange))
	if !ok || cr.first != 0 || cr.size < 0 || cr.last >= min(cr.size, ProbeBytes) {
		return Identity{}, fmt.Errorf("bad Content-Range %q for %s", aws.ToString(out.ContentRange), ProbeRange)
	}
	head := make([]byte, cr.last+1)
	if _, err := io.ReadFull(m.reader(out.Body), head); err != nil {
		return Identity{}, err
	}
	s.prefix = head
	return s3Identity(cr.size, out.ETag, out.LastModified, out.VersionId), nil
}

// getTail asks for the object's last ProbeBytes (SuffixRange) with a
// GetObject pinned to no version: the reply says which version it is of
// (tail.go).
func (s *s3Source) getTail(ctx context.Context) (tailReply, error) {
	rng := SuffixRange
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &s.key, Range: &rng})
	if err != nil {
		return tailReply{}, err
	}
	defer drainClose(out.Body)
	data, cr, err := readTailBody(out.Body, aws.ToString(out.ContentRange))
	if err != nil {
		return tailReply{}, err
	}
	got := s3Identity(cr.size, out.ETag, out.LastModified, out.VersionId)
	return tailReply{data: data, off: cr.first, matches: got.sameVersion}, nil
}

// s3Identity is the identity that a reply's fields give.
func s3Identity(size int64, etag *string, modified *time.Time, version *string) Identity {
	id := Identity{
		Size:         size,
		ETag:         aws.ToString(etag),
		LastModified: aws.ToTime(modified),
		VersionID:    aws.ToString(version),
	}
	// "null" names the one unversioned copy, which a PUT replaces in
	// place: it pins nothing.
	if id.VersionID == "null" {
		id.VersionID = ""
	}
	return id
}

// Prefix returns the object's first bytes, which the open fetched when
// asked to (Options.Prefix), else nil (Prefixer).
func (s *s3Source) Prefix() []byte { return s.prefix }

// FirstByte returns the object's first byte if the open fetched it
// (FirstByter).
func (s *s3Source) FirstByte() (byte, bool) {
	if len(s.prefix) == 0 {
		return 0, false
	}
	return s.prefix[0], true
}

// head learns the identity with one HeadObject.
func (s *s3Source) head(ctx context.Context) (Identity, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &s.key})
	if err != nil {
		return Identity{}, err
	}
	if out.ContentLength == nil || *out.ContentLength < 0 {
		return Identity{}, errors.New("S3 HeadObject: reply has no Content-Length")
	}
	return s3Identity(*out.ContentLength, out.ETag, out.LastModified, out.VersionId), nil
}

// explainHead maps an error of head. A HEAD reply has no body, so a 4xx
// comes without S3's error code; then one ranged GET of the first byte
// asks again, for the code and message that tell a bad signature from a
// missing permission or a wrong region, and a missing key from a missing
// bucket.
func (s *s3Source) explainHead(ctx context.Context, err error) error {
	err = s3CallError(ctx, "HeadObject", err)
	e, ok := errors.AsType[*s3Error](err)
	if !ok {
		return err
	}
	switch e.status {
	case http.StatusBadRequest, http.StatusForbidden, http.StatusNotFound:
		out, gerr := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &s.key, Range: aws.String("bytes=0-0")})
		if gerr == nil {
			drainClose(out.Body)
			break
		}
		gerr = s3CallError(ctx, "GetObject", gerr)
		if ge, ok := errors.AsType[*s3Error](gerr); ok && ge.code != "" && ge.status == e.status {
			e, err = ge, gerr
		}
	}
	switch {
	case e.region != "" && e.region != s.region:
		return fmt.Errorf("%w (the bucket is in region %s, not %s)", err, e.region, s.region)
	case e.status == http.StatusForbidden:
		return fmt.Errorf("%w (check the AWS credentials and their permissions)", err)
	}
	return err
}

// ReadAt fetches p from off with one ranged GetObject, pinned to the
// version seen at Open (VersionId when the bucket is versioned, else
// IfMatch with its ETag). Bytes reach p only from a reply whose
// Content-Range, size, ETag and version match the pinned identity.
func (s *s3Source) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return readRanged(ctx, p, off, s.id.Size, s.name, s.readRange)
}

func (s *s3Source) readRange(ctx context.Context, p []byte, off int64) (int, error) {
	if s.tail.readAt(ctx, p, off, s.id) {
		return len(p), nil
	}
	last := off + int64(len(p)) - 1
	m := meterFrom(ctx) // the stall watchdog's, if any
	m.arm()
	rng := rangeHeader(off, last)
	in := &s3.GetObjectInput{Bucket: &s.bucket, Key: &s.key, Range: &rng}
	if s.id.VersionID != "" {
		in.VersionId = &s.id.VersionID
	} else if s.etag != "" {
		in.IfMatch = &s.etag
	}
	out, err := s.client.GetObject(ctx, in)
	if err != nil {
		return 0, s3CallError(ctx, "GetObject", err)
	}
	defer drainClose(out.Body)
	crh := aws.ToString(out.ContentRange)
	if crh == "" {
		return 0, fmt.Errorf("%w: no Content-Range in the reply to %s", ErrNoRange, rng)
	}
	cr, ok := parseContentRange(crh)
	switch {
	case !ok:
		return 0, fmt.Errorf("bad Content-Range %q for %s", crh, rng)
	case cr.size != s.id.Size:
		return 0, fmt.Errorf("%w: size %d, was %d", ErrChanged, cr.size, s.id.Size)
	}
	if et := aws.ToString(out.ETag); et != "" && s.id.ETag != "" && et != s.id.ETag {
		return 0, fmt.Errorf("%w: ETag %s, was %s", ErrChanged, et, s.id.ETag)
	}
	if v := aws.ToString(out.VersionId); v != "" && s.id.VersionID != "" && v != s.id.VersionID {
		return 0, fmt.Errorf("%w: version %s, was %s", ErrChanged, v, s.id.VersionID)
	}
	if cr.first != off || cr.last != last {
		return 0, fmt.Errorf("got Content-Range %q for %s", crh, rng)
	}
	n, err := io.ReadFull(m.reader(out.Body), p)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return n, fmt.Errorf("body ended after %d of %d bytes: %w", n, len(p), io.ErrUnexpectedEOF)
		}
		return n, fmt.Errorf("body after %d of %d bytes: %w", n, len(p), classifyTransport(ctx, err))
	}
	return n, nil
}

func (s *s3Source) Identity() Identity { return s.id }

// String returns "s3://bucket/key", without endpoint or region.
func (s *s3Source) String() string { return s.name }

// Close does nothing: connections belong to the HTTP client.
func (s *s3Source) Close() error {
	s.tail.close()
	return nil
}

// s3Error is an S3 error reply, shortened for messages. Unwrap returns the
// SDK's error, so that errors.As finds smithy.APIError and
// *smithyhttp.ResponseError in it.
type s3Error struct {
	op     string // "GetObject"
	status int    // HTTP status code
	code   string // S3 error code ("SlowDown"); "" when the reply has none
	msg    string
	region string // x-amz-bucket-region of the reply, if any
	err    error
}

func (e *s3Error) Error() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "S3 %s: HTTP %d", e.op, e.status)
	if e.code != "" {
		sb.WriteString(" " + e.code)
	}
	if e.msg != "" && e.msg != e.code {
		sb.WriteString(": " + e.msg)
	}
	return sb.String()
}

func (e *s3Error) Unwrap() error { return e.err }

// s3CallError maps an error of an SDK call: a done ctx stays a context
// error, a failed send becomes retryable like an HTTP transport error,
// 404 is ErrNotFound, 412 (IfMatch failed) and 416 (the object shrank
// below the range) are ErrChanged, and other replies become an *s3Error.
func s3CallError(ctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return classifyTransport(ctx, err)
	}
	// A failed send comes wrapped in a ResponseError with no reply.
	if _, ok := errors.AsType[*smithyhttp.RequestSendError](err); ok {
		return classifyTransport(ctx, err)
	}
	re, ok := errors.AsType[*smithyhttp.ResponseError](err)
	if !ok || re.Response == nil || re.Response.Response == nil || re.HTTPStatusCode() == 0 {
		return err
	}
	e := &s3Error{op: op, status: re.HTTPStatusCode(), err: err,
		region: re.Response.Header.Get("X-Amz-Bucket-Region")}
	if ae, ok := errors.AsType[smithy.APIError](err); ok {
		e.code, e.msg = ae.ErrorCode(), ae.ErrorMessage()
	}
	switch e.status {
	case http.StatusNotFound:
		if !notFoundCodes[e.code] {
			// Not about the object: versitygw answers an unknown access
			// key with 404 XAdminUserNotFound.
			return e
		}
		return fmt.Errorf("%w (%w)", ErrNotFound, e)
	case http.StatusPreconditionFailed, http.StatusRequestedRangeNotSatisfiable:
		return fmt.Errorf("%w (%w)", ErrChanged, e)
	}
	return e
}

// notFoundCodes are the codes of a 404 that mean the object is not there
// ("" and NotFound: a HEAD reply, which has no body).
var notFoundCodes = map[string]bool{
	"": true, "NotFound": true, "NoSuchKey": true, "NoSuchBucket": true, "NoSuchVersion": true,
}

// retryableS3Codes are S3 error codes worth another attempt whatever the
// HTTP status: the SDK's own throttling and transient lists, and a clock
// skew the SDK corrects from the failed reply's Date.
var retryableS3Codes = func() map[string]bool {
	m := map[string]bool{
		"InternalError":        true,
		"ServiceUnavailable":   true,
		"RequestTimeTooSkewed": true,
	}
	for c := range retry.DefaultThrottleErrorCodes {
		m[c] = true
	}
	for c := range retry.DefaultRetryableErrorCodes {
		m[c] = true
	}
	return m
}()

// isRetryableS3 tells IsRetryable about S3 replies: ok is false when err
// holds none. Throttling (SlowDown, 503), timeouts and 5xx are retryable.
func isRetryableS3(err error) (retryable, ok bool) {
	if ae, ok := errors.AsType[smithy.APIError](err); ok && retryableS3Codes[ae.ErrorCode()] {
		return true, true
	}
	if re, ok := errors.AsType[*smithyhttp.ResponseError](err); ok && re.Response != nil &&
		re.Response.Response != nil && re.HTTPStatusCode() != 0 {
		return IsRetryable(&StatusError{Code: re.HTTPStatusCode()}), true
	}
	return false, false
}
