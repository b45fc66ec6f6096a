// Package fs serves an archive index as a read-only FUSE filesystem.
//
// It owns the go-fuse node tree, the mount and unmount of a mountpoint, and
// the translation of errors into syscall.Errno: it is the only package where
// errors become errnos. It knows no HTTP, S3, codecs or cache files: all it
// sees of an archive is the small Archive interface below.
//
// The tree is built lazily: a node is made when the kernel looks a name up
// (Lookup, or Readdir with readdirplus), never up front, so an archive with a
// million entries mounts at once. Inode numbers are EntryID+1 (the root is
// inode 1), so hard links share one inode and one link count.
package fs

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"syscall"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/tarmount/tarmount/index"
)

// Archive is the read side of an index. Implementations are safe for
// concurrent use.
type Archive interface {
	// Entry returns the entry of id. It is never nil for ids reachable
	// from Children or Lookup. The entry must not be modified.
	Entry(id index.EntryID) *index.Entry
	// Children lists the names in directory dir, sorted by Name. The slice
	// is shared: do not modify it.
	Children(dir index.EntryID) []index.Dirent
	// Lookup finds name in directory dir.
	Lookup(dir index.EntryID, name string) (index.EntryID, bool)
	// Xattrs lists the extended attributes of id. The slice is shared.
	Xattrs(id index.EntryID) []index.Xattr
	// ReadAt reads the content of file id at off into p, sparse holes
	// included (as zeros). It returns io.EOF at the end of the file and
	// honours ctx: a cancelled ctx makes it return ctx.Err() promptly.
	ReadAt(ctx context.Context, id index.EntryID, p []byte, off int64) (int, error)
	// Len is the number of entries (inodes).
	Len() int
}

// Growing is implemented by an Archive whose index is still being built:
// index.Live, a mount served during its first index pass. Until Complete,
// Lookup waits for names the archive does not know yet (a missing name is
// only answered once the pass has ended), a directory's listing waits for
// the whole index (tar order is arbitrary: no directory is known complete
// before), and the kernel caches no entry or attribute, which a later
// member may still change.
type Growing interface {
	// Complete reports whether the archive's answers are final.
	Complete() bool
	// WaitName returns once name in directory dir is known or the index
	// is complete, or with an error (the pass failed, ctx ended).
	WaitName(ctx context.Context, dir index.EntryID, name string) error
	// WaitListing returns once the index is complete, or with an error.
	WaitListing(ctx context.Context) error
}

// growingTimeout is the entry and attribute cache time while a Growing
// archive is not complete: the kernel asks again at the next use. (Zero
// would mean go-fuse's default, the mount's long timeout.)
const growingTimeout = time.Nanosecond

// Options configure a mount. The zero value is usable.
type Options struct {
	// Logger receives errors (once per entry), lifecycle messages and,
	// with Debug, go-fuse's request trace. Nil discards.
	Logger *slog.Logger
	// Name is the filesystem type suffix shown in /proc/mounts as
	// fuse.<Name>. Default "tarmount"; tests use "tarmount-test" so that
	// leftover test mounts can be found.
	Name string
	// FsName is the source shown in /proc/mounts (the archive URL). It is
	// readable by every user of the machine: do not put credentials in it.
	FsName string
	// AllowOther lets users other than the mounting one use the mount.
	AllowOther bool
	// UID and GID, when set, are reported as the owner of every entry
	// instead of the owner recorded in the archive.
	UID, GID *uint32
	// Debug logs every FUSE request at Debug level.
	Debug bool
	// Local, if set, holds local copies of files (a materialized
	// directory): a file opened once its copy is complete is read from
	// it, through the kernel's FUSE passthrough where it can.
	Local Local
	// Timeout is the kernel's entry, attribute and negative-lookup cache
	// time. The archive is immutable, so the default is one hour.
	Timeout time.Duration
	// Observe, if set, is told of every FUSE request served, with its op
	// name, duration and errno (see ObserveFunc). Nil observes nothing
	// and costs nothing.
	Observe ObserveFunc
	// Status, if set, is the value of the extended attribute StatusXattr
	// of the mount's root: whatever the mounting program wants to report
	// about itself (tarmount status reads it). It is called at each
	// getxattr of that name, from any goroutine; its result is not
	// retained and must be at most 64 KiB, the most an xattr value can
	// be. The attribute is not listed by listxattr.
	Status func() []byte
	// PartialListings lists, while a Growing archive is not complete,
	// the names known so far instead of waiting for the whole index.
	PartialListings bool
}

