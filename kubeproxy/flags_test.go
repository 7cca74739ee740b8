package kubeproxy

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/equality"
	cliflag "k8s.io/component-base/cli/flag"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/config"
)

// kubeProxyFlag is a flag of kube-proxy, as hack/kubeproxyref writes them
// into testdata/kube-proxy-flags.json from kube-proxy's own registration.
type kubeProxyFlag struct {
	Name        string `json:"name"`
	Shorthand   string `json:"shorthand"`
	Type        string `json:"type"`
	Default     string `json:"default"`
	NoOptDefVal string `json:"noOptDefVal"`
	Deprecated  string `json:"deprecated"`
	Hidden      bool   `json:"hidden"`
}

func kubeProxyFlags(t *testing.T) []kubeProxyFlag {
	t.Helper()
	data, err := os.ReadFile("testdata/kube-proxy-flags.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Kubernetes string          `json:"kubernetes"`
		Flags      []kubeProxyFlag `json:"flags"`
	}
	if err := json.Unmarshal(data, &ref); err != nil {
		t.Fatal(err)
	}
	if len(ref.Flags) < 50 || !strings.HasPrefix(ref.Kubernetes, "v1.36.") {
		t.Fatalf("testdata/kube-proxy-flags.json: %d flags of Kubernetes %s, want kube-proxy 1.36's", len(ref.Flags), ref.Kubernetes)
	}
	return ref.Flags
}

// defaultDifferences are the flags whose default, as --help shows it,
// differs from kube-proxy's, and why.
var defaultDifferences = map[string]string{}

// TestProxyTakesEveryKubeProxyFlag compares the flags of a Proxy's command
// with kube-proxy 1.36's: each exists, with the same shorthand, the same
// deprecation, the same way of being given without a value, and the same
// default.
func TestProxyTakesEveryKubeProxyFlag(t *testing.T) {
	ref := kubeProxyFlags(t)
	cmd := NewCommand(failingProxy(t))
	cmd.InitDefaultHelpFlag()
	_ = cmd.LocalFlags() // merges the persistent and global flags, as parsing does
	fs := cmd.Flags()
	name := "kpng"
	for _, want := range ref {
		got := fs.Lookup(want.Name)
		if got == nil {
			t.Errorf("%s has no --%s (kube-proxy: %s)", name, want.Name, want.Type)
			continue
		}
		if got.Shorthand != want.Shorthand {
			t.Errorf("%s --%s: shorthand %q, kube-proxy's %q", name, want.Name, got.Shorthand, want.Shorthand)
		}
		if (got.Deprecated != "") != (want.Deprecated != "") {
			t.Errorf("%s --%s: deprecated %q, kube-proxy's %q", name, want.Name, got.Deprecated, want.Deprecated)
		}
		if got.NoOptDefVal != want.NoOptDefVal {
			t.Errorf("%s --%s: value when given alone %q, kube-proxy's %q", name, want.Name, got.NoOptDefVal, want.NoOptDefVal)
		}
		if why, ok := defaultDifferences[want.Name]; !ok && got.DefValue != want.Default {
			t.Errorf("%s --%s: default %q, kube-proxy's %q", name, want.Name, got.DefValue, want.Default)
		} else if ok && got.DefValue == want.Default {
			t.Errorf("%s --%s: default %q is kube-proxy's now: drop it from defaultDifferences (%s)", name, want.Name, got.DefValue, why)
		}
	}
	var extra []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !slices.ContainsFunc(ref, func(r kubeProxyFlag) bool { return r.Name == f.Name }) {
			extra = append(extra, f.Name)
		}
	})
	t.Logf("%s: flags kube-proxy does not have: %v", name, extra)
}

// proxyArgs parses args as `kpng proxy` does and resolves the configuration.
func proxyArgs(t *testing.T, args ...string) (*cfg, []string, error) {
	t.Helper()
	fs := pflag.NewFlagSet("proxy", pflag.ContinueOnError)
	flags := AddFlags(fs)
	fs.SetNormalizeFunc(cliflag.WordSepNormalizeFunc)
	if err := fs.Parse(args); err != nil {
		return nil, nil, err
	}
	p := testProxy(proxyDeps{}, nil)
	return resolveConfig(fs, flags, p.backendFor, p.modes())
}

