//go:build !race

package materialize

const raceEnabled = false
