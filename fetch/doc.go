// Package fetch owns byte access to the source object: file, HTTP(S) and S3
// range sources pinned to one version of the object, parallel block
// fetching with one fetch in flight per block, a memory cache bounded in
// bytes, and in-order streaming with read-ahead.
//
// It imports no tarmount package and knows nothing of tar or compression:
// here an object is a sized, immutable sequence of bytes.
//
// Layers:
//
//	Open(url) -> Source   ReadAt(ctx, p, off) on one pinned version of the
//	                |     object; every HTTP or S3 range request is
//	                |     conditional on the identity seen at Open
//	                |     (If-Match, or the S3 version id)
//	                v
//	            Blocks    fixed-size blocks fetched by Workers goroutines,
//	                |     memory LRU bounded in bytes, ReadAt for random
//	                |     access, Stream for in-order reading with read-ahead
//	                |     (its first block in pieces of growing size, so
//	                |     that its first bytes come early), Ranges for
//	                |     exact ranges (gzip spans)
//	                v
//	            DiskCache optional: blocks and ranges kept on disk across
//	                      mounts and shared by processes, keyed by identity,
//	                      checksummed, LRU bounded in bytes
//
// Block layout of an object of Size bytes (the last block is short):
//
//	0            BlockSize     2*BlockSize         k*BlockSize     Size
//	|-- block 0 --|-- block 1 --|-- ... --|          |-- block k --|
//
// Errors: ErrNotFound, ErrChanged, ErrNoRange, ErrClosed and ErrTimeout
// are sentinels to test with errors.Is; IsRetryable tells transient
// failures (5xx, 429, cut connections) from permanent ones. Sources and
// Blocks do not retry: WithRetry wraps a Source with retries, resumed
// ranges, a stall watchdog and a bounded time per read.
package fetch
