package materialize

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
	"github.com/tarmount/tarmount/internal/xattr"
)

// State on disk, for resuming and for telling our DIR from somebody
// else's, all of it inside DIR, so that nothing is written beside it (its
// parent may be read-only, or the root of a volume):
//
//	DIR                          xattr user.tarmount.state (xattr.State): the
//	                             marker, JSON {"source": KEY, "complete": bool},
//	                             set (and synced) before the first byte goes into
//	                             DIR and again once DIR is complete; while a job
//	                             brings a DIR that held another tree to this
//	                             archive's (upgrade.go), also "replace": true and
//	                             "from": the KEY of the version DIR was complete
//	                             with, when one was
//	DIR/.tarmount-partial/       only while DIR is incomplete
//	    journal                  "tarmount-journal 1 KEY\n" then one decimal entry
//	                             id per line, for each regular file that is complete
//	                             under all its names (data, owner, mode, xattrs,
//	                             times); and "@OFFSET PATH" (decimal; the path
//	                             as it is when it is printable ASCII and starts
//	                             with no quote, else Go-quoted)
//	                             for each file a one-pass Stage wrote whole with
//	                             its header's metadata and linked under PATH, its
//	                             data at OFFSET of the tar stream (trusted only
//	                             by Job.TrustPlaced); a torn last line is ignored
//	    tmp/                     files being written, renamed into place when done;
//	                             emptied when a job starts
//
// On a filesystem without user xattrs the marker is the file
// PARENT/.BASE.tarmount beside DIR instead, where versions before the
// xattr kept it: it is read when DIR has no xattr, and removed once the
// xattr is written. The journal lives in DIR so that it goes away with
// the data it describes.

const (
	stateDirName = ".tarmount-partial"
	journalName  = "journal"
	tmpDirName   = "tmp"
	journalMagic = "tarmount-journal 1 "
)

type marker struct {
	Source   string `json:"source"`
	Complete bool   `json:"complete"`
	// Replace says that DIR held another tree when the job began:
	// whatever the archive lacks is removed, and a resumed job does so
	// too. From is the source key of the version DIR was complete with
	// ("" when unknown), whose index tells what is unchanged.
	Replace bool   `json:"replace,omitempty"`
	From    string `json:"from,omitempty"`
}

// legacyMarkerPath returns where the marker of dir lives on a filesystem
// without user xattrs (and where older versions kept it).
func legacyMarkerPath(dir string) string {
	return filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".tarmount")
}

// readMarker returns the marker of dir: its xattr, else the file beside
// it.
func readMarker(dir string) (marker, bool) {
	var m marker
	data, err := getState(dir)
	if err != nil {
		if data, err = os.ReadFile(legacyMarkerPath(dir)); err != nil {
			return marker{}, false
		}
	}
	if json.Unmarshal(data, &m) != nil || m.Source == "" {
		return marker{}, false
	}
	return m, true
}

// getState reads the state xattr of dir, without following a symlink.
func getState(dir string) ([]byte, error) {
	buf := make([]byte, 1024)
	for {
		n, err := unix.Lgetxattr(dir, xattr.State, buf)
		if err == unix.ERANGE && len(buf) < 1<<20 {
			buf = make([]byte, 4*len(buf))
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// writeMarker replaces the marker of dir, which must exist, atomically
// and durably: its xattr, or where the filesystem has no user xattrs, the
// file beside it.
func writeMarker(dir string, m marker) error {
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("write the state of %s: %w", dir, err)
	}
	defer unix.Close(fd)
	err = unix.Fsetxattr(fd, xattr.State, data, 0)
	if err == unix.ENOTSUP || err == unix.EOPNOTSUPP {
		return writeLegacyMarker(dir, data)
	}
	if err == nil {
		err = unix.Fsync(fd)
	}
	if err != nil {
		return fmt.Errorf("write the state of %s: %w", dir, err)
	}
	// A marker beside DIR from an older version is stale now. (Looked
	// for first: removing nothing would still fail in a read-only
	// parent.)
	if p := legacyMarkerPath(dir); lexists(p) {
		if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("remove the old state marker of %s: %w", dir, err)
		}
	}
	return nil
}

func lexists(p string) bool {
	_, err := os.Lstat(p)
	return err == nil
}

// writeLegacyMarker replaces the marker file beside dir atomically and
// makes it durable.
func writeLegacyMarker(dir string, data []byte) error {
	p := legacyMarkerPath(dir)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return fmt.Errorf("write state marker beside %s: %w", dir, err)
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write state marker beside %s: %w", dir, err)
	}
	return nil
}

