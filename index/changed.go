package index

import "github.com/tarmount/tarmount/fetch"

// ErrChanged is fetch.ErrChanged, which every read of a source that is no
// longer the version the index was built for wraps: the packages above
// index (fs answers ESTALE) test for it without knowing fetch.
var ErrChanged = fetch.ErrChanged
