package testutil

import "fmt"

// ModeLetters is the ls -l letter form of an entry type (as tarmount ls
// --json names it: "dir", "symlink", ...) and an octal mode ("2755"), as
// GNU tar -tv prints it: drwxr-sr-x. It is the tests' own reference,
// written apart from the code it checks.
func ModeLetters(typ, octal string) string {
	var mode uint32
	fmt.Sscanf(octal, "%o", &mode)
	b := []byte("-rwxrwxrwx")
	if c, ok := map[string]byte{"dir": 'd', "symlink": 'l', "hardlink": 'h', "char": 'c', "block": 'b', "fifo": 'p'}[typ]; ok {
		b[0] = c
	}
	for i := range 9 {
		if mode&(1<<(8-i)) == 0 {
			b[i+1] = '-'
		}
	}
	for _, s := range []struct {
		bit        uint32
		at         int
		set, unset byte
	}{{0o4000, 3, 's', 'S'}, {0o2000, 6, 's', 'S'}, {0o1000, 9, 't', 'T'}} {
		if mode&s.bit != 0 {
			if b[s.at] == '-' {
				b[s.at] = s.unset
			} else {
				b[s.at] = s.set
			}
		}
	}
	return string(b)
}
