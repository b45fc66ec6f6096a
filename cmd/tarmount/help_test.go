package main

import (
	"bytes"
	"errors"
	"flag"
	"strings"
	"testing"
)

// TestHelp checks that every subcommand's --help prints its own usage
// with examples, then the flags, and exits as a help request.
func TestHelp(t *testing.T) {
	for _, cmd := range []string{"mount", "index", "extract", "unmount", "status", "ls", "stat", "cat", "get", "pack"} {
		t.Run(cmd, func(t *testing.T) {
			var out bytes.Buffer
			args := []string{cmd, "--help"}
			if cmd == "mount" {
				args = args[1:]
			}
			err := run(args, &out)
			if !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("got %v, want flag.ErrHelp", err)
			}
			want := "tarmount " + cmd
			if cmd == "mount" {
				want = "tarmount [flags] URL MOUNTPOINT"
			}
			s := out.String()
			if !strings.Contains(s, want) || !strings.Contains(s, "Example") || !strings.Contains(s, "-fetch-workers") {
				t.Errorf("help of %s: got\n%s\nwant its usage (%q), examples and the flags", cmd, s, want)
			}
		})
	}
}

func TestParseID(t *testing.T) {
	var id *uint32
	if err := parseID("1000", &id); err != nil || id == nil || *id != 1000 {
		t.Errorf("parseID(1000): got %v, %v", id, err)
	}
	for _, bad := range []string{"", "-1", "root", "4294967296"} {
		var id *uint32
		if err := parseID(bad, &id); err == nil {
			t.Errorf("parseID(%q): got %d, want an error", bad, *id)
		}
	}
}

// TestHelpS3Environment checks that each command's help says which
// variables the S3 flags fall back on.
func TestHelpS3Environment(t *testing.T) {
	for _, cmd := range []string{"mount", "index", "extract", "ls", "cat", "get", "pack"} {
		var out bytes.Buffer
		args := []string{cmd, "--help"}
		if cmd == "mount" {
			args = args[1:]
		}
		run(args, &out)
		for _, v := range []string{"$AWS_REGION", "$AWS_DEFAULT_REGION", "$AWS_PROFILE", "$AWS_DEFAULT_PROFILE",
			"$AWS_ENDPOINT_URL_S3", "$AWS_ENDPOINT_URL or", "no environment variable"} {
			if !strings.Contains(out.String(), v) {
				t.Errorf("help of %s does not name %s", cmd, v)
			}
		}
	}
}
