//go:build e2e

package faults

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"runtime"
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
		run := s.c.startProbes(t)
		defer func() {
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
			s.tbl.add(*r)
		}()
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
	for _, dmg := range damages(c.v) {
		s.faultCounted(t, dmg.name, true, func(t *testing.T, r *row) { s.repair(t, r, dmg) })
	}
	s.fault(t, "kernel refuses a transaction", s.refused)
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
	s.toggleChurn(t, 0)
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

// toggleChurn makes the churn Service's IPv4 endpoints pod-b and pod-c
// (even i) or pod-b alone (odd i), through the API server.
func (s *suite) toggleChurn(t *testing.T, i int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	api := s.c.api.DiscoveryV1().EndpointSlices("default")
	sl, err := api.Get(ctx, "churn-v4", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.setChurn(sl, i)
	if _, err := api.Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (s *suite) setChurn(sl *discoveryv1.EndpointSlice, i int) {
	pods := []*netlab.Pod{s.c.lab.Pod("pod-b"), s.c.lab.Pod("pod-c")}
	if i%2 == 1 {
		pods = pods[:1]
	}
	sl.Endpoints = nil
	for _, p := range pods {
		sl.Endpoints = append(sl.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{p.IPv4.String()},
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
	changes := 0
	for {
		select {
		case <-deadline:
			r.measured = fmt.Sprintf("%d endpoint changes (%.1f/s)", changes, float64(changes)/s.d.churn.Seconds())
			return
		case <-tick.C:
		}
		s.setChurn(sl, changes+1)
		if sl, err = api.Update(ctx, sl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
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
	created, deleted := 0, 0
loop:
	for {
		select {
		case <-deadline:
			break loop
		case <-tick.C:
		}
		if err := create(created); err != nil {
			t.Fatal(err)
		}
		created++
		if created > alive {
			if err := del(deleted); err != nil {
				t.Fatal(err)
			}
			deleted++
		}
	}
	for ; deleted < created; deleted++ {
		if err := del(deleted); err != nil {
			t.Fatal(err)
		}
	}
	r.measured = fmt.Sprintf("%d created, %d deleted (%.1f/s each)", created, deleted, float64(created)/s.d.createDelete.Seconds())
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
		{name: "table deleted", argv: [][]string{{"iptables", "-w", "5", "-t", "nat", "-F"}, {"iptables", "-w", "5", "-t", "nat", "-X"}}},
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
	start := time.Now()
	for _, argv := range dmg.argv {
		if out, err := n1.Run(argv...); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
		}
	}
	damaged := time.Since(start)
	limit := 10 * time.Second
	if s.c.v.kubeProxy {
		limit = 2 * time.Minute // kube-proxy repairs at its periodic sync
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
			r.measured = fmt.Sprintf("not repaired within %v", limit)
			r.problems = append(r.problems, r.measured)
			return
		}
		time.Sleep(10 * time.Millisecond) // polling the kernel
	}
	took := time.Since(start)
	if !seenDamage && took > damaged+time.Second {
		t.Fatalf("the damage never showed: %d rules before", before)
	}
	r.measured = fmt.Sprintf("repaired in %v", took.Round(time.Millisecond))
	if !seenDamage {
		r.measured = fmt.Sprintf("repaired before the first check, within %v", took.Round(time.Millisecond))
	}
	if took > time.Second {
		r.problems = append(r.problems, fmt.Sprintf("repair took %v (> 1s)", took.Round(time.Millisecond)))
	}
}

// refused makes the kernel refuse the proxy's next transaction: a rule
// that the proxy does not own jumps to the chain of Service "refuse", and
// the Service is deleted, so that deleting its chain fails (EBUSY). The
// proxy must log the cause, keep its other rules (the probes), retry with
// backoff, and recover once the foreign rule is gone.
func (s *suite) refused(t *testing.T, r *row) {
	c, n1 := s.c, s.c.node("node-1")
	p := c.procs[n1]
	chain, add, remove := s.foreignJump(t, n1)
	if out, err := n1.Run(add...); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(add, " "), err, out)
	}
	removed := false
	defer func() {
		if !removed {
			n1.Run(remove...)
		}
	}()
	mark := p.Mark()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.api.CoreV1().Services("default").Delete(ctx, "refuse", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The driver's failed sync, or the nft backend's failed deletion of
	// stale chains (a transaction of its own, retried at each sync).
	failLine := "(Sync failed|failed; will retry)"
	if c.v.kubeProxy {
		failLine = "(Failed to execute|[Ss]ync failed)"
	}
	// The first refusal, then the retries for a while: their spacing is
	// the backoff.
	observe := 8 * time.Second
	time.Sleep(observe) // the fault's length, during which the retries are counted
	out := p.Output()
	since := out[min(mark, len(out)):]
	fails := regexp.MustCompile(`(?m)^.*`+failLine+`.*$`).FindAllString(since, -1)
	stillThere := s.chainExists(t, n1, chain)
	if out, err := n1.Run(remove...); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(remove, " "), err, out)
	}
	removed = true
	fixed := time.Now()
	if len(fails) == 0 {
		// The proxy removed the foreign reference along with its chain, in
		// one transaction (kpng's iptables backend owns every jump to its
		// chains): nothing to refuse.
		r.measured = fmt.Sprintf("no transaction refused in %v: the proxy removed the foreign jump with its chain (chain still there: %v)", observe, stillThere)
		return
	}
	// The cause, as the log names it (klog may put the error on the
	// following lines).
	cause := "not named"
	if m := regexp.MustCompile(`(?i)[^"\n]*(resource busy|EBUSY)[^"\n]*`).FindString(since); m != "" {
		cause = strings.TrimSpace(m)
		if len(cause) > 120 {
			cause = cause[:120] + "..."
		}
	}
	// Recovered: the deletion is applied once the cause is gone.
	for s.chainExists(t, n1, chain) {
		if time.Since(fixed) > 2*time.Minute {
			r.problems = append(r.problems, "the Service's chain was still there 2 minutes after the cause was removed")
			break
		}
		time.Sleep(20 * time.Millisecond) // polling the kernel
	}
	r.measured = fmt.Sprintf("%d failed attempts logged in %v, cause: %q; the Service's chain kept meanwhile: %v; deleted %v after the cause was removed",
		len(fails), observe, cause, stillThere, time.Since(fixed).Round(10*time.Millisecond))
	if !c.v.kubeProxy {
		if cause == "not named" {
			r.problems = append(r.problems, "the failure's log does not name the cause: "+fails[0])
		}
		if len(fails) > 6 {
			r.problems = append(r.problems, fmt.Sprintf("%d attempts in %v: no backoff", len(fails), observe))
		}
	}
}

// foreignJump returns the chain of Service "refuse" in node n, and the
// commands that add and remove a rule of nobody's, in a chain of nobody's,
// that jumps to it.
func (s *suite) foreignJump(t *testing.T, n *netlab.Node) (chain string, add, remove []string) {
	t.Helper()
	if s.c.v.nftables() {
		table := "kpng"
		if s.c.v.kubeProxy {
			table = "kube-proxy"
		}
		out, err := n.Run("nft", "list", "chains", "ip")
		if err != nil {
			t.Fatal(err)
		}
		in := ""
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == "table" {
				in = f[2]
			}
			if in == table && len(f) >= 2 && f[0] == "chain" && strings.Contains(f[1], "default/refuse/tcp") && !strings.Contains(f[1], "endpoint") {
				chain = f[1]
				break
			}
		}
		if chain == "" {
			t.Fatalf("no chain of default/refuse in table ip %s:\n%s", table, out)
		}
		script := fmt.Sprintf("add chain ip %s foreign\nadd rule ip %s foreign ip daddr 198.51.100.99 jump %s\n", table, table, chain)
		return chain, []string{"sh", "-c", "printf '%s' \"$0\" | nft -f -", script},
			[]string{"sh", "-c", "nft flush chain ip " + table + " foreign 2>/dev/null; nft delete chain ip " + table + " foreign 2>/dev/null; true"}
	}
	prefix := "KPNG-SVC-"
	if s.c.v.kubeProxy {
		prefix = "KUBE-SVC-"
	}
	out, err := n.Run("iptables-save", "-t", "nat")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "default/refuse:tcp") {
			if i := strings.Index(line, "-j "+prefix); i >= 0 {
				chain = strings.Fields(line[i+3:])[0]
				break
			}
		}
	}
	if chain == "" {
		t.Fatalf("no %s chain of default/refuse:tcp:\n%s", prefix, out)
	}
	// A chain of nobody's (no proxy's prefix), jumping to the Service's.
	return chain, []string{"sh", "-c", "iptables -w 5 -t nat -N FOREIGN && iptables -w 5 -t nat -A FOREIGN -d 198.51.100.99/32 -j " + chain},
		[]string{"sh", "-c", "iptables -w 5 -t nat -F FOREIGN 2>/dev/null; iptables -w 5 -t nat -X FOREIGN 2>/dev/null; true"}
}

func (s *suite) chainExists(t *testing.T, n *netlab.Node, chain string) bool {
	if s.c.v.nftables() {
		out, _ := n.Run("nft", "list", "chains", "ip")
		return strings.Contains(out, chain)
	}
	out, _ := n.Run("iptables-save", "-t", "nat")
	return strings.Contains(out, ":"+chain+" ")
}
