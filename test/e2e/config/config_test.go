//go:build e2e

// Package config is the end-to-end test of kpng's configuration files: kpng
// proxy started from a kube-proxy v1alpha1 file, against a real API server,
// programs the same nftables (or iptables) rules as when started from the
// v1alpha2 file that kpng itself migrated it to.
package config

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/kpng/kpng/proxyutil/sysctl"
	"github.com/kpng/kpng/test/e2e/netlab"
	"github.com/kpng/kpng/test/integration/apiserver"
)

const syncTimeout = time.Minute

// v1alpha1Config is a kube-proxy configuration that uses what v1alpha2
// moves or changes (per-mode sync periods and masqueradeAll, clusterCIDR as
// a string, bindAddress, conntrack at the root), in a form that changes the
// rules (masqueradeAll, the cluster CIDR, node port addresses). Its
// arguments are the API server's kubeconfig, the mode (nftables or
// iptables), and the mode section's masqueradeAll; the other mode's section
// holds the same syncPeriod, which v1alpha2 accepts.
const v1alpha1Config = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: %[2]s
hostnameOverride: node-1
bindAddress: 192.168.77.11
clientConnection:
  kubeconfig: %[1]s
clusterCIDR: 10.244.0.0/16,fd00:10:244::/56
nodePortAddresses: [127.0.0.0/8, "::1/128"] # the same local IPs in every node namespace
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
logging:
  format: json
%[2]s:
  masqueradeAll: %[3]t
  syncPeriod: 20s
  minSyncPeriod: 100ms
%[4]s:
  syncPeriod: 20s
conntrack:
  tcpEstablishedTimeout: 12h
  tcpCloseWaitTimeout: 30m
