package config

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestLoadRejects(t *testing.T) {
	cases := []struct {
		name    string
		doc     string
		wantErr []string
	}{
		{name: "an unknown field is named", doc: v1alpha2Header + "iptables:\n  syncPeriods: 1s\n", wantErr: []string{"unknown field", "iptables.syncPeriods"}},
		{name: "a v1alpha1-only field is unknown in v1alpha2", doc: v1alpha2Header + "bindAddress: 0.0.0.0\n", wantErr: []string{"unknown field", "bindAddress"}},
		{name: "a duplicate YAML key is named", doc: v1alpha2Header + "mode: iptables\nmode: ipvs\n", wantErr: []string{`duplicate field "mode" (line 4, first set on line 3)`}},
		{name: "a nested duplicate YAML key is named by its path and lines", doc: v1alpha2Header + "linux:\n  conntrack:\n    min: 1\n    min: 2\n", wantErr: []string{`duplicate field "linux.conntrack.min" (line 6, first set on line 5)`}},
		{name: "a duplicate inside a list is named by its path", doc: v1alpha2Header + "logging:\n  vmodule:\n  - filePattern: a\n    verbosity: 1\n  - filePattern: b\n    verbosity: 2\n    verbosity: 3\n", wantErr: []string{`duplicate field "logging.vmodule[1].verbosity"`}},
		{name: "every duplicate is named", doc: v1alpha2Header + "mode: ipvs\nlinux:\n  conntrack: {min: 1, min: 2}\nmode: nftables\n", wantErr: []string{`"linux.conntrack.min"`, `"mode"`}},
		{name: "a duplicate JSON key is named", doc: `{"apiVersion":"kubeproxy.config.k8s.io/v1alpha2","kind":"KubeProxyConfiguration","linux":{"conntrack":{"min":1,"min":2}}}`, wantErr: []string{`duplicate field "linux.conntrack.min"`}},
		{name: "field names are case-sensitive", doc: v1alpha2Header + "Mode: ipvs\n", wantErr: []string{"unknown field", "Mode"}},
		{name: "a wrong value type is an error", doc: v1alpha2Header + "syncPeriod: [1]\n", wantErr: []string{"syncPeriod"}},
		{name: "a value its own decoder refuses is named by its path", doc: v1alpha2Header + "syncPeriod: abc\n", wantErr: []string{`field "syncPeriod"`, `invalid value "abc"`, "invalid duration"}},
		{name: "a nested wrong type is named by its path", doc: v1alpha2Header + "linux: {conntrack: {maxPerCore: \"x\"}}\n", wantErr: []string{`field "linux.conntrack.maxPerCore"`, "int32"}},
		{name: "a wrong type in v1alpha1 is fatal and named", doc: v1alpha1Header + "conntrack: {maxPerCore: \"x\"}\n", wantErr: []string{`field "conntrack.maxPerCore"`}},
		{name: "a wrong type in a list element is named by its index", doc: v1alpha2Header + "logging: {vmodule: [{filePattern: a, verbosity: 1}, {filePattern: b, verbosity: x}]}\n", wantErr: []string{`field "logging.vmodule[1].verbosity"`}},
		{name: "a configHardFail of the wrong type is named and counts as true", doc: v1alpha2Header + "configHardFail: \"no\"\nsyncPeriod: abc\n", wantErr: []string{`field "configHardFail"`, `field "syncPeriod"`}},
		{name: "every wrong value and unknown field is named at once", doc: v1alpha2Header + "syncPeriod: abc\nbogus: 1\nlogging: {flushFrequency: soon}\nfeatureGates: {A: 3}\n",
			wantErr: []string{`field "syncPeriod"`, `unknown field "bogus"`, `field "logging.flushFrequency"`, `field "featureGates.A"`}},
		{name: "an unknown apiVersion is named", doc: "apiVersion: kubeproxy.config.k8s.io/v1beta1\nkind: KubeProxyConfiguration\n", wantErr: []string{"apiVersion", "v1beta1"}},
		{name: "a missing apiVersion is an error", doc: "kind: KubeProxyConfiguration\n", wantErr: []string{"apiVersion"}},
		{name: "another kind is an error", doc: "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeletConfiguration\n", wantErr: []string{"kind", "KubeletConfiguration"}},
		{name: "an empty document is an error", doc: "", wantErr: []string{"empty"}},
		{name: "a list is not a configuration", doc: "- a\n", wantErr: []string{"object"}},
		{name: "v1alpha1: a wrong value stays fatal beside unknown fields (kube-proxy's lenient decoding fails too)", doc: v1alpha1Header + "bogus: 1\nconfigSyncPeriod: abc\n", wantErr: []string{"bogus", "configSyncPeriod"}},
		{name: "v1alpha2 with configHardFail true keeps strictness fatal", doc: v1alpha2Header + "configHardFail: true\nbogus: 1\n", wantErr: []string{"bogus"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.doc))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

// TestLoadV1Alpha1IsLenientAsKubeProxy checks that a v1alpha1 file whose
// only faults are unknown or duplicate fields loads, as kube-proxy loads it
// (strict decoding, then lenient decoding with a log line): unknown fields
// are dropped, the last duplicate wins, and a warning names every fault.
func TestLoadV1Alpha1IsLenientAsKubeProxy(t *testing.T) {
	cases := []struct {
		name  string
		doc   string
		check func(c *KubeProxyConfiguration) string
		warn  []string
	}{
		{name: "an unknown field is dropped", doc: v1alpha1Header + "mode: nftables\niptables:\n  syncPeriods: 1s\nbogus: 1\n",
			check: func(c *KubeProxyConfiguration) string {
				if c.Mode != ProxyModeNFTables {
					return fmt.Sprintf("mode %q, want nftables", c.Mode)
				}
				return ""
			},
			warn: []string{"lenient decoding", `unknown field "iptables.syncPeriods"`, `unknown field "bogus"`}},
		{name: "a v1alpha2-only field is unknown, so ignored", doc: v1alpha1Header + "configHardFail: false\n",
			check: func(c *KubeProxyConfiguration) string {
				if !c.ConfigHardFail {
					return "configHardFail false from a v1alpha1 file was used"
				}
				return ""
			},
			warn: []string{`unknown field "configHardFail"`}},
		{name: "the last duplicate wins", doc: v1alpha1Header + "conntrack:\n  min: 1\n  min: 2\nmode: iptables\nmode: nftables\n",
			check: func(c *KubeProxyConfiguration) string {
				if c.Linux.Conntrack.Min != 2 || c.Mode != ProxyModeNFTables {
					return fmt.Sprintf("conntrack.min %d mode %q, want 2 and nftables", c.Linux.Conntrack.Min, c.Mode)
				}
				return ""
			},
			warn: []string{`duplicate field "conntrack.min" (line 5, first set on line 4)`, `duplicate field "mode"`}},
		{name: "a field spelled with the wrong case is unknown", doc: v1alpha1Header + "Mode: nftables\n",
			check: func(c *KubeProxyConfiguration) string {
				if c.Mode != "" {
					return fmt.Sprintf("mode %q from a wrongly spelled field", c.Mode)
				}
				return ""
			},
			warn: []string{`unknown field "Mode"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := mustLoad(t, tc.doc)
			if msg := tc.check(l.Config); msg != "" {
				t.Error(msg)
			}
			joined := strings.Join(l.Warnings, "\n")
			for _, w := range tc.warn {
				if !strings.Contains(joined, w) {
					t.Errorf("warnings %q do not mention %s", l.Warnings, w)
				}
			}
			for _, p := range []string{"bogus", "iptables.syncPeriods", "configHardFail", "Mode"} {
				if l.Set.Has(p) {
					t.Errorf("Set = %q holds the unknown field %s", l.Set.List(), p)
				}
			}
		})
	}
}

// TestLoadKubeadmDefaults loads the kube-proxy configuration that kubeadm
// 1.36 writes into its ConfigMap (hack/kubeproxyref renders it with
// kubeadm's own code), unchanged, with and without a pod subnet: no warning
// at all (kubeadm writes portRange empty), and kube-proxy's defaults.
func TestLoadKubeadmDefaults(t *testing.T) {
	for _, tc := range []struct {
		file        string
		clusterCIDR []string
	}{
		{file: "testdata/v1alpha1/kubeadm-1.36-default.yaml"},
		{file: "testdata/v1alpha1/kubeadm-1.36-pod-subnet.yaml", clusterCIDR: []string{"10.244.0.0/16"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			data, err := os.ReadFile(tc.file)
			if err != nil {
				t.Fatal(err)
			}
			l := mustLoad(t, string(data))
			for _, w := range l.Warnings {
				t.Errorf("warning: %s", w)
			}
			c, invalid, err := Check(l.Config)
			if err != nil || len(invalid) > 0 {
				t.Fatalf("Check: %v %v", err, invalid)
			}
			if c.ClientConnection.Kubeconfig != "/var/lib/kube-proxy/kubeconfig.conf" || !slices.Equal(c.DetectLocal.ClusterCIDRs, tc.clusterCIDR) ||
				c.NodeIPOverride != nil || c.HealthzBindAddress != "0.0.0.0:10256" || c.MetricsBindAddress != "127.0.0.1:10249" ||
				c.SyncPeriod != 30*time.Second || c.MinSyncPeriod != time.Second || c.ConfigSyncPeriod != 15*time.Minute ||
				c.Linux.Conntrack.MaxPerCore != 32768 || c.Linux.Conntrack.Min != 131072 || c.Linux.OOMScoreAdj != -999 ||
				c.IPTables.MasqueradeBit != 14 || !c.IPTables.LocalhostNodePorts || c.BindAddressHardFail || c.Mode != "" {
				t.Errorf("not kube-proxy's defaults: %+v", c)
			}
		})
	}
}

func TestLoadJSON(t *testing.T) {
	l := mustLoad(t, `{"apiVersion":"kubeproxy.config.k8s.io/v1alpha2","kind":"KubeProxyConfiguration","mode":"nftables","minSyncPeriod":"0s"}`)
	if l.Config.Mode != ProxyModeNFTables || l.Config.MinSyncPeriod != 0 || l.APIVersion != "kubeproxy.config.k8s.io/v1alpha2" {
		t.Errorf("got %+v", l)
	}
}

func TestLoadWithConfigHardFailFalseWarnsAboutStrictness(t *testing.T) {
	l := mustLoad(t, v1alpha2Header+"configHardFail: false\nbogus: 1\nmode: ipvs\nmode: nftables\n")
	if l.Config.Mode != ProxyModeNFTables {
		t.Errorf("mode = %q, want the last duplicate (nftables)", l.Config.Mode)
	}
	joined := strings.Join(l.Warnings, "\n")
	for _, s := range []string{"bogus", "mode"} {
		if !strings.Contains(joined, s) {
			t.Errorf("warnings %q do not mention %q", l.Warnings, s)
		}
	}
}

// TestLoadWithConfigHardFailFalseResetsWrongTypes checks that with
// configHardFail: false a value of the wrong type is a warning naming its
// field, and the field keeps its default while the rest of the file is used.
func TestLoadWithConfigHardFailFalseResetsWrongTypes(t *testing.T) {
	l := mustLoad(t, v1alpha2Header+`configHardFail: false
mode: nftables
syncPeriod: abc
minSyncPeriod: 2s
linux:
  conntrack: {maxPerCore: "x", min: 5}
  oomScoreAdj: [1]
featureGates: {A: 3, B: true}
logging:
  verbosity: 3
  vmodule: [{filePattern: a, verbosity: 1}, {filePattern: b, verbosity: x}]
clientConnection: {qps: fast, burst: 7}
`)
	d, c := Default(), l.Config
	if c.SyncPeriod != d.SyncPeriod || c.Linux.Conntrack.MaxPerCore != d.Linux.Conntrack.MaxPerCore || c.Linux.OOMScoreAdj != d.Linux.OOMScoreAdj ||
		c.Logging.VModule != nil || c.ClientConnection.QPS != d.ClientConnection.QPS {
		t.Errorf("wrong values not defaulted: syncPeriod %v, maxPerCore %d, oomScoreAdj %d, vmodule %v, qps %v",
			c.SyncPeriod, c.Linux.Conntrack.MaxPerCore, c.Linux.OOMScoreAdj, c.Logging.VModule, c.ClientConnection.QPS)
	}
	if c.Mode != ProxyModeNFTables || c.MinSyncPeriod != 2*time.Second || c.Linux.Conntrack.Min != 5 || c.Logging.Verbosity != 3 ||
		c.ClientConnection.Burst != 7 || len(c.FeatureGates) != 1 || !c.FeatureGates["B"] {
		t.Errorf("good values lost: %+v", c)
	}
	joined := strings.Join(l.Warnings, "\n")
	for _, s := range []string{`"syncPeriod"`, `"linux.conntrack.maxPerCore"`, `"linux.oomScoreAdj"`, `"featureGates.A"`, `"logging.vmodule[1].verbosity"`, `"clientConnection.qps"`, "reset to its default"} {
		if !strings.Contains(joined, s) {
			t.Errorf("warnings %q do not mention %s", l.Warnings, s)
		}
	}
	for _, p := range []string{"syncPeriod", "linux.conntrack.maxPerCore", "logging.vmodule", "featureGates.A"} {
		if l.Set.Has(p) {
			t.Errorf("Set has %s, which kept its default", p)
		}
	}
	if !l.Set.Has("linux.conntrack.min") || !l.Set.Has("featureGates.B") {
		t.Errorf("Set = %q lost the good fields", l.Set.List())
	}
}

func TestLoadWarnsAboutPortRange(t *testing.T) {
	l := mustLoad(t, v1alpha1Header+"portRange: 1000-2000\n")
	if len(l.Warnings) != 1 || !strings.Contains(l.Warnings[0], "portRange") {
		t.Errorf("warnings = %q", l.Warnings)
	}
}

func TestLoadReportsSetFields(t *testing.T) {
	cases := []struct {
		name string
		doc  string
		want []string
	}{
		{name: "v1alpha2 paths are reported as written, nulls skipped", doc: v1alpha2Header + "mode: ipvs\nlinux:\n  conntrack:\n    min: 1\n    maxPerCore: null\nfeatureGates:\n  A: true\n",
			want: []string{"featureGates.A", "linux.conntrack.min", "mode"}},
		{name: "v1alpha1 paths are renamed to their v1alpha2 place", doc: v1alpha1Header + "bindAddress: 192.0.2.1\nclusterCIDR: 10.0.0.0/8\nconntrack:\n  min: 1\noomScoreAdj: 0\nwindowsRunAsService: true\nportRange: \"\"\n",
			want: []string{"detectLocal.clusterCIDRs", "linux.conntrack.min", "linux.oomScoreAdj", "nodeIPOverride", "windows.runAsService"}},
		{name: "only the active backend's sync periods and masqueradeAll count", doc: v1alpha1Header + "mode: nftables\niptables:\n  syncPeriod: 30s\n  masqueradeAll: false\n  masqueradeBit: 3\nnftables:\n  minSyncPeriod: 2s\n  masqueradeAll: true\n",
			want: []string{"iptables.masqueradeBit", "ipvs.masqueradeBit", "linux.masqueradeAll", "minSyncPeriod", "mode"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := mustLoad(t, tc.doc)
			if got := l.Set.List(); !slices.Equal(got, tc.want) {
				t.Errorf("Set = %q, want %q", got, tc.want)
			}
		})
	}
	l := mustLoad(t, v1alpha2Header+"linux:\n  conntrack:\n    min: 1\n")
	if !l.Set.Has("linux") || !l.Set.Has("linux.conntrack") || l.Set.Has("linux.conntrack.max") || l.Set.Has("lin") {
		t.Errorf("Has is wrong for %q", l.Set.List())
	}
}

func TestLoadMultiDocument(t *testing.T) {
	kubeadmInit := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: InitConfiguration\n"
	kubeadmCluster := "apiVersion: kubeadm.k8s.io/v1beta4\nkind: ClusterConfiguration\nnetworking:\n  podSubnet: 10.244.0.0/16\n"
	cases := []struct {
		name         string
		doc          string
		wantMode     ProxyMode
		wantWarnings []string
	}{
		{name: "the KubeProxyConfiguration of a kubeadm file is used, the rest skipped",
			doc:          kubeadmInit + "---\n" + kubeadmCluster + "---\n" + v1alpha1Header + "mode: nftables\n",
			wantMode:     ProxyModeNFTables,
			wantWarnings: []string{"document 1", "InitConfiguration", "document 2", "ClusterConfiguration"}},
		{name: "a first KubeProxyConfiguration is used too", doc: v1alpha2Header + "mode: ipvs\n---\n" + kubeadmInit,
			wantMode: ProxyModeIPVS, wantWarnings: []string{"document 2", "InitConfiguration"}},
		{name: "empty and comment-only documents do not count", doc: "---\n# nothing\n---\n" + v1alpha2Header + "mode: nftables\n---\n",
			wantMode: ProxyModeNFTables},
		{name: "warnings of the chosen document are kept", doc: kubeadmInit + "---\n" + v1alpha1Header + "portRange: 1-2\n",
			wantMode: "", wantWarnings: []string{"document 1", "portRange"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := mustLoad(t, tc.doc)
			if l.Config.Mode != tc.wantMode {
				t.Errorf("mode = %q, want %q", l.Config.Mode, tc.wantMode)
			}
			joined := strings.Join(l.Warnings, "\n")
			for _, s := range tc.wantWarnings {
				if !strings.Contains(joined, s) {
					t.Errorf("warnings %q do not mention %q", l.Warnings, s)
				}
			}
			if len(tc.wantWarnings) == 0 && len(l.Warnings) > 0 {
				t.Errorf("unexpected warnings %q", l.Warnings)
			}
		})
	}
}

func TestLoadMultiDocumentRejects(t *testing.T) {
	cases := []struct {
		name    string
		doc     string
		wantErr []string
	}{
		{name: "two KubeProxyConfigurations are ambiguous", doc: v1alpha1Header + "---\n" + v1alpha2Header, wantErr: []string{"documents 1, 2", "at most one"}},
		{name: "no KubeProxyConfiguration among several documents", doc: "kind: A\n---\nkind: B\n", wantErr: []string{"none of the 2 documents", `"A"`, `"B"`}},
		{name: "strictness errors in the chosen document name it", doc: "kind: A\n---\n" + v1alpha2Header + "bogus: 1\n", wantErr: []string{"document 2", "bogus"}},
		{name: "a malformed document is named", doc: v1alpha2Header + "---\nkey: [\n", wantErr: []string{"document 2"}},
		{name: "only empty documents", doc: "---\n---\n# comment\n", wantErr: []string{"empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.doc))
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

// TestLoadWithModeFromTheCommandLine checks that a --proxy-mode given on the
// command line, not the file's mode, picks the v1alpha1 per-mode section that
// gives syncPeriod, minSyncPeriod and masqueradeAll.
func TestLoadWithModeFromTheCommandLine(t *testing.T) {
	mode := func(m ProxyMode) *ProxyMode { return &m }
	cases := []struct {
		name    string
		doc     string
		mode    *ProxyMode
		check   func(l *Loaded) string
		wantErr []string
	}{
		{name: "nftables.masqueradeAll counts when the command line says nftables", doc: v1alpha1Header + "nftables:\n  masqueradeAll: true\n", mode: mode(ProxyModeNFTables),
			check: func(l *Loaded) string {
				if !l.Config.Linux.MasqueradeAll || l.Config.Mode != ProxyModeNFTables || !l.Set.Has("linux.masqueradeAll") {
					return "nftables.masqueradeAll not used"
				}
				return ""
			}},
		{name: "nftables sync periods count when the command line says nftables", doc: v1alpha1Header + "mode: iptables\nnftables:\n  syncPeriod: 20s\n  minSyncPeriod: 2s\n", mode: mode(ProxyModeNFTables),
			check: func(l *Loaded) string {
				if l.Config.SyncPeriod != 20*time.Second || l.Config.MinSyncPeriod != 2*time.Second || !l.Set.Has("syncPeriod") || !l.Set.Has("minSyncPeriod") {
					return fmt.Sprintf("sync %v, min %v, set %q", l.Config.SyncPeriod, l.Config.MinSyncPeriod, l.Set.List())
				}
				return ""
			}},
		{name: "a non-default iptables.syncPeriod is not silently used in nftables mode", doc: v1alpha1Header + "iptables:\n  syncPeriod: 10s\n", mode: mode(ProxyModeNFTables),
			wantErr: []string{"iptables.syncPeriod", "nftables.syncPeriod", `mode "nftables" from the command line`}},
		{name: "an explicit empty mode overrides the file's nftables", doc: v1alpha1Header + "mode: nftables\nnftables:\n  syncPeriod: 20s\n", mode: mode(""),
			wantErr: []string{"nftables.syncPeriod", "iptables.syncPeriod", `the file says "nftables"`}},
		{name: "ipvs sections count in ipvs mode", doc: v1alpha1Header + "mode: nftables\nipvs:\n  syncPeriod: 5s\n  minSyncPeriod: 0s\n", mode: mode(ProxyModeIPVS),
			check: func(l *Loaded) string {
				if l.Config.SyncPeriod != 5*time.Second || l.Config.MinSyncPeriod != 0 || l.Config.Mode != ProxyModeIPVS {
					return fmt.Sprintf("sync %v, min %v, mode %q", l.Config.SyncPeriod, l.Config.MinSyncPeriod, l.Config.Mode)
				}
				return ""
			}},
		{name: "without a mode on the command line the file's mode is used", doc: v1alpha1Header + "mode: nftables\nnftables:\n  syncPeriod: 20s\n",
			check: func(l *Loaded) string {
				if l.Config.SyncPeriod != 20*time.Second || l.Config.Mode != ProxyModeNFTables {
					return fmt.Sprintf("sync %v, mode %q", l.Config.SyncPeriod, l.Config.Mode)
				}
				return ""
			}},
		{name: "a v1alpha2 file takes the command line's mode", doc: v1alpha2Header + "mode: iptables\nsyncPeriod: 20s\n", mode: mode(ProxyModeNFTables),
			check: func(l *Loaded) string {
				if l.Config.SyncPeriod != 20*time.Second || l.Config.Mode != ProxyModeNFTables {
					return fmt.Sprintf("sync %v, mode %q", l.Config.SyncPeriod, l.Config.Mode)
				}
				return ""
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l, err := LoadWith([]byte(tc.doc), LoadOptions{Mode: tc.mode})
			if len(tc.wantErr) > 0 {
				if err == nil {
					t.Fatalf("LoadWith succeeded (syncPeriod %v), want an error", l.Config.SyncPeriod)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("LoadWith: %v", err)
			}
			if msg := tc.check(l); msg != "" {
				t.Error(msg)
			}
		})
	}
}
