package fetch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

const (
	// maxDrainBytes bounds how much of an unwanted body is read so that
	// its connection can be reused; a longer body closes the connection.
	maxDrainBytes = 64 << 10
	userAgent     = "tarmount"
)

// httpSource reads ranges of an HTTP(S) object with conditional GETs.
// Bytes come as stored: "Accept-Encoding: identity" is sent, so a
// .tar.gz served with "Content-Encoding: gzip" is not decoded on the way.
type httpSource struct {
	// set once
	client *http.Client
	url    string // for requests: may hold userinfo and a query
	name   string // for logs and errors: redacted
	header http.Header
	id     Identity
	// cond is the precondition that pins id: If-Match for a strong ETag,
	// else If-Unmodified-Since when Last-Modified is known.
	condKey, condValue string
	log                *slog.Logger
	copies             *DiskCache // Options.Copies
	copyPath           string     // set by probe when the server ignores ranges
	ownClient          bool       // client was made for this source: Close closes its connections
	prefix             []byte     // the object's first bytes, from the probe's reply
	wantPrefix         bool       // Options.Prefix: Prefix returns prefix
	tail               *tailFetch // the object's last bytes, asked for with the probe (Options.Suffix); nil: not asked
}

// ProbeBytes is how much of an HTTP object its open asks for with the
// identity when a stream from the start is likely to follow
// (Options.Prefix): the first piece that such a stream fetches
// (defaultFirstPiece), so that a first pass gets its first bytes one
// round trip after the open starts, rather than two.
const ProbeBytes = defaultFirstPiece

// ProbeRange is the Range header of the request that opens an HTTP
// source with Options.Prefix, and "bytes=0-0" without: the only ranged
// GET it sends without a precondition, since it learns the identity that
// the others are pinned to.
var ProbeRange = rangeHeader(0, ProbeBytes-1)

var _ Source = (*httpSource)(nil)

func openHTTP(ctx context.Context, u *url.URL, opts Options, log *slog.Logger) (Source, error) {
	s := &httpSource{
		url:    u.String(),
		name:   redactURL(u),
		header: opts.Header.Clone(),
		log:    log,
		copies: opts.Copies,
	}
	if opts.Client != nil {
		s.client = withCheckRedirect(opts.Client)
	} else {
		conns := opts.Conns
		if conns <= 0 {
			conns = defaultConns
		}
		s.client = &http.Client{Transport: newSpreadTransport(baseTransport(), conns, opts.HTTP1), CheckRedirect: checkRedirect}
		s.ownClient = true
	}
	probe := "bytes=0-0"
	if opts.Prefix {
		probe, s.wantPrefix = ProbeRange, true
	}
	if opts.Suffix {
		s.tail = startTail(ctx, s.getTail)
	}
	id, err := s.probe(ctx, probe)
	if err != nil {
		s.tail.close()
		return nil, fmt.Errorf("open %s: %w", s.name, err)
	}
	s.id = id
	if s.copyPath != "" {
		s.tail.close()
		return openCopy(ctx, s.copyPath, id, s.name, s.log)
	}
	switch {
	case id.ETag != "" && !strings.HasPrefix(id.ETag, "W/"):
		s.condKey, s.condValue = "If-Match", id.ETag
	case !id.LastModified.IsZero():
		s.condKey, s.condValue = "If-Unmodified-Since", id.LastModified.UTC().Format(http.TimeFormat)
	}
	log.Debug("open", "src", s.name, "len", id.Size)
	return s, nil
}

// probe learns the identity with one GET of the range probe (the first
// byte, or ProbeRange), whose bytes it keeps: a 206 carries the size in
// Content-Range.
// A 200 (range ignored) gives Content-Length, and a HEAD is the last
// resort when neither gives a size.
func (s *httpSource) probe(ctx context.Context, probe string) (Identity, error) {
	m := meterFrom(ctx) // the stall watchdog's, if any: as a read's
	m.arm()
	req, err := s.newRequest(ctx, http.MethodGet)
	if err != nil {
		return Identity{}, err
	}
	req.Header.Set("Range", probe)
	resp, err := s.client.Do(req)
	if err != nil {
		return Identity{}, classifyTransport(ctx, unwrapURLError(err))
	}
	defer drainClose(resp.Body)
	id := identityFrom(resp.Header)
	switch resp.StatusCode {
	case http.StatusPartialContent:
		cr, ok := parseContentRange(resp.Header.Get("Content-Range"))
		if !ok || cr.first != 0 {
			return Identity{}, fmt.Errorf("bad Content-Range %q for %s", resp.Header.Get("Content-Range"), probe)
		}
		if cr.size >= 0 {
			id.Size = cr.size
			// The bytes are kept when the reply holds all it says
			// it does, and no more than asked for.
			if cr.last >= 0 && cr.last < min(cr.size, ProbeBytes) {
				head := make([]byte, cr.last+1)
				if _, err := io.ReadFull(m.reader(resp.Body), head); err == nil {
					s.prefix = head
				}
			}
			return id, nil
		}
	case http.StatusOK:
		if strings.EqualFold(strings.TrimSpace(resp.Header.Get("Accept-Ranges")), "none") {
			return Identity{}, fmt.Errorf("%w (Accept-Ranges: none)", ErrNoRange)
		}
		if resp.ContentLength >= 0 {
			id.Size = resp.ContentLength
			if s.copies != nil {
				// The reply is the whole object: keep it, once.
				path, err := s.keepCopy(ctx, resp, id)
				if err != nil {
					return Identity{}, err
				}
				s.copyPath = path
				return id, nil
			}
			// Some caches answer 200 until they hold the object; range
			// requests may work later. If not, reads fail with ErrNoRange.
			s.log.Debug("probe got 200 to a range request", "src", s.name)
			return id, nil
		}
	case http.StatusRequestedRangeNotSatisfiable:
		// Some servers answer a range on an empty object this way.
		if cr, ok := parseContentRange(resp.Header.Get("Content-Range")); ok && cr.first < 0 && cr.size == 0 {
			id.Size = 0
			return id, nil
		}
		return Identity{}, statusError(resp)
	default:
		return Identity{}, statusError(resp)
	}
	return s.head(ctx, id)
}

