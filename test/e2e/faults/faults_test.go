//go:build e2e

package faults

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// tail is how long the probes keep running after a fault's last step, so
// that a breakage that follows it is counted.
const tail = time.Second

func numCPU() int { return runtime.NumCPU() }

// TestFaults runs every fault against every variant (see the package doc),
// under probe traffic, and prints the table.
func TestFaults(t *testing.T) {
	netlab.RequireRoot(t)
	d := faultDurations()
	tbl := &table{}
	begin := time.Now()
	t.Cleanup(func() {
		t.Logf("fault table:\n%s", tbl.text())
		if path := os.Getenv("KPNG_FAULTS_MARKDOWN"); path != "" {
			if err := os.WriteFile(path, []byte(tbl.markdown(time.Since(begin))), 0o644); err != nil {
				t.Error(err)
			}
		}
	})
	for _, v := range variants(t) {
		t.Run(v.name, func(t *testing.T) {
			c := startCluster(t, v)
			s := &suite{c: c, tbl: tbl, d: d}
			s.run(t)
		})
	}
}

// suite runs the faults on one cluster, one after the other.
type suite struct {
	c   *cluster
	tbl *table
	d   durations
}

// fault runs f as a subtest under probe traffic and records its row. f
// reports the pass conditions it measured as problems; failed probes are
// one. For kpng a problem fails the test; for kube-proxy it is reported.
func (s *suite) fault(t *testing.T, name string, f func(t *testing.T, r *row)) {
	s.faultCounted(t, name, false, f)
}

// faultCounted is fault; with counted, failed probes are counted but are
// no problem (the rules were damaged: traffic fails until the repair).
func (s *suite) faultCounted(t *testing.T, name string, counted bool, f func(t *testing.T, r *row)) {
	t.Run(strings.ReplaceAll(name, " ", "-"), func(t *testing.T) {
		r := &row{variant: s.c.v, fault: name}
		n1 := s.c.node("node-1")
		mark := s.c.procs[n1].Mark()
		var run *probeRun
		defer func() {
			if run == nil {
				// The traffic never started (the dataplane was broken
				// before the fault): a row all the same.
				r.problems = append(r.problems, "the probes did not answer before the fault (see the test log)")
				s.tbl.add(*r)
				return
			}
			if os.Getenv("KPNG_FAULTS_DEBUG") != "" {
				t.Logf("node-1's proxy log during the fault:\n%s", s.c.procs[n1].Output()[mark:])
			}
			sent, failed, failures := run.counts()
			r.sent, r.failed = sent, failed
			if failed > 0 && !counted {
				r.problems = append(r.problems, fmt.Sprintf("%d probes failed (%s)", failed, failures))
			}
			if t.Failed() && len(r.problems) == 0 {
				r.problems = append(r.problems, "did not complete (see the test log)")
			}
			if sent == 0 {
				r.problems = append(r.problems, "no probe ran")
			}
			for _, p := range r.problems {
				if s.c.v.kubeProxy {
					t.Logf("kube-proxy (reference): %s", p)
				} else {
					t.Error(p)
				}
			}
			t.Logf("%s: %d probes, %d failed; %s", name, r.sent, r.failed, r.measured)
			if failures != "" && (failed == 0 || counted) {
				// The failures of a fault whose failed probes are
				// counted, not a problem.
				t.Logf("%s: %s", name, failures)
			}
			s.tbl.add(*r)
		}()
		run = s.c.startProbes(t)
		f(t, r)
		time.Sleep(tail) // probe traffic, not a wait for a condition
	})
}

