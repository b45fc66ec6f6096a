package main

import (
	"fmt"
	"regexp"
	"strings"
)

// A run can measure several tarmount binaries side by side (an old build
// against a new one, to check that a change leaves the figures unchanged
// within noise): each is one more tool in every scenario, run in the same
// rounds and alternating with the others. A single binary keeps the plain
// tool names ("tarmount extract (saved index)"); with several, every
// tarmount row carries its build's name ("tarmount extract (saved index)
// [old]"), and the report compares each build's rows with the first
// build's (the baseline).

// build is one tarmount binary of the run.
type build struct {
	name string // empty when the run has one binary
	bin  string
}

var buildName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]*$`)

// parseBuilds reads -tarmount: one PATH, or NAME=PATH,NAME=PATH,... with
// the baseline first.
func parseBuilds(s string) ([]build, error) {
	if !strings.Contains(s, "=") {
		if s == "" {
			return nil, fmt.Errorf("-tarmount is empty")
		}
		return []build{{bin: s}}, nil
	}
	var bs []build
	seen := map[string]bool{}
	for _, f := range strings.Split(s, ",") {
		name, bin, ok := strings.Cut(strings.TrimSpace(f), "=")
		if !ok || bin == "" || !buildName.MatchString(name) {
			return nil, fmt.Errorf("-tarmount %q: want PATH or NAME=PATH,NAME=PATH (names of letters, digits, '.', '_', '+', '-')", s)
		}
		if seen[name] {
			return nil, fmt.Errorf("-tarmount %q: the name %q comes twice", s, name)
		}
		seen[name] = true
		bs = append(bs, build{name: name, bin: bin})
	}
	return bs, nil
}

// tool names a tarmount tool of this build: base itself, or "base [name]".
func (b build) tool(base string) string {
	if b.name == "" {
		return base
	}
	return base + " [" + b.name + "]"
}

// splitTool returns a tool's name without its build, and the build's name
// (empty for a peer or a run of one binary).
func splitTool(tool string) (base, name string) {
	if !strings.HasSuffix(tool, "]") {
		return tool, ""
	}
	i := strings.LastIndex(tool, " [")
	if i < 0 {
		return tool, ""
	}
	return tool[:i], tool[i+2 : len(tool)-1]
}

// tools returns base once per build, in the order of -tarmount.
func (s *suite) tools(base string) []string {
	out := make([]string, len(s.c.builds))
	for i, b := range s.c.builds {
		out[i] = b.tool(base)
	}
	return out
}

// buildOf returns the build that runs a tarmount tool.
func (s *suite) buildOf(tool string) build {
	_, name := splitTool(tool)
	for _, b := range s.c.builds {
		if b.name == name {
			return b
		}
	}
	return s.c.builds[0]
}