// getTail asks for the object's last ProbeBytes (SuffixRange), without
// a precondition: the reply says which version it is of (tail.go).
func (s *httpSource) getTail(ctx context.Context) (tailReply, error) {
	req, err := s.newRequest(ctx, http.MethodGet)
	if err != nil {
		return tailReply{}, err
	}
	req.Header.Set("Range", SuffixRange)
	resp, err := s.client.Do(req)
	if err != nil {
		return tailReply{}, classifyTransport(ctx, unwrapURLError(err))
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != http.StatusPartialContent {
		return tailReply{}, statusError(resp)
	}
	data, cr, err := readTailBody(resp.Body, resp.Header.Get("Content-Range"))
	if err != nil {
		return tailReply{}, err
	}
	got := identityFrom(resp.Header)
	got.Size = cr.size
	return tailReply{data: data, off: cr.first, matches: got.sameVersion}, nil
}

// head completes id with the size from a HEAD reply.
func (s *httpSource) head(ctx context.Context, id Identity) (Identity, error) {
	req, err := s.newRequest(ctx, http.MethodHead)
	if err != nil {
		return Identity{}, err
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return Identity{}, classifyTransport(ctx, unwrapURLError(err))
	}
	defer drainClose(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return Identity{}, statusError(resp)
	}
	if resp.ContentLength < 0 {
		return Identity{}, errors.New("server sends no object size (no Content-Range total, no Content-Length)")
	}
	hid := identityFrom(resp.Header)
	if id.ETag == "" {
		id.ETag = hid.ETag
	}
	if id.LastModified.IsZero() {
		id.LastModified = hid.LastModified
	}
	id.Size = resp.ContentLength
	return id, nil
}

func identityFrom(h http.Header) Identity {
	id := Identity{ETag: h.Get("ETag")}
	if lm := h.Get("Last-Modified"); lm != "" {
		if t, err := http.ParseTime(lm); err == nil {
			id.LastModified = t
		}
	}
	return id
}

// ReadAt fetches p from off with one conditional range request. Bytes
// reach p only from a 206 reply whose Content-Range, size and validators
// match the pinned identity.
func (s *httpSource) ReadAt(ctx context.Context, p []byte, off int64) (int, error) {
	return readRanged(ctx, p, off, s.id.Size, s.name, s.readRange)
}

func (s *httpSource) readRange(ctx context.Context, p []byte, off int64) (int, error) {
	if s.tail.readAt(ctx, p, off, s.id) {
		return len(p), nil
	}
	last := off + int64(len(p)) - 1
	m := meterFrom(ctx) // the stall watchdog's, if any
	m.arm()
	req, err := s.newRequest(ctx, http.MethodGet)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Range", rangeHeader(off, last))
	if s.condKey != "" {
		req.Header.Set(s.condKey, s.condValue)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return 0, classifyTransport(ctx, unwrapURLError(err))
	}
	defer drainClose(resp.Body)
	switch resp.StatusCode {
	case http.StatusPartialContent:
	case http.StatusOK:
		return 0, fmt.Errorf("%w: got %s to %s", ErrNoRange, resp.Status, rangeHeader(off, last))
	default:
		return 0, statusError(resp)
	}
	crh := resp.Header.Get("Content-Range")
	cr, ok := parseContentRange(crh)
	switch {
	case !ok:
		return 0, fmt.Errorf("bad Content-Range %q for %s", crh, rangeHeader(off, last))
	case cr.size != s.id.Size:
		return 0, fmt.Errorf("%w: size %d, was %d", ErrChanged, cr.size, s.id.Size)
	}
	if err := s.checkValidators(resp.Header); err != nil {
		return 0, err
	}
	if cr.first != off || cr.last != last {
		return 0, fmt.Errorf("got Content-Range %q for %s", crh, rangeHeader(off, last))
	}
	n, err := io.ReadFull(m.reader(resp.Body), p)
	if err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return n, fmt.Errorf("body ended after %d of %d bytes: %w", n, len(p), io.ErrUnexpectedEOF)
		}
		return n, fmt.Errorf("body after %d of %d bytes: %w", n, len(p), classifyTransport(ctx, err))
	}
	return n, nil
}