func (s *suite) run(t *testing.T) {
	c := s.c
	if c.v.split {
		s.fault(t, "agent restart (graceful)", func(t *testing.T, r *row) { s.restart(t, r, c.procs, false) })
		s.fault(t, "agent restart (SIGKILL)", func(t *testing.T, r *row) { s.restart(t, r, c.procs, true) })
		s.fault(t, "brain restart (graceful)", func(t *testing.T, r *row) { s.restartBrain(t, r, false) })
		s.fault(t, "brain restart (SIGKILL)", func(t *testing.T, r *row) { s.restartBrain(t, r, true) })
	} else {
		s.fault(t, "proxy restart (graceful)", func(t *testing.T, r *row) { s.restart(t, r, c.procs, false) })
		s.fault(t, "proxy restart (SIGKILL)", func(t *testing.T, r *row) { s.restart(t, r, c.procs, true) })
	}
	s.fault(t, "API server down "+s.d.outage.String(), s.apiOutage)
	s.fault(t, "endpoint churn "+s.d.churn.String(), s.churn)
	s.fault(t, "Services created/deleted "+s.d.createDelete.String(), s.createDelete)
	if c.v.ebpf() {
		// No rules to damage: the maps and links instead (ebpf_test.go).
		s.ebpfDamages(t)
	} else {
		for _, dmg := range damages(c.v) {
			s.faultCounted(t, dmg.name, true, func(t *testing.T, r *row) { s.repair(t, r, dmg) })
		}
	}
	// The pass condition: the cause logged, the rules intact,
	// retries with backoff (s.refused checks them). Failed probes are
	// counted, not a failure: in one run of 18, one LoadBalancer probe of
	// about 2,200 failed while kpng wrote nothing, and kube-proxy lost
	// probes in the same run of the same fault (docs/reliability.md).
	if c.v.ebpf() {
		s.faultCounted(t, "kernel refuses a transaction", true, s.refusedMap)
	} else {
		s.faultCounted(t, "kernel refuses a transaction", true, s.refused)
	}
	if c.v.split {
		s.fault(t, "gRPC garbage, huge, slow; idle conns", s.grpcAbuse)
	}
}

// restart restarts each of procs, one node after the other, gracefully or
// with SIGKILL, and waits for each to sync again.
func (s *suite) restart(t *testing.T, r *row, procs map[*netlab.Node]*netlab.Process, kill bool) {
	var longest time.Duration
	for _, n := range s.c.lab.Nodes {
		p := procs[n]
		mark := p.Mark()
		start := time.Now()
		if kill {
			if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			<-p.Exited()
		}
		if err := p.Restart(); err != nil {
			t.Fatal(err)
		}
		p.WaitOutputSince(t, mark, s.c.v.syncedLine(), firstSync)
		longest = max(longest, time.Since(start))
	}
	r.measured = fmt.Sprintf("synced again within %v", longest.Round(time.Millisecond))
}

