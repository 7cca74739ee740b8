//go:build e2e

package faults

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// row is one fault's counts for one variant.
type row struct {
	variant variant
	fault   string
	sent    int
	failed  int
	// measured is what the pass condition measures beyond probes (a
	// repair time, a memory bound, ...).
	measured string
	// problems are the pass conditions not met; none is a pass.
	problems []string
	// gap is a pass condition that kpng does not meet yet, known and
	// documented: the suite expects what kpng does instead (and fails
	// once it does otherwise, so that the gap is struck when closed).
	gap string
}

func (r row) verdict() string {
	switch {
	case len(r.problems) > 0:
		return "FAIL: " + strings.Join(r.problems, "; ")
	case r.gap != "":
		return "known gap: " + r.gap
	}
	return "pass"
}

// table collects the rows of a run.
type table struct {
	mu   sync.Mutex
	rows []row
	// loads are the machine's 1-minute load averages as each row was
	// added: the page says how loaded the machine was.
	loads []float64
}

func (tb *table) add(r row) {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.rows = append(tb.rows, r)
	if l, ok := loadAverage(); ok {
		tb.loads = append(tb.loads, l)
	}
}

// loadAverage is the machine's 1-minute load average (/proc/loadavg).
func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, false
	}
	l, err := strconv.ParseFloat(f[0], 64)
	return l, err == nil
}

// loadRange says the range of loads, for the page.
func loadRange(loads []float64) string {
	if len(loads) == 0 {
		return ""
	}
	return fmt.Sprintf("; 1-minute load average %.1f to %.1f as the faults ended", slices.Min(loads), slices.Max(loads))
}

// text is the table as the test prints it.
func (tb *table) text() string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%-34s %-36s %7s %6s  %s\n", "variant", "fault", "probes", "failed", "measured / verdict")
	for _, r := range tb.rows {
		fmt.Fprintf(&b, "%-34s %-36s %7d %6d  %s / %s\n", r.variant.form(), r.fault, r.sent, r.failed, r.measured, r.verdict())
	}
	return b.String()
}

// markdown is the table as docs/reliability.md shows it: one line per
// fault, one column per variant.
func (tb *table) markdown(took time.Duration) string {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	var vs []variant
	var faults []string
	cell := map[string]map[string]row{}
	for _, r := range tb.rows {
		if !slices.ContainsFunc(vs, func(v variant) bool { return v.name == r.variant.name }) {
			vs = append(vs, r.variant)
		}
		if !slices.Contains(faults, r.fault) {
			faults = append(faults, r.fault)
		}
		if cell[r.fault] == nil {
			cell[r.fault] = map[string]row{}
		}
		cell[r.fault][r.variant.name] = r
	}
	var b strings.Builder
	b.WriteString("<!-- Written by hack/faults.sh from test/e2e/faults; do not edit. -->\n")
	b.WriteString("# Reliability: the fault suite\n\n")
	at := ""
	if c := os.Getenv("KPNG_FAULTS_COMMIT"); c != "" {
		at = " at commit " + c
	}
	fmt.Fprintf(&b, "Measured by `hack/faults.sh`%s on %s (%s, %d CPUs shared with other work%s), in %v.\n",
		at, time.Now().UTC().Format("2006-01-02"), kernelRelease(), numCPU(), loadRange(tb.loads), took.Round(time.Second))
	b.WriteString(`Each fault runs under constant probe traffic: every 20 ms, a new TCP connection
and a new UDP socket from a pod to a ClusterIP, and new TCP connections from a
host outside the cluster to a NodePort, a LoadBalancer IP and a local-policy
NodePort (IPv4), on a two-node cluster with a real kube-apiserver and etcd, in
network namespaces (test/e2e/netlab). Each cell: probes failed / probes sent,
then what the fault's pass condition measures. "n/a": the fault does not exist
in that form. kpng's cells are asserted by the suite; kube-proxy's are measured
through the same cases, as the reference.

`)
	if slices.ContainsFunc(vs, variant.ebpf) {
		fmt.Fprintf(&b, `kpng's ebpf backend runs in a lab with a cgroup v2 per node, where the pods'
and the node's clients open their sockets, and with --sync-period=%v (30 s by
default). It writes no firewall rules: "table deleted", "chain flushed" and
"rule deleted" are n/a for it, and its equivalents are rows of their own. The
kernel notifies no change of a BPF map or link, so what is damaged by hand is
repaired by the periodic sync, which reads the maps back and checks the links:
each damage must be
repaired at the first periodic sync after it, within the sync period plus
%v, and the probes that fail until then are counted. "services map emptied":
every frontend of node-1's pinned kpng_services deleted, as a table deleted;
"one frontend deleted": the ClusterIP TCP probe's, as one rule deleted; "one
backend slot deleted": a slot of that frontend's set in kpng_slots, as one
rule of a Service's endpoints deleted;
"pinned links removed": the pins of node-1's connect4 link (on its cgroup) and
of its uplink's tcx ingress link deleted, which detaches those programs (kpng
holds no other reference to a link), as an rm in /sys/fs/bpf would. "kernel
refuses a transaction" is, for it, node-1's kpng_slots map filled to
max_entries with sets no frontend names, so that the kernel refuses every
write of a Service's new backend set (E2BIG, a cluster outgrowing the map),
with the same pass conditions; the repair follows the filler's deletion.

`, ebpfSyncPeriod, ebpfRepairSlack)
	}
	if slices.ContainsFunc(tb.rows, func(r row) bool { return r.gap != "" }) {
		b.WriteString(`A "known gap" is a pass condition kpng does not meet yet, and says what it does
instead; the suite checks that, and fails once it changes, so that the gap is
struck when closed.

`)
	}
	b.WriteString("| fault |")
	for _, v := range vs {
		b.WriteString(" " + v.form() + " |")
	}
	b.WriteString("\n|---|")
	for range vs {
		b.WriteString("---|")
	}
	b.WriteString("\n")
	for _, f := range faults {
		b.WriteString("| " + f + " |")
		for _, v := range vs {
			r, ok := cell[f][v.name]
			if !ok {
				b.WriteString(" n/a |")
				continue
			}
			s := fmt.Sprintf("%d / %d", r.failed, r.sent)
			if r.measured != "" {
				s += "; " + r.measured
			}
			if !v.kubeProxy {
				s += "; **" + r.verdict() + "**"
			}
			b.WriteString(" " + strings.ReplaceAll(s, "|", "/") + " |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "Linux"
	}
	return "Linux " + strings.TrimSpace(string(b))
}
