package materialize

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
)

// dirTree is the directories of the archive in DIR. Run plans them from
// the index before anything is written (plan): which to make, parents
// first, which names to refuse, the other names (hard links) of other
// entries. One goroutine then makes them (make) while the writers wait
// for the directory a file goes in (wait) and use it through the table of
// open directories (table.get and put).
//
// Concurrency: what plan sets is read-only once make and the writers
// start. make alone writes plain and made; a directory's plain is read
// only once wait saw it made (made is stored after plain). mu guards
// stopped and the waits on cond; made is stored under mu, so that a
// waiter cannot miss a broadcast, and loaded without it on the fast path.
// table has its own lock. Lock order: mu and table's lock are never held
// together.
type dirTree struct {
	// set by Open from RLIMIT_NOFILE (or by tests)
	limit int // directories kept open at most (dirTable); more are opened again as needed

	// set by plan, read-only afterwards
	order   []index.EntryID // the directories to make, parents first
	reach   []bool          // by EntryID: a directory reachable from DIR by valid names
	refused []bool          // by EntryID: an entry whose first name plan refused
	pos     []int32         // by EntryID: a directory's place in order, -1 for others
	extra   map[index.EntryID][]name
	table   *dirTable // the directories made, open or opened again on demand

	// written by make, read by others after wait
	plain []bool // by EntryID: made by this job in a plain directory (plainDir)
	made  atomic.Int32

	mu      sync.Mutex
	cond    sync.Cond // on mu: broadcast when made or stopped change
	stopped bool      // guarded by mu: make returned
}

// name is another name of an entry (a hard link): name in directory dir.
type name struct {
	dir  index.EntryID
	name string
}

// plan walks the tree of ix from the root, without touching DIR: it lists
// the directories to make, parents first, refuses names that are not one
// component (telling note), and collects the extra names (hard links) of
// other entries. rootFd is DIR, which table holds but never closes.
func (t *dirTree) plan(ix *index.Index, rootFd int, rootPlain bool, note func(kind, path string, err error)) error {
	n := ix.Len()
	t.reach = make([]bool, n)
	t.reach[index.RootID] = true
	t.refused = make([]bool, n)
	t.extra = map[index.EntryID][]name{}
	queue := []index.EntryID{index.RootID}
	for k := 0; k < len(queue); k++ {
		d := queue[k]
		for _, c := range ix.Children(d) {
			e := ix.Entry(c.ID)
			if e == nil || c.ID == index.RootID {
				return fmt.Errorf("%w: entry %d listed in directory %d", index.ErrBadIndex, c.ID, d)
			}
			if !validName(c.Name) || (d == index.RootID && c.Name == stateDirName) {
				note("names that are not one path component or are reserved (refused)", c.Name, nil)
				if e.Parent == d && e.Name == c.Name {
					// Its other names (hard links), if any, go too.
					t.refused[c.ID] = true
				}
				continue
			}
			if e.Parent != d || e.Name != c.Name {
				if e.Type == index.TypeDir {
					return fmt.Errorf("%w: directory %d has two names", index.ErrBadIndex, c.ID)
				}
				t.extra[c.ID] = append(t.extra[c.ID], name{d, c.Name})
				continue
			}
			if e.Type != index.TypeDir {
				continue
			}
			if t.reach[c.ID] {
				return fmt.Errorf("%w: directory %d listed twice", index.ErrBadIndex, c.ID)
			}
			t.reach[c.ID] = true
			queue = append(queue, c.ID)
		}
	}
	// Made in archive (EntryID) order where parents come first in it,
	// as they do in an index Build made, so that make keeps ahead of
	// the writers, which go in archive order; else level by level.
	t.order = slices.Clone(queue[1:])
	slices.Sort(t.order)
	if !t.placeDirs(ix) {
		t.order = queue[1:]
		t.placeDirs(ix)
	}
	t.table = newDirTable(ix, rootFd, t.limit)
	t.plain = make([]bool, n)
	t.plain[index.RootID] = rootPlain
	t.cond.L = &t.mu
	return nil
}

// placeDirs sets pos from order and reports whether every directory
// comes after its parent.
func (t *dirTree) placeDirs(ix *index.Index) bool {
	t.pos = make([]int32, ix.Len())
	for i := range t.pos {
		t.pos[i] = -1
	}
	for k, id := range t.order {
		if p := ix.Entry(id).Parent; p != index.RootID && t.pos[p] < 0 {
			return false
		}
		t.pos[id] = int32(k)
	}
	return true
}

// make makes the directories plan listed, parents first, and hands each
// to the table, counting each in entries. Before each it calls stop,
// and returns its error when not nil. Its caller calls halt once it
// returned (and its error is recorded).
func (t *dirTree) make(ix *index.Index, entries *atomic.Int64, stop func() error) error {
	for k, id := range t.order {
		if err := stop(); err != nil {
			return err
		}
		e := ix.Entry(id)
		pfd, err := t.table.get(e.Parent)
		if err != nil {
			return err
		}
		fd, made, err := makeDirBeneath(pfd, e.Name)
		t.table.put(e.Parent)
		if err != nil {
			return fmt.Errorf("%s: %w", ix.Path(id), err)
		}
		t.table.add(id, fd)
		t.plain[id] = made && t.plain[e.Parent]
		entries.Add(1)
		t.mu.Lock()
		t.made.Store(int32(k + 1))
		t.mu.Unlock()
		t.cond.Broadcast()
	}
	return nil
}

// halt records that make returned, and wakes every wait.
func (t *dirTree) halt() {
	t.mu.Lock()
	t.stopped = true
	t.mu.Unlock()
	t.cond.Broadcast()
}

// wait waits until directory id is made (at once for the root and for
// entries make does not make); it returns false when make stopped
// before it.
func (t *dirTree) wait(id index.EntryID) bool {
	if t.made.Load() > t.pos[id] {
		return true // inlined: the usual case, once per file
	}
	return t.waitSlow(id)
}

func (t *dirTree) waitSlow(id index.EntryID) bool {
	pos := t.pos[id]
	t.mu.Lock()
	for t.made.Load() <= pos && !t.stopped {
		t.cond.Wait()
	}
	t.mu.Unlock()
	return t.made.Load() > pos
}

// parentFd returns the open directory that holds the first name of e,
// in use until the caller puts it back (table.put(e.Parent)).
func (t *dirTree) parentFd(ix *index.Index, id index.EntryID, e *index.Entry) (int, error) {
	if !validName(e.Name) {
		return -1, fmt.Errorf("%w: entry %d (%s) has no directory", index.ErrBadIndex, id, ix.Path(id))
	}
	fd, err := t.table.get(e.Parent)
	if err != nil {
		return -1, fmt.Errorf("entry %d (%s): %w", id, ix.Path(id), err)
	}
	return fd, nil
}

// close closes the directories the table holds open (not DIR). Close
// calls it once the writers stopped.
func (t *dirTree) close() {
	if t.table != nil {
		t.table.closeAll()
	}
}

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