// restartBrain restarts the brain while the agents are connected, and
// checks that the agents then apply a change it serves.
func (s *suite) restartBrain(t *testing.T, r *row, kill bool) {
	c := s.c
	mark := c.brain.Mark()
	if kill {
		if err := syscall.Kill(c.brain.Pid(), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-c.brain.Exited()
	}
	if err := c.brain.Restart(); err != nil {
		t.Fatal(err)
	}
	c.brain.WaitOutputSince(t, mark, "Serving the localv1 and globalv1 Watch APIs", firstSync)
	marks := map[*netlab.Node]int{}
	for n, p := range c.procs {
		marks[n] = p.Mark()
	}
	start := time.Now()
	s.toggleChurn(t)
	for n, p := range c.procs {
		p.WaitOutputSince(t, marks[n], c.v.syncedLine(), syncTimeout)
	}
	r.measured = fmt.Sprintf("agents applied a change %v after the restart", time.Since(start).Round(time.Millisecond))
}

// apiOutage kills the API server, changes the cluster through a second API
// server on the same etcd meanwhile, brings the first back, and measures
// how long the change takes to reach the dataplane once it is back.
func (s *suite) apiOutage(t *testing.T, r *row) {
	c := s.c
	peer := c.mirror.Server.StartPeer()
	defer peer.Stop()
	c.mirror.Server.StopAPIServer()
	// A row that fails during the outage leaves the API server to the
	// rows after it, as it found it.
	defer func() {
		if !c.mirror.Server.APIServerRunning() {
			c.mirror.Server.RestartAPIServer()
		}
	}()
	time.Sleep(s.d.outage / 2) // the outage's length is the fault

	// A Service created during the outage.
	late := c.state.AddService("late", netlab.TCPPort("tcp", 80, targetPort))
	c.state.SetEndpoints(late, netlab.Ready(c.lab.Pod("pod-b"))...)
	c.svcs["late"] = late
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	createService(ctx, t, peer.Client, late, c.state)

	time.Sleep(s.d.outage / 2)
	podA := c.lab.Pod("pod-a")
	dst := netlab.ClusterIP(late, 4, 80)
	if res := podA.Dial(netlab.TCP, dst, 100*time.Millisecond); res.Outcome == netlab.OK {
		t.Fatalf("the Service created during the outage answers before the API server is back: %v", res)
	}
	restarted := time.Now()
	c.mirror.Server.RestartAPIServer()
	ready := time.Now()
	var took time.Duration
	for {
		if res := podA.Dial(netlab.TCP, dst, 100*time.Millisecond); res.Outcome == netlab.OK {
			took = time.Since(ready)
			break
		}
		if time.Since(ready) > 2*time.Minute {
			r.problems = append(r.problems, "the change made during the outage was not applied within 2 minutes of the API server's return")
			r.measured = "change not applied within 2m"
			return
		}
		time.Sleep(20 * time.Millisecond) // polling the dataplane, which has no event to wait on
	}
	// The API server answers some requests before its /readyz does, so a
	// proxy may be back in contact before "ready": the change can be in
	// place at once.
	r.measured = fmt.Sprintf("change made meanwhile applied %v after the API server was ready (restarted %v before)",
		took.Round(10*time.Millisecond), ready.Sub(restarted).Round(10*time.Millisecond))
	if took > 2*time.Second {
		r.problems = append(r.problems, fmt.Sprintf("the change made during the outage took %v (> 2s) after the API server's return", took.Round(10*time.Millisecond)))
	}
}

// createService creates svc and its EndpointSlices (from state) through c.
func createService(ctx context.Context, t *testing.T, c kubernetes.Interface, svc *corev1.Service, state *netlab.State) {
	t.Helper()
	cp := svc.DeepCopy()
	cp.ResourceVersion = ""
	if _, err := c.CoreV1().Services(cp.Namespace).Create(ctx, cp, metav1.CreateOptions{}); err != nil {
		t.Fatalf("service %s: %v", svc.Name, err)
	}
	for _, sl := range state.Slices {
		if sl.Labels[discoveryv1.LabelServiceName] == svc.Name {
			if _, err := c.DiscoveryV1().EndpointSlices(sl.Namespace).Create(ctx, sl.DeepCopy(), metav1.CreateOptions{}); err != nil {
				t.Fatalf("endpointslice %s: %v", sl.Name, err)
			}
		}
	}
}

// toggleChurn changes the churn Service's endpoints in both IP families,
// through the API server: pod-b and pod-c if it has one, pod-b alone if it
// has two, so that each call is a change.
func (s *suite) toggleChurn(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	api := s.c.api.DiscoveryV1().EndpointSlices("default")
	for _, fam := range []int{4, 6} {
		sl, err := api.Get(ctx, fmt.Sprintf("churn-v%d", fam), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		s.setChurn(sl, fam, len(sl.Endpoints))
		if _, err := api.Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// setChurn makes sl's endpoints (of family fam) pod-b and pod-c (odd i) or
// pod-b alone (even i).
func (s *suite) setChurn(sl *discoveryv1.EndpointSlice, fam, i int) {
	pods := []*netlab.Pod{s.c.lab.Pod("pod-b"), s.c.lab.Pod("pod-c")}
	if i%2 == 0 {
		pods = pods[:1]
	}
	sl.Endpoints = nil
	for _, p := range pods {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{p.Addr(fam).String()},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
			NodeName:   ptr(p.Node.Name),
			Zone:       ptr(netlab.Zone(p.Node)),
		})
	}
}

func ptr[T any](v T) *T { return &v }

// churn changes one Service's endpoints ten times a second; the probes go
// to the other Services.
func (s *suite) churn(t *testing.T, r *row) {
	ctx, cancel := context.WithTimeout(context.Background(), s.d.churn+time.Minute)
	defer cancel()
	api := s.c.api.DiscoveryV1().EndpointSlices("default")
	sl, err := api.Get(ctx, "churn-v4", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tick := time.NewTicker(100 * time.Millisecond) // the rate is the fault
	defer tick.Stop()
	deadline := time.After(s.d.churn)
	changes, apiErrors := 0, 0
	for {
		select {
		case <-deadline:
			r.measured = fmt.Sprintf("%d endpoint changes (%.1f/s)", changes, float64(changes)/s.d.churn.Seconds())
			if apiErrors > 0 {
				r.measured += fmt.Sprintf(", %d API errors", apiErrors)
			}
			return
		case <-tick.C:
		}
		s.setChurn(sl, 4, changes)
		updated, err := api.Update(ctx, sl, metav1.UpdateOptions{})
		if err != nil {
			// The API server (or etcd) failing under load is not the
			// proxy's fault: counted, and the slice read again.
			if apiErrors++; apiErrors > 20 {
				t.Fatalf("%d API errors, the last: %v", apiErrors, err)
			}
			if sl, err = api.Get(ctx, "churn-v4", metav1.GetOptions{}); err != nil {
				t.Fatal(err)
			}
			continue
		}
		sl = updated
		changes++
	}
}

// createDelete creates Services (each with an endpoint) at 20 a second and
// deletes each half a second later; the probes go to the steady Services.
func (s *suite) createDelete(t *testing.T, r *row) {
	ctx, cancel := context.WithTimeout(context.Background(), s.d.createDelete+2*time.Minute)
	defer cancel()
	podB := s.c.lab.Pod("pod-b")
	create := func(i int) error {
		name := fmt.Sprintf("burst-%d", i)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "tcp", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(targetPort)}}},
		}
		if _, err := s.c.api.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return err
		}
		sl := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Endpoints: []discoveryv1.Endpoint{{
				Addresses:  []string{podB.IPv4.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
				NodeName:   ptr(podB.Node.Name),
			}},
			Ports: []discoveryv1.EndpointPort{{Name: ptr("tcp"), Protocol: ptr(corev1.ProtocolTCP), Port: ptr(int32(targetPort))}},
		}
		_, err := s.c.api.DiscoveryV1().EndpointSlices("default").Create(ctx, sl, metav1.CreateOptions{})
		return err
	}
	del := func(i int) error {
		name := fmt.Sprintf("burst-%d", i)
		if err := s.c.api.CoreV1().Services("default").Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		err := s.c.api.DiscoveryV1().EndpointSlices("default").Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	const alive = 10                              // each Service lives ten ticks: half a second
	tick := time.NewTicker(50 * time.Millisecond) // the rate is the fault
	defer tick.Stop()
	deadline := time.After(s.d.createDelete)
	created, deleted, apiErrors := 0, 0, 0
	// The API server (or etcd) failing under load is not the proxy's
	// fault: counted, and the step tried again at the next tick.
	apiError := func(err error) {
		if apiErrors++; apiErrors > 20 {
			t.Fatalf("%d API errors, the last: %v", apiErrors, err)
		}
	}
loop:
	for {
		select {
		case <-deadline:
			break loop
		case <-tick.C:
		}
		if created-deleted <= alive {
			if err := create(created); err != nil {
				apiError(err)
				del(created) // what a failed create may have left
				continue
			}
			created++
		}
		if created-deleted > alive {
			if err := del(deleted); err != nil {
				apiError(err)
				continue
			}
			deleted++
		}
	}
	for deleted < created {
		if err := del(deleted); err != nil {
			apiError(err)
			continue
		}
		deleted++
	}
	r.measured = fmt.Sprintf("%d created, %d deleted (%.1f/s each)", created, deleted, float64(created)/s.d.createDelete.Seconds())
	if apiErrors > 0 {
		r.measured += fmt.Sprintf(", %d API errors", apiErrors)
	}
}