`

// run is kpng proxy started from one file in one node.
type run struct {
	name string
	mode string // nftables or iptables
	file string
	node *netlab.Node
	proc *netlab.Process
}

// ruleCheck is a rule that a configuration drives, by a regexp that must
// (or, with absent, must not) match the rules of a run.
type ruleCheck struct {
	run    string // the v1alpha1 run whose rules are checked
	what   string
	re     string
	absent bool
}

// TestV1Alpha1AndMigratedV1Alpha2ProgramTheSameRules migrates v1alpha1
// files (nftables and iptables modes, masqueradeAll true and false) with
// kpng itself, starts kpng proxy from each v1alpha1 file and each migrated
// file in its own node against one API server, and compares each v1alpha1
// node's ruleset with its v1alpha2 twin's. Each pair's rules are also
// checked for what the configuration drives (masquerade all, or masquerade
// by cluster CIDR in both families; node port addresses), so that the
// comparison cannot pass by both runs ignoring the file.
func TestV1Alpha1AndMigratedV1Alpha2ProgramTheSameRules(t *testing.T) {
	netlab.RequireRoot(t)
	srv := startAPIServer(t)
	createCluster(t, srv.Client)
	kpng := netlab.KpngBinary(t)
	dir := t.TempDir()

	var runs []*run
	for _, mode := range []string{"nftables", "iptables"} {
		other := map[string]string{"nftables": "iptables", "iptables": "nftables"}[mode]
		for _, masqueradeAll := range []bool{true, false} {
			name := fmt.Sprintf("%s-masqueradeAll-%t", mode, masqueradeAll)
			v1 := filepath.Join(dir, name+".v1alpha1.yaml")
			if err := os.WriteFile(v1, fmt.Appendf(nil, v1alpha1Config, srv.KubeconfigPath, mode, masqueradeAll, other), 0o644); err != nil {
				t.Fatal(err)
			}
			// The migration, as a user runs it.
			v2 := filepath.Join(dir, name+".v1alpha2.yaml")
			if out, err := exec.Command(kpng, "proxy", "--config", v1, "--write-config-to", v2).CombinedOutput(); err != nil {
				t.Fatalf("kpng proxy --write-config-to: %v\n%s", err, out)
			}
			migrated, err := os.ReadFile(v2)
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"apiVersion: kubeproxy.config.k8s.io/v1alpha2", "\nmode: " + mode + "\n", fmt.Sprintf("\n  masqueradeAll: %t\n", masqueradeAll),
				"\nsyncPeriod: 20s\n", "\nminSyncPeriod: 100ms\n", "nodeIPOverride:\n- 192.168.77.11\n", "clusterCIDRs:\n  - 10.244.0.0/16\n  - fd00:10:244::/56\n"}
			for _, s := range want {
				if !strings.Contains(string(migrated), s) {
					t.Fatalf("%s: the migrated file lacks %q:\n%s", name, s, migrated)
				}
			}
			runs = append(runs, &run{name: name + " v1alpha1", mode: mode, file: v1}, &run{name: name + " v1alpha2", mode: mode, file: v2})
		}
	}

	spec := netlab.Spec{}
	for i := range runs {
		spec.Nodes = append(spec.Nodes, netlab.NodeSpec{Name: fmt.Sprintf("node-%c", 'a'+i)})
	}
	lab := netlab.New(t, spec)
	apiHost := strings.TrimPrefix(srv.URL, "https://")
	for i, r := range runs {
		r.node = lab.Nodes[i]
		// kpng runs in the node's namespace; the API server listens on the
		// test's loopback, so the node gets a loopback port forwarded to it.
		// --master overrides the kubeconfig's server: a flag over the file.
		master := "https://" + forward(t, r.node.NS, apiHost)
		r.proc = r.node.Start(t, kpng, "proxy", "--config", r.file, "--master", master)
	}
	for _, r := range runs {
		r.proc.WaitOutput(t, "Dataplane synced", syncTimeout)
	}

	rules := map[string]string{}
	for _, r := range runs {
		rules[r.name] = ruleset(t, r)
	}
	// What each configuration drives, seen in the v1alpha1 runs' rules
	// (and so, if the comparison below passes, in the v1alpha2 ones').
	const (
		nftAll, nftCIDR = "nftables-masqueradeAll-true v1alpha1", "nftables-masqueradeAll-false v1alpha1"
		iptAll, iptCIDR = "iptables-masqueradeAll-true v1alpha1", "iptables-masqueradeAll-false v1alpha1"
	)
	for _, c := range []ruleCheck{
		{run: nftAll, what: "the service", re: `10\.96\.0\.20 \. tcp \. 80 : goto service-`},
		{run: nftAll, what: "the endpoints", re: `elements = \{ 0-32767 : 10\.244\.1\.10 \. 8080,\s+32768-65535 : 10\.244\.1\.11 \. 8080 \}`},
		{run: nftAll, what: "masqueradeAll (IPv4)", re: `(?m)^\s+ip daddr @cluster-ips meta mark set .*"masquerade all clusterIP traffic`},
		{run: nftAll, what: "masqueradeAll (IPv6)", re: `(?m)^\s+ip6 daddr @cluster-ips meta mark set .*"masquerade all clusterIP traffic`},
		{run: nftAll, what: "nodePortAddresses (IPv4)", re: `(?m)^\s+ip daddr @nodeport-ips meta l4proto \. th dport vmap @service-nodeports`},
		{run: nftAll, what: "nodePortAddresses (IPv6)", re: `(?m)^\s+ip6 daddr @nodeport-ips meta l4proto \. th dport vmap @service-nodeports`},
		{run: nftCIDR, what: "clusterCIDR's IPv4 half", re: `(?m)^\s+ip daddr @cluster-ips ip saddr != 10\.244\.0\.0/16 meta mark set `},
		{run: nftCIDR, what: "clusterCIDR's IPv6 half", re: `(?m)^\s+ip6 daddr @cluster-ips ip6 saddr != fd00:10:244::/56 meta mark set `},
		{run: nftCIDR, what: "nodePortAddresses (IPv4)", re: `(?m)^\s+ip daddr @nodeport-ips meta l4proto \. th dport vmap @service-nodeports`},
		{run: nftCIDR, what: "no masqueradeAll", re: `masquerade all clusterIP traffic`, absent: true},

		{run: iptAll, what: "the service", re: `(?m)^-A KPNG-SERVICES -d 10\.96\.0\.20/32 -p tcp .*--dport 80 -j KPNG-SVC-`},
		{run: iptAll, what: "the endpoints", re: `(?m)^-A KPNG-SEP-\S+ -p tcp .*-j DNAT --to-destination 10\.244\.1\.11:8080$`},
		{run: iptAll, what: "masqueradeAll (IPv4)", re: `(?m)^-A KPNG-SVC-\S+ -d 10\.96\.0\.20/32 -p tcp .*--dport 80 -j KPNG-MARK-MASQ$`},
		{run: iptAll, what: "masqueradeAll (IPv6)", re: `(?m)^-A KPNG-SVC-\S+ -d fd00:10:96::20/128 -p tcp .*--dport 80 -j KPNG-MARK-MASQ$`},
		// The local IPs in nodePortAddresses; IPv6 has none, since node
		// ports on ::1 are never accepted (as in kube-proxy).
		{run: iptAll, what: "nodePortAddresses (IPv4)", re: `(?m)^-A KPNG-SERVICES -d 127\.0\.0\.1/32 .*-j KPNG-NODEPORTS$`},
		// v1alpha1's iptables.localhostNodePorts default (true), kept by
		// the migration although v1alpha2's default is false.
		{run: iptAll, what: "localhostNodePorts' protection", re: `(?m)^-A KPNG-FIREWALL ! -s 127\.0\.0\.0/8 -d 127\.0\.0\.0/8 .*-j DROP$`},
		{run: iptCIDR, what: "clusterCIDR's IPv4 half", re: `(?m)^-A KPNG-SVC-\S+ ! -s 10\.244\.0\.0/16 -d 10\.96\.0\.20/32 -p tcp .*-j KPNG-MARK-MASQ$`},
		{run: iptCIDR, what: "clusterCIDR's IPv6 half", re: `(?m)^-A KPNG-SVC-\S+ ! -s fd00:10:244::/56 -d fd00:10:96::20/128 -p tcp .*-j KPNG-MARK-MASQ$`},
		{run: iptCIDR, what: "no masqueradeAll", re: `(?m)^-A KPNG-SVC-\S+ -d 10\.96\.0\.20/32 -p tcp .*-j KPNG-MARK-MASQ$`, absent: true},
	} {
		if regexp.MustCompile(c.re).MatchString(rules[c.run]) == c.absent {
			t.Errorf("%s: %s: /%s/ matched %v in:\n%s", c.run, c.what, c.re, c.absent, rules[c.run])
		}
	}
	for i := 0; i < len(runs); i += 2 {
		name := strings.TrimSuffix(runs[i].name, " v1alpha1")
		v1, v2 := rules[runs[i].name], rules[runs[i+1].name]
		if v1 != v2 {
			t.Errorf("%s: v1alpha1 and its migrated v1alpha2 program different rules:\n%s\nv1alpha1's:\n%s", name, lineDiff(v1, v2), v1)
		}
	}

	// What reached the backend's flags and the runner, from the start log
	// line: the same for twins, with the file's sync periods.
	for i := 0; i < len(runs); i += 2 {
		f1, f2 := startFlags(t, runs[i]), startFlags(t, runs[i+1])
		if !slices.Equal(f1, f2) {
			t.Errorf("backend flags differ:\n%s: %q\n%s: %q", runs[i].name, f1, runs[i+1].name, f2)
		}
		for _, want := range []string{"--sync-period=20s", "--min-sync-period=100ms", "--cluster-cidr=10.244.0.0/16,fd00:10:244::/56"} {
			if !slices.Contains(f1, want) {
				t.Errorf("%s: backend flags %q lack %s", runs[i].name, f1, want)
			}
		}
	}

	// Both runs of a pair report the same configuration on /configz,
	// under kube-proxy's key, as v1alpha1 (kube-proxy's shape).
	for i := 0; i < len(runs); i += 2 {
		cz1, cz2 := configz(t, runs[i].node), configz(t, runs[i+1].node)
		if cz1 != cz2 {
			t.Errorf("/configz differs:\n%s: %s\n%s: %s", runs[i].name, cz1, runs[i+1].name, cz2)
		}
		var body map[string]map[string]any
		if err := json.Unmarshal([]byte(cz1), &body); err != nil || body["kubeproxy.config.k8s.io"]["apiVersion"] != "kubeproxy.config.k8s.io/v1alpha1" {
			t.Errorf("%s: /configz = %s (%v)", runs[i].name, cz1, err)
		}
	}

	// The table size kpng wants (kube-proxy's defaults: 32768 a CPU, at
	// least 131072). A host already at it gets no write, so no line.
	wantMax := sysctl.ConntrackMax(sysctl.Conntrack{MaxPerCore: 32768, Min: 131072}, runtime.NumCPU())
	hostMax, _ := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_max")
	sizeSkipped := strings.TrimSpace(string(hostMax)) != fmt.Sprint(wantMax)
	for _, r := range runs {
		// Conntrack timeouts are the namespace's own: set. The table size
		// only the host's namespace may change: skipped, with a log line.
		for key, want := range map[string]string{"net.netfilter.nf_conntrack_tcp_timeout_established": "43200", "net.netfilter.nf_conntrack_tcp_timeout_close_wait": "1800"} {
			if got, err := r.node.NS.ReadSysctl(key); err != nil || got != want {
				t.Errorf("%s: %s = %q (%v), want %s", r.name, key, got, err, want)
			}
		}
		out := r.proc.Output()
		if sizeSkipped && !regexp.MustCompile(`"msg":"Conntrack settings skipped: not allowed here".*"settings":"table size"`).MatchString(out) {
			t.Errorf("%s: no log line for the skipped conntrack table size:\n%s", r.name, out)
		}
		// logging.format: json.
		if !regexp.MustCompile(`(?m)^\{"ts":[0-9.]+,.*"msg":"Starting kpng proxy"`).MatchString(out) {
			t.Errorf("%s: no JSON log line for the start:\n%s", r.name, out)
		}
	}
}

