//go:build e2e

package iptables

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/internal/netnstest"
	"github.com/kpng/kpng/internal/procstat"
)

// kernelRunner is an execRunner inside a namespace.
func kernelRunner(t *testing.T, ns *netnstest.Netns, v variant, ipv6 bool) *execRunner {
	t.Helper()
	r := v.runnerFor(ipv6, 5*time.Second)
	if _, err := exec.LookPath(r.restoreCmd); err != nil {
		t.Fatalf("%s is required: %v", r.restoreCmd, err)
	}
	r.wrap = ns.ExecPrefix()
	// A lock file of our own: never contend with the host's iptables.
	r.env = []string{"XTABLES_LOCKFILE=" + filepath.Join(t.TempDir(), "xtables.lock")}
	return r
}

var saveNoise = regexp.MustCompile(`(?m)^#.*\n|\[\d+:\d+\]`)

// ourRules returns iptables-save's output restricted to kpng's chains and
// the jumps to them, without comments and counters.
func ourRules(t *testing.T, r *execRunner) string {
	t.Helper()
	var out bytes.Buffer
	if err := r.save(context.Background(), &out); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, l := range strings.Split(saveNoise.ReplaceAllString(out.String(), ""), "\n") {
		if strings.HasPrefix(l, "*") || strings.Contains(l, chainPrefix) {
			b.WriteString(l + "\n")
		}
	}
	return b.String()
}

// everyKind is a state with a service of each kind, in both families.
func everyKind() *backend.State {
	st := newState()
	add := func(se *localv1.ServiceEndpoints) { st.Services[backend.KeyOf(se)] = se }
	add(named("cip", "10.96.0.10", nil, ep("10.244.1.5", 8080, true), ep("10.244.2.7", 8080, false)))
	add(named("none", "10.96.0.11", func(s *localv1.Service) {
		s.Type = localv1.ServiceType_NODE_PORT
		s.Ports[0].NodePort = 30011
		s.ExternalIps = []string{"192.0.2.1"}
	}))
	add(named("aff", "10.96.0.12", func(s *localv1.Service) { s.ClientIpAffinitySeconds = 600 }, ep("10.244.1.5", 8080, true)))
	add(named("itp", "10.96.0.13", func(s *localv1.Service) { s.InternalTrafficPolicy = localv1.TrafficPolicy_LOCAL },
		&localv1.Endpoint{PortName: "p", Protocol: localv1.Protocol_TCP, Ip: "10.244.2.7", Port: 8080, Ready: true}))
	add(named("etp", "10.96.0.14", func(s *localv1.Service) {
		s.Type = localv1.ServiceType_LOAD_BALANCER
		s.Ports[0].NodePort = 30014
		s.ExternalTrafficPolicy = localv1.TrafficPolicy_LOCAL
		s.HealthCheckNodePort = 32014
		s.LoadBalancerIps = []string{"203.0.113.14"}
		s.LoadBalancerSourceRanges = []string{"192.168.77.0/24", "198.51.100.0/24"}
	}, ep("10.244.1.5", 8080, true), ep("10.244.2.7", 8080, false)))
	udp := ep("fd00:10:244:1::5", 53, true)
	udp.Protocol = localv1.Protocol_UDP
	add(named("dns6", "fd00:10:96::a", func(s *localv1.Service) {
		s.Family = localv1.IPFamily_IPV6
		s.Type = localv1.ServiceType_NODE_PORT
		s.Ports[0].Protocol = localv1.Protocol_UDP
		s.Ports[0].NodePort = 30053
		s.ExternalIps = []string{"2001:db8::1"}
		s.ClientIpAffinitySeconds = 60
	}, udp))
	return st
}

func forEachVariant(t *testing.T, f func(t *testing.T, v variant, ipv6 bool)) {
	for _, vn := range []string{"nft", "legacy"} {
		for _, ipv6 := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/ipv6=%v", vn, ipv6), func(t *testing.T) { f(t, variants[vn], ipv6) })
		}
	}
}

// syncEveryKind makes a proxier of variant v writing into a network
// namespace of its own, ns, and syncs every kind of service with it, in
// full.
func syncEveryKind(t *testing.T, v variant, ipv6 bool) (ns *netnstest.Netns, r *execRunner, p *proxier, st *backend.State, res syncResult) {
	t.Helper()
	ns = netnstest.New(t, "ipt")
	r = kernelRunner(t, ns, v, ipv6)
	p = newProxier(ipv6, testConfig(), r)
	st = everyKind()
	return ns, r, p, st, mustSync(t, p, st, backend.Changes{Reset: true})
}

