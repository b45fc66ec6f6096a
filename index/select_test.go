package index

import "testing"

// TestSelectionName: the matching of tar -x --exclude (unanchored, a
// directory takes what it holds) and member names (anchored), with
// wildcards that match '/', then --strip-components.
func TestSelectionName(t *testing.T) {
	for _, tc := range []struct {
		sel  Selection
		name string
		want string // "" = left out
	}{
		{Selection{}, "a/b", "a/b"},
		{Selection{StripComponents: 1}, "a/b/c", "b/c"},
		{Selection{StripComponents: 1}, "a", ""},
		{Selection{StripComponents: 2}, "a/b", ""},
		{Selection{Exclude: []string{"*.md"}}, "x/y.md", ""},
		{Selection{Exclude: []string{"*.md"}}, "x/y.md.txt", "x/y.md.txt"},
		{Selection{Exclude: []string{"sub"}}, "a/sub/f", ""},
		{Selection{Exclude: []string{"sub"}}, "a/subway/f", "a/subway/f"},
		{Selection{Exclude: []string{"a/s*"}}, "a/sub/f", ""},
		{Selection{Exclude: []string{"b/c"}}, "a/b/c/d", ""},
		{Selection{Exclude: []string{"[!a]*"}}, "a/x", ""}, // unanchored: "x" matches
		{Selection{Exclude: []string{`\*`}}, "a/*", ""},
		{Selection{Exclude: []string{`\*`}}, "a/b", "a/b"},
		{Selection{Include: []string{"a/*"}}, "a/b/c", "a/b/c"},
		{Selection{Include: []string{"a/*"}}, "b/a/c", ""},
		{Selection{Include: []string{"a"}}, "a/b", "a/b"},
		{Selection{Include: []string{"a"}}, "ab", ""},
		{Selection{Include: []string{"[a-c]?"}}, "bx/y", "bx/y"},
		{Selection{Include: []string{"[a-c]?"}}, "dx", ""},
		{Selection{Include: []string{"a"}, Exclude: []string{"*.go"}, StripComponents: 1}, "a/x.go", ""},
		{Selection{Include: []string{"a"}, Exclude: []string{"*.go"}, StripComponents: 1}, "a/x.md", "x.md"},
	} {
		got, ok := tc.sel.Name(tc.name, nil)
		if !ok {
			got = ""
		}
		if got != tc.want {
			t.Errorf("%s of %q: got %q, want %q", tc.sel, tc.name, got, tc.want)
		}
	}
}
