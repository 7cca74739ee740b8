package config

import (
	"os"
	"regexp"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestValidate(t *testing.T) {
	cases := []struct {
		name   string
		goos   string // "" means linux
		mutate func(c *KubeProxyConfiguration)
		want   []string // error field paths; none means valid
	}{
		{name: "defaults are valid", mutate: func(c *KubeProxyConfiguration) {}},
		{name: "every linux mode is valid", mutate: func(c *KubeProxyConfiguration) { c.Mode = ProxyModeNFTables }},
		{name: "an unknown mode is rejected", mutate: func(c *KubeProxyConfiguration) { c.Mode = "userspace" }, want: []string{"mode"}},
		{name: "kernelspace is rejected on linux", mutate: func(c *KubeProxyConfiguration) { c.Mode = ProxyModeKernelspace }, want: []string{"mode"}},
		{name: "kernelspace is accepted on windows", goos: "windows", mutate: func(c *KubeProxyConfiguration) { c.Mode = ProxyModeKernelspace }},
		{name: "iptables is rejected on windows", goos: "windows", mutate: func(c *KubeProxyConfiguration) { c.Mode = ProxyModeIPTables }, want: []string{"mode"}},

		{name: "syncPeriod must be positive", mutate: func(c *KubeProxyConfiguration) { c.SyncPeriod = 0; c.MinSyncPeriod = 0 }, want: []string{"syncPeriod"}},
		{name: "minSyncPeriod must not be negative", mutate: func(c *KubeProxyConfiguration) { c.MinSyncPeriod = -time.Second }, want: []string{"minSyncPeriod"}},
		{name: "minSyncPeriod above syncPeriod is rejected", mutate: func(c *KubeProxyConfiguration) { c.MinSyncPeriod = time.Minute }, want: []string{"syncPeriod"}},
		{name: "minSyncPeriod equal to syncPeriod is valid", mutate: func(c *KubeProxyConfiguration) { c.MinSyncPeriod = c.SyncPeriod }},
		{name: "configSyncPeriod must be positive", mutate: func(c *KubeProxyConfiguration) { c.ConfigSyncPeriod = -1 }, want: []string{"configSyncPeriod"}},

		{name: "healthzBindAddress must be IP:port", mutate: func(c *KubeProxyConfiguration) { c.HealthzBindAddress = "0.0.0.0" }, want: []string{"healthzBindAddress"}},
		{name: "an empty healthzBindAddress disables the server", mutate: func(c *KubeProxyConfiguration) { c.HealthzBindAddress = "" }},
		{name: "metricsBindAddress needs a valid IP", mutate: func(c *KubeProxyConfiguration) { c.MetricsBindAddress = "localhost:10249" }, want: []string{"metricsBindAddress"}},
		{name: "metricsBindAddress port 0 is rejected", mutate: func(c *KubeProxyConfiguration) { c.MetricsBindAddress = "127.0.0.1:0" }, want: []string{"metricsBindAddress"}},
		{name: "metricsBindAddress port above 65535 is rejected", mutate: func(c *KubeProxyConfiguration) { c.MetricsBindAddress = "[::1]:65536" }, want: []string{"metricsBindAddress"}},

		{name: "conntrack.maxPerCore must not be negative", mutate: func(c *KubeProxyConfiguration) { c.Linux.Conntrack.MaxPerCore = -1 }, want: []string{"linux.conntrack.maxPerCore"}},
		{name: "conntrack.min must not be negative", mutate: func(c *KubeProxyConfiguration) { c.Linux.Conntrack.Min = -1 }, want: []string{"linux.conntrack.min"}},
		{name: "conntrack timeouts must not be negative", mutate: func(c *KubeProxyConfiguration) {
			c.Linux.Conntrack.TCPEstablishedTimeout = -1
			c.Linux.Conntrack.TCPCloseWaitTimeout = -1
			c.Linux.Conntrack.UDPTimeout = -1
			c.Linux.Conntrack.UDPStreamTimeout = -1
		}, want: []string{"linux.conntrack.tcpEstablishedTimeout", "linux.conntrack.tcpCloseWaitTimeout", "linux.conntrack.udpTimeout", "linux.conntrack.udpStreamTimeout"}},
		{name: "oomScoreAdj below -1000 is rejected", mutate: func(c *KubeProxyConfiguration) { c.Linux.OOMScoreAdj = -1001 }, want: []string{"linux.oomScoreAdj"}},
		{name: "oomScoreAdj 1000 is valid", mutate: func(c *KubeProxyConfiguration) { c.Linux.OOMScoreAdj = 1000 }},

		{name: "iptables.masqueradeBit above 31 is rejected", mutate: func(c *KubeProxyConfiguration) { c.IPTables.MasqueradeBit = 32 }, want: []string{"iptables.masqueradeBit"}},
		{name: "ipvs.masqueradeBit below 0 is rejected in any mode", mutate: func(c *KubeProxyConfiguration) { c.IPVS.MasqueradeBit = -1 }, want: []string{"ipvs.masqueradeBit"}},
		{name: "nftables.masqueradeBit is checked in nftables mode", mutate: func(c *KubeProxyConfiguration) { c.Mode = ProxyModeNFTables; c.NFTables.MasqueradeBit = 40 }, want: []string{"nftables.masqueradeBit"}},
		{name: "nftables.masqueradeBit is ignored in other modes, as in kube-proxy", mutate: func(c *KubeProxyConfiguration) { c.NFTables.MasqueradeBit = 40 }},
		{name: "ipvs timeouts and excludeCIDRs are checked in ipvs mode", mutate: func(c *KubeProxyConfiguration) {
			c.Mode = ProxyModeIPVS
			c.IPVS.TCPTimeout, c.IPVS.TCPFinTimeout, c.IPVS.UDPTimeout = -1, -1, -1
			c.IPVS.ExcludeCIDRs = []string{"10.0.0.0/8", "10.0.0.1"}
		}, want: []string{"ipvs.tcpTimeout", "ipvs.tcpFinTimeout", "ipvs.udpTimeout", "ipvs.excludeCIDRs[1]"}},

		{name: "detectLocalMode must be known", mutate: func(c *KubeProxyConfiguration) { c.DetectLocalMode = "PodCIDR" }, want: []string{"detectLocalMode"}},
		{name: "BridgeInterface mode needs detectLocal.bridgeInterface", mutate: func(c *KubeProxyConfiguration) { c.DetectLocalMode = LocalModeBridgeInterface }, want: []string{"detectLocal.bridgeInterface"}},
		{name: "InterfaceNamePrefix mode needs detectLocal.interfaceNamePrefix", mutate: func(c *KubeProxyConfiguration) { c.DetectLocalMode = LocalModeInterfaceNamePrefix }, want: []string{"detectLocal.interfaceNamePrefix"}},
		{name: "cluster CIDRs must parse", mutate: func(c *KubeProxyConfiguration) { c.DetectLocal.ClusterCIDRs = []string{"10.0.0.0/8", " fd00::/48"} }, want: []string{"detectLocal.clusterCIDRs[1]"}},
		{name: "two cluster CIDRs must be a dual-stack pair", mutate: func(c *KubeProxyConfiguration) { c.DetectLocal.ClusterCIDRs = []string{"10.0.0.0/8", "192.168.0.0/16"} }, want: []string{"detectLocal.clusterCIDRs"}},
		{name: "three cluster CIDRs are too many", mutate: func(c *KubeProxyConfiguration) {
			c.DetectLocalMode = LocalModeClusterCIDR
			c.DetectLocal.ClusterCIDRs = []string{"10.0.0.0/8", "fd00::/48", "192.168.0.0/16"}
		}, want: []string{"detectLocal.clusterCIDRs"}},
		{name: "a dual-stack cluster CIDR pair is valid", mutate: func(c *KubeProxyConfiguration) { c.DetectLocal.ClusterCIDRs = []string{"10.0.0.0/8", "fd00::/48"} }},

		{name: "nodePortAddresses must be CIDRs", mutate: func(c *KubeProxyConfiguration) { c.NodePortAddresses = []string{"10.0.0.1"} }, want: []string{"nodePortAddresses[0]"}},
		{name: "nodePortAddresses primary alone is valid", mutate: func(c *KubeProxyConfiguration) { c.NodePortAddresses = []string{"primary"} }},
		{name: "nodePortAddresses cannot mix primary and CIDRs", mutate: func(c *KubeProxyConfiguration) { c.NodePortAddresses = []string{"10.0.0.0/8", "primary"} }, want: []string{"nodePortAddresses[1]"}},

		{name: "feature gate names must look like feature gates", mutate: func(c *KubeProxyConfiguration) { c.FeatureGates = map[string]bool{"GoodName": true, "bad-name": true} }, want: []string{"featureGates[bad-name]"}},
		{name: "clientConnection.burst must not be negative", mutate: func(c *KubeProxyConfiguration) { c.ClientConnection.Burst = -1 }, want: []string{"clientConnection.burst"}},
		{name: "showHiddenMetricsForVersion must be a previous minor version", mutate: func(c *KubeProxyConfiguration) { c.ShowHiddenMetricsForVersion = "one" }, want: []string{"showHiddenMetricsForVersion"}},
		{name: "logging format must be registered", mutate: func(c *KubeProxyConfiguration) { c.Logging.Format = "xml" }, want: []string{"logging.format"}},
		{name: "alpha logging options need LoggingAlphaOptions", mutate: func(c *KubeProxyConfiguration) { c.Logging.Options.Text.SplitStream = true }, want: []string{"logging.options.text.splitStream"}},
		{name: "alpha logging options are valid with LoggingAlphaOptions", mutate: func(c *KubeProxyConfiguration) {
			c.Logging.Options.Text.SplitStream = true
			c.FeatureGates = map[string]bool{"LoggingAlphaOptions": true}
		}},

		{name: "a blank hostnameOverride is rejected", mutate: func(c *KubeProxyConfiguration) { c.HostnameOverride = " \t " }, want: []string{"hostnameOverride"}},
		{name: "a hostnameOverride with spaces around a name is valid (it is trimmed)", mutate: func(c *KubeProxyConfiguration) { c.HostnameOverride = " Node-A " }},
		{name: "nodeIPOverride entries must be IPs", mutate: func(c *KubeProxyConfiguration) { c.NodeIPOverride = []string{"node-a"} }, want: []string{"nodeIPOverride[0]"}},
		{name: "nodeIPOverride cannot be unspecified", mutate: func(c *KubeProxyConfiguration) { c.NodeIPOverride = []string{"::"} }, want: []string{"nodeIPOverride[0]"}},
		{name: "two nodeIPOverride IPs must be one per family", mutate: func(c *KubeProxyConfiguration) { c.NodeIPOverride = []string{"192.0.2.1", "192.0.2.2"} }, want: []string{"nodeIPOverride"}},
		{name: "three nodeIPOverride IPs are too many", mutate: func(c *KubeProxyConfiguration) {
			c.NodeIPOverride = []string{"192.0.2.1", "2001:db8::1", "192.0.2.2"}
		}, want: []string{"nodeIPOverride"}},
		{name: "a dual-stack nodeIPOverride is valid", mutate: func(c *KubeProxyConfiguration) { c.NodeIPOverride = []string{"2001:db8::1", "192.0.2.1"} }},
		{name: "ipFamilyPolicy must be known", mutate: func(c *KubeProxyConfiguration) { c.IPFamilyPolicy = "DualStack" }, want: []string{"ipFamilyPolicy"}},
		{name: "SingleStack contradicts a dual-stack nodeIPOverride", mutate: func(c *KubeProxyConfiguration) {
			c.IPFamilyPolicy = IPFamilyPolicySingleStack
			c.NodeIPOverride = []string{"2001:db8::1", "192.0.2.1"}
		}, want: []string{"ipFamilyPolicy"}},
		{name: "RequireDualStack is valid", mutate: func(c *KubeProxyConfiguration) { c.IPFamilyPolicy = IPFamilyPolicyRequireDualStack }},

		{name: "ebpf settings are valid with named interfaces", mutate: func(c *KubeProxyConfiguration) {
			c.EBPF = EBPFConfiguration{CgroupPath: "/sys/fs/cgroup/kpng", Interfaces: []string{"eth0", "cbr0", "enp0s31f6.100"}, PinPath: "/run/kpng/bpf"}
		}},
		{name: "no ebpf interfaces (socket programs only) is valid", mutate: func(c *KubeProxyConfiguration) { c.EBPF.Interfaces = []string{} }},
		{name: "ebpf.cgroupPath must be absolute", mutate: func(c *KubeProxyConfiguration) { c.EBPF.CgroupPath = "kpng.slice" }, want: []string{"ebpf.cgroupPath"}},
		{name: "ebpf.pinPath is required", mutate: func(c *KubeProxyConfiguration) { c.EBPF.PinPath = "" }, want: []string{"ebpf.pinPath"}},
		{name: "ebpf.pinPath must be absolute", mutate: func(c *KubeProxyConfiguration) { c.EBPF.PinPath = "bpf/kpng" }, want: []string{"ebpf.pinPath"}},
		{name: "ebpf.pinPath cannot be the root, which --cleanup would delete", mutate: func(c *KubeProxyConfiguration) { c.EBPF.PinPath = "//" }, want: []string{"ebpf.pinPath"}},
		{name: "ebpf.pinPath cannot climb with ..", mutate: func(c *KubeProxyConfiguration) { c.EBPF.PinPath = "/sys/fs/bpf/../../../etc" }, want: []string{"ebpf.pinPath"}},
		{name: "ebpf.interfaces auto must be alone", mutate: func(c *KubeProxyConfiguration) { c.EBPF.Interfaces = []string{"eth0", "auto"} }, want: []string{"ebpf.interfaces[1]"}},
		{name: "ebpf.interfaces none is the flag's word, not the file's", mutate: func(c *KubeProxyConfiguration) { c.EBPF.Interfaces = []string{"none"} }, want: []string{"ebpf.interfaces[0]"}},
		{name: "ebpf.interfaces must be interface names", mutate: func(c *KubeProxyConfiguration) {
			c.EBPF.Interfaces = []string{"", "a-name-of-16-chr", "eth0,eth1", "eth 0", "..", "veth/1", "eth0:1", "ok"}
		}, want: []string{"ebpf.interfaces[0]", "ebpf.interfaces[1]", "ebpf.interfaces[2]", "ebpf.interfaces[3]", "ebpf.interfaces[4]", "ebpf.interfaces[5]", "ebpf.interfaces[6]"}},
		{name: "ebpf.interfaces must not repeat a name", mutate: func(c *KubeProxyConfiguration) { c.EBPF.Interfaces = []string{"eth0", "eth1", "eth0"} }, want: []string{"ebpf.interfaces[2]"}},
		{name: "ebpf settings are checked in every mode (no kube-proxy file holds them)", mutate: func(c *KubeProxyConfiguration) {
			c.Mode = ProxyModeNFTables
			c.EBPF.PinPath = "relative"
		}, want: []string{"ebpf.pinPath"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Default()
			tc.mutate(c)
			goos := tc.goos
			if goos == "" {
				goos = "linux"
			}
			var got []string
			for _, e := range ValidateFor(c, goos) {
				got = append(got, e.Field)
			}
			slices.Sort(got)
			want := slices.Clone(tc.want)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("error fields = %q, want %q\n%v", got, want, ValidateFor(c, goos))
			}
		})
	}
}

