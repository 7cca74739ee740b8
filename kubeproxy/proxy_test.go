package kubeproxy

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/backends/nft"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/config"
	"github.com/kpng/kpng/internal/logtest"
	"github.com/kpng/kpng/source/file"
)

var update = flag.Bool("update", false, "rewrite the golden files")

const (
	v1alpha1Header = "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n"
	v1alpha2Header = "apiVersion: kubeproxy.config.k8s.io/v1alpha2\nkind: KubeProxyConfiguration\n"
)

// kpngBackends are kpng's backends, as kpng runs them: nftables by nft,
// iptables by iptables.
func kpngBackends() map[config.ProxyMode]backend.Registration {
	nft, _ := backend.Lookup("nft")
	ipt, _ := backend.Lookup("iptables")
	return map[config.ProxyMode]backend.Registration{config.ProxyModeNFTables: nft, config.ProxyModeIPTables: ipt}
}

// testProxy is kpng's proxy with deps, its modes run by backends
// (kpngBackends when nil).
func testProxy(deps proxyDeps, backends map[config.ProxyMode]backend.Registration) *Proxy {
	if backends == nil {
		backends = kpngBackends()
	}
	return &Proxy{Name: "kpng", Backends: backends, deps: &deps}
}

// withPlugin runs both modes with plugin, named as kpng's backends.
func withPlugin(plugin backend.Plugin) map[config.ProxyMode]backend.Registration {
	reg := func(name string) backend.Registration {
		return backend.Registration{Name: name, New: func() backend.Plugin { return plugin }}
	}
	return map[config.ProxyMode]backend.Registration{config.ProxyModeNFTables: reg("nft"), config.ProxyModeIPTables: reg("iptables")}
}

// testRoot is the command of p (with klog's -v and --vmodule).
func testRoot(p *Proxy) *cobra.Command { return NewCommand(p) }

// failingProxy is kpng's proxy for tests that must stop before running
// anything: before a source, host set-up or backend is opened.
func failingProxy(t *testing.T) *Proxy {
	return testProxy(failingDeps(t), nil)
}