// TestConfigErrorsExitNonZero runs the binary: with configHardFail (always
// for v1alpha1), a bad field exits 1 with a message naming the field.
func TestConfigErrorsExitNonZero(t *testing.T) {
	kpng := netlab.KpngBinary(t)
	dir := t.TempDir()
	cases := map[string]string{
		"v1alpha1 invalid value": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\noomScoreAdj: 5000\n",
		"v1alpha2 unknown field": "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\nmasqueradeAll: true\n",
		"Windows mode":           "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\nmode: kernelspace\n",
		"v1alpha1 sync periods that disagree": "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: nftables\n" +
			"nftables:\n  syncPeriod: 20s\niptables:\n  syncPeriod: 10s\n",
		"v1alpha2 duplicate field": "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\nlinux:\n  conntrack:\n    min: 1\n    min: 2\n",
		"v1alpha2 wrong type":      "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\nlinux:\n  conntrack:\n    maxPerCore: many\n",
	}
	want := map[string]string{"v1alpha1 invalid value": "linux.oomScoreAdj", "v1alpha2 unknown field": "masqueradeAll", "Windows mode": `mode: Unsupported value: "kernelspace"`,
		"v1alpha1 sync periods that disagree": "iptables.syncPeriod: Invalid value: \"10s\": disagrees with nftables.syncPeriod (20s)",
		"v1alpha2 duplicate field":            `duplicate field "linux.conntrack.min"`,
		"v1alpha2 wrong type":                 `field "linux.conntrack.maxPerCore": invalid value "many"`}
	for name, doc := range cases {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
			if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			out, err := exec.CommandContext(ctx, kpng, "--config", file, "--hostname-override", "node-1").CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("kpng --config: %v, want exit status 1\n%s", err, out)
			}
			if !strings.Contains(string(out), want[name]) {
				t.Errorf("output does not name %q:\n%s", want[name], out)
			}
		})
	}
}

