package main

import (
	"fmt"
	"runtime/debug"
	"strconv"
)

// buildVersion is set at build time by scripts that know it:
//
//	go build -ldflags "-X main.buildVersion=$(git describe --always --dirty)" ./cmd/tarmount
var buildVersion string

// version says which tarmount this is, from what the Go toolchain
// recorded in the binary: the module version (buildVersion when set), the
// commit and its date (with -buildvcs, the default in a git checkout), and
// the Go version.
func version() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "tarmount (no build information)"
	}
	v := info.Main.Version
	if buildVersion != "" {
		v = buildVersion
	}
	if v == "" || v == "(devel)" {
		v = "devel"
	}
	var rev, when, dirty string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			when = s.Value
		case "vcs.modified":
			if b, _ := strconv.ParseBool(s.Value); b {
				dirty = ", modified"
			}
		}
	}
	out := "tarmount " + v
	if rev != "" {
		out += fmt.Sprintf(" (commit %.12s%s", rev, dirty)
		if when != "" {
			out += ", " + when
		}
		out += ")"
	}
	return out + ", " + info.GoVersion
}