// failingDeps are deps for tests that must stop before running anything.
func failingDeps(t *testing.T) proxyDeps {
	return proxyDeps{
		source: func(*config.KubeProxyConfiguration, string, string) (cluster.Stage, error) {
			t.Error("unexpected source")
			return nil, errors.New("no source")
		},
		setupHost: func(context.Context, *config.KubeProxyConfiguration) error {
			t.Error("unexpected host setup")
			return nil
		},
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runCommand(ctx context.Context, root *cobra.Command, args ...string) error {
	root.SetArgs(args)
	root.SetOut(io.Discard)
	return root.ExecuteContext(ctx)
}

// resolved runs kpng with args plus --write-config-to, and loads what it
// wrote: the configuration kpng would run with.
func resolved(t *testing.T, args ...string) *config.KubeProxyConfiguration {
	t.Helper()
	out := filepath.Join(t.TempDir(), "out.yaml")
	if err := runCommand(context.Background(), testRoot(failingProxy(t)), append(args, "--write-config-to", out)...); err != nil {
		t.Fatalf("kpng %q: %v", args, err)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	l, err := config.Load(data)
	if err != nil {
		t.Fatalf("the written configuration does not load: %v\n%s", err, data)
	}
	return l.Config
}

func TestProxyFlagsOverrideTheFile(t *testing.T) {
	file := writeFile(t, "kp.yaml", v1alpha1Header+`mode: nftables
hostnameOverride: from-file
clusterCIDR: 10.0.0.0/8
nodePortAddresses: [192.0.2.0/24]
featureGates: {HPAScaleToZero: true, AllBeta: true}
logging: {verbosity: 2, vmodule: [{filePattern: file, verbosity: 3}]}
nftables: {syncPeriod: 20s, minSyncPeriod: 2s, masqueradeAll: true}
conntrack: {maxPerCore: 7}
`)
	cases := []struct {
		name  string
		args  []string
		check func(c *config.KubeProxyConfiguration) string
	}{
		{name: "without flags the file is used", check: func(c *config.KubeProxyConfiguration) string {
			if c.Mode != config.ProxyModeNFTables || c.HostnameOverride != "from-file" || c.SyncPeriod != 20*time.Second ||
				c.MinSyncPeriod != 2*time.Second || !c.Linux.MasqueradeAll || c.Linux.Conntrack.MaxPerCore != 7 ||
				!slices.Equal(c.DetectLocal.ClusterCIDRs, []string{"10.0.0.0/8"}) || c.Logging.Verbosity != 2 {
				return "file values lost"
			}
			return ""
		}},
		{name: "an explicit false overrides the file's true", args: []string{"--masquerade-all=false"}, check: func(c *config.KubeProxyConfiguration) string {
			if c.Linux.MasqueradeAll {
				return "masqueradeAll still true"
			}
			return ""
		}},
		{name: "the hostname is trimmed and lower-cased", args: []string{"--hostname-override", "  Node-A "}, check: func(c *config.KubeProxyConfiguration) string {
			if c.HostnameOverride != "node-a" {
				return "hostnameOverride = " + c.HostnameOverride
			}
			return ""
		}},
		{name: "iptables sync flags apply in nftables mode", args: []string{"--iptables-sync-period", "1m", "--iptables-min-sync-period", "0s"}, check: func(c *config.KubeProxyConfiguration) string {
			if c.SyncPeriod != time.Minute || c.MinSyncPeriod != 0 {
				return "sync periods not overridden"
			}
			return ""
		}},
		{name: "ipvs sync flags do not apply in nftables mode", args: []string{"--ipvs-sync-period", "1m"}, check: func(c *config.KubeProxyConfiguration) string {
			if c.SyncPeriod != 20*time.Second {
				return "syncPeriod changed by an ipvs flag"
			}
			return ""
		}},
		{name: "cluster-cidr is split on commas", args: []string{"--cluster-cidr", "10.1.0.0/16,fd00::/64"}, check: func(c *config.KubeProxyConfiguration) string {
			if !slices.Equal(c.DetectLocal.ClusterCIDRs, []string{"10.1.0.0/16", "fd00::/64"}) {
				return "clusterCIDRs not replaced"
			}
			return ""
		}},
		{name: "a list flag replaces the file's list", args: []string{"--nodeport-addresses", "primary"}, check: func(c *config.KubeProxyConfiguration) string {
			if !slices.Equal(c.NodePortAddresses, []string{"primary"}) {
				return "nodePortAddresses not replaced"
			}
			return ""
		}},
		{name: "bind-address sets nodeIPOverride", args: []string{"--bind-address", "192.0.2.7"}, check: func(c *config.KubeProxyConfiguration) string {
			if !slices.Equal(c.NodeIPOverride, []string{"192.0.2.7"}) {
				return "nodeIPOverride not set"
			}
			return ""
		}},
		{name: "feature gates are merged, the flag winning", args: []string{"--feature-gates", "AllBeta=false,LoggingAlphaOptions=true"}, check: func(c *config.KubeProxyConfiguration) string {
			if !c.FeatureGates["HPAScaleToZero"] || c.FeatureGates["AllBeta"] || !c.FeatureGates["LoggingAlphaOptions"] {
				return "gates not merged"
			}
			return ""
		}},
		{name: "the root's -v overrides logging.verbosity, --vmodule is added", args: []string{"-v", "5", "--vmodule", "proxy=4"}, check: func(c *config.KubeProxyConfiguration) string {
			if c.Logging.Verbosity != 5 || len(c.Logging.VModule) != 2 || c.Logging.VModule[0].FilePattern != "proxy" {
				return "logging flags not applied"
			}
			return ""
		}},
		{name: "conntrack flags override", args: []string{"--conntrack-max-per-core", "0", "--conntrack-tcp-timeout-established", "1h"}, check: func(c *config.KubeProxyConfiguration) string {
			if c.Linux.Conntrack.MaxPerCore != 0 || c.Linux.Conntrack.TCPEstablishedTimeout != time.Hour {
				return "conntrack not overridden"
			}
			return ""
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--config", file}, tc.args...)
			if msg := tc.check(resolved(t, args...)); msg != "" {
				t.Errorf("kpng %q: %s", args, msg)
			}
		})
	}
}

// TestProxyModeFlagPicksTheV1Alpha1Sections checks that --proxy-mode, not
// the file's mode, selects the v1alpha1 section whose syncPeriod,
// minSyncPeriod and masqueradeAll are used, as kube-proxy reads the section
// of the mode it runs in.
func TestProxyModeFlagPicksTheV1Alpha1Sections(t *testing.T) {
	t.Run("nftables.masqueradeAll of a file without mode", func(t *testing.T) {
		file := writeFile(t, "kp.yaml", v1alpha1Header+"nftables: {masqueradeAll: true, syncPeriod: 20s}\n")
		c := resolved(t, "--config", file, "--proxy-mode", "nftables")
		if c.Mode != config.ProxyModeNFTables || !c.Linux.MasqueradeAll || c.SyncPeriod != 20*time.Second {
			t.Errorf("mode %q, masqueradeAll %v, syncPeriod %v; want nftables, true, 20s", c.Mode, c.Linux.MasqueradeAll, c.SyncPeriod)
		}
	})
	t.Run("a non-default iptables.syncPeriod is an error in nftables mode, not used", func(t *testing.T) {
		file := writeFile(t, "kp.yaml", v1alpha1Header+"iptables: {syncPeriod: 10s}\n")
		err := runCommand(context.Background(), testRoot(failingProxy(t)), "--config", file, "--proxy-mode", "nftables", "--write-config-to", filepath.Join(t.TempDir(), "out"))
		if err == nil {
			t.Fatal("succeeded, want an error")
		}
		for _, s := range []string{file, "iptables.syncPeriod", "nftables.syncPeriod", "command line"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %q", err, s)
			}
		}
	})
	t.Run("the mode flag is applied before the per-mode sync flags", func(t *testing.T) {
		file := writeFile(t, "kp.yaml", v1alpha1Header+"mode: nftables\n")
		c := resolved(t, "--config", file, "--ipvs-sync-period", "1m", "--proxy-mode", "ipvs", "--iptables-sync-period", "2m")
		if c.Mode != config.ProxyModeIPVS || c.SyncPeriod != time.Minute {
			t.Errorf("mode %q, syncPeriod %v; want ipvs, 1m (--ipvs-sync-period)", c.Mode, c.SyncPeriod)
		}
	})
	t.Run("an explicit empty --proxy-mode is the iptables section", func(t *testing.T) {
		file := writeFile(t, "kp.yaml", v1alpha1Header+"mode: nftables\niptables: {syncPeriod: 10s}\n")
		c := resolved(t, "--config", file, "--proxy-mode=")
		if c.Mode != "" || c.SyncPeriod != 10*time.Second {
			t.Errorf("mode %q, syncPeriod %v; want empty, 10s", c.Mode, c.SyncPeriod)
		}
	})
}

// TestProxyHostnameOverrideFromTheFile checks that the file's
// hostnameOverride is normalised as the flag's is (trimmed, lower-cased), as
// kube-proxy normalises both, and that a blank one is an error naming the
// field (a warning and the host name with configHardFail false).
func TestProxyHostnameOverrideFromTheFile(t *testing.T) {
	for version, header := range map[string]string{"v1alpha1": v1alpha1Header, "v1alpha2": v1alpha2Header} {
		t.Run("trimmed and lower-cased/"+version, func(t *testing.T) {
			file := writeFile(t, "kp.yaml", header+"hostnameOverride: \"  Node-A\\t\"\n")
			if c := resolved(t, "--config", file); c.HostnameOverride != "node-a" {
				t.Errorf("hostnameOverride = %q, want node-a", c.HostnameOverride)
			}
		})
		t.Run("blank is an error naming the field/"+version, func(t *testing.T) {
			file := writeFile(t, "kp.yaml", header+"hostnameOverride: \"  \"\n")
			err := runCommand(context.Background(), testRoot(failingProxy(t)), "--config", file, "--write-config-to", filepath.Join(t.TempDir(), "out"))
			if err == nil {
				t.Fatal("succeeded, want an error")
			}
			for _, s := range []string{file, "hostnameOverride", "blank"} {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
	t.Run("blank with configHardFail false falls back to the host name", func(t *testing.T) {
		file := writeFile(t, "kp.yaml", v1alpha2Header+"configHardFail: false\nhostnameOverride: \"  \"\n")
		if c := resolved(t, "--config", file); c.HostnameOverride != "" {
			t.Errorf("hostnameOverride = %q, want its default (empty: the host name)", c.HostnameOverride)
		}
	})
	t.Run("an empty --hostname-override leaves the file's, as kube-proxy", func(t *testing.T) {
		file := writeFile(t, "kp.yaml", v1alpha1Header+"hostnameOverride: node-b\n")
		if c := resolved(t, "--config", file, "--hostname-override="); c.HostnameOverride != "node-b" {
			t.Errorf("hostnameOverride = %q, want node-b", c.HostnameOverride)
		}
	})
	t.Run("the flag wins over the file", func(t *testing.T) {
		file := writeFile(t, "kp.yaml", v1alpha1Header+"hostnameOverride: \"  \"\n")
		if c := resolved(t, "--config", file, "--hostname-override", "Node-C"); c.HostnameOverride != "node-c" {
			t.Errorf("hostnameOverride = %q, want node-c", c.HostnameOverride)
		}
	})
}

// TestProxyWithoutConfigUsesKubeProxyDefaultsAndFlags: without --config,
// kube-proxy runs with v1alpha1's defaults (bindAddressHardFail false,
// iptables.localhostNodePorts true, ...), and so does kpng.
func TestProxyWithoutConfigUsesKubeProxyDefaultsAndFlags(t *testing.T) {
	c := resolved(t, "--proxy-mode", "nftables", "--kubeconfig", "/k")
	want, err := config.DefaultV1Alpha1()
	if err != nil {
		t.Fatal(err)
	}
	if want.BindAddressHardFail || !want.IPTables.LocalhostNodePorts {
		t.Errorf("not v1alpha1's defaults: bindAddressHardFail %t, localhostNodePorts %t", want.BindAddressHardFail, want.IPTables.LocalhostNodePorts)
	}
	want.Mode, want.ClientConnection.Kubeconfig = config.ProxyModeNFTables, "/k"
	// But for minSyncPeriod, which nothing set: the backend's default
	// (TestMinSyncPeriodUnsetTakesTheBackendDefault).
	want.MinSyncPeriod = nft.DefaultConfig().MinSyncPeriod
	if !equality.Semantic.DeepEqual(c, want) {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
}

func TestProxyFlagErrors(t *testing.T) {
	file := writeFile(t, "kp.yaml", v1alpha1Header)
	cases := []struct {
		name    string
		args    []string
		wantErr []string
	}{
		{name: "a blank hostname override", args: []string{"--hostname-override", "  "}, wantErr: []string{"hostname-override"}},
		{name: "a bad bind address", args: []string{"--bind-address", "nope"}, wantErr: []string{"bind-address"}},
		{name: "a flag value the configuration rejects", args: []string{"--iptables-masquerade-bit", "40"}, wantErr: []string{"iptables.masqueradeBit", "configHardFail is true"}},
		{name: "a bad duration", args: []string{"--iptables-sync-period", "soon"}, wantErr: []string{"iptables-sync-period"}},
		{name: "an unknown flag", args: []string{"--no-such-flag"}, wantErr: []string{"no-such-flag"}},
		{name: "a positional argument", args: []string{"extra"}, wantErr: []string{"extra"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--config", file, "--write-config-to", filepath.Join(t.TempDir(), "out")}, tc.args...)
			err := runCommand(context.Background(), testRoot(failingProxy(t)), args...)
			if err == nil {
				t.Fatal("succeeded, want an error")
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

func TestConfigHardFail(t *testing.T) {
	bad := "mode: nftables\nsyncPeriod: -1s\nlinux: {oomScoreAdj: 5000}\n"
	t.Run("true: an invalid file is an error naming the fields and the file", func(t *testing.T) {
		file := writeFile(t, "hard.yaml", v1alpha2Header+bad)
		err := runCommand(context.Background(), testRoot(failingProxy(t)), "--config", file, "--write-config-to", filepath.Join(t.TempDir(), "out"))
		if err == nil {
			t.Fatal("succeeded, want an error")
		}
		for _, s := range []string{file, "syncPeriod", "linux.oomScoreAdj", "configHardFail is true"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %q", err, s)
			}
		}
	})
	t.Run("true: a strictness error is fatal", func(t *testing.T) {
		file := writeFile(t, "strict.yaml", v1alpha2Header+"bogus: 1\n")
		err := runCommand(context.Background(), testRoot(failingProxy(t)), "--config", file, "--write-config-to", filepath.Join(t.TempDir(), "out"))
		if err == nil || !strings.Contains(err.Error(), "bogus") {
			t.Fatalf("err = %v, want one naming bogus", err)
		}
	})
	t.Run("true: a value of the wrong type is an error naming the field", func(t *testing.T) {
		file := writeFile(t, "types.yaml", v1alpha2Header+"syncPeriod: abc\nlinux: {conntrack: {maxPerCore: x}}\n")
		err := runCommand(context.Background(), testRoot(failingProxy(t)), "--config", file, "--write-config-to", filepath.Join(t.TempDir(), "out"))
		if err == nil {
			t.Fatal("succeeded, want an error")
		}
		for _, s := range []string{file, `"syncPeriod"`, `"linux.conntrack.maxPerCore"`} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %s", err, s)
			}
		}
	})
	t.Run("false: a value of the wrong type gets its default, the rest is kept", func(t *testing.T) {
		file := writeFile(t, "soft-types.yaml", v1alpha2Header+"configHardFail: false\nmode: nftables\nsyncPeriod: abc\nlinux: {conntrack: {maxPerCore: x, min: 5}}\n")
		c := resolved(t, "--config", file)
		d := config.Default()
		if c.SyncPeriod != d.SyncPeriod || c.Linux.Conntrack.MaxPerCore != d.Linux.Conntrack.MaxPerCore || c.Linux.Conntrack.Min != 5 || c.Mode != config.ProxyModeNFTables {
			t.Errorf("got syncPeriod %v, maxPerCore %d, min %d, mode %q", c.SyncPeriod, c.Linux.Conntrack.MaxPerCore, c.Linux.Conntrack.Min, c.Mode)
		}
	})
	t.Run("false: invalid fields get their defaults, the rest is kept", func(t *testing.T) {
		file := writeFile(t, "soft.yaml", v1alpha2Header+"configHardFail: false\nbogus: 1\n"+bad)
		c := resolved(t, "--config", file)
		d := config.Default()
		if c.SyncPeriod != d.SyncPeriod || c.Linux.OOMScoreAdj != d.Linux.OOMScoreAdj || c.Mode != config.ProxyModeNFTables || c.ConfigHardFail {
			t.Errorf("got syncPeriod %v, oomScoreAdj %d, mode %q, configHardFail %v", c.SyncPeriod, c.Linux.OOMScoreAdj, c.Mode, c.ConfigHardFail)
		}
	})
}

// TestWriteConfigToGolden checks what --write-config-to writes: the real
// fixtures of config/testdata (kubeadm's, kind's, every field) as the config
// package's golden files, through both command forms, and the resolved
// file+flags as testdata/proxy goldens.
func TestWriteConfigToGolden(t *testing.T) {
	fixtures, err := filepath.Glob("../config/testdata/v1alpha1/*.yaml")
	if err != nil || len(fixtures) < 3 {
		t.Fatalf("found %d fixtures (%v), want kubeadm's, kind's and every-field", len(fixtures), err)
	}
	for _, in := range fixtures {
		name := strings.TrimSuffix(filepath.Base(in), ".yaml")
		want, err := os.ReadFile(filepath.Join("../config/testdata/golden", name+".v1alpha2.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.yaml")
			args := []string{"--config", in, "--write-config-to", out}
			if err := runCommand(context.Background(), testRoot(failingProxy(t)), args...); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("kpng %q wrote:\n%s\nwant config/testdata/golden/%s.v1alpha2.yaml", args, got, name)
			}
		})
	}

	// Flags are part of what is written.
	cases := []struct {
		golden string
		args   []string
	}{
		{golden: "kubeadm-nftables-flags.v1alpha2.yaml", args: []string{"--config", "../config/testdata/v1alpha1/kubeadm-1.36-pod-subnet.yaml",
			"--proxy-mode", "nftables", "--masquerade-all", "--cluster-cidr", "10.244.0.0/16", "--iptables-min-sync-period", "250ms", "--hostname-override", "Node-1"}},
		{golden: "no-file-flags.v1alpha2.yaml", args: []string{"--proxy-mode", "nftables", "--kubeconfig", "/etc/kpng/kubeconfig", "--nodeport-addresses", "primary",
			"--conntrack-max-per-core", "0", "--metrics-bind-address", "0.0.0.0:10249"}},
	}
	for _, tc := range cases {
		t.Run(tc.golden, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "out.yaml")
			args := append(slices.Clone(tc.args), "--write-config-to", out)
			if err := runCommand(context.Background(), testRoot(failingProxy(t)), args...); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "proxy", tc.golden)
			if *update {
				if err := os.MkdirAll(filepath.Dir(golden), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./kubeproxy -run TestWriteConfigToGolden -update)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("kpng %q wrote (run with -update if intended):\n%s", args, got)
			}
		})
	}
}

func TestBackendForMode(t *testing.T) {
	cases := []struct {
		mode    config.ProxyMode
		want    string
		wantErr string
	}{
		{mode: config.ProxyModeNFTables, want: "nft"},
		{mode: config.ProxyModeIPTables, want: "iptables"},
		{mode: "", want: "iptables"},
		{mode: config.ProxyModeIPVS, wantErr: "no ipvs backend"},
		{mode: config.ProxyModeKernelspace, wantErr: "Windows"},
		{mode: "userspace", wantErr: "unknown proxy mode"},
	}
	p := testProxy(proxyDeps{}, nil)
	for _, tc := range cases {
		reg, err := p.backendFor(tc.mode)
		if reg.Name != tc.want || (err == nil) != (tc.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("backendFor(%q) = %q, %v; want %q, error containing %q", tc.mode, reg.Name, err, tc.want, tc.wantErr)
		}
	}
	nftOnly := testProxy(proxyDeps{}, map[config.ProxyMode]backend.Registration{config.ProxyModeNFTables: kpngBackends()[config.ProxyModeNFTables]})
	_, err := nftOnly.backendFor("")
	if err == nil || !strings.Contains(err.Error(), "mode iptables: kpng has no backend for it (it runs mode nftables)") {
		t.Errorf("backendFor a mode without a backend: %v", err)
	}
}

// fakePlugin is a backend with the flags its test gives it; it records the
// flags it was opened with and the states it was asked to sync.
type fakePlugin struct {
	flagNames []string
	values    map[string]*string
	bit       int
	hasBit    bool

	mu     sync.Mutex
	env    backend.Env
	opened map[string]string
	syncs  chan *backend.State
	opts   backend.Options
	// cleaned counts Cleanup calls; cleanupErr is their answer.
	cleaned    int
	cleanupErr error
}

func newFakePlugin(flags ...string) *fakePlugin {
	return &fakePlugin{flagNames: flags, values: map[string]*string{}, syncs: make(chan *backend.State, 100)}
}

func (p *fakePlugin) BindFlags(fs *flag.FlagSet) {
	for _, name := range p.flagNames {
		if name == "masquerade-bit" { // a typed flag, which rejects bad values
			p.hasBit = true
			fs.IntVar(&p.bit, name, 14, "")
			continue
		}
		p.values[name] = fs.String(name, "backend-default", "")
	}
}

func (p *fakePlugin) Open(_ context.Context, env backend.Env) (backend.Backend, backend.Options, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.env = env
	p.opened = map[string]string{}
	for name, v := range p.values {
		p.opened[name] = *v
	}
	return p, backend.Options{MinSyncPeriod: time.Hour, ResyncPeriod: time.Hour, RetryPeriod: 3 * time.Second}, nil
}

func (p *fakePlugin) Cleanup(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cleaned++
	return p.cleanupErr
}

func (p *fakePlugin) Sync(_ context.Context, state *backend.State, _ backend.Changes) error {
	copied := *state
	p.syncs <- &copied
	return nil
}

// nftFlags are the flags the nft backend has (kube-proxy's names).
var nftFlags = []string{"table", "nodeport-addresses", "masquerade-all", "cluster-cidr", "detect-local-mode", "pod-bridge-interface",
	"pod-interface-name-prefix", "min-sync-period", "sync-period", "healthz-bind-address", "metrics-bind-address"}

func TestConfigureBackend(t *testing.T) {
	load := func(doc string) *config.KubeProxyConfiguration {
		t.Helper()
		l, err := config.Load([]byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		return l.Config
	}
	t.Run("nftables mode sets the nft flags from the configuration", func(t *testing.T) {
		p := newFakePlugin(nftFlags...)
		fs := pflag.NewFlagSet("to-nft", pflag.ContinueOnError)
		fs.AddGoFlagSet(PluginFlags("test", p))
		c := load(v1alpha2Header + "mode: nftables\nlinux: {masqueradeAll: true}\ndetectLocal: {clusterCIDRs: [10.0.0.0/8, fd00::/48]}\nnodePortAddresses: [primary]\nhealthzBindAddress: 127.0.0.1:1234\nminSyncPeriod: 3s\n")
		set, warnings, err := configureBackend("nft", fs, c)
		if err != nil || len(warnings) > 0 {
			t.Fatalf("configureBackend: %v, warnings %q", err, warnings)
		}
		want := map[string]string{
			"table": "backend-default", "nodeport-addresses": "primary", "masquerade-all": "true", "cluster-cidr": "10.0.0.0/8,fd00::/48",
			"detect-local-mode": "ClusterCIDR", "pod-bridge-interface": "backend-default", "pod-interface-name-prefix": "backend-default",
			"min-sync-period": "3s", "sync-period": "30s", "healthz-bind-address": "127.0.0.1:1234", "metrics-bind-address": "",
		}
		for name, v := range want {
			if got := *p.values[name]; got != v {
				t.Errorf("--%s = %q, want %q", name, got, v)
			}
		}
		if !slices.Contains(set, "--masquerade-all=true") {
			t.Errorf("set = %q", set)
		}
	})
	t.Run("iptables mode also sets the masquerade bit and localhost node ports", func(t *testing.T) {
		p := newFakePlugin(append(slices.Clone(nftFlags), "masquerade-bit", "localhost-nodeports")...)
		fs := pflag.NewFlagSet("to-iptables", pflag.ContinueOnError)
		fs.AddGoFlagSet(PluginFlags("test", p))
		if _, _, err := configureBackend("iptables", fs, load(v1alpha1Header+"iptables: {masqueradeBit: 3}\n")); err != nil {
			t.Fatal(err)
		}
		if p.bit != 3 || *p.values["localhost-nodeports"] != "true" {
			t.Errorf("masquerade-bit %d, localhost-nodeports %q; want 3 and v1alpha1's default true", p.bit, *p.values["localhost-nodeports"])
		}
	})
	t.Run("a setting the backend lacks is an error with configHardFail", func(t *testing.T) {
		p := newFakePlugin(nftFlags...)
		fs := pflag.NewFlagSet("to-nft", pflag.ContinueOnError)
		fs.AddGoFlagSet(PluginFlags("test", p))
		_, _, err := configureBackend("nft", fs, load(v1alpha2Header+"mode: nftables\nnftables: {masqueradeBit: 5}\n"))
		if err == nil || !strings.Contains(err.Error(), "nftables.masqueradeBit") || !strings.Contains(err.Error(), "--masquerade-bit") {
			t.Errorf("err = %v, want one naming nftables.masqueradeBit and --masquerade-bit", err)
		}
	})
	t.Run("a setting the backend lacks is a warning without configHardFail", func(t *testing.T) {
		p := newFakePlugin(nftFlags...)
		fs := pflag.NewFlagSet("to-nft", pflag.ContinueOnError)
		fs.AddGoFlagSet(PluginFlags("test", p))
		_, warnings, err := configureBackend("nft", fs, load(v1alpha2Header+"configHardFail: false\nmode: nftables\nnftables: {masqueradeBit: 5}\n"))
		if err != nil || len(warnings) != 1 || !strings.Contains(warnings[0], "nftables.masqueradeBit") {
			t.Errorf("err %v, warnings %q", err, warnings)
		}
	})
	t.Run("a default setting the backend lacks is no problem, nor are the runner's", func(t *testing.T) {
		p := newFakePlugin("table")
		fs := pflag.NewFlagSet("to-x", pflag.ContinueOnError)
		fs.AddGoFlagSet(PluginFlags("test", p))
		_, warnings, err := configureBackend("x", fs, load(v1alpha2Header+"mode: nftables\nsyncPeriod: 1m\n"))
		if err != nil || len(warnings) > 0 {
			t.Errorf("err %v, warnings %q", err, warnings)
		}
	})
	t.Run("a value the backend rejects is an error", func(t *testing.T) {
		p := newFakePlugin("masquerade-bit")
		fs := pflag.NewFlagSet("to-x", pflag.ContinueOnError)
		fs.AddGoFlagSet(PluginFlags("test", p))
		c := load(v1alpha2Header + "mode: iptables\n")
		fs.Lookup("masquerade-bit").Value = rejectingValue{}
		_, _, err := configureBackend("x", fs, c)
		if err == nil || !strings.Contains(err.Error(), "rejects --masquerade-bit") {
			t.Errorf("err = %v", err)
		}
	})
}

type rejectingValue struct{}

func (rejectingValue) String() string   { return "" }
func (rejectingValue) Set(string) error { return errors.New("no") }
func (rejectingValue) Type() string     { return "int" }

// freePort returns a loopback port that was free a moment ago.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// TestProxyRunsTheModesBackend runs kpng proxy end to end in process, with
// the file source standing in for the API server and a fake backend: the
// mode picks the backend, the configuration reaches its flags and the
// runner, the node is hostnameOverride, the view reaches Sync, host set-up
// runs once, and /configz serves the configuration.
func TestProxyRunsTheModesBackend(t *testing.T) {
	metricsAddr := freePort(t)
	cfgFile := writeFile(t, "kp.yaml", v1alpha1Header+`mode: nftables
hostnameOverride: node-1
clusterCIDR: 10.244.0.0/16
nftables: {minSyncPeriod: 2s, syncPeriod: 45s, masqueradeAll: true}
metricsBindAddress: `+metricsAddr+"\n")
	plugin := newFakePlugin(nftFlags...)
	var looked []string
	var setups int
	var sourceNode string
	backends := map[config.ProxyMode]backend.Registration{}
	for mode, name := range map[config.ProxyMode]string{config.ProxyModeNFTables: "nft", config.ProxyModeIPTables: "iptables"} {
		backends[mode] = backend.Registration{Name: name, New: func() backend.Plugin { looked = append(looked, name); return plugin }}
	}
	deps := proxyDeps{
		source: func(c *config.KubeProxyConfiguration, master, node string) (cluster.Stage, error) {
			sourceNode = node
			return &file.Source{Path: "../examples/cluster.yaml"}, nil
		},
		setupHost: func(context.Context, *config.KubeProxyConfiguration) error { setups++; return nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- runCommand(ctx, testRoot(testProxy(deps, backends)), "--config", cfgFile, "--master", "https://192.0.2.1:6443")
	}()

	var state *backend.State
	select {
	case state = <-plugin.syncs:
	case err := <-done:
		t.Fatalf("kpng proxy ended before syncing: %v", err)
	}

	// /configz answers while the proxy runs, in kube-proxy's shape (v1alpha1).
	resp, err := http.Get("http://" + metricsAddr + "/configz")
	if err != nil {
		t.Fatalf("GET /configz: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var configz map[string]json.RawMessage
	if err := json.Unmarshal(body, &configz); err != nil {
		t.Fatalf("/configz: %v\n%s", err, body)
	}
	served, err := config.Load(configz["kubeproxy.config.k8s.io"])
	if err != nil {
		t.Fatalf("/configz does not hold a configuration: %v\n%s", err, body)
	}
	if served.APIVersion != "kubeproxy.config.k8s.io/v1alpha1" || served.Config.Mode != config.ProxyModeNFTables || served.Config.SyncPeriod != 45*time.Second {
		t.Errorf("/configz served %s", body)
	}

	cancel()
	if err := <-done; err != nil {
		t.Fatalf("kpng proxy: %v", err)
	}
	if !slices.Equal(looked, []string{"nft"}) || setups != 1 || sourceNode != "node-1" {
		t.Errorf("looked up %q, host set up %d times, source node %q", looked, setups, sourceNode)
	}
	if plugin.env.NodeName != "node-1" || state.NodeName != "node-1" || len(state.Services) == 0 {
		t.Errorf("opened for %q; synced node %q with %d services", plugin.env.NodeName, state.NodeName, len(state.Services))
	}
	for name, want := range map[string]string{"masquerade-all": "true", "cluster-cidr": "10.244.0.0/16", "min-sync-period": "2s", "sync-period": "45s", "metrics-bind-address": ""} {
		if got := plugin.opened[name]; got != want {
			t.Errorf("backend opened with --%s=%q, want %q", name, got, want)
		}
	}
}

func TestProxyCleanup(t *testing.T) {
	file := writeFile(t, "kp.yaml", v1alpha2Header+"mode: nftables\n")
	for _, failing := range []bool{false, true} {
		t.Run(fmt.Sprint("failing=", failing), func(t *testing.T) {
			plugin := newFakePlugin(nftFlags...)
			if failing {
				plugin.cleanupErr = errors.New("injected cleanup failure")
			}
			deps := failingDeps(t)
			others := 0
			deps.cleanupOthers = func(context.Context) error { others++; return nil }
			err := runCommand(context.Background(), testRoot(testProxy(deps, withPlugin(plugin))), "--config", file, "--cleanup")
			switch {
			case plugin.cleaned != 1:
				t.Errorf("the backend's Cleanup ran %d times, want once", plugin.cleaned)
			case failing && (err == nil || !strings.Contains(err.Error(), "injected cleanup failure")):
				t.Errorf("err = %v, want the backend's failure", err)
			case failing && others != 0:
				t.Errorf("the other proxies' rules were removed after the backend's cleanup failed")
			case !failing && (err != nil || others != 1):
				t.Errorf("err = %v, other proxies cleaned %d times; want nil and once", err, others)
			}
		})
	}
}

func TestConfigureBackendUsesAliases(t *testing.T) {
	p := newFakePlugin("iptables-masquerade-bit", "iptables-localhost-nodeports")
	fs := pflag.NewFlagSet("to-x", pflag.ContinueOnError)
	fs.AddGoFlagSet(PluginFlags("test", p))
	c := config.Default()
	c.Mode, c.IPTables.MasqueradeBit, c.IPTables.LocalhostNodePorts = config.ProxyModeIPTables, 9, true
	set, warnings, err := configureBackend("x", fs, c)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("err %v, warnings %q", err, warnings)
	}
	if *p.values["iptables-masquerade-bit"] != "9" || *p.values["iptables-localhost-nodeports"] != "true" {
		t.Errorf("set %q", set)
	}
}

// TestRealBackendsTakeTheRealConfigurations maps the real fixtures onto the
// real nft and iptables backends compiled into kpng, in both modes: every
// setting finds its flag, every value is accepted, and the backend opens
// (in --dry-run, so without a kernel) with those values.
func TestRealBackendsTakeTheRealConfigurations(t *testing.T) {
	fixtures, err := filepath.Glob("../config/testdata/v1alpha1/*.yaml")
	if err != nil || len(fixtures) < 3 {
		t.Fatalf("found %d fixtures (%v)", len(fixtures), err)
	}
	for _, in := range fixtures {
		for _, mode := range []config.ProxyMode{config.ProxyModeNFTables, config.ProxyModeIPTables} {
			t.Run(filepath.Base(in)+"/"+string(mode), func(t *testing.T) {
				data, err := os.ReadFile(in)
				if err != nil {
					t.Fatal(err)
				}
				l, err := config.Load(data)
				if err != nil {
					t.Fatal(err)
				}
				c := l.Config
				c.Mode = mode
				reg, err := testProxy(proxyDeps{}, nil).backendFor(mode)
				if err != nil {
					t.Fatal(err)
				}
				plugin := reg.New()
				fs := pflag.NewFlagSet(reg.Name, pflag.ContinueOnError)
				fs.AddGoFlagSet(PluginFlags(reg.Name, plugin))
				set, warnings, err := configureBackend(reg.Name, fs, c)
				if err != nil || len(warnings) > 0 {
					t.Fatalf("configureBackend: %v, warnings %q", err, warnings)
				}
				if got := fs.Lookup("masquerade-all").Value.String(); got != strconv.FormatBool(c.Linux.MasqueradeAll) {
					t.Errorf("--masquerade-all = %s", got)
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
					t.Errorf("%s rejects the configuration (flags %q): %v", reg.Name, set, err)
				}
			})
		}
	}
}

// TestConfigHardFailFalseWarnsAndRuns runs kpng proxy from a v1alpha2 file
// with configHardFail: false and bad fields: it logs a warning naming each
// (the unknown field included) and runs with their defaults, the good
// fields kept. The same file with configHardFail true does not start.
func TestConfigHardFailFalseWarnsAndRuns(t *testing.T) {
	body := "mode: nftables\nhostnameOverride: node-1\nbogus: 1\nsyncPeriod: -1s\nlinux: {masqueradeAll: true, oomScoreAdj: 5000}\ndetectLocal: {clusterCIDRs: [10.244.0.0/16, nope]}\nmetricsBindAddress: " + freePort(t) + "\n"
	hard := writeFile(t, "hard.yaml", v1alpha2Header+body)
	if err := runCommand(context.Background(), testRoot(failingProxy(t)), "--config", hard); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("configHardFail true: err = %v, want one naming bogus", err)
	}

	soft := writeFile(t, "soft.yaml", v1alpha2Header+"configHardFail: false\n"+body)
	plugin := newFakePlugin(nftFlags...)
	var hostConfig *config.KubeProxyConfiguration
	deps := proxyDeps{
		source: func(*config.KubeProxyConfiguration, string, string) (cluster.Stage, error) {
			return &file.Source{Path: "../examples/cluster.yaml"}, nil
		},
		setupHost: func(_ context.Context, c *config.KubeProxyConfiguration) error { hostConfig = c; return nil },
	}
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- runCommand(ctx, testRoot(testProxy(deps, withPlugin(plugin))), "--config", soft) }()
	select {
	case <-plugin.syncs:
	case err := <-done:
		t.Fatalf("kpng proxy ended before syncing: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("kpng proxy: %v", err)
	}

	d := config.Default()
	if hostConfig.Linux.OOMScoreAdj != d.Linux.OOMScoreAdj || !hostConfig.Linux.MasqueradeAll || hostConfig.DetectLocal.ClusterCIDRs != nil {
		t.Errorf("host set up with oomScoreAdj %d, masqueradeAll %v, clusterCIDRs %q; want the default, the file's true, the default",
			hostConfig.Linux.OOMScoreAdj, hostConfig.Linux.MasqueradeAll, hostConfig.DetectLocal.ClusterCIDRs)
	}
	for name, want := range map[string]string{"sync-period": d.SyncPeriod.String(), "masquerade-all": "true", "cluster-cidr": "backend-default"} {
		if got := plugin.opened[name]; got != want {
			t.Errorf("backend opened with --%s=%q, want %q", name, got, want)
		}
	}
	var warnings []string
	for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
		if e.Message == "Configuration warning" {
			warnings = append(warnings, fmt.Sprint(e.ParameterKVList...))
		}
	}
	joined := strings.Join(warnings, "\n")
	for _, field := range []string{"bogus", "syncPeriod", "linux.oomScoreAdj", "detectLocal.clusterCIDRs[1]"} {
		if !strings.Contains(joined, field) {
			t.Errorf("no configuration warning names %s; warnings:\n%s", field, joined)
		}
	}
}

// TestMetricsServerBindAddressHardFail: with bindAddressHardFail a metrics
// port already in use ends kpng proxy with an error naming the setting;
// without it, the failure is logged and the server retries until the proxy
// stops, as kube-proxy does.
func TestMetricsServerBindAddressHardFail(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	c := config.Default()
	c.MetricsBindAddress = taken.Addr().String()

	c.BindAddressHardFail = true
	if err := serveMetrics(context.Background(), c, nil); err == nil || !strings.Contains(err.Error(), "bindAddressHardFail is true") {
		t.Errorf("bindAddressHardFail true: err = %v, want one naming bindAddressHardFail", err)
	}

	c.BindAddressHardFail = false
	ctx, logged := logtest.Lines(context.Background(), 10)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- serveMetrics(ctx, c, nil) }()
	select {
	case line := <-logged:
		if !strings.Contains(line, "could not bind") {
			t.Errorf("logged %s, want the bind failure", line)
		}
	case err := <-done:
		t.Fatalf("bindAddressHardFail false: serveMetrics returned %v before the proxy stopped", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("bindAddressHardFail false: serveMetrics = %v after the proxy stopped, want nil", err)
	}
}

// TestProxyFeatureGatesReachTheBrain: featureGates AllowServiceExternalIPs
// false, as kube-proxy 1.36, leaves the example's external IP out of the
// view the backend gets; by default it is in.
func TestProxyFeatureGatesReachTheBrain(t *testing.T) {
	for _, tc := range []struct {
		gates string
		want  bool
	}{{"", true}, {"featureGates: {AllowServiceExternalIPs: false}\n", false}} {
		cfgFile := writeFile(t, "kp.yaml", v1alpha1Header+"mode: nftables\nhostnameOverride: node-1\nmetricsBindAddress: \"\"\nhealthzBindAddress: \"\"\n"+tc.gates)
		plugin := newFakePlugin(nftFlags...)
		deps := proxyDeps{
			source: func(*config.KubeProxyConfiguration, string, string) (cluster.Stage, error) {
				return &file.Source{Path: "../examples/cluster.yaml"}, nil
			},
			setupHost: func(context.Context, *config.KubeProxyConfiguration) error { return nil },
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- runCommand(ctx, testRoot(testProxy(deps, withPlugin(plugin))), "--config", cfgFile) }()
		var state *backend.State
		select {
		case state = <-plugin.syncs:
		case err := <-done:
			cancel()
			t.Fatalf("%q: kpng proxy ended before syncing: %v", tc.gates, err)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("%q: kpng proxy: %v", tc.gates, err)
		}
		found := false
		for _, se := range state.Services {
			found = found || slices.Contains(se.Service.ExternalIps, "192.0.2.50")
		}
		if found != tc.want {
			t.Errorf("%q: external IP 192.0.2.50 in the view: %t, want %t", tc.gates, found, tc.want)
		}
	}
}
