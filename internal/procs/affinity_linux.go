package procs

import "golang.org/x/sys/unix"

// affinityCPUs is how many CPUs the process's affinity mask allows now, 0
// when it cannot be read.
func affinityCPUs() int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return 0
	}
	return set.Count()
}