func TestValidateNil(t *testing.T) {
	if errs := Validate(nil); len(errs) == 0 {
		t.Error("a nil configuration validated")
	}
}

// TestKubernetesMinorIsTheModules keeps KubernetesMinor on the version of
// k8s.io/kube-proxy in go.mod (v0.X.Y is Kubernetes 1.X).
func TestKubernetesMinorIsTheModules(t *testing.T) {
	data, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kube-proxy v0\.(\d+)\.`).FindSubmatch(data)
	if m == nil {
		t.Fatal("go.mod requires no k8s.io/kube-proxy")
	}
	if want := "1." + string(m[1]); KubernetesMinor != want {
		t.Errorf("KubernetesMinor = %s, go.mod's k8s.io/kube-proxy is %s", KubernetesMinor, want)
	}
}

// TestShowHiddenMetricsForVersion: as kube-proxy 1.36, only "1.35" (or
// nothing) is accepted.
func TestShowHiddenMetricsForVersion(t *testing.T) {
	for v, ok := range map[string]bool{"": true, "1.35": true, "1.34": false, "1.36": false, "x": false} {
		errs := validateShowHiddenMetricsForVersion(v, field.NewPath("showHiddenMetricsForVersion"))
		if (len(errs) == 0) != ok {
			t.Errorf("%q: errors %v, want ok=%t", v, errs, ok)
		}
	}
}