// startAPIServer starts the test API server from a thread that lives until
// the server is stopped. apiserver starts etcd and kube-apiserver with a
// parent-death signal, which Linux sends when the thread that forked them
// exits, not the process; and netlab's Do discards every thread it uses,
// which may be any thread the runtime pools, the forking one included. So
// the test goroutine keeps its thread locked (no other goroutine, hence no
// Do, runs on it) until the last cleanup, registered first so that it runs
// after the API server's.
func startAPIServer(t *testing.T) *apiserver.Server {
	t.Helper()
	runtime.LockOSThread()
	t.Cleanup(runtime.UnlockOSThread)
	return apiserver.Start(t)
}

// TestConfigHardFailFalseContinues runs the binary on a v1alpha2 file with
// configHardFail: false, an unknown field, an invalid value and a value of
// the wrong type: it exits 0, logs a warning naming each, and writes the
// default in the bad fields' place.
func TestConfigHardFailFalseContinues(t *testing.T) {
	kpng := netlab.KpngBinary(t)
	dir := t.TempDir()
	in, out := filepath.Join(dir, "soft.yaml"), filepath.Join(dir, "out.yaml")
	doc := "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\nconfigHardFail: false\nmode: nftables\nbogus: 1\nsyncPeriod: abc\nlinux:\n  oomScoreAdj: 5000\n"
	if err := os.WriteFile(in, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logs, err := exec.CommandContext(ctx, kpng, "proxy", "--config", in, "--write-config-to", out).CombinedOutput()
	if err != nil {
		t.Fatalf("kpng proxy: %v, want success\n%s", err, logs)
	}
	for _, s := range []string{`unknown field \"bogus\"`, "linux.oomScoreAdj: Invalid value: 5000", `field \"syncPeriod\": invalid value \"abc\"`} {
		if !strings.Contains(string(logs), s) {
			t.Errorf("no warning with %q:\n%s", s, logs)
		}
	}
	written, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"\n  oomScoreAdj: -999\n", "\nmode: nftables\n", "\nconfigHardFail: false\n", "\nsyncPeriod: 30s\n"} {
		if !strings.Contains(string(written), s) {
			t.Errorf("written configuration lacks %q:\n%s", s, written)
		}
	}
}

