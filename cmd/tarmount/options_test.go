package main

import (
	"io"
	"strings"
	"testing"
)

func TestApplyMountOptions(t *testing.T) {
	cases := []struct {
		opts    string
		check   func(c *config) bool
		wantErr string
	}{
		{"ro,allow_other,dev,suid,nofail,_netdev,x-systemd.automount,comment=boot", func(c *config) bool { return c.allowOther && !c.debugFUSE }, ""},
		{"debug", func(c *config) bool { return c.debugFUSE }, ""},
		{"materialize=/var/lib/rt,cache_dir=/var/cache/tm,fetch-workers=16", func(c *config) bool {
			return c.mat.dir == "/var/lib/rt" && c.ao.CacheDir == "/var/cache/tm" && c.ao.FetchWorkers == 16
		}, ""},
		{"no_sign_request,foreground", func(c *config) bool { return c.ao.NoSignRequest && c.foreground }, ""},
		{"header=Authorization: Bearer x", func(c *config) bool { return c.ao.Header.Get("Authorization") == "Bearer x" }, ""},
		{"no_such_option", nil, `unknown mount option "no_such_option"`},
		{"materialize", nil, "needs a value"},
		{"fetch_workers=many", nil, "mount option fetch_workers=many"},
		{"o=x", nil, "unknown mount option"},
	}
	for _, tc := range cases {
		t.Run(tc.opts, func(t *testing.T) {
			var c config
			fs := c.flags("tarmount mount", io.Discard)
			if _, err := parse(fs, []string{"URL", "MNT", "-o", tc.opts}); err != nil {
				t.Fatal(err)
			}
			err := c.applyMountOptions(fs)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got error %v, want one with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tc.check(&c) {
				t.Errorf("options %q not applied: %+v", tc.opts, c)
			}
		})
	}
}

func TestRepeatedOptions(t *testing.T) {
	var c config
	fs := c.flags("tarmount mount", io.Discard)
	if _, err := parse(fs, []string{"-o", "allow_other", "URL", "MNT", "-o", "debug"}); err != nil {
		t.Fatal(err)
	}
	if err := c.applyMountOptions(fs); err != nil {
		t.Fatal(err)
	}
	if !c.allowOther || !c.debugFUSE {
		t.Errorf("-o allow_other -o debug: got allowOther=%v debug=%v, want both", c.allowOther, c.debugFUSE)
	}
}