// TestNoKubeProxyFlagIsSilentlyIgnored gives each of kube-proxy's flags
// that sets the configuration a value other than its default, alone: the
// configuration kpng resolves must differ from the one without the flag,
// or a warning or an error must name the flag. Flags that act on the
// process rather than the configuration are tested on their own.
func TestNoKubeProxyFlagIsSilentlyIgnored(t *testing.T) {
	process := map[string]string{
		"config": "TestProxyFlagsOverrideTheFile", "write-config-to": "TestWriteConfigToGolden", "cleanup": "TestProxyCleanup",
		"init-only": "the e2e tests", "master": "TestMasterFlag", "help": "cobra", "version": "TestVersion",
		"v": "TestProxyFlagsOverrideTheFile", "vmodule": "TestProxyFlagsOverrideTheFile",
	}
	values := map[string]string{
		"bind-address": "192.0.2.7", "cluster-cidr": "10.0.0.0/8", "detect-local-mode": "NodeCIDR", "proxy-mode": "nftables",
		"feature-gates": "HPAScaleToZero=true", "healthz-bind-address": "127.0.0.1:7", "metrics-bind-address": "127.0.0.1:7",
		"healthz-port": "0", "metrics-port": "0", "nodeport-addresses": "10.0.0.0/8", "ipvs-exclude-cidrs": "10.0.0.0/8",
		"show-hidden-metrics-for-version": "1.35", "logging-format": "json", "log-json-info-buffer-size": "1Mi",
		"log-text-info-buffer-size": "1Mi", "iptables-masquerade-bit": "7", "oom-score-adj": "7",
	}
	byType := map[string]string{"duration": "7s", "int32": "7", "float32": "7", "string": "x"}
	base, _, err := proxyArgs(t)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range kubeProxyFlags(t) {
		if _, ok := process[f.Name]; ok {
			continue
		}
		value, ok := values[f.Name]
		if !ok {
			value, ok = byType[f.Type]
		}
		if f.Type == "bool" {
			value, ok = map[string]string{"true": "false", "false": "true"}[f.Default], true
		}
		if !ok {
			t.Errorf("--%s (%s): no test value", f.Name, f.Type)
			continue
		}
		t.Run(f.Name, func(t *testing.T) {
			c, warnings, err := proxyArgs(t, "--"+f.Name+"="+value)
			switch {
			case err != nil:
				// Refused, by kpng as by kube-proxy (the logging alpha
				// options need their feature gate; metricsBindAddress
				// cannot be empty): not silent.
				t.Logf("--%s=%s: %v", f.Name, value, err)
			case slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "--"+f.Name) }):
			case equality.Semantic.DeepEqual(c, base):
				t.Errorf("--%s=%s changes nothing and says nothing (warnings: %q)", f.Name, value, warnings)
			}
		})
	}
}

// TestKubeProxyFlagSpellings: kube-proxy's command line takes "_" for "-"
// in flag names (component-base's word-separator normalizer), and so does
// a Proxy's.
func TestKubeProxyFlagSpellings(t *testing.T) {
	args := []string{"--cluster_cidr=10.1.0.0/16", "--proxy_mode", "nftables", "--conntrack_max_per_core=0"}
	c := resolved(t, args...)
	if !slices.Equal(c.DetectLocal.ClusterCIDRs, []string{"10.1.0.0/16"}) || c.Mode != "nftables" || c.Linux.Conntrack.MaxPerCore != 0 {
		t.Errorf("kpng %q: clusterCIDRs %v, mode %q, maxPerCore %d", args, c.DetectLocal.ClusterCIDRs, c.Mode, c.Linux.Conntrack.MaxPerCore)
	}
}