// StatusXattr is the extended attribute of a mount's root whose value is
// what Options.Status returns. It answers only at the root of a mount
// made with a Status function, so a path where it answers is such a
// mount's root.
const StatusXattr = "user.tarmount.status"

const (
	defaultName    = "tarmount"
	defaultTimeout = time.Hour
	// blockSizeBytes is the st_blksize reported for every entry: the
	// preferred I/O size.
	blockSizeBytes = 128 << 10
	// statfsBlockSizeBytes is the block size reported by statfs.
	statfsBlockSizeBytes = 4096
	// maxReadBytes is the largest READ we ask the kernel for (max_read);
	// go-fuse caps it at what the kernel accepts.
	maxReadBytes = 1 << 20
	// maxBackground is the number of asynchronous requests (readahead,
	// readdir) the kernel may have in flight.
	maxBackground = 64
	// MaxInflightRequestBytes bounds the request buffers that go-fuse has
	// checked out (each holds up to maxReadBytes): what FUSE itself costs
	// in memory, however many processes read at once. 16 MiB lets 15
	// requests be served at once, more than the cores that serve them.
	MaxInflightRequestBytes = 16 << 20
	// maxPathDepth bounds the parent walk used to name entries in logs;
	// a hostile index could hold a cycle.
	maxPathDepth = 4096
	// maxLoggedEntries bounds the set of entries whose errors have been
	// logged at Error level.
	maxLoggedEntries = 1 << 16
)

// tree is the state shared by all nodes of one mount.
type tree struct {
	// Set once.
	a       Archive
	local   Local         // nil: none
	status  func() []byte // nil: none
	log     *slog.Logger
	uid     *uint32
	gid     *uint32
	timeout time.Duration
	grow    Growing // nil unless the archive is Growing
	partial bool    // Options.PartialListings

	statfsOnce   sync.Once
	statfsBlocks uint64 // set by statfsOnce

	mu     sync.Mutex
	logged map[index.EntryID]struct{} // guarded by mu: entries with an error logged at Error level
}

// growing reports whether the archive is Growing and not yet complete.
func (t *tree) growing() bool { return t.grow != nil && !t.grow.Complete() }

// cacheTime is how long the kernel may keep entries and attributes now.
func (t *tree) cacheTime() time.Duration {
	if t.growing() {
		return growingTimeout
	}
	return t.timeout
}

// withDefaults fills in the defaults documented on Options.
func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Name == "" {
		o.Name = defaultName
	}
	if o.Timeout <= 0 {
		o.Timeout = defaultTimeout
	}
	return o
}

func newTree(a Archive, opts Options) *tree {
	opts = opts.withDefaults()
	t := &tree{
		a:       a,
		local:   opts.Local,
		status:  opts.Status,
		log:     opts.Logger,
		timeout: opts.Timeout,
		partial: opts.PartialListings,
		logged:  make(map[index.EntryID]struct{}),
	}
	if g, ok := a.(Growing); ok && !g.Complete() {
		t.grow = g
	}
	if opts.UID != nil {
		uid := *opts.UID
		t.uid = &uid
	}
	if opts.GID != nil {
		gid := *opts.GID
		t.gid = &gid
	}
	return t
}

// NewRoot returns the root node of the tree over a, for tests that call node
// methods directly. Such tests must first attach it with go-fuse's
// NewNodeFS, which Mount does itself.
func NewRoot(a Archive, opts Options) fusefs.InodeEmbedder {
	return newDirNode(newTree(a, opts), index.RootID)
}