// startFlags returns the backend flags kpng proxy logged (as JSON) when it
// started in r.
func startFlags(t *testing.T, r *run) []string {
	t.Helper()
	for _, line := range strings.Split(r.proc.Output(), "\n") {
		var entry struct {
			Msg          string   `json:"msg"`
			BackendFlags []string `json:"backendFlags"`
		}
		if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "Starting kpng proxy" {
			return entry.BackendFlags
		}
	}
	t.Fatalf("%s: no start line in the output:\n%s", r.name, r.proc.Output())
	return nil
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b string) string {
	count := map[string]int{}
	for _, l := range strings.Split(a, "\n") {
		count[l]++
	}
	for _, l := range strings.Split(b, "\n") {
		count[l]--
	}
	var out []string
	for l, n := range count {
		for ; n > 0; n-- {
			out = append(out, "- "+l)
		}
		for ; n < 0; n++ {
			out = append(out, "+ "+l)
		}
	}
	slices.Sort(out)
	return strings.Join(out, "\n")
}

// counters are what changes in a ruleset as packets flow.
var counters = regexp.MustCompile(`packets \d+ bytes \d+`)

// iptablesNoise is what changes in iptables-save's output from one run to
// the next: its comment lines (date, version) and packet counters.
var iptablesNoise = regexp.MustCompile(`(?m)^#.*\n|\[\d+:\d+\]`)

// ruleset returns kpng's rules in r's node, without counter values: its
// nftables tables, or the iptables tables (legacy and nft, both families)
// that hold its chains, restricted to them.
func ruleset(t *testing.T, r *run) string {
	t.Helper()
	var b strings.Builder
	if r.mode == "iptables" {
		for _, save := range []string{"iptables-legacy-save", "iptables-nft-save", "ip6tables-legacy-save", "ip6tables-nft-save"} {
			out, err := r.node.Run(save)
			if err != nil {
				t.Fatalf("node %s: %v", r.node.Name, err)
			}
			if !strings.Contains(out, "KPNG-") {
				continue
			}
			b.WriteString("# " + save + "\n")
			for _, l := range strings.Split(iptablesNoise.ReplaceAllString(out, ""), "\n") {
				if strings.HasPrefix(l, "*") || strings.Contains(l, "KPNG-") {
					b.WriteString(l + "\n")
				}
			}
		}
		if b.Len() == 0 {
			t.Fatalf("%s: no KPNG- chain in any iptables table", r.name)
		}
		return b.String()
	}
	for _, family := range []string{"ip", "ip6"} {
		out, err := r.node.Run("nft", "list", "table", family, "kpng")
		if err != nil {
			t.Fatalf("node %s: %v", r.node.Name, err)
		}
		b.WriteString(counters.ReplaceAllString(out, "packets 0 bytes 0"))
	}
	return b.String()
}

