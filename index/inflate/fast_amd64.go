//go:build amd64 && !purego

package inflate

// fastLoop is huffmanFast's loop, fastLoopGo written out by hand in
// fast_amd64.s: the same steps, with the bit buffer, the positions and
// the table in registers throughout.
//
//go:noescape
func fastLoop(st *fastState) int