// TestKernelAcceptsEveryKind: the kernel takes a full sync of every kind of
// service, a second full sync is a no-op, and cleanup leaves nothing.
func TestKernelAcceptsEveryKind(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant, ipv6 bool) {
		_, r, p, st, res := syncEveryKind(t, v, ipv6)
		got := ourRules(t, r)
		if res.rules["nat"] < 5 || !strings.Contains(got, "-j DNAT --to-destination") {
			t.Fatalf("no service rules were written:\n%s", got)
		}
		mustSync(t, p, st, backend.Changes{Resync: true})
		if diff := cmp.Diff(got, ourRules(t, r)); diff != "" {
			t.Errorf("a second full sync changed the tables:\n%s", diff)
		}
		if err := cleanup(context.Background(), r); err != nil {
			t.Fatal(err)
		}
		if left := ourRules(t, r); strings.Contains(left, chainPrefix) {
			t.Errorf("cleanup left:\n%s", left)
		}
	})
}

// TestKernelPartialSyncsEqualFullSync: partial syncs of random changes leave
// the kernel tables exactly as one full sync of the final state does.
func TestKernelPartialSyncsEqualFullSync(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant, ipv6 bool) {
		fam := localv1.IPFamily_IPV4
		if ipv6 {
			fam = localv1.IPFamily_IPV6
		}
		r := kernelRunner(t, netnstest.New(t, "ipt"), v, ipv6)
		p := newProxier(ipv6, testConfig(), r)
		rng := mrand.New(mrand.NewPCG(3, 4))
		st := newState()
		mustSync(t, p, st, backend.Changes{Reset: true})
		partial := 0
		for range 40 {
			name := fmt.Sprintf("s%d", rng.IntN(8))
			key := backend.ServiceKey{Namespace: "ns", Name: name, Family: fam}
			ch := backend.Changes{}
			if rng.IntN(5) == 0 {
				delete(st.Services, key)
				ch.Deleted = []backend.ServiceKey{key}
			} else {
				st.Services[key] = randomServiceOf(rng, name, ipv6)
				ch.Set = []backend.ServiceKey{key}
			}
			if res := mustSync(t, p, st, ch); !res.full {
				partial++
			}
		}
		if partial < 30 {
			t.Fatalf("only %d of 40 syncs were partial", partial)
		}
		sameAsFullSync(t, v, ipv6, st, r, "kernel tables after partial syncs differ from a full sync")
	})
}

// sameAsFullSync fails the test, saying what, unless kpng's rules in r's
// namespace are those a full sync of st writes in a fresh one.
func sameAsFullSync(t *testing.T, v variant, ipv6 bool, st *backend.State, r *execRunner, what string) {
	t.Helper()
	fresh := kernelRunner(t, netnstest.New(t, "ipt"), v, ipv6)
	mustSync(t, newProxier(ipv6, testConfig(), fresh), st, backend.Changes{Reset: true})
	if diff := cmp.Diff(ourRules(t, fresh), ourRules(t, r)); diff != "" {
		t.Fatalf("%s (-full sync +got):\n%s", what, diff)
	}
}

// TestKernelCanary: flushing and deleting kpng's chains by hand makes the
// next partial sync fail on the canary and a full sync repair everything.
func TestKernelCanary(t *testing.T) {
	forEachVariant(t, func(t *testing.T, v variant, ipv6 bool) {
		ns, r, p, st, _ := syncEveryKind(t, v, ipv6)

		ipt := strings.TrimSuffix(r.saveCmd, "-save")
		for _, args := range [][]string{{"-t", "nat", "-F"}, {"-t", "nat", "-X"}, {"-t", "filter", "-F"}, {"-t", "filter", "-X"}} {
			cmd := ns.Command(t.Context(), append([]string{ipt, "-w", "5"}, args...)...)
			cmd.Env = append(os.Environ(), r.env...)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("%s %v: %v: %s", ipt, args, err, out)
			}
		}
		key := backend.ServiceKey{Namespace: "ns", Name: "cip", Family: localv1.IPFamily_IPV4}
		if ipv6 {
			key = backend.ServiceKey{Namespace: "ns", Name: "dns6", Family: localv1.IPFamily_IPV6}
		}
		// A change to one service: a partial sync, but for the canary.
		changed := named(key.Name, "10.96.0.10", nil, ep("10.244.1.6", 8080, true))
		if ipv6 {
			e := ep("fd00:10:244:1::6", 53, true)
			e.Protocol = localv1.Protocol_UDP
			changed = named(key.Name, "fd00:10:96::a", func(s *localv1.Service) {
				s.Family = localv1.IPFamily_IPV6
				s.Ports[0].Protocol = localv1.Protocol_UDP
			}, e)
		}
		st.Services[key] = changed
		res := mustSync(t, p, st, backend.Changes{Set: []backend.ServiceKey{key}})
		if !res.partialFailed || !res.full {
			t.Fatalf("the canary did not turn the partial sync into a full one: %+v", res)
		}
		sameAsFullSync(t, v, ipv6, st, r, "not repaired")
	})
}

