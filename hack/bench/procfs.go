package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times: 100 on every
// Linux architecture Go supports.
const clockTicks = 100

// ProcUsage is what /proc says about one process.
type ProcUsage struct {
	// CPUSeconds is user + system time of the process and of its children
	// that it has waited for (kube-proxy's iptables-restore, kpng's nft or
	// iptables-restore runs), in seconds.
	CPUSeconds float64
	// SysSeconds is the system (kernel) part of CPUSeconds: the
	// process's and those children's stime.
	SysSeconds float64
	// ChildSysSeconds is the children's part of SysSeconds (cstime): the
	// kernel's work for the rules a child loaded, where the rest is the
	// process's own (its netlink writes, page faults, network reads).
	ChildSysSeconds float64
	// RSSBytes and PeakRSSBytes are VmRSS and VmHWM.
	RSSBytes, PeakRSSBytes int64
}

// readProcUsage reads /proc/PID/stat and /proc/PID/status.
func readProcUsage(pid int) (ProcUsage, error) {
	var u ProcUsage
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return u, err
	}
	if u.CPUSeconds, u.SysSeconds, u.ChildSysSeconds, err = parseStatCPU(string(stat)); err != nil {
		return u, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, err
	}
	if u.RSSBytes, u.PeakRSSBytes, err = parseStatusRSS(string(status)); err != nil {
		return u, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	return u, nil
}

// parseStatCPU returns utime+stime+cutime+cstime (fields 14 to 17 of
// proc(5)), stime+cstime and cstime, in seconds. The command name (field
// 2) is in parentheses and may hold spaces and parentheses, so fields are
// counted from its last ')'.
func parseStatCPU(stat string) (total, sys, childSys float64, err error) {
	end := strings.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, 0, 0, fmt.Errorf("no command name")
	}
	// After ')': field 3 (state) onwards.
	f := strings.Fields(stat[end+1:])
	const first, last = 14 - 3, 17 - 3
	if len(f) <= last {
		return 0, 0, 0, fmt.Errorf("%d fields after the command name, want more than %d", len(f), last)
	}
	var ticks, sysTicks, childSysTicks int64
	for i, s := range f[first : last+1] {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("cpu time %q: %w", s, err)
		}
		ticks += v
		if i%2 == 1 { // stime, cstime
			sysTicks += v
		}
		if i == 3 { // cstime
			childSysTicks = v
		}
	}
	return float64(ticks) / clockTicks, float64(sysTicks) / clockTicks, float64(childSysTicks) / clockTicks, nil
}

// parseStatusRSS returns VmRSS and VmHWM, in bytes.
func parseStatusRSS(status string) (rss, hwm int64, err error) {
	found := 0
	for _, line := range strings.Split(status, "\n") {
		key, val, ok := strings.Cut(line, ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		f := strings.Fields(val)
		if len(f) != 2 || f[1] != "kB" {
			return 0, 0, fmt.Errorf("%s: want `N kB`, got %q", key, strings.TrimSpace(val))
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", key, err)
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
		found++
	}
	if found != 2 {
		return 0, 0, fmt.Errorf("VmRSS or VmHWM missing")
	}
	return rss, hwm, nil
}
