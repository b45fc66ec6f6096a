package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// repoRoot is the repository's root, from this package's directory.
var repoRoot = filepath.Join("..", "..")

// TestReadme: README.md is what a newcomer reads to the end: at most
// about 150 lines, opening with the two commands, the demo and the tests.
func TestReadme(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 150 {
		t.Errorf("README.md has %d lines, want at most 150: reference material goes to docs/", len(lines))
	}
	// The title, then the two commands in the first code block.
	var first []string
	in := false
	for _, l := range lines[1:] {
		switch {
		case strings.HasPrefix(l, "```"):
			in = !in
		case in:
			first = append(first, strings.Fields(l)...)
		case strings.TrimSpace(l) != "" && first == nil:
			t.Fatalf("README.md says %q before its two commands", l)
		}
		if !in && first != nil {
			break
		}
	}
	got := strings.Join(first, " ")
	if !strings.HasPrefix(got, "bash scripts/demo.sh #") || !strings.Contains(got, " bash scripts/test.sh #") {
		t.Errorf("README.md's first code block: got %q, want bash scripts/demo.sh and bash scripts/test.sh, each with its comment", got)
	}
}

// mdLink is a markdown link or image: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// TestDocLinks: every relative link of README.md and docs/ leads to a
// file of the repository, and every #anchor to a heading of its page.
func TestDocLinks(t *testing.T) {
	files, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "*.md"))
	more, _ := filepath.Glob(filepath.Join(repoRoot, "docs", "*", "*.md"))
	files = append(append([]string{filepath.Join(repoRoot, "README.md")}, files...), more...)
	n := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range mdLink.FindAllStringSubmatch(string(data), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			n++
			path, anchor, _ := strings.Cut(target, "#")
			page := f
			if path != "" {
				page = filepath.Join(filepath.Dir(f), path)
			}
			if _, err := os.Stat(page); err != nil {
				t.Errorf("%s: link %s: %v", f, target, err)
				continue
			}
			if anchor != "" && !hasAnchor(t, page, anchor) {
				t.Errorf("%s: link %s: %s has no heading #%s", f, target, page, anchor)
			}
		}
	}
	if n < 20 {
		t.Errorf("found %d relative links, want the 20 or more README.md and docs/ have", n)
	}
}

// hasAnchor reports whether the markdown file at page has a heading whose
// GitHub anchor is anchor.
func hasAnchor(t *testing.T, page, anchor string) bool {
	data, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if h := strings.TrimLeft(l, "#"); h != l && strings.HasPrefix(h, " ") && githubAnchor(h) == anchor {
			return true
		}
	}
	return false
}

// githubAnchor is the anchor GitHub gives a heading: lower case, spaces
// as '-', and every other character but letters, digits, '-' and '_'
// left out.
func githubAnchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

func TestGithubAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Boot: a published index, --materialize, `go version` from the mount": "boot-a-published-index---materialize-go-version-from-the-mount",
		"Caches and their bounds":       "caches-and-their-bounds",
		"With the inflater's fast loop": "with-the-inflaters-fast-loop",
	} {
		if got := githubAnchor(heading); got != want {
			t.Errorf("%q: got %q, want %q", heading, got, want)
		}
	}
}
