package kubeproxy

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/backends/ebpf"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/config"
	"github.com/kpng/kpng/source/file"
)

// ebpfFlags are the flags the ebpf backend has: its own and the kube-proxy
// settings it binds.
var ebpfFlags = []string{"ebpf-pin-path", "ebpf-cgroup-path", "ebpf-interfaces", "nodeport-addresses", "min-sync-period", "sync-period",
	"healthz-bind-address", "metrics-bind-address", "profiling", "dry-run", "ip-families"}

// ebpfOnly runs mode ebpf with plugin, named as kpng's eBPF backend.
func ebpfOnly(plugin backend.Plugin) map[config.ProxyMode]backend.Registration {
	return map[config.ProxyMode]backend.Registration{
		config.ProxyModeEBPF: {Name: "ebpf", New: func() backend.Plugin { return plugin }},
	}
}

func loadConfig(t *testing.T, doc string) *config.KubeProxyConfiguration {
	t.Helper()
	l, err := config.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return l.Config
}

func TestConfigureBackendEBPF(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		want map[string]string // flag -> value the backend holds
	}{
		{
			name: "the ebpf section sets the backend's flags",
			doc:  "mode: ebpf\nebpf:\n  cgroupPath: /sys/fs/cgroup/kpng\n  interfaces: [eth0, cbr0]\n  pinPath: /run/kpng/bpf\n",
			want: map[string]string{"ebpf-cgroup-path": "/sys/fs/cgroup/kpng", "ebpf-interfaces": "eth0,cbr0", "ebpf-pin-path": "/run/kpng/bpf"},
		},
		{
			name: "defaults: cgroupPath left to the backend (the cgroup v2 root), interfaces auto",
			doc:  "mode: ebpf\n",
			want: map[string]string{"ebpf-cgroup-path": "backend-default", "ebpf-interfaces": "auto", "ebpf-pin-path": "/sys/fs/bpf/kpng"},
		},
		{
			name: "an empty interfaces list is the flag's none (its default is auto)",
			doc:  "mode: ebpf\nebpf:\n  interfaces: []\n",
			want: map[string]string{"ebpf-interfaces": "none"},
		},
		{
			name: "a v1alpha1 file with mode ebpf gets the defaults",
			doc:  v1alpha1Header + "mode: ebpf\n",
			want: map[string]string{"ebpf-cgroup-path": "backend-default", "ebpf-interfaces": "auto", "ebpf-pin-path": "/sys/fs/bpf/kpng"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newFakePlugin(ebpfFlags...)
			fs := pflag.NewFlagSet("to-ebpf", pflag.ContinueOnError)
			fs.AddGoFlagSet(PluginFlags("ebpf", p))
			doc := tc.doc
			if !strings.HasPrefix(doc, "apiVersion") {
				doc = v1alpha2Header + doc
			}
			set, warnings, err := configureBackend("ebpf", fs, loadConfig(t, doc))
			if err != nil || len(warnings) > 0 {
				t.Fatalf("configureBackend: %v, warnings %q", err, warnings)
			}
			for name, want := range tc.want {
				if got := *p.values[name]; got != want {
					t.Errorf("--%s = %q, want %q (set %q)", name, got, want, set)
				}
			}
		})
	}

	t.Run("a backend for mode ebpf without the flags loses a non-default section: an error naming it", func(t *testing.T) {
		p := newFakePlugin("nodeport-addresses")
		fs := pflag.NewFlagSet("to-x", pflag.ContinueOnError)
		fs.AddGoFlagSet(PluginFlags("x", p))
		_, _, err := configureBackend("x", fs, loadConfig(t, v1alpha2Header+"mode: ebpf\nebpf: {pinPath: /run/x, interfaces: []}\n"))
		if err == nil {
			t.Fatal("configureBackend succeeded, want an error naming the lost settings")
		}
		for _, s := range []string{"ebpf.pinPath", "--ebpf-pin-path", "ebpf.interfaces", "--ebpf-interfaces"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("err = %v, want one naming %s", err, s)
			}
		}
		if strings.Contains(err.Error(), "ebpf.cgroupPath") {
			t.Errorf("err = %v names ebpf.cgroupPath, which holds its default", err)
		}
		// Its defaults lose nothing.
		if _, warnings, err := configureBackend("x", fs, loadConfig(t, v1alpha2Header+"mode: ebpf\n")); err != nil || len(warnings) > 0 {
			t.Errorf("default section: err %v, warnings %q", err, warnings)
		}
	})

	t.Run("other modes do not pass the section", func(t *testing.T) {
		p := newFakePlugin(append(slices.Clone(nftFlags), "ebpf-pin-path")...)
		fs := pflag.NewFlagSet("to-nft", pflag.ContinueOnError)
		fs.AddGoFlagSet(PluginFlags("nft", p))
		if _, _, err := configureBackend("nft", fs, loadConfig(t, v1alpha2Header+"mode: nftables\nebpf: {pinPath: /run/x}\n")); err != nil {
			t.Fatal(err)
		}
		if got := *p.values["ebpf-pin-path"]; got != "backend-default" {
			t.Errorf("--ebpf-pin-path = %q in mode nftables", got)
		}
	})
}

