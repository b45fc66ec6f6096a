// Package archive is an opened tarball as a library: what every command,
// and every test that needs an archive, uses.
//
// It owns:
//   - opening the source (file, http(s), s3) with fetch's retries, the
//     block cache and the disk cache;
//   - the one index lookup, in this order: an explicit file (--index),
//     the index saved in the cache directory for this version of the
//     archive (read while the source opens), the index embedded in the
//     archive (tarmount pack); else the first pass builds one and saves it;
//   - the first pass's lifecycle: in the foreground (Build) or in the
//     background while a mount already serves (StartPass);
//   - the decoded copy of stream-only archives (decoded.go);
//   - background materialization behind a mount (Materializer) and the
//     fastest full extraction (Extraction);
//   - packing a tree or tarball as seekable zstd (Pack), and writing
//     members out (Get, Cat).
//
// It knows no FUSE, no flags and no output formats: cmd/tarmount turns
// flags into Options, and fs serves the Tree an Archive gives.
//
// The package is imported by cmd only; it imports fetch, index and
// materialize.
package archive