// fuseOptions builds the go-fuse options for a mount with opts.
func fuseOptions(opts Options) *fusefs.Options {
	opts = opts.withDefaults()
	timeout := opts.Timeout
	// go-fuse logs its request trace (Debug) and its complaints through
	// the same *log.Logger.
	level := slog.LevelWarn
	if opts.Debug {
		level = slog.LevelDebug
	}
	fuseLog := slog.NewLogLogger(opts.Logger.With("component", "go-fuse").Handler(), level)
	return &fusefs.Options{
		MountOptions: fuse.MountOptions{
			AllowOther: opts.AllowOther,
			// "ro" makes the kernel refuse writes itself; the node
			// methods answer EROFS too, should a mount ever be
			// remounted read-write.
			Options:       []string{"ro", "default_permissions"},
			MaxBackground: maxBackground,
			// Requests beyond the bound wait in the kernel.
			MaxInflightRequestBytes: MaxInflightRequestBytes,
			MaxWrite:                maxReadBytes,
			MaxReadAhead:            maxReadBytes,
			FsName:                  opts.FsName,
			Name:                    opts.Name,
			Debug:                   opts.Debug,
			Logger:                  fuseLog,
			// The archive never changes: cached pages, attributes
			// and link targets stay valid for the life of the mount.
			EnableSymlinkCaching:     true,
			ExplicitDataCacheControl: true,
			// Try mount(2) first (root); go-fuse falls back to
			// fusermount3 when that fails.
			DirectMount:      true,
			DirectMountFlags: syscall.MS_RDONLY | syscall.MS_NOSUID | syscall.MS_NODEV,
		},
		EntryTimeout:    &timeout,
		AttrTimeout:     &timeout,
		NegativeTimeout: &timeout,
		// Report modes as the archive has them, even 0000.
		NullPermissions: true,
		RootStableAttr:  &fusefs.StableAttr{Ino: inodeNumber(index.RootID), Gen: 1},
		Logger:          fuseLog,
	}
}

// Mount mounts a read-only at mountpoint and serves it in the background.
// It returns once the kernel answers requests on the mountpoint.
//
// The caller unmounts with Unmount(mountpoint) (or server.Unmount) and then
// waits with server.Wait, which returns once the kernel has released the
// mount: after a lazy detach (ErrBusy), only when the last open file is
// closed.
func Mount(mountpoint string, a Archive, opts Options) (*fuse.Server, error) {
	if err := checkMountpoint(mountpoint); err != nil {
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	t := newTree(a, opts)
	root := newDirNode(t, index.RootID)
	fopts := fuseOptions(opts)
	// As fusefs.Mount, with the observer between go-fuse's server and
	// its node bridge.
	raw := fusefs.NewNodeFS(root, fopts)
	if opts.Observe != nil {
		raw = &observedFS{RawFileSystem: raw, observe: opts.Observe}
	}
	server, err := fuse.NewServer(raw, mountpoint, &fopts.MountOptions)
	if err != nil {
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	go server.Serve()
	if err := server.WaitMount(); err != nil {
		// The serve loop ends by itself when the mount failed.
		return nil, fmt.Errorf("mount %s: %w", mountpoint, err)
	}
	t.log.Info("mounted", "path", mountpoint, "src", opts.FsName, "entries", a.Len())
	return server, nil
}

// checkMountpoint refuses a mountpoint that holds a FUSE mount already: a
// live one would be hidden, and a dead one (its server gone) must be cleared
// with Unmount first. statfs is never answered from the kernel's caches, so
// it reaches a dead mount's missing server and fails with ENOTCONN.
func checkMountpoint(mountpoint string) error {
	var st unix.Statfs_t
	if err := unix.Statfs(mountpoint, &st); err != nil {
		if err == unix.ENOTCONN {
			return fmt.Errorf("%w: a dead FUSE mount (its server is gone) is still attached; unmount it first", err)
		}
		return err
	}
	target, err := mountTarget(mountpoint)
	if err != nil {
		return err
	}
	if fstype, found, err := mountType(target); err == nil && found && isFUSE(fstype) {
		return fmt.Errorf("%w (a %s filesystem)", ErrMounted, fstype)
	}
	return nil
}

// inodeNumber is the inode number of id: EntryID+1, so the root is inode 1
// as FUSE wants.
func inodeNumber(id index.EntryID) uint64 {
	return uint64(id) + 1
}