// TestEBPFBackendTakesTheEBPFSection maps a configuration onto the real
// eBPF backend compiled into kpng: the section reaches its Config, and it
// opens (in --dry-run, so without a kernel) with those values.
func TestEBPFBackendTakesTheEBPFSection(t *testing.T) {
	reg, ok := backend.Lookup("ebpf")
	if !ok {
		t.Fatal("the ebpf backend is not registered")
	}
	c := loadConfig(t, v1alpha2Header+"mode: ebpf\nnodePortAddresses: [primary]\nebpf:\n  cgroupPath: /sys/fs/cgroup/kpng\n  interfaces: [eth0, cbr0]\n  pinPath: /run/kpng/bpf\n")
	plugin := reg.New()
	fs := pflag.NewFlagSet(reg.Name, pflag.ContinueOnError)
	fs.AddGoFlagSet(PluginFlags(reg.Name, plugin))
	set, warnings, err := configureBackend(reg.Name, fs, c)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("configureBackend: %v, warnings %q", err, warnings)
	}
	got := plugin.(*ebpf.Plugin).Config
	if got.CgroupPath != "/sys/fs/cgroup/kpng" || got.Interfaces != "eth0,cbr0" || got.PinPath != "/run/kpng/bpf" {
		t.Errorf("backend configured with cgroup %q, interfaces %q, pin path %q (flags %q)", got.CgroupPath, got.Interfaces, got.PinPath, set)
	}
	// No kernel, and no health server on a shared port.
	for name, v := range map[string]string{"dry-run": "true", "healthz-bind-address": ""} {
		if err := fs.Set(name, v); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, _, err := plugin.Open(ctx, backend.Env{NodeName: "node-1"}); err != nil {
		t.Errorf("ebpf rejects the configuration (flags %q): %v", set, err)
	}
}

// TestEBPFDefaultsAreTheBackends: the section's defaults are the backend's
// flag defaults, so that a file that leaves it out runs to-ebpf as its
// flags' defaults do, and nothing is passed that the backend would not
// take anyway.
func TestEBPFDefaultsAreTheBackends(t *testing.T) {
	def, backendDef := config.Default().EBPF, ebpf.DefaultConfig()
	if def.CgroupPath != backendDef.CgroupPath || strings.Join(def.Interfaces, ",") != backendDef.Interfaces || def.PinPath != backendDef.PinPath {
		t.Errorf("config defaults %+v, backend defaults cgroup %q, interfaces %q, pin path %q", def, backendDef.CgroupPath, backendDef.Interfaces, backendDef.PinPath)
	}
}

