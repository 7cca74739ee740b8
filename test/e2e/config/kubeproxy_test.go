//go:build e2e

package config

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/kpng/kpng/backends/nft"
	"github.com/kpng/kpng/config"
	"github.com/kpng/kpng/test/e2e/netlab"
)

// kubeProxyBinary is upstream kube-proxy, built by hack/install-test-deps.sh
// from the Kubernetes module hack/tools pins.
func kubeProxyBinary(t *testing.T) string {
	t.Helper()
	p, err := filepath.Abs("../../../.cache/bin/kube-proxy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("kube-proxy binary: %v (run hack/install-test-deps.sh)", err)
	}
	return p
}

// lenientV1Alpha1 is a v1alpha1 file that kube-proxy reads only leniently:
// an unknown field and duplicate fields.
const lenientV1Alpha1 = `apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
bogus: 1
mode: nftables
conntrack:
  min: 1000
  min: 2000
`

// TestResolvedConfigurationIsKubeProxys gives kube-proxy and kpng the same
// command line with --write-config-to (kube-proxy writes the configuration
// it would run with as v1alpha1, kpng as v1alpha2), loads both, and
// compares them: kubeadm 1.36's ConfigMap content unchanged, a file that
// only lenient decoding reads, and flag-only command lines (underscore
// spellings included). kube-proxy writes its platform defaults in (mode
// iptables, detectLocalMode ClusterCIDR, nftables' nodePortAddresses
// [primary]), which kpng resolves when it runs: those are filled in on
// kpng's side before comparing. A configuration that leaves minSyncPeriod
// unset takes the backend's default in kpng, kube-proxy's 1s in kube-proxy
// (docs/config.md): that one difference is checked, then left out.
func TestResolvedConfigurationIsKubeProxys(t *testing.T) {
	kp, kpng := kubeProxyBinary(t), netlab.KpngBinary(t)
	dir := t.TempDir()
	lenient := filepath.Join(dir, "lenient.yaml")
	if err := os.WriteFile(lenient, []byte(lenientV1Alpha1), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
		log  string // in both outputs
		// unsetMinSync: nothing sets minSyncPeriod, and the mode is
		// nftables: kpng resolves the nft backend's default.
		unsetMinSync bool
	}{
		{name: "kubeadm 1.36 defaults", args: []string{"--config", "../../../config/testdata/v1alpha1/kubeadm-1.36-default.yaml"}},
		{name: "kubeadm 1.36 with a pod subnet", args: []string{"--config", "../../../config/testdata/v1alpha1/kubeadm-1.36-pod-subnet.yaml", "--hostname-override", "Node-A"}},
		{name: "lenient v1alpha1", args: []string{"--config", lenient}, log: "lenient decoding", unsetMinSync: true},
		{name: "flags only", args: []string{"--proxy-mode=nftables", "--cluster_cidr=10.0.0.0/8,fd00::/48", "--bind-address=192.0.2.1", "--config-sync-period=1m",
			"--iptables-min-sync-period=2s", "--masquerade_all", "--conntrack-min=5", "--nodeport-addresses=192.0.2.0/24", "--kube-api-qps=9", "--metrics-bind-address=127.0.0.1:10300"}},
		{name: "flags only, iptables mode", args: []string{"--iptables-sync-period=1m", "--iptables-localhost-nodeports=false", "--detect-local-mode=NodeCIDR", "--oom-score-adj=-500", "--healthz-bind-address=127.0.0.1:10300"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kpOut, kpngOut := filepath.Join(t.TempDir(), "kube-proxy.yaml"), filepath.Join(t.TempDir(), "kpng.yaml")
			var logs []string
			for _, run := range []struct{ bin, out string }{{kp, kpOut}, {kpng, kpngOut}} {
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				out, err := exec.CommandContext(ctx, run.bin, append(slices.Clone(tc.args), "--write-config-to", run.out)...).CombinedOutput()
				cancel()
				if err != nil {
					t.Fatalf("%s %q: %v\n%s", filepath.Base(run.bin), tc.args, err, out)
				}
				logs = append(logs, string(out))
			}
			if tc.log != "" {
				for i, name := range []string{"kube-proxy", "kpng"} {
					if !strings.Contains(logs[i], tc.log) {
						t.Errorf("%s did not log %q:\n%s", name, tc.log, logs[i])
					}
				}
			}
			want, got := loadResolved(t, kpOut), loadResolved(t, kpngOut)
			if got.Mode == "" {
				got.Mode = config.ProxyModeIPTables
			}
			if got.DetectLocalMode == "" {
				got.DetectLocalMode = config.LocalModeClusterCIDR
			}
			if got.Mode == config.ProxyModeNFTables && len(got.NodePortAddresses) == 0 {
				got.NodePortAddresses = []string{config.NodePortAddressesPrimary}
			}
			if tc.unsetMinSync {
				if d := nft.DefaultConfig().MinSyncPeriod; got.MinSyncPeriod != d || want.MinSyncPeriod != time.Second {
					t.Errorf("minSyncPeriod unset: kpng %v, kube-proxy %v; want the nft backend's %v and kube-proxy's 1s", got.MinSyncPeriod, want.MinSyncPeriod, d)
				}
				got.MinSyncPeriod = want.MinSyncPeriod
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("kpng resolves a different configuration than kube-proxy (-kube-proxy +kpng):\n%s", diff)
			}
		})
	}
}