// TestKernelLockWaitIsBounded: with the xtables lock held by someone else,
// the legacy restore gives up after -w seconds instead of hanging.
func TestKernelLockWaitIsBounded(t *testing.T) {
	ns := netnstest.New(t, "ipt")
	r := kernelRunner(t, ns, variants["legacy"], false)
	r.wait = 1
	lockFile := strings.TrimPrefix(r.env[0], "XTABLES_LOCKFILE=")
	f, err := os.OpenFile(lockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err = r.restore(ctx, text("*nat\n:KPNG-X - [0:0]\nCOMMIT\n"))
	var re *restoreError
	if !errors.As(err, &re) || ctx.Err() != nil {
		t.Fatalf("want a restore error from the lock wait, got %v (ctx %v)", err, ctx.Err())
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if err := r.restore(ctx, text("*nat\n:KPNG-X - [0:0]\nCOMMIT\n")); err != nil {
		t.Fatalf("with the lock free: %v", err)
	}
}

// TestKernelDetectVariant: kubelet's hint chain decides, in either
// variant, over the rules the other variant holds; without it the variant
// holding more rules wins. Each case writes tables in a namespace of its
// own and detects from inside it.
func TestKernelDetectVariant(t *testing.T) {
	const (
		twoRules = "*filter\n-A INPUT -j ACCEPT\n-A OUTPUT -j ACCEPT\nCOMMIT\n"
		hint     = "*mangle\n:KUBE-IPTABLES-HINT - [0:0]\nCOMMIT\n"
		canary   = "*mangle\n:KUBE-KUBELET-CANARY - [0:0]\nCOMMIT\n"
	)
	type write struct {
		variant string
		ipv6    bool
		input   string
	}
	for _, tc := range []struct {
		name   string
		writes []write
		want   string
	}{
		{"no hint: legacy holds the rules", []write{{"legacy", false, twoRules}}, "legacy"},
		{"no hint: nft holds the rules", []write{{"nft", false, twoRules}}, "nft"},
		{"hint in nft, rules in legacy", []write{{"nft", false, hint}, {"legacy", false, twoRules}}, "nft"},
		{"hint in legacy, rules in nft", []write{{"legacy", false, hint}, {"nft", false, twoRules}}, "legacy"},
		{"IPv6 canary in nft, rules in legacy", []write{{"nft", true, canary}, {"legacy", false, twoRules}}, "nft"},
		{"IPv6 canary in legacy, rules in nft", []write{{"legacy", true, canary}, {"nft", true, twoRules}}, "legacy"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := netnstest.New(t, "ipt")
			for _, w := range tc.writes {
				r := kernelRunner(t, ns, variants[w.variant], w.ipv6)
				if err := r.restore(context.Background(), text(w.input)); err != nil {
					t.Fatal(err)
				}
			}
			var got variant
			err := ns.Do(func() (err error) {
				got, err = detectVariant(context.Background())
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if got.name != tc.want {
				t.Fatalf("detected %q, want %q", got.name, tc.want)
			}
		})
	}
}

// BenchmarkKernelSync runs real iptables-restore, in a namespace of its
// own, at n ClusterIP services of 10 endpoints (IPv4): the cold full sync
// and a full resync (reported once), then the sync after one endpoint
// change (the loop, alternating between two endpoint sets), a periodic
// sync that only checks the canary (reported once), with the rules
// and bytes each such sync writes, the rules kpng owns, and the process's
// RSS after these syncs and its peak RSS. The legacy variant runs at 10,000 services; the nft variant at 1,000
// and 2,000 only: iptables-nft-restore's own cost grows faster than the
// input (about 7x from 1,000 to 2,000 services), so a cold load of 10,000
// takes hours (see docs/performance.md).
//
//	go test -tags e2e -run XXX -bench KernelSync -benchtime 20x ./backends/iptables
func BenchmarkKernelSync(b *testing.B) {
	for _, tc := range []struct {
		variant  string
		services int
	}{{"legacy", 10000}, {"nft", 1000}, {"nft", 2000}} {
		b.Run(fmt.Sprintf("%s/%d-services", tc.variant, tc.services), func(b *testing.B) {
			benchKernelSync(b, variants[tc.variant], tc.services)
		})
	}
}

func benchKernelSync(b *testing.B, v variant, services int) {
	ns := netnstest.New(b, "ipt")
	r := v.runnerFor(false, 5*time.Second)
	if _, err := exec.LookPath(r.restoreCmd); err != nil {
		b.Fatalf("%s is required: %v", r.restoreCmd, err)
	}
	r.wrap = ns.ExecPrefix()
	r.env = []string{"XTABLES_LOCKFILE=" + filepath.Join(b.TempDir(), "xtables.lock")}
	st := bigState(services, 10)
	p := newProxier(false, testConfig(), r)
	ctx := context.Background()

	start := time.Now()
	cold, err := p.sync(ctx, st, backend.Changes{Reset: true})
	if err != nil {
		b.Fatal(err)
	}
	coldTime := time.Since(start)
	start = time.Now()
	if _, err := p.sync(ctx, st, backend.Changes{Resync: true}); err != nil {
		b.Fatal(err)
	}
	resyncTime := time.Since(start)

	flip := newEndpointFlip(st, services)
	var last syncResult
	for b.Loop() {
		last = flip.partialSync(b, ctx, p)
	}
	// A periodic sync within --full-sync-period: the canary check only.
	p.cfg.FullSyncPeriod = time.Hour
	start = time.Now()
	if res, err := p.sync(ctx, st, backend.Changes{Resync: true}); err != nil || res.full {
		b.Fatalf("periodic sync: %+v %v", res, err)
	}
	periodicTime := time.Since(start)
	// The process's RSS now, and its peak, before the check below reads
	// the tables into memory.
	rss, peakRSS := procstat.RSSKiB(), procstat.PeakRSSKiB()
	// The loop's syncs reached the kernel: the tables hold the endpoint of
	// the last state, not the other one.
	want, gone := "10.250.0.1:8009", endpointString(flip.orig.Endpoints[9].Ip, flip.orig.Endpoints[9].Port)
	if flip.i%2 == 0 {
		want, gone = gone, want
	}
	var out bytes.Buffer
	if err := r.save(ctx, &out); err != nil {
		b.Fatal(err)
	}
	if !bytes.Contains(out.Bytes(), []byte("--to-destination "+want+"\n")) || bytes.Contains(out.Bytes(), []byte("--to-destination "+gone+"\n")) {
		b.Fatalf("the tables do not hold the last sync's endpoint %s (and not %s)", want, gone)
	}
	b.ReportMetric(coldTime.Seconds(), "cold-full-sync-s")
	b.ReportMetric(float64(cold.written["nat"]+cold.written["filter"]), "cold-rules")
	b.ReportMetric(float64(cold.bytes)/(1<<20), "cold-restore-MiB")
	b.ReportMetric(resyncTime.Seconds(), "resync-s")
	b.ReportMetric(periodicTime.Seconds(), "periodic-sync-s")
	b.ReportMetric(float64(last.written["nat"]+last.written["filter"]), "rules-written/sync")
	b.ReportMetric(float64(last.bytes), "restore-bytes/sync")
	b.ReportMetric(float64(last.rules["nat"]+last.rules["filter"]), "rules-owned")
	b.ReportMetric(float64(rss)/1024, "rss-MiB")
	b.ReportMetric(float64(peakRSS)/1024, "peak-rss-MiB")
	// What the backend keeps between syncs (its record, and the state it
	// is given), without the garbage of the full syncs that RSS includes.
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "live-heap-MiB")
	runtime.KeepAlive(p)
	runtime.KeepAlive(st)
}
