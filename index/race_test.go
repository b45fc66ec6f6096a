//go:build race

package index

// raceEnabled shrinks the data of the slowest tests: the race detector
// slows decoding tenfold, and these tests are about bytes, not goroutines.
const raceEnabled = true
