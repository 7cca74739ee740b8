// Package cgroupv2 reads what the kernel says of a cgroup v2 folder. The
// eBPF backend attaches its socket programs to a cgroup and checks where
// its links are attached by the cgroup's id; the tests' cgroups
// (internal/cgrouptest) are checked the same way.
package cgroupv2

import (
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// ID returns the id of the cgroup v2 at path (its inode number, which is
// what the kernel reports as a cgroup id, in a bpf_link's info among
// others). It fails when path is not on a cgroup v2 hierarchy.
func ID(path string) (uint64, error) {
	var fs unix.Statfs_t
	if err := unix.Statfs(path, &fs); err != nil {
		return 0, fmt.Errorf("cgroup %s: %w", path, err)
	}
	if fs.Type != unix.CGROUP2_SUPER_MAGIC {
		return 0, fmt.Errorf("%s is not a cgroup v2 folder", path)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Sys().(*syscall.Stat_t).Ino, nil
}