// checkValidators compares a reply's ETag and Last-Modified, when both
// sides have one, with the pinned identity.
func (s *httpSource) checkValidators(h http.Header) error {
	if et := h.Get("ETag"); et != "" && s.id.ETag != "" && et != s.id.ETag {
		return fmt.Errorf("%w: ETag %s, was %s", ErrChanged, et, s.id.ETag)
	}
	if lm := h.Get("Last-Modified"); lm != "" && !s.id.LastModified.IsZero() {
		if t, err := http.ParseTime(lm); err == nil && !t.Equal(s.id.LastModified) {
			return fmt.Errorf("%w: Last-Modified %s, was %s", ErrChanged, lm, s.id.LastModified.UTC().Format(http.TimeFormat))
		}
	}
	return nil
}

func (s *httpSource) newRequest(ctx context.Context, method string) (*http.Request, error) {
	req, err := http.NewRequestWithContext(ctx, method, s.url, nil)
	if err != nil {
		return nil, unwrapURLError(err)
	}
	if len(s.header) > 0 {
		req.Header = s.header.Clone()
	}
	if req.Header.Get("User-Agent") == "" {
		req.Header.Set("User-Agent", userAgent)
	}
	// Set explicitly, so that no transport decodes what it fetches.
	req.Header.Set("Accept-Encoding", "identity")
	return req, nil
}

func (s *httpSource) Identity() Identity { return s.id }

// Prefix returns the object's first bytes, which the probe fetched when
// asked to (Options.Prefix), else nil (Prefixer).
func (s *httpSource) Prefix() []byte {
	if !s.wantPrefix {
		return nil
	}
	return s.prefix
}

// FirstByte returns the object's first byte, which the probe fetched.
func (s *httpSource) FirstByte() (byte, bool) {
	if len(s.prefix) == 0 {
		return 0, false
	}
	return s.prefix[0], true
}

func (s *httpSource) String() string { return s.name }

// Close closes the idle connections of a client made for this source;
// connections of a client from Options are left to their owner.
func (s *httpSource) Close() error {
	s.tail.close()
	if s.ownClient {
		s.client.CloseIdleConnections()
	}
	return nil
}

// statusError maps an error status to ErrNotFound, ErrChanged or a
// *StatusError.
func statusError(resp *http.Response) error {
	switch resp.StatusCode {
	case http.StatusNotFound, http.StatusGone:
		return fmt.Errorf("%w (%s)", ErrNotFound, resp.Status)
	case http.StatusPreconditionFailed, http.StatusRequestedRangeNotSatisfiable:
		return fmt.Errorf("%w (%s)", ErrChanged, resp.Status)
	}
	return &StatusError{Code: resp.StatusCode, Status: resp.Status,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
}

// drainClose reads what is left of a short body and closes it, so that
// the connection goes back to the pool.
func drainClose(body io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, body, maxDrainBytes)
	_ = body.Close()
}

func rangeHeader(first, last int64) string {
	b := make([]byte, 0, 48)
	b = append(b, "bytes="...)
	b = strconv.AppendInt(b, first, 10)
	b = append(b, '-')
	b = strconv.AppendInt(b, last, 10)
	return string(b)
}

// contentRange is a parsed Content-Range header: "bytes first-last/size",
// or "bytes */size" (first = last = -1). size is -1 when sent as "*".
type contentRange struct {
	first, last, size int64
}

func parseContentRange(s string) (contentRange, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(s), "bytes ")
	if !ok {
		return contentRange{}, false
	}
	rng, total, ok := strings.Cut(rest, "/")
	if !ok {
		return contentRange{}, false
	}
	cr := contentRange{first: -1, last: -1, size: -1}
	if total != "*" {
		n, ok := parseUint(total)
		if !ok {
			return contentRange{}, false
		}
		cr.size = n
	}
	if rng == "*" {
		return cr, cr.size >= 0
	}
	a, b, ok := strings.Cut(rng, "-")
	if !ok {
		return contentRange{}, false
	}
	first, ok1 := parseUint(a)
	last, ok2 := parseUint(b)
	if !ok1 || !ok2 || first > last || (cr.size >= 0 && last >= cr.size) {
		return contentRange{}, false
	}
	cr.first, cr.last = first, last
	return cr, true
}

// parseUint parses a non-negative decimal int64 with no sign or spaces.
func parseUint(s string) (int64, bool) {
	if s == "" || s[0] < '0' || s[0] > '9' {
		return 0, false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return n, err == nil
}
