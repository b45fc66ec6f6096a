package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/archive"
	tfs "github.com/tarmount/tarmount/fs"
)

// tarmount status MNT asks the server of a mount how it is doing. The
// server answers through the mount itself: the root of every mount has
// the extended attribute fs.StatusXattr, whose value is an archive.Status as
// JSON, made at the time of the getxattr. Compared with a control socket
// beside the mount, nothing is created or left behind (no stale socket
// after a kill -9, no runtime directory to choose), the path is the
// mountpoint whatever symlinks, bind mounts or mount namespaces lead to
// it, a dead server is told apart by the kernel (ENOTCONN), and who may
// read the status is who may use the mount.

// statusSource gathers a mount's status from the counters of its parts.
type statusSource struct {
	a           *archive.Archive
	materialize bool // with --materialize
	mountpoint  string
	started     time.Time
}

func (s *statusSource) status() *archive.Status {
	st := s.a.Status()
	st.Mountpoint = s.mountpoint
	st.Started = s.started.UTC()
	st.UptimeSeconds = time.Since(s.started).Seconds()
	return st
}

// json is the value of the mount's status attribute.
func (s *statusSource) json() []byte {
	data, err := json.Marshal(s.status())
	if err != nil {
		return fmt.Appendf(nil, `{"error":%q}`, err.Error())
	}
	return data
}

// maxStatusBytes is the most an extended attribute value can be
// (XATTR_SIZE_MAX): one getxattr with a buffer that large never races
// with a status growing between a size query and the read.
const maxStatusBytes = 64 << 10

// errNotMount is returned by readStatus for a path that is not the root of a
// running tarmount mount.
var errNotMount = errors.New("not a tarmount mount")

// readStatus reads the status attribute of the mount at path.
func readStatus(path string) ([]byte, error) {
	buf := make([]byte, maxStatusBytes)
	n, err := unix.Getxattr(path, tfs.StatusXattr, buf)
	switch {
	case err == nil:
		return buf[:n], nil
	case errors.Is(err, unix.ENODATA), errors.Is(err, unix.ENOTSUP):
		return nil, fmt.Errorf("%s: %w (no tarmount status there; give the mountpoint itself)", path, errNotMount)
	case errors.Is(err, unix.ENOTCONN):
		return nil, fmt.Errorf("%s: the server of this mount is gone; tarmount unmount %s clears it", path, path)
	default:
		return nil, fmt.Errorf("status of %s: %w", path, err)
	}
}

func newStatusCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "status [--json] MOUNTPOINT",
		Short:   "How a running mount is doing: source, index, fetches, caches, materialization",
		GroupID: "mount",
		Long: `What a running mount is doing: its source, index, bytes fetched, caches and
materialization progress. --json prints the same as one JSON object. A
mount with --metrics-addr also serves them to Prometheus.`,
		Example: `  tarmount status /mnt/runtime
  tarmount status --json /mnt/runtime | jq .materialize`,
		Args: exactArgs(1, "MOUNTPOINT"),
		RunE: func(_ *cobra.Command, args []string) error { return statusCmd(args[0], a.c.inspect.json, a.stdout) },
	}
	cmd.Flags().BoolVar(&a.c.inspect.json, "json", false, "the status as one JSON object")
	return cmd
}

// statusCmd prints the status of the mount at path: the server's JSON
// as it is with asJSON, else a few lines for people.
func statusCmd(path string, asJSON bool, w io.Writer) error {
	data, err := readStatus(path)
	if err != nil {
		return err
	}
	if asJSON {
		_, err := fmt.Fprintf(w, "%s\n", data)
		return err
	}
	var st archive.Status
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("status of %s: %w", path, err)
	}
	printStatus(w, &st)
	return nil
}

var indexSourceText = map[string]string{
	archive.FromFile:     "from --index",
	archive.FromCache:    "loaded from the cache",
	archive.FromEmbedded: "embedded in the archive",
	archive.FromSidecar:  "published beside the archive",
	archive.FromBuilt:    "built by this mount",
	archive.Building:     "being built by this mount",
}