// damage is a change made to the rules by hand, as an admin or another
// tool might.
type damage struct {
	name string
	argv [][]string
}

// damages returns the rule damage of the variant's dataplane.
func damages(v variant) []damage {
	if v.nftables() {
		table := "kpng"
		if v.kubeProxy {
			table = "kube-proxy"
		}
		return []damage{
			{name: "table deleted", argv: [][]string{{"nft", "delete", "table", "ip", table}}},
			{name: "chain flushed", argv: [][]string{{"nft", "flush", "chain", "ip", table, "services"}}},
			{name: "rule deleted", argv: [][]string{{"sh", "-c", "nft delete rule ip " + table + " nat-prerouting handle " +
				"$(nft -a list chain ip " + table + " nat-prerouting | grep -o 'handle [0-9]*' | tail -n 1 | cut -d ' ' -f 2)"}}},
		}
	}
	chain := "KPNG-SERVICES"
	if v.kubeProxy {
		chain = "KUBE-SERVICES"
	}
	return []damage{
		// At once, as nft's table delete: with -F then -X, a proxy that
		// repairs the flush between the two makes -X fail (EBUSY).
		{name: "table deleted", argv: [][]string{{"sh", "-c", "printf '*nat\\nCOMMIT\\n' | iptables-restore -w 5"}}},
		{name: "chain flushed", argv: [][]string{{"iptables", "-w", "5", "-t", "nat", "-F", chain}}},
		{name: "rule deleted", argv: [][]string{{"iptables", "-w", "5", "-t", "nat", "-D", "PREROUTING", "1"}}},
	}
}

