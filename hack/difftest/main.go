// Command difftest compares kpng's brain with kube-proxy's own code on
// random clusters: per node and per service port, whether the port is
// proxied, its service-level facts, and the endpoints Cluster and Local
// traffic may use. Each cluster is compared whole, then through a random
// sequence of updates applied to kpng incrementally, each step compared
// with kube-proxy computed afresh. A mismatch prints the seed and a shrunk
// cluster that `kpng file --input` reads. See README.md.
//
//	go -C hack/difftest run . -n 20000
package main

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
)

// rerunBuild and rerunFlags are what a report's rerun line needs besides
// the seed: the mutation build's tag and flag, when a bug is planted.
var rerunBuild, rerunFlags string

func main() {
	var o Options
	flag.IntVar(&o.N, "n", 300, "number of random clusters")
	flag.Uint64Var(&o.Seed, "seed", 1, "seed of the first cluster (cluster i uses seed+i)")
	flag.IntVar(&o.Steps, "steps", 8, "random updates applied to each cluster, each compared")
	flag.IntVar(&o.MaxFailures, "max-failures", 3, "stop after this many failing clusters (0: never)")
	flag.BoolVar(&o.NoShrink, "no-shrink", false, "report failures unshrunk")
	quiet := flag.Bool("q", false, "no progress lines")
	flag.Parse()
	if flag.NArg() > 0 || o.N < 0 || o.Steps < 0 || o.MaxFailures < 0 {
		fmt.Fprintln(os.Stderr, "usage: difftest [-n clusters] [-seed S] [-steps K] [-max-failures F] [-no-shrink] [-q]")
		os.Exit(2)
	}
	os.Exit(run(o, os.Stdout, *quiet))
}

// run runs difftest and returns the exit code: 0 when kpng and kube-proxy
// agree everywhere, 1 on a mismatch, 2 when the harness itself fails.
func run(o Options, w io.Writer, quiet bool) int {
	// kube-proxy's code logs what it ignores (invalid ports, ...); the
	// comparison is the output.
	klog.SetLogger(logr.Discard())
	if err := checkUpstreamGates(); err != nil {
		fmt.Fprintln(w, "difftest:", err)
		return 2
	}
	start := time.Now()
	last := start
	st, err := Run(o, func(st Stats) {
		if !quiet && time.Since(last) > 10*time.Second {
			last = time.Now()
			fmt.Fprintf(w, "... %d clusters, %d steps, %s\n", st.Clusters, st.Steps, time.Since(start).Round(time.Second))
		}
	})
	for _, f := range st.Failures {
		report(w, f)
	}
	fmt.Fprintf(w, "difftest: %d clusters (seeds %d-%d; %d with AllowServiceExternalIPs=false) and %d incremental steps; %d service-port decisions compared per node and family (%d proxied by both; and %d service ports proxied by neither), %d of them with their endpoints not compared (an address listed twice differently, which upstream leaves undefined); %d failing clusters; %s\n",
		st.Clusters, o.Seed, o.Seed+uint64(max(st.Clusters, 1))-1, st.GatesOff, st.Steps, st.Ports, st.Proxied, st.NotProxied, st.Ambiguous, len(st.Failures), time.Since(start).Round(time.Millisecond))
	if err != nil {
		fmt.Fprintln(w, "difftest:", err)
		return 2
	}
	if len(st.Failures) > 0 {
		return 1
	}
	return 0
}

// report prints a failure: the seed, what differs, and the shrunk
// cluster as a file for `kpng file`.
func report(w io.Writer, f Failure) {
	where := "the whole state"
	switch {
	case f.Step > 0 && f.Before == nil:
		where = fmt.Sprintf("update %d of the sequence, whose state computed afresh disagrees too (shrunk as a whole state)", f.Step)
	case f.Step > 0:
		where = fmt.Sprintf("update %d of the sequence (the same state computed afresh agrees)", f.Step)
	}
	fmt.Fprintf(w, "\nMISMATCH seed=%d at %s; rerun: go -C hack/difftest run %s. %s-seed %d -n 1\n", f.Seed, where, rerunBuild, rerunFlags, f.Seed)
	nodes := slices.Sorted(maps.Keys(f.Diffs))
	for _, n := range nodes {
		fmt.Fprintf(w, "node %s:\n", n)
		for _, d := range f.Diffs[n] {
			fmt.Fprintf(w, "  %s\n", d)
		}
	}
	gates, gateFlag := "", ""
	if f.After.Gates.NoExternalIPs {
		gates, gateFlag = " (with AllowServiceExternalIPs=false)", " --feature-gates AllowServiceExternalIPs=false"
	}
	node := "NODE"
	if len(nodes) > 0 {
		node = nodes[0]
	}
	if f.Before != nil {
		note := "shrunk"
		if !f.Reproduced {
			note = "not shrunk: two states alone do not reproduce it, the sequence's history matters; rerun the seed"
		}
		before, err := YAML(f.Before, fmt.Sprintf("seed %d, state before update %d (%s)%s", f.Seed, f.Step, note, gates),
			"start `kpng file --input FILE to-file --node-name "+node+gateFlag+" --output -` on this,")
		printYAML(w, before, err)
		after, err := YAML(f.After, fmt.Sprintf("seed %d, state after update %d: write it over FILE while kpng runs", f.Seed, f.Step))
		printYAML(w, after, err)
		return
	}
	y, err := YAML(f.After, fmt.Sprintf("seed %d, shrunk%s", f.Seed, gates),
		"kpng file --input FILE to-file --node-name "+node+gateFlag+" --output -")
	printYAML(w, y, err)
}

func printYAML(w io.Writer, y []byte, err error) {
	if err != nil {
		fmt.Fprintln(w, "(cannot print the cluster:", err, ")")
		return
	}
	fmt.Fprintln(w, strings.TrimRight(string(y), "\n"))
	fmt.Fprintln(w, "...")
}
