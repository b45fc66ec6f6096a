package main

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestAppendJSON checks that entryJSON.appendJSON writes what
// encoding/json writes (without HTML escaping), for names with control
// characters, quotes, invalid UTF-8 and line separators, and with every
// optional field set or not.
func TestAppendJSON(t *testing.T) {
	all := make([]byte, 0, 128)
	for c := range 128 {
		all = append(all, byte(c))
	}
	off, stored := int64(1536), int64(7)
	for _, j := range []entryJSON{
		{Path: "a/b.txt", Type: "file", Size: 10, Mode: "0644", MTime: "2020-01-02T03:04:05.123Z", MTimeNs: 1, Inode: 3, Nlink: 1, Offset: &off},
		{Path: string(all), Type: "symlink", Link: "../x\"y\\z", Mode: "0777", Uname: "ü", Gname: "<&>", UID: 4000000000, GID: 1},
		{Path: "bad\xff\xfe utf8 \u2028 \u2029 \U0001F600", Type: "char", Devmaj: 1, Devmin: 3, Mode: "0600", ATimeNs: -5, CTimeNs: 9},
		{Path: "s", Type: "file", Sparse: true, Stored: &stored, Xattrs: map[string]string{"user.b": "2", "user.a": "\x00\x01", "user.\xff": "v"}},
		{},
	} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(j); err != nil {
			t.Fatal(err)
		}
		if got := j.appendJSON(nil); !bytes.Equal(got, want.Bytes()) {
			t.Errorf("appendJSON:\n got %s\nwant %s", got, want.Bytes())
		}
	}
}