// TestProxyRunsEBPFModeWithTheSection runs kpng proxy in process from a
// v1alpha2 file of mode ebpf (the file source stands in for the API
// server): the section reaches the backend's flags, /configz answers
// (v1alpha1, which has no ebpf section, leaves it out), and --cleanup
// cleans the configured pin path.
func TestProxyRunsEBPFModeWithTheSection(t *testing.T) {
	metricsAddr := freePort(t)
	section := "ebpf:\n  cgroupPath: /sys/fs/cgroup/kpng\n  interfaces: [eth0]\n  pinPath: /run/kpng/bpf\n"
	cfgFile := writeFile(t, "kp.yaml", v1alpha2Header+"mode: ebpf\nhostnameOverride: node-1\n"+section+"metricsBindAddress: "+metricsAddr+"\n")
	plugin := newFakePlugin(ebpfFlags...)
	deps := proxyDeps{
		source: func(*config.KubeProxyConfiguration, string, string) (cluster.Stage, error) {
			return &file.Source{Path: "../examples/cluster.yaml"}, nil
		},
		setupHost: func(context.Context, *config.KubeProxyConfiguration) error { return nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runCommand(ctx, testRoot(testProxy(deps, ebpfOnly(plugin))), "--config", cfgFile) }()
	select {
	case <-plugin.syncs:
	case err := <-done:
		t.Fatalf("kpng proxy ended before syncing: %v", err)
	}

	resp, err := http.Get("http://" + metricsAddr + "/configz")
	if err != nil {
		t.Fatalf("GET /configz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var configz map[string]json.RawMessage
	if err := json.Unmarshal(body, &configz); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("/configz: %s, %v\n%s", resp.Status, err, body)
	}
	served, err := config.Load(configz["kubeproxy.config.k8s.io"])
	if err != nil || served.Config.Mode != config.ProxyModeEBPF || strings.Contains(string(body), "ebpf\":") {
		t.Errorf("/configz served %s (%v)", body, err)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("kpng proxy: %v", err)
	}
	for name, want := range map[string]string{"ebpf-cgroup-path": "/sys/fs/cgroup/kpng", "ebpf-interfaces": "eth0", "ebpf-pin-path": "/run/kpng/bpf"} {
		if got := plugin.opened[name]; got != want {
			t.Errorf("backend opened with --%s=%q, want %q", name, got, want)
		}
	}

	// --cleanup removes what the configured pin path holds, not the
	// default's.
	cleaner := newFakePlugin(ebpfFlags...)
	cleanupDeps := failingDeps(t)
	cleanupDeps.cleanupOthers = func(context.Context) error { return nil }
	if err := runCommand(context.Background(), testRoot(testProxy(cleanupDeps, ebpfOnly(cleaner))), "--config", cfgFile, "--cleanup"); err != nil {
		t.Fatalf("--cleanup: %v", err)
	}
	if cleaner.cleaned != 1 || *cleaner.values["ebpf-pin-path"] != "/run/kpng/bpf" {
		t.Errorf("Cleanup ran %d times with --ebpf-pin-path=%q", cleaner.cleaned, *cleaner.values["ebpf-pin-path"])
	}
}

func TestConfigzLeavesOutTheEBPFSection(t *testing.T) {
	c := loadConfig(t, v1alpha2Header+"mode: ebpf\nebpf: {cgroupPath: /c, interfaces: [], pinPath: /p}\n")
	body, err := configzBody(c)
	if err != nil {
		t.Fatalf("configzBody: %v", err)
	}
	if strings.Contains(string(body), "ebpf\":") || strings.Contains(string(body), "/p\"") {
		t.Errorf("/configz holds the ebpf section, which v1alpha1 cannot: %s", body)
	}
	if c.EBPF.PinPath != "/p" {
		t.Errorf("configzBody changed its argument: %+v", c.EBPF)
	}
}

// TestEBPFSectionOutsideItsModeWarns: the section does nothing in another
// mode; set to other than its defaults there, it is named in a warning.
func TestEBPFSectionOutsideItsModeWarns(t *testing.T) {
	cases := []struct {
		doc  string
		want string // "" for no ebpf warning
	}{
		{doc: "mode: nftables\nebpf: {pinPath: /p, interfaces: [eth0]}\n", want: "ebpf.interfaces, ebpf.pinPath have no effect in mode nftables"},
		{doc: "ebpf: {cgroupPath: /c}\n", want: "ebpf.cgroupPath has no effect in mode iptables"},
		{doc: "mode: ebpf\nebpf: {pinPath: /p, interfaces: [eth0], cgroupPath: /c}\n"},
		{doc: "mode: nftables\n"},
	}
	for _, tc := range cases {
		_, warnings, err := unsupportedFields(loadConfig(t, v1alpha2Header+tc.doc))
		if err != nil {
			t.Fatalf("%q: %v", tc.doc, err)
		}
		var got []string
		for _, w := range warnings {
			if strings.Contains(w, "ebpf.") {
				got = append(got, w)
			}
		}
		switch {
		case tc.want == "" && len(got) > 0:
			t.Errorf("%q: warnings %q, want none about ebpf", tc.doc, got)
		case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
			t.Errorf("%q: warnings %q, want one saying %q", tc.doc, got, tc.want)
		}
	}
}
