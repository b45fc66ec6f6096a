package testutil

import (
	"os"
	"testing"
)

// Missing reports that a prerequisite of tb (root, /dev/fuse, a tool, a
// server, a kernel feature) is missing. Under CI (CI=true), where the test
// command installs and starts everything, it fails tb: a missing
// prerequisite must never pass as a skip. Elsewhere it skips tb.
func Missing(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv("CI") == "true" {
		tb.Fatalf("missing prerequisite, and CI=true: "+format, args...)
	}
	tb.Skipf(format, args...)
}
