//go:build race

package tests

// raceEnabled builds the tarmount binary under test with -race too, so the
// mount tests check the whole serving stack for data races.
const raceEnabled = true
