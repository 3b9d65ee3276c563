//go:build !linux

package procs

// affinityCPUs is 0 (unknown) off Linux: GOMAXPROCS grows to Max.
func affinityCPUs() int { return 0 }