func printStatus(w io.Writer, st *archive.Status) {
	line := func(name, format string, args ...any) {
		fmt.Fprintf(w, "%-13s %s\n", name+":", fmt.Sprintf(format, args...))
	}
	line("source", "%s", st.Source)
	line("mountpoint", "%s (server pid %d, up %s)", st.Mountpoint, st.PID,
		(time.Duration(st.UptimeSeconds) * time.Second).String())
	etag := ""
	if st.Archive.ETag != "" {
		etag = ", ETag " + st.Archive.ETag
	}
	codec := ""
	if st.Archive.Codec != "" { // known once the index is
		codec = ", " + st.Archive.Codec
	}
	line("archive", "%s%s%s", mb(st.Archive.Size), etag, codec)
	p := st.Index.Pass
	switch {
	case st.Index.Error != "":
		line("index", "pass failed after %d entries: %s", st.Index.Entries, st.Index.Error)
	case st.Index.Source == archive.Building && p != nil:
		line("index", "%s: %s", indexSourceText[st.Index.Source], passText(p))
	case st.Index.Source == archive.Building:
		line("index", "%s, %d entries so far", indexSourceText[st.Index.Source], st.Index.Entries)
	case p != nil && !p.DecodedCopy && !p.IntoDir:
		line("index", "%s in %s (%s at %s/s), %d entries, %d checkpoints", indexSourceText[st.Index.Source],
			seconds(p.ElapsedSeconds), mb(p.BytesRead), mb(int64(p.RateBytesPerSecond)), st.Index.Entries, st.Index.Checkpoints)
	default:
		line("index", "%s, %d entries, %d checkpoints", indexSourceText[st.Index.Source], st.Index.Entries, st.Index.Checkpoints)
	}
	switch {
	case p != nil && p.DecodedCopy:
		line("decoded copy", "%s", decodedCopyText(p))
	case p != nil && p.IntoDir:
		line("decoding", "%s", intoDirText(p))
	}
	f := st.Fetch
	line("fetched", "%s in %d requests (%s in flight), %d retries", mb(f.Bytes), f.Requests, mb(f.InFlightBytes), f.Retries)
	c := st.Cache
	line("memory cache", "%s of %s; blocks %d hits, %d misses; spans %d hits, %d misses, %d decodes",
		mb(c.MemoryBytes), mb(c.MemoryLimitBytes), c.BlockHits, c.BlockMisses, c.SpanHits, c.SpanMisses, c.SpanDecodes)
	if c.DiskEnabled {
		line("disk cache", "%d hits (%s read); %s of %s used", c.DiskHits, mb(c.DiskReadBytes), mb(c.DiskUsedBytes), mb(c.DiskLimitBytes))
	} else {
		line("disk cache", "none")
	}
	if m := st.Materialize; m != nil {
		line("materialize", "%s: %s", m.Dir, materializeText(m))
	}
}

// seconds is a duration in seconds, to a tenth.
func seconds(s float64) string {
	return (time.Duration(s*10) * time.Second / 10).String()
}

// passText says how far the first pass is: "42% of 66.6 MB read at
// 20.1 MB/s, about 3s left, 8123 entries so far".
func passText(p *archive.PassStatus) string {
	eta := ""
	if p.ETASeconds > 0 {
		eta = ", about " + seconds(p.ETASeconds) + " left"
	}
	return fmt.Sprintf("%.0f%% of %s read at %s/s%s, %d entries so far",
		p.Percent, mb(p.BytesTotal), mb(int64(p.RateBytesPerSecond)), eta, p.Entries)
}

// decodedCopyText says how far the decode pass is, which writes the
// decoded copy of a stream-only archive whose index was found without it.
func decodedCopyText(p *archive.PassStatus) string {
	switch {
	case p.Error != "":
		return "writing it again failed (reads of what it lacks fail): " + p.Error
	case p.Running:
		return "missing, being written again (reads past it wait): " + passText(p)
	default:
		return fmt.Sprintf("written again in %s (%s at %s/s)", seconds(p.ElapsedSeconds), mb(p.BytesRead), mb(int64(p.RateBytesPerSecond)))
	}
}

