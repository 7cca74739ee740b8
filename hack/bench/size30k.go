package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// 30,000 services are part of a run of the default sizes where the
// machine allows (--with-30k=auto, the default): the bench decides once
// 10,000 has run, from what it measured there. Issue 20 states one target
// on them: cold start at 30,000 at most 3.3 x the one at 10,000.
const (
	size30k = 30000
	// min30kMemory is the memory available (MemAvailable) that 30,000
	// needs. At 10,000 services the five netfilter proxies' peak RSS
	// summed to 2.2 GiB (BENCHMARKS.md's run of 93dcf5e), kpng-ebpf's
	// is some 200 MiB more; three times that, with the API server and
	// etcd holding three times the objects, on a machine others use too.
	min30kMemory = 16 << 30
	// growth30k is the time of a 30,000-service run projected from the
	// 10,000 one's: the preload through the API server grows faster
	// than the number of services (kpng-ebpf alone: 14 minutes at
	// 10,000, 75 at 30,000, BENCHMARKS.md), and the proxies' cold starts
	// too. A projection to decide by, not a bound.
	growth30k = 5
	// linearityGoal is issue 20's bound on cold start at 30,000 over the
	// same at 10,000.
	linearityGoal = 3.3
)

// with30k is --with-30k: "auto" (the default), "true" or "false". It
// is a boolean flag too: --with-30k alone means true.
type with30k string

func (w *with30k) String() string { return string(*w) }

func (w *with30k) Set(s string) error {
	if s == "auto" {
		*w = "auto"
		return nil
	}
	b, err := strconv.ParseBool(s)
	if err != nil {
		return fmt.Errorf("auto, true or false")
	}
	*w = with30k(strconv.FormatBool(b))
	return nil
}

func (w *with30k) IsBoolFlag() bool { return true }

// plan30k says, before the run, whether 30,000 is added to sizes at once
// (add), decided after 10,000 (auto), and otherwise why it is not run.
// The rule applies to the default sizes: with --sizes, 30,000 runs if
// listed or asked for.
func plan30k(w with30k, sizesGiven bool, sizes []int) (add, auto bool, note string) {
	switch {
	case slices.Contains(sizes, size30k):
		return false, false, "30,000 services were in --sizes"
	case w == "true":
		return true, false, "30,000 services ran: --with-30k"
	case w == "false":
		return false, false, "30,000 services were not run: --with-30k=false"
	case sizesGiven:
		return false, false, "30,000 services were not run: --sizes without them, and no --with-30k"
	}
	return false, true, ""
}

// decide30k is the rule of --with-30k=auto, once 10,000 services ran:
// 30,000 run if the memory available is at least min30kMemory and
// growth30k times the 10,000 run's time fits in budget. It returns the
// decision and the sentence the page gives for it.
func decide30k(memAvailable int64, took10k, budget time.Duration, failed10k bool) (bool, string) {
	gib := func(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }
	if failed10k {
		return false, "30,000 services were not run: the 10,000-service run failed (--with-30k to run them anyway)"
	}
	projected := (growth30k * took10k).Round(time.Minute)
	took := took10k.Round(time.Second)
	if memAvailable < min30kMemory {
		return false, fmt.Sprintf("30,000 services were not run: %s of memory available after 10,000, where the rule "+
			"asks for %s (--with-30k to run them anyway)", gib(memAvailable), gib(min30kMemory))
	}
	if growth30k*took10k > budget {
		return false, fmt.Sprintf("30,000 services were not run: 10,000 took %s, so 30,000 would take about %s "+
			"(%d x), more than --budget-30k %s (--with-30k to run them anyway)", took, projected, growth30k, budget)
	}
	return true, fmt.Sprintf("30,000 services ran: %s of memory available after 10,000 (the rule asks for %s), "+
		"and 10,000 took %s, so 30,000 were expected to take about %s (%d x), within --budget-30k %s",
		gib(memAvailable), gib(min30kMemory), took, projected, growth30k, budget)
}

// memAvailable reads MemAvailable from /proc/meminfo, in bytes.
func memAvailable() (int64, error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, err
	}
	return parseMemAvailable(string(b))
}

func parseMemAvailable(meminfo string) (int64, error) {
	for _, line := range strings.Split(meminfo, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "MemAvailable:" && f[2] == "kB" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("MemAvailable: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no MemAvailable in /proc/meminfo")
}