// TestDeprecatedPortFlags: --healthz-port and --metrics-port do as in
// kube-proxy without a file (0 turns the server off; a port completes a
// bare IP; an address with a port keeps it, with a warning), and are
// ignored with a warning when a file is given, as kube-proxy ignores them.
func TestDeprecatedPortFlags(t *testing.T) {
	c, _, err := proxyArgs(t, "--healthz-port=0", "--metrics-bind-address=127.0.0.2", "--metrics-port=10300")
	if err != nil {
		t.Fatal(err)
	}
	if c.HealthzBindAddress != "" || c.MetricsBindAddress != "127.0.0.2:10300" {
		t.Errorf("healthz %q, metrics %q; want none and 127.0.0.2:10300", c.HealthzBindAddress, c.MetricsBindAddress)
	}
	c, warnings, err := proxyArgs(t, "--healthz-bind-address=::1")
	if err != nil {
		t.Fatal(err)
	}
	if c.HealthzBindAddress != "[::1]:10256" || len(warnings) != 0 {
		t.Errorf("healthz %q (warnings %q), want [::1]:10256: the default port completes a bare IP", c.HealthzBindAddress, warnings)
	}
	c, warnings, err = proxyArgs(t, "--healthz-port=12345")
	if err != nil {
		t.Fatal(err)
	}
	if c.HealthzBindAddress != "0.0.0.0:10256" || !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "--healthz-port=12345 changes nothing") }) {
		t.Errorf("healthz %q, warnings %q", c.HealthzBindAddress, warnings)
	}
	file := writeFile(t, "kp.yaml", v1alpha1Header)
	c, warnings, err = proxyArgs(t, "--config", file, "--healthz-port=0")
	if err != nil {
		t.Fatal(err)
	}
	if c.HealthzBindAddress != "0.0.0.0:10256" || !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "--healthz-port=0 is ignored with --config") }) {
		t.Errorf("healthz %q, warnings %q", c.HealthzBindAddress, warnings)
	}
}

// TestFlagsOverTheFileAreSaid: kpng applies flags given with --config over
// the file, where kube-proxy ignores them; it says so, naming them, except
// for --hostname-override and the logging flags, which kube-proxy applies.
func TestFlagsOverTheFileAreSaid(t *testing.T) {
	file := writeFile(t, "kp.yaml", v1alpha1Header)
	_, warnings, err := proxyArgs(t, "--config", file, "--proxy-mode=nftables", "--masquerade-all", "--hostname-override=n", "-v=3")
	if err != nil {
		t.Fatal(err)
	}
	joined := strings.Join(warnings, "\n")
	if !strings.Contains(joined, "--masquerade-all, --proxy-mode override") && !strings.Contains(joined, "--proxy-mode, --masquerade-all override") {
		t.Errorf("warnings %q do not name --proxy-mode and --masquerade-all", warnings)
	}
	if strings.Contains(joined, "--hostname-override,") || strings.Contains(joined, "--v") {
		t.Errorf("warnings %q name a flag kube-proxy applies too", warnings)
	}
}

// TestUnusedSettingsAreSaid: configSyncPeriod other than its default, and
// ipFamilyPolicy, which kpng does not implement: a warning for the first,
// an error for the second unless configHardFail is false.
func TestUnusedSettingsAreSaid(t *testing.T) {
	file := writeFile(t, "kp.yaml", v1alpha2Header+"configSyncPeriod: 1m\n")
	_, warnings, err := proxyArgs(t, "--config", file)
	if err != nil || !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "configSyncPeriod=1m0s has no effect in kpng") }) {
		t.Errorf("configSyncPeriod: err %v, warnings %q", err, warnings)
	}
	file = writeFile(t, "kp.yaml", v1alpha2Header+"ipFamilyPolicy: SingleStack\n")
	if _, _, err := proxyArgs(t, "--config", file); err == nil || !strings.Contains(err.Error(), `ipFamilyPolicy="SingleStack" is not implemented`) {
		t.Errorf("ipFamilyPolicy with configHardFail: err %v", err)
	}
	file = writeFile(t, "kp.yaml", v1alpha2Header+"ipFamilyPolicy: SingleStack\nconfigHardFail: false\n")
	c, warnings, err := proxyArgs(t, "--config", file)
	if err != nil || c.IPFamilyPolicy != "" || !slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "ipFamilyPolicy") }) {
		t.Errorf("ipFamilyPolicy without configHardFail: err %v, policy %q, warnings %q", err, c.IPFamilyPolicy, warnings)
	}
}

