// Package procstat reads what /proc says about this process, for the
// backends' benchmarks.
package procstat

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// RSSKiB is the process's resident set size (VmRSS), 0 when unknown.
func RSSKiB() int { return statusKiB("VmRSS:") }

// PeakRSSKiB is the process's peak resident set size (VmHWM), 0 when
// unknown.
func PeakRSSKiB() int { return statusKiB("VmHWM:") }

// statusKiB is the value in kB of /proc/self/status's field, 0 when unknown.
func statusKiB(field string) int {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), field); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}