func loadResolved(t *testing.T, path string) *config.KubeProxyConfiguration {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	l, err := config.Load(data)
	if err != nil {
		t.Fatalf("%s: %v\n%s", path, err, data)
	}
	return l.Config
}

// TestMetricsAndConfigzAreKubeProxys runs kube-proxy and kpng from the same
// file (kubeadm 1.36's, pointed at the test API server and with the
// conntrack settings a network namespace allows), each in its own node, in
// nftables and in iptables mode, and compares what their metrics servers
// serve: /configz is the same document, /flagz and /statusz the same pages
// and objects, and kpng's /metrics has every metric name kube-proxy's has. The names kpng has beyond kube-proxy's are
// logged.
func TestMetricsAndConfigzAreKubeProxys(t *testing.T) {
	netlab.RequireRoot(t)
	srv := startAPIServer(t)
	createCluster(t, srv.Client)
	kp, kpng := kubeProxyBinary(t), netlab.KpngBinary(t)
	base, err := os.ReadFile("../../../config/testdata/v1alpha1/kubeadm-1.36-pod-subnet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	modes := []string{"nftables", "iptables"}
	spec := netlab.Spec{}
	for _, mode := range modes {
		spec.Nodes = append(spec.Nodes, netlab.NodeSpec{Name: "kp-" + mode}, netlab.NodeSpec{Name: "kpng-" + mode})
	}
	lab := netlab.New(t, spec)
	apiHost := strings.TrimPrefix(srv.URL, "https://")
	dir := t.TempDir()
	for i, mode := range modes {
		doc := string(base)
		for old, repl := range map[string]string{
			"kubeconfig: /var/lib/kube-proxy/kubeconfig.conf": "kubeconfig: " + srv.KubeconfigPath,
			`hostnameOverride: ""`:                            "hostnameOverride: node-1",
			`mode: ""`:                                        "mode: " + mode,
			"  maxPerCore: null":                              "  maxPerCore: 0", // nf_conntrack_max is the host's
			"  tcpCloseWaitTimeout: null":                     "  tcpCloseWaitTimeout: 0s",
			"  tcpEstablishedTimeout: null":                   "  tcpEstablishedTimeout: 0s",
		} {
			if !strings.Contains(doc, old) {
				t.Fatalf("kubeadm's file lacks %q", old)
			}
			doc = strings.Replace(doc, old, repl, 1)
		}
		file := filepath.Join(dir, mode+".yaml")
		if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		kpNode, kpngNode := lab.Nodes[2*i], lab.Nodes[2*i+1]
		// -v=2: kube-proxy logs its syncs at verbosity 2 (a logging flag,
		// which both apply over the file).
		kpProc := kpNode.Start(t, kp, "--config", file, "--master", "https://"+forward(t, kpNode.NS, apiHost), "--v=2")
		kpngProc := kpngNode.Start(t, kpng, "--config", file, "--master", "https://"+forward(t, kpngNode.NS, apiHost), "--v=2")
		kpProc.WaitOutput(t, "SyncProxyRules complete", syncTimeout)
		kpngProc.WaitOutput(t, "Dataplane synced", syncTimeout)

		t.Run(mode, func(t *testing.T) {
			kpz, kpngz := get(t, kpNode, "/configz"), get(t, kpngNode, "/configz")
			var want, got map[string]any
			if err := json.Unmarshal([]byte(kpz), &want); err != nil {
				t.Fatalf("kube-proxy's /configz: %v\n%s", err, kpz)
			}
			if err := json.Unmarshal([]byte(kpngz), &got); err != nil {
				t.Fatalf("kpng's /configz: %v\n%s", err, kpngz)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("/configz differs (-kube-proxy +kpng):\n%s", diff)
			}

			// The health server (healthzBindAddress, 0.0.0.0:10256): the
			// same status, content type and JSON fields on /healthz and
			// /livez (their times differ by nature).
			for _, page := range []string{"/healthz", "/livez"} {
				kpCode, kpType, kpBody := fetch(t, kpNode, "127.0.0.1:10256", page, "")
				kpngCode, kpngType, kpngBody := fetch(t, kpngNode, "127.0.0.1:10256", page, "")
				var kpJSON, kpngJSON map[string]any
				_ = json.Unmarshal([]byte(kpBody), &kpJSON)
				_ = json.Unmarshal([]byte(kpngBody), &kpngJSON)
				if kpCode != kpngCode || kpType != kpngType || !slices.Equal(slices.Sorted(maps.Keys(kpJSON)), slices.Sorted(maps.Keys(kpngJSON))) ||
					kpJSON["nodeEligible"] != kpngJSON["nodeEligible"] {
					t.Errorf("health %s differs:\nkube-proxy: %d %s %s\nkpng:       %d %s %s", page, kpCode, kpType, kpBody, kpngCode, kpngType, kpngBody)
				}
			}

			// /flagz and /statusz: the same text pages' headers, and the
			// same config.k8s.io/v1beta1 objects (flags and their values,
			// versions, paths), but for what differs by nature (start
			// time, uptime, binary version).
			for _, page := range []string{"/flagz", "/statusz"} {
				kpText, kpngText := get(t, kpNode, page), get(t, kpngNode, page)
				header := "\nkube-proxy " + page[1:] + "\nWarning: "
				if !strings.HasPrefix(kpText, header) || !strings.HasPrefix(kpngText, header) {
					t.Errorf("%s text pages do not both start with %q:\nkube-proxy:\n%s\nkpng:\n%s", page, header, kpText, kpngText)
				}
			}
			kind := map[string]string{"/flagz": "Flagz", "/statusz": "Statusz"}
			structured := func(node *netlab.Node, page string) map[string]any {
				body := getAccept(t, node, page, "application/json;as="+kind[page]+";v=v1beta1;g=config.k8s.io")
				var m map[string]any
				if err := json.Unmarshal([]byte(body), &m); err != nil {
					t.Fatalf("node %s: %s: %v\n%s", node.Name, page, err, body)
				}
				return m
			}
			kpFlags, kpngFlags := structured(kpNode, "/flagz"), structured(kpngNode, "/flagz")
			for _, m := range []map[string]any{kpFlags, kpngFlags} {
				if flags, ok := m["flags"].(map[string]any); ok {
					delete(flags, "master") // each node's own forwarder
				}
			}
			if diff := cmp.Diff(kpFlags, kpngFlags); diff != "" {
				t.Errorf("/flagz differs (-kube-proxy +kpng):\n%s", diff)
			}
			kpStatus, kpngStatus := structured(kpNode, "/statusz"), structured(kpngNode, "/statusz")
			for _, m := range []map[string]any{kpStatus, kpngStatus} {
				if m["startTime"] == nil || m["goVersion"] == "" || m["binaryVersion"] == "" {
					t.Errorf("/statusz lacks start time or versions: %v", m)
				}
				delete(m, "startTime")
				delete(m, "uptimeSeconds")
				delete(m, "binaryVersion")
			}
			if diff := cmp.Diff(kpStatus, kpngStatus); diff != "" {
				t.Errorf("/statusz differs (-kube-proxy +kpng):\n%s", diff)
			}

			// Some series appear with their first observation (a request,
			// a sync), which neither process announces: scrape again until
			// kpng's names cover kube-proxy's, or fail with what is missing
			// at the deadline.
			var missing, extra []string
			deadline := time.After(syncTimeout)
			tick := time.NewTicker(250 * time.Millisecond)
			defer tick.Stop()
		scrape:
			for {
				kpNames, kpngNames := metricNames(t, get(t, kpNode, "/metrics")), metricNames(t, get(t, kpngNode, "/metrics"))
				missing, extra = setDiff(kpNames, kpngNames), setDiff(kpngNames, kpNames)
				if !slices.ContainsFunc(missing, func(name string) bool { return knownMissingMetric(name) == "" }) {
					break
				}
				select {
				case <-deadline:
					break scrape
				case <-tick.C:
				}
			}
			var known []string
			missing = slices.DeleteFunc(missing, func(name string) bool {
				why := knownMissingMetric(name)
				if why != "" {
					known = append(known, name+" ("+why+")")
				}
				return why != ""
			})
			if len(missing) > 0 {
				t.Errorf("kpng's /metrics lacks %d of kube-proxy's metric names in %s mode: %v", len(missing), mode, missing)
			}
			t.Logf("%s mode: kube-proxy's metric names kpng lacks, known: %v", mode, known)
			t.Logf("%s mode: metric names kpng has and kube-proxy has not: %v", mode, extra)
		})
	}
}

// knownMissingMetric says why kpng lacks one of kube-proxy's metrics, or
// returns "" for a metric kpng must have.
func knownMissingMetric(name string) string {
	switch {
	case strings.HasPrefix(name, "apiserver_") || strings.HasPrefix(name, "aggregator_"):
		// Registered at init by k8s.io/apiserver packages that kube-proxy
		// links for /flagz, /statusz and /healthz; no kube-proxy code
		// updates them.
		return "k8s.io/apiserver's, registered by linking it"
	case name == "kubeproxy_iptables_ct_state_invalid_dropped_packets_total", name == "kubeproxy_iptables_localhost_nodeports_accepted_packets_total":
		return "not counted by kpng's iptables backend yet"
	}
	return ""
}

// get fetches path from the metrics server (127.0.0.1:10249) in node's
// network namespace.
func get(t *testing.T, node *netlab.Node, path string) string {
	t.Helper()
	return getAccept(t, node, path, "")
}

// getAccept is get with an Accept header (none if empty); anything but
// 200 fails the test.
func getAccept(t *testing.T, node *netlab.Node, path, accept string) string {
	t.Helper()
	code, _, body := fetch(t, node, "127.0.0.1:10249", path, accept)
	if code != http.StatusOK {
		t.Fatalf("node %s: %s: %d\n%s", node.Name, path, code, body)
	}
	return body
}

// fetch GETs path from addr in node's network namespace, with an Accept
// header unless accept is empty, and returns the status code, the content
// type and the body.
func fetch(t *testing.T, node *netlab.Node, addr, path, accept string) (int, string, string) {
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
	req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("node %s: GET %s: %v", node.Name, path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("node %s: %s: %v", node.Name, path, err)
	}
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(body)
}

// metricNames lists the metric families a Prometheus text exposition
// declares (# TYPE lines).
func metricNames(t *testing.T, exposition string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	re := regexp.MustCompile(`^# TYPE (\S+) `)
	sc := bufio.NewScanner(strings.NewReader(exposition))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			names[m[1]] = true
		}
	}
	if len(names) == 0 {
		t.Fatalf("no metric in:\n%s", exposition)
	}
	return names
}

// setDiff returns the sorted names in a and not in b.
func setDiff(a, b map[string]bool) []string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(a)) {
		if !b[n] {
			out = append(out, n)
		}
	}
	return out
}