// intoDirText says how far the pass that decodes a stream-only archive
// into the materialized directory is (PassStatus.IntoDir).
func intoDirText(p *archive.PassStatus) string {
	switch {
	case p.Error != "":
		return "into the materialized directory failed (reads of what it lacks decode the archive again): " + p.Error
	case p.Running:
		return "into the materialized directory (reads of files not there yet wait): " + passText(p)
	default:
		return fmt.Sprintf("into the materialized directory done in %s (%s at %s/s)", seconds(p.ElapsedSeconds), mb(p.BytesRead), mb(int64(p.RateBytesPerSecond)))
	}
}

// materializeText says how far materialization is, without a "0 of 0"
// while its totals are not known.
func materializeText(m *archive.MaterializeStatus) string {
	switch {
	case m.Complete:
		return fmt.Sprintf("complete (%d files, %s written by this run)", m.Files, mb(m.Bytes))
	case m.Error != "" && m.TotalsFinal && m.FilesTotal > 0:
		return fmt.Sprintf("stopped at %d of %d files: %s", m.Files, m.FilesTotal, m.Error)
	case m.Error != "":
		return "stopped: " + m.Error
	case !m.TotalsFinal && m.FilesTotal > 0:
		return fmt.Sprintf("staging with the index pass, %d files (%s) seen so far, %s written", m.FilesTotal, mb(m.BytesTotal), mb(m.Bytes))
	case !m.TotalsFinal:
		return "waiting for the list of files"
	case m.FilesTotal == 0:
		return "no file data to write; placing the other entries"
	default:
		return fmt.Sprintf("%.0f%%, %d of %d files, %s of %s", m.Percent, m.Files, m.FilesTotal, mb(m.Bytes), mb(m.BytesTotal))
	}
}

// statusLine is a mount's status in one line, for systemd's STATUS=:
// "indexing: 42% of 66.6 MB, 8123 entries; materializing DIR: …".
func statusLine(st *archive.Status) string {
	var parts []string
	switch p := st.Index.Pass; {
	case st.Index.Error != "":
		parts = append(parts, "index pass failed: "+st.Index.Error)
	case st.Index.Source == archive.Building && p != nil:
		parts = append(parts, fmt.Sprintf("indexing: %.0f%% of %s, %d entries", p.Percent, mb(p.BytesTotal), p.Entries))
	default:
		parts = append(parts, fmt.Sprintf("serving %d entries of %s", st.Index.Entries, st.Source))
	}
	switch p := st.Index.Pass; {
	case p != nil && p.DecodedCopy && (p.Running || p.Error != ""):
		parts = append(parts, "decoded copy "+decodedCopyText(p))
	case p != nil && p.IntoDir && (p.Running || p.Error != ""):
		parts = append(parts, "decoding "+intoDirText(p))
	}
	if m := st.Materialize; m != nil {
		verb := "materializing "
		if m.Complete {
			verb = "materialized "
		}
		parts = append(parts, verb+m.Dir+": "+materializeText(m))
	}
	return strings.Join(parts, "; ")
}

// statusInterval is how often report tells systemd how the mount is
// doing.
const statusInterval = 2 * time.Second

// report sends the status of a to ready (STATUS=) every statusInterval
// while the first pass, the decode pass or the materialization m (nil
// without one) runs, and once more each time one of them ends, until done
// is closed.
func report(a *archive.Archive, m *archive.Materializer, ready *readiness, done <-chan struct{}) {
	t := time.NewTicker(statusInterval)
	defer t.Stop()
	s := &statusSource{a: a}
	passDone, decodeDone, mDone := a.PassDone(), a.DecodeDone(), (<-chan struct{})(nil)
	if m != nil {
		mDone = m.Done()
	}
	for passDone != nil || decodeDone != nil || mDone != nil {
		select {
		case <-done:
			return
		case <-t.C:
		case <-passDone:
			passDone = nil
		case <-decodeDone:
			decodeDone = nil
		case <-mDone:
			mDone = nil
		}
		ready.status(statusLine(s.status()))
	}
}

// reportBuild sends the status of a's first pass in the foreground
// (--wait-index, before the mount answers) to ready every
// statusInterval, until built is closed.
func reportBuild(a *archive.Archive, ready *readiness, built <-chan struct{}) {
	t := time.NewTicker(statusInterval)
	defer t.Stop()
	s := &statusSource{a: a}
	for {
		select {
		case <-built:
			return
		case <-t.C:
			ready.status(statusLine(s.status()))
		}
	}
}
