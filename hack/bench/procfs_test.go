package main

import (
	"os"
	"testing"
)

func TestParseStatCPU(t *testing.T) {
	// proc(5): utime 14, stime 15, cutime 16, cstime 17. The command name
	// holds a space and a parenthesis, which must not shift the fields.
	stat := "4242 (kube proxy) R 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 120 80 20 0 12 0 100 1000 200 18446744073709551615"
	got, sys, childSys, err := parseStatCPU(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := (250 + 50 + 120 + 80) / 100.0; got != want {
		t.Errorf("cpu = %v, want %v (children included)", got, want)
	}
	if want := (50 + 80) / 100.0; sys != want {
		t.Errorf("system cpu = %v, want %v (stime + cstime)", sys, want)
	}
	if want := 80 / 100.0; childSys != want {
		t.Errorf("children's system cpu = %v, want %v (cstime)", childSys, want)
	}
	for _, bad := range []string{"", "1 (x) R 1 2", "1 (x) R 1 2 3 4 5 6 7 8 9 10 x 1 1 1 1"} {
		if _, _, _, err := parseStatCPU(bad); err == nil {
			t.Errorf("parseStatCPU(%q) succeeded, want an error", bad)
		}
	}
}

func TestParseStatusRSS(t *testing.T) {
	status := "Name:\tkpng\nVmPeak:\t 2000000 kB\nVmHWM:\t   81920 kB\nVmRSS:\t   40960 kB\nThreads:\t12\n"
	rss, hwm, err := parseStatusRSS(status)
	if err != nil {
		t.Fatal(err)
	}
	if rss != 40960<<10 || hwm != 81920<<10 {
		t.Errorf("rss %d hwm %d", rss, hwm)
	}
	if _, _, err := parseStatusRSS("Name:\tkpng\nVmRSS:\t 1 kB\n"); err == nil {
		t.Error("no error without VmHWM")
	}
	if _, _, err := parseStatusRSS("VmRSS:\t 1 MB\nVmHWM:\t 1 kB\n"); err == nil {
		t.Error("no error for a unit other than kB")
	}
}

// The parsers agree with the kernel about this very process.
func TestReadProcUsageSelf(t *testing.T) {
	u, err := readProcUsage(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if u.RSSBytes <= 0 || u.PeakRSSBytes < u.RSSBytes || u.CPUSeconds < 0 {
		t.Errorf("usage of the test process: %+v", u)
	}
}