// readJournal returns the ids a journal of source key lists and the
// files it says Stage placed (by data offset), or nil ids when there is
// no journal of that source.
func readJournal(path, key string, n int) ([]index.EntryID, map[int64]string) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil
	}
	first, rest, ok := bytes.Cut(data, []byte("\n"))
	if !ok || string(first) != journalMagic+key {
		return nil, nil
	}
	ids := []index.EntryID{}
	placed := map[int64]string{}
	for len(rest) > 0 {
		line, tail, ok := bytes.Cut(rest, []byte("\n"))
		if !ok {
			break // torn last line
		}
		rest = tail
		if at, ok := bytes.CutPrefix(line, []byte("@")); ok {
			off, name, _ := bytes.Cut(at, []byte(" "))
			o, err := strconv.ParseInt(string(off), 10, 64)
			p := string(name)
			var qerr error
			if strings.HasPrefix(p, `"`) {
				p, qerr = strconv.Unquote(p)
			}
			if err == nil && qerr == nil && o >= 0 && p != "" {
				placed[o] = p
			}
			continue
		}
		v, err := strconv.ParseUint(string(line), 10, 32)
		if err != nil || int(v) >= n {
			continue
		}
		ids = append(ids, index.EntryID(v))
	}
	if len(ids) == 0 && len(placed) == 0 {
		return nil, nil // nothing to resume
	}
	return ids, placed
}

// journal appends completed entry ids, in batches: Add buffers, and the
// buffer is written when it grows or every flushEvery.
type journal struct {
	mu   sync.Mutex
	f    *os.File
	w    *bufio.Writer
	err  error
	buf  []byte // the line AddPlaced writes
	stop chan struct{}
	done chan struct{}
}

const flushEvery = 200 * time.Millisecond

// openJournal opens the journal at path for appending, starting it over
// (with a header for key) unless keep.
func openJournal(path, key string, keep bool) (*journal, error) {
	flags := os.O_WRONLY | os.O_CREATE | os.O_APPEND
	if !keep {
		flags |= os.O_TRUNC
	}
	f, err := os.OpenFile(path, flags, 0o600)
	if err != nil {
		return nil, err
	}
	j := &journal{f: f, w: bufio.NewWriterSize(f, 16<<10), stop: make(chan struct{}), done: make(chan struct{})}
	if !keep {
		if _, err := f.WriteString(journalMagic + key + "\n"); err != nil {
			f.Close()
			return nil, err
		}
	} else if st, err := f.Stat(); err == nil && st.Size() > 0 {
		// End a torn last line so that the next id starts a line.
		buf := make([]byte, 1)
		if _, err := f.ReadAt(buf, st.Size()-1); err == nil && buf[0] != '\n' {
			f.WriteString("\n")
		}
	}
	go j.loop()
	return j, nil
}

func (j *journal) loop() {
	defer close(j.done)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-j.stop:
			return
		case <-t.C:
			j.mu.Lock()
			if j.err == nil {
				j.err = j.w.Flush()
			}
			j.mu.Unlock()
		}
	}
}

// Add records id as complete.
func (j *journal) Add(id index.EntryID) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return
	}
	var buf [16]byte
	b := strconv.AppendUint(buf[:0], uint64(id), 10)
	b = append(b, '\n')
	_, j.err = j.w.Write(b)
}

// AddPlaced records that Stage placed the file whose data starts at off
// under path p.
func (j *journal) AddPlaced(off int64, p string) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err != nil {
		return
	}
	j.buf = strconv.AppendInt(append(j.buf[:0], '@'), off, 10)
	j.buf = append(j.buf, ' ')
	if plainName(p) {
		j.buf = append(j.buf, p...)
	} else {
		j.buf = strconv.AppendQuote(j.buf, p)
	}
	j.buf = append(j.buf, '\n')
	_, j.err = j.w.Write(j.buf)
}

// plainName reports whether p is written in the journal as it is: it
// does not start with a quote and holds only printable ASCII.
func plainName(p string) bool {
	if p == "" || p[0] == '"' {
		return false
	}
	for i := range len(p) {
		if c := p[i]; c < 0x20 || c >= 0x7f {
			return false
		}
	}
	return true
}

// Flush writes what is buffered to the file (durable against a crash of
// the process, not of the machine).
func (j *journal) Flush() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err == nil {
		j.err = j.w.Flush()
	}
	return j.err
}

// Close flushes and closes the journal. It is idempotent.
func (j *journal) Close() error {
	select {
	case <-j.stop:
		return nil
	default:
	}
	close(j.stop)
	<-j.done
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.err == nil {
		j.err = j.w.Flush()
	}
	if err := j.f.Close(); j.err == nil {
		j.err = err
	}
	return j.err
}