// TestOverrideAddresses: nodeIPOverride becomes the first address of its
// family, the Node's others follow without duplicates.
func TestOverrideAddresses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		addrs    []string
		override []string
		want     []string
	}{
		{"IPv4 over the Node's", []string{"10.0.0.1", "fd00::1", "10.0.0.2"}, []string{"10.0.0.2"}, []string{"10.0.0.2", "10.0.0.1", "fd00::1"}},
		{"IPv6 only", []string{"10.0.0.1", "fd00::1"}, []string{"fd00::9"}, []string{"fd00::9", "10.0.0.1", "fd00::1"}},
		{"both families", []string{"10.0.0.1"}, []string{"192.0.2.1", "2001:db8::1"}, []string{"192.0.2.1", "2001:db8::1", "10.0.0.1"}},
		{"unspecified is no override", []string{"10.0.0.1"}, []string{"0.0.0.0"}, []string{"10.0.0.1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			feed := withNodeIPOverride(nil, tc.override)
			got := tc.addrs
			if f, ok := feed.(*nodeIPFeed); ok {
				got = overrideAddresses(tc.addrs, f.override)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestFeatureGatesAsKubeProxy: featureGates are parsed by a feature gate
// holding kube-proxy 1.36's own gates (hack/kubeproxyref writes them): an
// unknown gate, a locked one set against its lock, or one enabled without
// the gates it depends on is refused as kube-proxy refuses it, whatever
// configHardFail says (kube-proxy's Complete fails); known gates kpng does
// not act on, set to other than their default, are named in one warning;
// the gates kpng reads (decisions, logging, z-pages) say nothing.
func TestFeatureGatesAsKubeProxy(t *testing.T) {
	for _, tc := range []struct {
		gate    string
		wantErr string
		warn    string
	}{
		{gate: "NoSuchGate=true", wantErr: "unrecognized feature gate: NoSuchGate"},
		{gate: "APIServerTracing=false", wantErr: "cannot set feature gate APIServerTracing to false, feature is locked to true"},
		{gate: "PreferSameTrafficDistribution=false", wantErr: "cannot set feature gate PreferSameTrafficDistribution to false, feature is locked to true"},
		{gate: "ClusterTrustBundleProjection=true", wantErr: "ClusterTrustBundleProjection is enabled, but depends on features that are disabled: [ClusterTrustBundle]"},
		{gate: "HPAScaleToZero=true", warn: "featureGates HPAScaleToZero=true accepted"},
		{gate: "HPAScaleToZero=true,ClusterTrustBundle=true,ClusterTrustBundleProjection=true",
			warn: "featureGates ClusterTrustBundle=true, ClusterTrustBundleProjection=true, HPAScaleToZero=true accepted, as kube-proxy 1.36 accepts them, but have no effect in kpng"},
		{gate: "HPAScaleToZero=false"},
		{gate: "ComponentFlagz=false"},
		{gate: "LoggingAlphaOptions=true"},
		{gate: "AllowServiceExternalIPs=false"},
		{gate: "PreferSameTrafficDistribution=true"},
	} {
		t.Run(tc.gate, func(t *testing.T) {
			_, warnings, err := proxyArgs(t, "--feature-gates="+tc.gate)
			gateWarnings := slices.DeleteFunc(slices.Clone(warnings), func(w string) bool { return !strings.Contains(w, "featureGates") })
			switch {
			case tc.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("error %v, want %q", err, tc.wantErr)
				}
				file := writeFile(t, "kp.yaml", v1alpha2Header+"configHardFail: false\n")
				if _, _, err := proxyArgs(t, "--config", file, "--feature-gates="+tc.gate); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Errorf("configHardFail false: error %v, want %q (kube-proxy exits on it too)", err, tc.wantErr)
				}
			case err != nil:
				t.Errorf("error %v", err)
			case tc.warn != "":
				if len(gateWarnings) != 1 || !strings.Contains(gateWarnings[0], tc.warn) {
					t.Errorf("warnings %q, want one with %q", gateWarnings, tc.warn)
				}
			default:
				if len(gateWarnings) > 0 {
					t.Errorf("warnings %q about a gate kpng reads or left at its default", gateWarnings)
				}
			}
		})
	}
}

// TestFeatureGatesDecideTheBrain: the gates kube-proxy 1.36 reads in a
// decision of the brain's take effect there; the others of them are locked,
// so that a Kubernetes update that unlocks one fails here until the brain
// follows it.
func TestFeatureGatesDecideTheBrain(t *testing.T) {
	for _, tc := range []struct {
		gates map[string]bool
		want  bool
	}{
		{nil, false},
		{map[string]bool{"AllowServiceExternalIPs": true}, false},
		{map[string]bool{"AllowServiceExternalIPs": false}, true},
	} {
		var opts brain.Options
		if err := GateBrainOptions(tc.gates, &opts); err != nil {
			t.Fatal(err)
		}
		if opts.ExternalIPsDisabled != tc.want {
			t.Errorf("gates %v: ExternalIPsDisabled %t, want %t", tc.gates, opts.ExternalIPsDisabled, tc.want)
		}
	}
	var known struct {
		Gates []kubeProxyGate `json:"gates"`
	}
	if err := json.Unmarshal(kubeProxyGatesJSON, &known); err != nil {
		t.Fatal(err)
	}
	locked := map[string]bool{}
	for _, g := range known.Gates {
		locked[g.Name] = g.LockToDefault && g.Default
	}
	for _, name := range []string{gateSameNode, gateServiceCIDRs} {
		if !locked[name] {
			t.Errorf("%s is no longer locked on in kube-proxy: the brain must follow it (and hack/difftest cover it off)", name)
		}
	}
	if locked[gateExternalIPs] {
		t.Errorf("%s is locked now: ExternalIPsDisabled can go", gateExternalIPs)
	}
}

// A mode of the program's own (kpng's ebpf) is valid where a backend runs
// it, and refused, as kube-proxy refuses it, where none does.
func TestOwnModes(t *testing.T) {
	resolve := func(p *Proxy, args ...string) (*cfg, error) {
		fs := pflag.NewFlagSet("proxy", pflag.ContinueOnError)
		flags := AddFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		c, _, err := resolveConfig(fs, flags, p.backendFor, p.modes())
		return c, err
	}
	backends := kpngBackends()
	backends[config.ProxyModeEBPF] = backend.Registration{Name: "ebpf", New: func() backend.Plugin { return newFakePlugin() }}
	c, err := resolve(testProxy(proxyDeps{}, backends), "--proxy-mode=ebpf")
	if err != nil || c.Mode != config.ProxyModeEBPF {
		t.Errorf("with an ebpf backend: mode %v, err %v; want ebpf", c, err)
	}
	c, err = resolve(testProxy(proxyDeps{}, nil), "--proxy-mode=ebpf")
	if err == nil && c.Mode == config.ProxyModeEBPF {
		t.Errorf("without an ebpf backend, mode ebpf was accepted")
	}
}

// An --ipvs-* flag is a warning outside ipvs mode, where kube-proxy does
// not read it either, and applies without one in ipvs mode.
func TestIPVSFlagsWarnOutsideIPVSMode(t *testing.T) {
	_, warnings, err := proxyArgs(t, "--proxy-mode", "nftables", "--ipvs-scheduler", "lc")
	if err != nil || !slices.ContainsFunc(warnings, func(w string) bool {
		return strings.Contains(w, `--ipvs-scheduler has no effect in mode "nftables"`)
	}) {
		t.Errorf("mode nftables: err %v, warnings %q", err, warnings)
	}
	c, warnings, err := proxyArgs(t, "--proxy-mode", "ipvs", "--ipvs-scheduler", "lc")
	if err != nil || slices.ContainsFunc(warnings, func(w string) bool { return strings.Contains(w, "ipvs-scheduler") }) {
		t.Errorf("mode ipvs: err %v, warnings %q", err, warnings)
	}
	if err == nil && c.IPVS.Scheduler != "lc" {
		t.Errorf("mode ipvs: scheduler %q, want lc", c.IPVS.Scheduler)
	}
}