// configz fetches /configz from the metrics server in node's namespace.
func configz(t *testing.T, node *netlab.Node) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		DialContext: func(_ context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := node.NS.Do(func() (err error) {
				c, err = net.Dial(network, addr)
				return err
			})
			return c, err
		},
	}}
	defer client.CloseIdleConnections()
	resp, err := client.Get("http://127.0.0.1:10249/configz")
	if err != nil {
		t.Fatalf("node %s: GET /configz: %v", node.Name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("node %s: /configz: %s %v\n%s", node.Name, resp.Status, err, body)
	}
	return string(body)
}

// forward listens on a loopback port of ns and forwards every connection
// to target (host:port, in the test's own namespace). It returns the
// listening address; everything is closed when the test ends.
func forward(t *testing.T, ns *netlab.Netns, target string) string {
	t.Helper()
	if _, err := ns.Run("ip", "link", "set", "lo", "up"); err != nil {
		t.Fatal(err)
	}
	var ln net.Listener
	if err := ns.Do(func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", ns.Name, err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	var wg sync.WaitGroup
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			// This goroutine runs in the test's own namespace: netlab's
			// Do never hands a thread that joined a namespace back.
			out, err := net.Dial("tcp", target)
			if err != nil {
				t.Logf("forward to %s: %v", target, err)
				in.Close()
				continue
			}
			mu.Lock()
			conns = append(conns, in, out)
			mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); _, _ = io.Copy(out, in); closeWrite(out) }()
			go func() { defer wg.Done(); _, _ = io.Copy(in, out); closeWrite(in) }()
		}
	}()
	return ln.Addr().String()
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// createCluster creates node-1, and a NodePort Service with two endpoints
// on node-1, both families.
func createCluster(t *testing.T, c kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "node-1"},
		Spec:       corev1.NodeSpec{PodCIDRs: []string{"10.244.1.0/24", "fd00:10:244:1::/64"}},
	}
	node, err := c.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.77.11"}, {Type: corev1.NodeInternalIP, Address: "fd00:77::11"}}
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	policy := corev1.IPFamilyPolicyRequireDualStack
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{
			Type:           corev1.ServiceTypeNodePort,
			IPFamilyPolicy: &policy,
			IPFamilies:     []corev1.IPFamily{corev1.IPv4Protocol, corev1.IPv6Protocol},
			ClusterIP:      "10.96.0.20",
			ClusterIPs:     []string{"10.96.0.20", "fd00:10:96::20"},
			Ports:          []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: 30080}},
		},
	}
	if _, err := c.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, nodeName, port, proto, name := true, "node-1", int32(8080), corev1.ProtocolTCP, "http"
	for family, addrs := range map[discoveryv1.AddressType][]string{
		discoveryv1.AddressTypeIPv4: {"10.244.1.10", "10.244.1.11"},
		discoveryv1.AddressTypeIPv6: {"fd00:10:244:1::10", "fd00:10:244:1::11"},
	} {
		slice := &discoveryv1.EndpointSlice{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-" + strings.ToLower(string(family)),
				Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
			AddressType: family,
			Ports:       []discoveryv1.EndpointPort{{Name: &name, Protocol: &proto, Port: &port}},
		}
		for _, a := range addrs {
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{Addresses: []string{a},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready}, NodeName: &nodeName})
		}
		if _, err := c.DiscoveryV1().EndpointSlices("default").Create(ctx, slice, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
