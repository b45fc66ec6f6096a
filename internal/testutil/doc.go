// Package testutil is the root of tarmount's test support. It holds
// Missing, which every test that lacks a prerequisite calls: a failure
// under CI=true, a skip elsewhere. Its sub-packages, importable from every
// package of the module:
//
//   - tarbuild: the one tar builder: members written with archive/tar in
//     any format, crafted raw headers (what archive/tar refuses to write),
//     trees packed by GNU tar, bsdtar or Go, and the compressors (gzip,
//     zstd frames, seekable zstd, lz4, ...).
//   - memsrc: an in-memory fetch.Source over a byte slice that counts
//     requests and ranges and injects faults.
//   - shaped: a static HTTP file server shaped like object storage that
//     injects faults (also used by scripts/httpserve and the benchmarks).
//   - corpus: trees with one of everything, packed with tarbuild.
//   - hostile: archives that attack their reader, with what a safe reader
//     does with each.
//   - s3server: a small S3-compatible server.
//   - treecmp: compares extracted trees.
//
// Test support knows no FUSE, starts no mounts and imports no tarmount
// package, so that the internal tests of every package can use it (a
// helper that imported package P could not serve P's own tests: an import
// cycle). memsrc gets fetch's Identity type as a type parameter for that.
package testutil
