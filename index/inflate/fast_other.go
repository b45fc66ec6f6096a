//go:build !amd64 || purego

package inflate

func fastLoop(st *fastState) int { return fastLoopGo(st) }