// ruleCount counts node n's firewall rules: the rules in the chains of its
// nftables ruleset, and iptables' rules. Empty chains (a proxy deletes
// stale ones a little later) and set elements are not rules.
func ruleCount(t *testing.T, n *netlab.Node) int {
	t.Helper()
	out, err := n.Run("nft", "list", "ruleset")
	if err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	count := 0
	inChain := false
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
		case f[0] == "chain":
			inChain = true
		case f[0] == "}" || f[0] == "table" || f[0] == "set" || f[0] == "map":
			inChain = false
		case inChain && f[0] != "type" && f[0] != "policy" && f[0] != "comment":
			count++
		}
	}
	for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
		out, err := n.Run(cmd)
		if err != nil {
			t.Fatalf("node %s: %v", n.Name, err)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "-A ") {
				count++
			}
		}
	}
	return count
}

// repair damages node-1's rules and measures how long the proxy takes to
// put them back, polling the kernel (which has no event for the test to
// wait on); the proxy runs on, its notification watch at work.
func (s *suite) repair(t *testing.T, r *row, dmg damage) {
	n1 := s.c.node("node-1")
	before := ruleCount(t, n1)
	mark := s.c.procs[n1].Mark()
	start := time.Now()
	for _, argv := range dmg.argv {
		if out, err := n1.Run(argv...); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	damaged := time.Since(start)
	limit := 10 * time.Second
	if s.c.v.kubeProxy {
		limit = 70 * time.Second // kube-proxy repairs at its periodic sync (30 s)
	}
	seenDamage := false
	for {
		n := ruleCount(t, n1)
		if n < before {
			seenDamage = true
		}
		if n >= before {
			break
		}
		if time.Since(start) > limit {
			r.measured = fmt.Sprintf("not repaired within %v (the proxy was restarted for the next faults)", limit)
			r.problems = append(r.problems, fmt.Sprintf("not repaired within %v", limit))
			// The next faults need working rules: a restart writes them.
			p := s.c.procs[n1]
			mark := p.Mark()
			if err := p.Restart(); err != nil {
				t.Fatal(err)
			}
			p.WaitOutputSince(t, mark, s.c.v.syncedLine(), firstSync)
			return
		}
		time.Sleep(10 * time.Millisecond) // polling the kernel
	}
	took := time.Since(start)
	if !seenDamage && took > damaged+time.Second {
		t.Fatalf("the damage never showed: %d rules before", before)
	}
	// The polling above saw the rules back; when it did is late by up to
	// one poll (three commands, hundreds of milliseconds on a loaded
	// machine). kpng logs the end of each sync: the first one after the
	// damage that checked the rules (a resync) is when they were back. The
	// test process may not have read that line from kpng's output yet:
	// wait for it (it is there at once unless the machine is loaded).
	polled := took
	// requested is when kpng's watch of the kernel asked for the repair.
	var requested time.Time
	if !s.c.v.kubeProxy {
		var at time.Time
		logged := func(out string) bool {
			var ok bool
			at, ok = syncStartedAfter(out, start, "resync=true", "Dataplane synced again")
			requested, _ = loggedAfter(out, start, resyncRequested)
			return ok
		}
		if s.c.procs[n1].AwaitOutput(mark, logged, 10*time.Second) && at.Before(start.Add(took)) {
			took = at.Sub(start)
		}
	}
	r.measured = fmt.Sprintf("repaired in %v", took.Round(time.Millisecond))
	if !seenDamage {
		r.measured = fmt.Sprintf("repaired before the first check, within %v", took.Round(time.Millisecond))
	}
	if polled-took > 100*time.Millisecond {
		r.measured += fmt.Sprintf(" (the proxy's log; the kernel polled at %v)", polled.Round(time.Millisecond))
	}
	switch {
	case !s.c.v.kubeProxy && requested.IsZero():
		r.problems = append(r.problems, fmt.Sprintf("the repair was not asked for by kpng's watch of the kernel (no %q logged after the damage)", resyncRequested))
	case took <= time.Second:
	case fullRun() || s.c.v.kubeProxy:
		r.problems = append(r.problems, fmt.Sprintf("repair took %v (> 1s)", took.Round(time.Millisecond)))
	default:
		// The watch asked at once (checked above); what remains is the
		// repair sync's own time, which waits for a CPU on a loaded
		// machine. The 1 s target is a speed target: hack/faults.sh's
		// run judges it (KPNG_FAULTS_FULL), as benchmarks judge the
		// others.
		load, _ := loadAverage()
		r.measured += fmt.Sprintf("; asked for %v after the damage began, over 1 s in all on a loaded machine (load %.1f): judged by hack/faults.sh",
			requested.Sub(start).Round(time.Millisecond), load)
	}
}

// resyncRequested is what kpng logs when its backend's watch of the kernel
// asks for a repair (backend.Run).
const resyncRequested = "Resync requested by the backend"

// loggedAfter is when the first klog line of log that contains want and
// was logged at or after after was logged.
func loggedAfter(log string, after time.Time, want string) (time.Time, bool) {
	for _, line := range strings.Split(log, "\n") {
		if !strings.Contains(line, want) {
			continue
		}
		if at, ok := klogTime(strings.TrimSpace(line), after); ok && !at.Before(after) {
			return at, true
		}
	}
	return time.Time{}, false
}

// refused makes the kernel refuse the proxy's transactions for one IP
// family: node-1's IPv6 table of the proxy (nft: its own table; iptables:
// ip6 nat, where iptables-nft writes) is replaced, atomically, by an empty
// one that another process owns (an nf_tables owner table, Linux 5.12: only
// the netlink socket that created it may change it, and it goes with that
// socket), so every
// transaction of the proxy's that touches it fails with EPERM. Another
// Service changes every second meanwhile, so that the proxy keeps syncing.
// The proxy must log the cause, keep the other family's rules (the IPv4
// probes), retry with backoff, and repair once the owner is gone.
func (s *suite) refused(t *testing.T, r *row) {
	s.refusedBy(t, r, func(t *testing.T) refusal { return s.ownerTable(t, s.c.node("node-1")) })
}

// refusal is the kernel refusing the proxy's writes, as a fault makes it.
type refusal struct {
	// release makes the kernel accept the proxy's writes again; it may be
	// called more than once.
	release func()
	// repaired reports whether the dataplane is whole again.
	repaired func() bool
	// errno matches the kernel's error where the proxy's log quotes it.
	errno string
}

// ownerTable makes the kernel refuse the proxy's transactions of node n's
// IPv6 table (see refused).
func (s *suite) ownerTable(t *testing.T, n1 *netlab.Node) refusal {
	c := s.c
	table := "nat"
	switch {
	case c.v.nftables() && c.v.kubeProxy:
		table = "kube-proxy"
	case c.v.nftables():
		table = "kpng"
	}
	before := ruleCount(t, n1)
	// The owner: nft reading commands from a pipe, its netlink socket open
	// until the pipe closes. One line is one transaction.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	owner := n1.NS.Command(ctx, "nft", "-i")
	stdin, err := owner.StdinPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	var ownerOut strings.Builder
	owner.Stdout, owner.Stderr = &ownerOut, &ownerOut
	if err := owner.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	closed := false
	release := func() {
		if !closed {
			closed = true
			stdin.Close()
			owner.Wait()
			cancel()
		}
	}
	t.Cleanup(release)
	if _, err := fmt.Fprintf(stdin, "delete table ip6 %s; add table ip6 %s { flags owner; }\n", table, table); err != nil {
		t.Fatal(err)
	}
	for asked := time.Now(); ; {
		out, _ := n1.Run("nft", "list", "table", "ip6", table)
		if strings.Contains(out, "flags owner") {
			break
		}
		if time.Since(asked) > time.Minute {
			t.Fatalf("the owner table never showed; nft -i said: %s", ownerOut.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the kernel
	}
	return refusal{
		release:  release,
		repaired: func() bool { return ruleCount(t, n1) >= before },
		errno:    `operation not permitted|EPERM`,
	}
}

// refusedBy runs a refusal that refuse starts: the proxy's writes are
// refused while a Service changes every second, then accepted again. The
// proxy must log the cause (the kernel's errno), keep what it wrote
// before (the probes), retry with backoff, and repair once the writes are
// accepted, at its next retry.
func (s *suite) refusedBy(t *testing.T, r *row, refuse func(t *testing.T) refusal) {
	c, n1 := s.c, s.c.node("node-1")
	p := c.procs[n1]
	mark := p.Mark()
	ref := refuse(t)
	defer ref.release()

	changes := 0
	change := func() { changes++; s.toggleChurn(t) }
	// The refusals, and the retries for a while: their spacing is the
	// backoff. Paced by a ticker: the changes are load, not a wait.
	observe := 8 * time.Second
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for end := time.After(observe); ; {
		select {
		case <-tick.C:
			change()
			continue
		case <-end:
		}
		break
	}
	// Three waits between retries show the backoff. A failed sync that
	// takes long (to-ebpf's reset reads back a map the fault filled) waits
	// at least as long before its retry, so on a loaded machine three may
	// not fit in observe: go on until kpng logged four failures.
	if !c.v.kubeProxy {
		started := time.Now().Add(-observe)
		failures := func() int { out := p.Output(); return strings.Count(out[min(mark, len(out)):], "Sync failed") }
		for failures() < 4 && time.Since(started) < time.Minute {
			<-tick.C
			change()
		}
		observe = time.Since(started).Round(time.Second)
	}
	out := p.Output()
	since := out[min(mark, len(out)):]
	// The driver's failed syncs; kube-proxy's failed restores or
	// transactions.
	syncFails := regexp.MustCompile(`(?m)^.*Sync failed.*$`).FindAllString(since, -1)
	refusals := regexp.MustCompile(`(?m)^.*(Sync failed|failed; will retry|Failed to execute|[Ss]ync failed|[Ff]ailed to).*$`).FindAllString(since, -1)
	// The cause as logged: the kernel's EPERM where the log quotes it (klog
	// may put a multi-line error on the following lines), else the error
	// of the first failure.
	cause := "not named"
	if m := regexp.MustCompile(`(?i)[^"\n]*?(` + ref.errno + `)[^"\n]*`).FindStringSubmatchIndex(since); m != nil {
		// The words around the errno: what failed, and why.
		from, to := max(m[0], m[2]-60), min(m[1], m[3]+40)
		cause = strings.TrimSpace(since[from:to])
		if from > m[0] {
			cause = "..." + cause
		}
		if to < m[1] {
			cause += "..."
		}
	} else if len(refusals) > 0 {
		if m := regexp.MustCompile(`err="([^"]+)"`).FindStringSubmatch(refusals[0]); m != nil {
			cause = m[1]
		}
		if len(cause) > 100 {
			cause = cause[:100] + "..."
		}
	}
	// The driver's waits between retries, as its failures log them.
	var waits []time.Duration
	for _, m := range regexp.MustCompile(`retryIn="([^"]+)"`).FindAllStringSubmatch(strings.Join(syncFails, "\n"), -1) {
		if d, err := time.ParseDuration(m[1]); err == nil {
			waits = append(waits, d)
		}
	}

	// The refusal ends (the owner table goes with its owner; the filler
	// of a map is deleted): the proxy repairs.
	fixed := time.Now()
	ref.release() // a filler's deletion takes a while: the repair may come meanwhile
	// When the refusal ended, to set beside a probe's failure (its time
	// is in the row).
	releasing := time.Since(fixed)
	t.Logf("the refusal ended at %s, in %v", fixed.Format("15:04:05.000"), releasing.Round(time.Millisecond))
	for !ref.repaired() {
		if time.Since(fixed) > 2*time.Minute {
			r.problems = append(r.problems, "not repaired 2 minutes after the refusal ended")
			break
		}
		select {
		case <-tick.C:
			change()
		case <-time.After(20 * time.Millisecond): // polling the kernel
		}
	}
	repaired := time.Since(fixed)
	// The kernel tells no one that it accepts again: the proxy finds out
	// at its next retry, which must succeed. The first sync it started
	// once the refusal was lifted (the owner gone; the whole filler
	// deleted, which takes a while) is in its log.
	var first syncAttempt
	if !c.v.kubeProxy {
		lifted := fixed.Add(releasing)
		var at time.Time
		logged := func(out string) bool {
			var ok bool
			at, ok = syncLoggedAfter(out, fixed, "Dataplane synced again", "reset=true")
			return ok
		}
		// The end of the first sync that succeeded after the refusal ended,
		// as kpng logs it: the polling above is late by up to one poll.
		// The test process may not have read that line from kpng's output
		// yet: wait for it.
		if p.AwaitOutput(mark, logged, 10*time.Second) && at.Before(fixed.Add(repaired)) {
			repaired = at.Sub(fixed)
		}
		attempted := func(out string) bool {
			var ok bool
			first, ok = firstSyncAttempt(out, lifted)
			return ok
		}
		if !p.AwaitOutput(mark, attempted, 10*time.Second) {
			r.problems = append(r.problems, "no sync logged as started after the refusal was lifted")
		}
	}
	r.measured = fmt.Sprintf("%d refusals logged in %v (%d failed syncs) under %d changes, cause: %q; repaired %v after the refusal ended",
		len(refusals), observe, len(syncFails), changes, cause, repaired.Round(10*time.Millisecond))
	if len(waits) > 0 {
		r.measured += fmt.Sprintf("; retries %v apart", waits)
	}
	if !c.v.kubeProxy {
		if len(syncFails) == 0 {
			r.problems = append(r.problems, "no failed sync logged")
		} else if cause == "not named" {
			r.problems = append(r.problems, "the failure's log does not name the cause: "+syncFails[0])
		}
		// Backoff: the waits between retries grow, up to the bound of
		// kpng's backends (1 s, or as long as the failed sync took),
		// which bounds the repair once the refusal ended (the kernel
		// tells no one of that).
		if len(waits) < 3 || waits[len(waits)-1] <= waits[0] {
			r.problems = append(r.problems, fmt.Sprintf("no backoff: retries %v apart", waits))
		}
		if first.failed {
			r.problems = append(r.problems, "the first sync started after the refusal was lifted failed too: "+first.line)
		}
	}
}

// syncAttempt is one sync as kpng's backend driver logs it: when it
// started, and whether it failed.
type syncAttempt struct {
	start  time.Time
	failed bool
	line   string
}

// loggedSync reads a line of kpng's log that ends a sync, successful
// ("Dataplane synced") or failed ("Sync failed"): when it ended, and how
// long it took (0 when the line says no took=).
func loggedSync(line string, near time.Time) (end time.Time, took time.Duration, failed, ok bool) {
	failed = strings.Contains(line, "Sync failed")
	if !failed && !strings.Contains(line, "Dataplane synced") {
		return time.Time{}, 0, false, false
	}
	end, ok = klogTime(line, near)
	if m := tookField.FindStringSubmatch(line); m != nil {
		took, _ = time.ParseDuration(m[1])
	}
	return end, took, failed, ok
}

// firstSyncAttempt returns the first sync, successful or failed, of a kpng
// log that started after after (its line's time, less the took="..." it
// logs).
func firstSyncAttempt(log string, after time.Time) (syncAttempt, bool) {
	var first syncAttempt
	found := false
	for _, line := range strings.Split(log, "\n") {
		end, took, failed, ok := loggedSync(line, after)
		if !ok || took == 0 {
			continue
		}
		start := end.Add(-took)
		if start.Before(after) || (found && !start.Before(first.start)) {
			continue
		}
		first, found = syncAttempt{start: start, failed: failed, line: line}, true
	}
	return first, found
}

// syncLoggedAfter returns the time of the first line of a kpng log (klog's
// "I1126 15:04:05.000000 ..." header) logged after after, that reports a
// sync ("Dataplane synced") and contains one of want.
func syncLoggedAfter(log string, after time.Time, want ...string) (time.Time, bool) {
	return firstSyncLogged(log, after, false, want...)
}

// syncStartedAfter is syncLoggedAfter for a sync that also started after
// after (its end, less the took="..." it logs): a sync already running
// when a damage was done cannot be what repaired it.
func syncStartedAfter(log string, after time.Time, want ...string) (time.Time, bool) {
	return firstSyncLogged(log, after, true, want...)
}

var tookField = regexp.MustCompile(`took="?([0-9.]+[a-zµ]+)`)

func firstSyncLogged(log string, after time.Time, started bool, want ...string) (time.Time, bool) {
	for _, line := range strings.Split(log, "\n") {
		end, took, failed, ok := loggedSync(line, after)
		if !ok || failed || !end.After(after) || !slices.ContainsFunc(want, func(w string) bool { return strings.Contains(line, w) }) {
			continue
		}
		if started && (took == 0 || !end.Add(-took).After(after)) {
			continue
		}
		return end, true
	}
	return time.Time{}, false
}

// klogTime reads the time of a klog line ("Lmmdd hh:mm:ss.uuuuuu ..."), in
// the local zone, the year taken from near (the log has none).
func klogTime(line string, near time.Time) (time.Time, bool) {
	f := strings.Fields(line)
	if len(f) < 2 || len(f[0]) != 5 {
		return time.Time{}, false
	}
	at, err := time.ParseInLocation("0102 15:04:05.000000", f[0][1:]+" "+f[1], time.Local)
	if err != nil {
		return time.Time{}, false
	}
	return at.AddDate(near.Year(), 0, 0), true
}
