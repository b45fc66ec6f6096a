package materialize

import (
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
)

// dirTable holds the directories a job made open, by EntryID, so that
// every file is created, linked and given its metadata relative to a
// directory descriptor, never by a path. An archive may have more
// directories than the process may open (a node_modules tree has tens of
// thousands), so at most limit of them stay open: a directory nobody
// uses is closed, least recently used first, and opened again when
// needed, one component at a time from its nearest open ancestor with
// openDirBeneath (no symbolic link followed, never out of DIR).
//
// A directory is in use between get and put; one in use is never closed,
// so the table holds more than limit only while more are in use at once.
// Safe for concurrent use.
type dirTable struct {
	// set once
	ix    *index.Index
	limit int

	mu sync.Mutex
	// guarded by mu
	fd   []int32 // by EntryID: the open directory, -1 when closed
	refs []int32 // by EntryID: get calls not yet put
	made []bool  // by EntryID: added, so that get may open it again
	// The directories open and not in use, least recently used first:
	// a list threaded through prev and next (-1 ends it).
	prev, next []int32
	head, tail int32
	open       int // directories open, in use or not
	maxOpen    int // the most that were open at once (for tests)
	reopened   int // directories opened again after being closed (for tests)
}

func newDirTable(ix *index.Index, rootFd, limit int) *dirTable {
	if limit <= 0 {
		limit = 1024
	}
	n := ix.Len()
	t := &dirTable{ix: ix, limit: max(limit, 2), fd: make([]int32, n), refs: make([]int32, n),
		made: make([]bool, n), prev: make([]int32, n), next: make([]int32, n), head: -1, tail: -1}
	for i := range t.fd {
		t.fd[i], t.prev[i], t.next[i] = -1, -1, -1
	}
	// The root is the job's own descriptor: always open, never closed
	// here, and not counted.
	t.fd[index.RootID], t.refs[index.RootID], t.made[index.RootID] = int32(rootFd), 1, true
	return t
}

// add records directory id, just made (or found) and open at fd; it is
// not in use.
func (t *dirTable) add(id index.EntryID, fd int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.made[id] = true
	t.openedLocked(id, fd)
	t.pushLocked(id)
	t.trimLocked()
}

// openedLocked records that directory id is open at fd.
func (t *dirTable) openedLocked(id index.EntryID, fd int) {
	t.fd[id] = int32(fd)
	t.open++
	t.maxOpen = max(t.maxOpen, t.open)
}

// closeLocked closes open directory id, which is not in use.
func (t *dirTable) closeLocked(id index.EntryID) {
	t.unlinkLocked(id)
	unix.Close(int(t.fd[id]))
	t.fd[id] = -1
	t.open--
}

// get returns the open descriptor of directory id, which add recorded,
// opening it again if it was closed; the caller puts it back when done.
func (t *dirTable) get(id index.EntryID) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if int(id) >= len(t.fd) || !t.made[id] {
		return -1, fmt.Errorf("%w: entry %d is not a directory this job made", index.ErrBadIndex, id)
	}
	if t.fd[id] < 0 {
		if err := t.reopenLocked(id); err != nil {
			return -1, err
		}
		return int(t.fd[id]), nil // in use already
	}
	t.pinLocked(id)
	return int(t.fd[id]), nil
}

// put ends a use of directory id that get began.
func (t *dirTable) put(id index.EntryID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.unpinLocked(id)
	t.trimLocked()
}

// pinLocked marks open directory id in use once more.
func (t *dirTable) pinLocked(id index.EntryID) {
	if t.refs[id]++; t.refs[id] == 1 {
		t.unlinkLocked(id)
	}
}

// unpinLocked ends one use of directory id; the last makes it the most
// recently used of those not in use.
func (t *dirTable) unpinLocked(id index.EntryID) {
	if t.refs[id]--; t.refs[id] == 0 {
		t.pushLocked(id)
	}
}

// reopenLocked opens directory id, which was closed, from its nearest
// open ancestor down, one component at a time, and leaves it in use. Each
// directory on the way is in use while its child is opened, so that
// trimming does not close it first; then it is left open, not in use.
func (t *dirTable) reopenLocked(id index.EntryID) error {
	var chain []index.EntryID // id, then its closed ancestors
	for d := id; t.fd[d] < 0; {
		chain = append(chain, d)
		e := t.ix.Entry(d)
		if e == nil || e.Parent == d || !t.made[e.Parent] || len(chain) > t.ix.Len() {
			return fmt.Errorf("%w: directory %d has no open ancestor", index.ErrBadIndex, id)
		}
		d = e.Parent
	}
	t.pinLocked(t.ix.Entry(chain[len(chain)-1]).Parent)
	for k := len(chain) - 1; k >= 0; k-- {
		d := chain[k]
		e := t.ix.Entry(d)
		fd, err := openDirBeneath(int(t.fd[e.Parent]), e.Name)
		if err == nil {
			t.openedLocked(d, fd)
			t.refs[d] = 1
			t.reopened++
		}
		t.unpinLocked(e.Parent)
		t.trimLocked()
		if err != nil {
			return fmt.Errorf("open directory %s again: %w", t.ix.Path(d), err)
		}
	}
	return nil
}

// trimLocked closes directories not in use, least recently used first,
// while more than limit are open.
func (t *dirTable) trimLocked() {
	for t.open > t.limit && t.head >= 0 {
		t.closeLocked(index.EntryID(t.head))
	}
}

// pushLocked appends id to the list of directories not in use.
func (t *dirTable) pushLocked(id index.EntryID) {
	if id == index.RootID {
		return
	}
	t.prev[id], t.next[id] = t.tail, -1
	if t.tail >= 0 {
		t.next[t.tail] = int32(id)
	} else {
		t.head = int32(id)
	}
	t.tail = int32(id)
}

// unlinkLocked removes id from the list of directories not in use.
func (t *dirTable) unlinkLocked(id index.EntryID) {
	if id == index.RootID {
		return
	}
	p, n := t.prev[id], t.next[id]
	if p >= 0 {
		t.next[p] = n
	} else {
		t.head = n
	}
	if n >= 0 {
		t.prev[n] = p
	} else {
		t.tail = p
	}
	t.prev[id], t.next[id] = -1, -1
}

// drop closes directory id for good (its metadata is applied): get fails
// for it from then on. It must not be in use.
func (t *dirTable) drop(id index.EntryID) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if id == index.RootID || !t.made[id] {
		return
	}
	if t.fd[id] >= 0 {
		t.closeLocked(id)
	}
	t.made[id] = false
}

// closeAll closes every directory the table holds open but the root.
func (t *dirTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, fd := range t.fd {
		if fd >= 0 && index.EntryID(i) != index.RootID {
			unix.Close(int(fd))
			t.fd[i] = -1
		}
	}
	t.head, t.tail, t.open = -1, -1, 0
}
