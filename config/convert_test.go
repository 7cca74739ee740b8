package config

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
)

// TestKEP784FieldMapping walks every row of KEP-784's tables (and every field
// v1alpha2 keeps unchanged): a v1alpha1 document setting the field loads, is
// written as v1alpha2 with the value at its new place, and converts back to
// v1alpha1 with the original value at the original place.
func TestKEP784FieldMapping(t *testing.T) {
	for _, tc := range kep784Cases {
		t.Run(tc.name, func(t *testing.T) {
			loaded := mustLoad(t, v1alpha1Header+tc.v1)
			out, err := Marshal(loaded.Config)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			v2 := yamlMap(t, out)
			got, ok := lookup(v2, tc.v2Path)
			if tc.want == "<absent>" {
				if ok {
					t.Fatalf("v1alpha2 has %s = %#v, want no such field", tc.v2Path, got)
				}
				return
			}
			if !ok {
				t.Fatalf("v1alpha2 has no %s:\n%s", tc.v2Path, out)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("v1alpha2 %s = %#v, want %#v", tc.v2Path, got, tc.want)
			}

			// And back: re-load the v1alpha2 document (so the new version
			// really carries the value), then write v1alpha1.
			again := mustLoad(t, string(out))
			if !equality.Semantic.DeepEqual(again.Config, loaded.Config) {
				t.Errorf("v1alpha2 re-load differs from the v1alpha1 load:\n%#v\n%#v", again.Config, loaded.Config)
			}
			if tc.v1Path == "" {
				return
			}
			back, err := MarshalV1Alpha1(again.Config)
			if err != nil {
				t.Fatalf("MarshalV1Alpha1: %v", err)
			}
			want := tc.wantV1
			if want == nil {
				want = tc.want
			}
			if got, _ := lookup(yamlMap(t, back), tc.v1Path); !reflect.DeepEqual(got, want) {
				t.Errorf("v1alpha1 %s = %#v after converting back, want %#v", tc.v1Path, got, want)
			}
		})
	}
}

// kep784Case is one row of TestKEP784FieldMapping.
type kep784Case struct {
	name   string
	v1     string // v1alpha1 body (without apiVersion/kind)
	v2Path string
	want   any    // value at v2Path in the written v1alpha2 (JSON form)
	v1Path string // "" when the field does not come back (dropped)
	wantV1 any    // value at v1Path after converting back; nil means want
}

// kep784Cases are the rows of KEP-784's tables, and every field v1alpha2
// keeps unchanged; TestEveryV1Alpha1FieldIsMapped checks that no v1alpha1
// field is missing.
var kep784Cases = []kep784Case{
	// Moved (KEP-784 "Following fields will be moved").
	{name: "conntrack.maxPerCore moves to linux.conntrack.maxPerCore", v1: "conntrack:\n  maxPerCore: 7\n", v2Path: "linux.conntrack.maxPerCore", want: 7.0, v1Path: "conntrack.maxPerCore"},
	{name: "conntrack.min moves to linux.conntrack.min", v1: "conntrack:\n  min: 9\n", v2Path: "linux.conntrack.min", want: 9.0, v1Path: "conntrack.min"},
	{name: "conntrack.tcpEstablishedTimeout moves to linux.conntrack", v1: "conntrack:\n  tcpEstablishedTimeout: 2h\n", v2Path: "linux.conntrack.tcpEstablishedTimeout", want: "2h0m0s", v1Path: "conntrack.tcpEstablishedTimeout"},
	{name: "conntrack.tcpCloseWaitTimeout moves to linux.conntrack", v1: "conntrack:\n  tcpCloseWaitTimeout: 5m\n", v2Path: "linux.conntrack.tcpCloseWaitTimeout", want: "5m0s", v1Path: "conntrack.tcpCloseWaitTimeout"},
	{name: "conntrack.tcpBeLiberal moves to linux.conntrack", v1: "conntrack:\n  tcpBeLiberal: true\n", v2Path: "linux.conntrack.tcpBeLiberal", want: true, v1Path: "conntrack.tcpBeLiberal"},
	{name: "conntrack.udpTimeout moves to linux.conntrack", v1: "conntrack:\n  udpTimeout: 31s\n", v2Path: "linux.conntrack.udpTimeout", want: "31s", v1Path: "conntrack.udpTimeout"},
	{name: "conntrack.udpStreamTimeout moves to linux.conntrack", v1: "conntrack:\n  udpStreamTimeout: 301s\n", v2Path: "linux.conntrack.udpStreamTimeout", want: "5m1s", v1Path: "conntrack.udpStreamTimeout"},
	{name: "oomScoreAdj moves to linux.oomScoreAdj", v1: "oomScoreAdj: -500\n", v2Path: "linux.oomScoreAdj", want: -500.0, v1Path: "oomScoreAdj"},
	{name: "iptables.masqueradeAll moves to linux.masqueradeAll in iptables mode", v1: "mode: iptables\niptables:\n  masqueradeAll: true\n", v2Path: "linux.masqueradeAll", want: true, v1Path: "iptables.masqueradeAll"},
	{name: "iptables.masqueradeAll moves to linux.masqueradeAll in ipvs mode (ipvs reads it)", v1: "mode: ipvs\niptables:\n  masqueradeAll: true\n", v2Path: "linux.masqueradeAll", want: true, v1Path: "iptables.masqueradeAll"},
	{name: "nftables.masqueradeAll moves to linux.masqueradeAll in nftables mode", v1: "mode: nftables\nnftables:\n  masqueradeAll: true\n", v2Path: "linux.masqueradeAll", want: true, v1Path: "nftables.masqueradeAll"},
	{name: "iptables.syncPeriod moves to syncPeriod in the default mode", v1: "iptables:\n  syncPeriod: 10s\n", v2Path: "syncPeriod", want: "10s", v1Path: "iptables.syncPeriod"},
	{name: "nftables.syncPeriod moves to syncPeriod in nftables mode", v1: "mode: nftables\nnftables:\n  syncPeriod: 11s\n", v2Path: "syncPeriod", want: "11s", v1Path: "nftables.syncPeriod"},
	{name: "ipvs.syncPeriod moves to syncPeriod in ipvs mode", v1: "mode: ipvs\nipvs:\n  syncPeriod: 12s\n", v2Path: "syncPeriod", want: "12s", v1Path: "ipvs.syncPeriod"},
	{name: "iptables.minSyncPeriod moves to minSyncPeriod in iptables mode", v1: "mode: iptables\niptables:\n  minSyncPeriod: 2s\n", v2Path: "minSyncPeriod", want: "2s", v1Path: "iptables.minSyncPeriod"},
	{name: "nftables.minSyncPeriod moves to minSyncPeriod in nftables mode", v1: "mode: nftables\nnftables:\n  minSyncPeriod: 3s\n", v2Path: "minSyncPeriod", want: "3s", v1Path: "nftables.minSyncPeriod"},
	{name: "ipvs.minSyncPeriod moves to minSyncPeriod in ipvs mode", v1: "mode: ipvs\nipvs:\n  minSyncPeriod: 4s\n", v2Path: "minSyncPeriod", want: "4s", v1Path: "ipvs.minSyncPeriod"},
	{name: "ipvs.minSyncPeriod's v1alpha1 default 0s survives in ipvs mode", v1: "mode: ipvs\n", v2Path: "minSyncPeriod", want: "0s", v1Path: "ipvs.minSyncPeriod"},
	{name: "kernelspace mode reads iptables.syncPeriod", v1: "mode: kernelspace\niptables:\n  syncPeriod: 13s\n", v2Path: "syncPeriod", want: "13s", v1Path: "iptables.syncPeriod"},

	// Changed.
	{name: "clusterCIDR becomes a one-element detectLocal.clusterCIDRs", v1: "clusterCIDR: 10.244.0.0/16\n", v2Path: "detectLocal.clusterCIDRs", want: []any{"10.244.0.0/16"}, v1Path: "clusterCIDR", wantV1: "10.244.0.0/16"},
	{name: "comma-separated dual-stack clusterCIDR splits into the list", v1: "clusterCIDR: 10.244.0.0/16,fd00:10:244::/56\n", v2Path: "detectLocal.clusterCIDRs", want: []any{"10.244.0.0/16", "fd00:10:244::/56"}, v1Path: "clusterCIDR", wantV1: "10.244.0.0/16,fd00:10:244::/56"},
	{name: "empty clusterCIDR is an empty list", v1: "clusterCIDR: \"\"\n", v2Path: "detectLocal.clusterCIDRs", want: nil, v1Path: "clusterCIDR", wantV1: ""},

	// Added.
	{name: "ipvs.masqueradeBit comes from iptables.masqueradeBit, which v1alpha1 ipvs mode reads", v1: "iptables:\n  masqueradeBit: 5\n", v2Path: "ipvs.masqueradeBit", want: 5.0, v1Path: "iptables.masqueradeBit"},
	{name: "ipvs.masqueradeBit defaults to 14", v1: "", v2Path: "ipvs.masqueradeBit", want: 14.0, v1Path: "iptables.masqueradeBit"},
	{name: "windowsRunAsService becomes windows.runAsService", v1: "windowsRunAsService: true\n", v2Path: "windows.runAsService", want: true, v1Path: "windowsRunAsService"},
	{name: "configHardFail is true for v1alpha1, whose errors are always fatal", v1: "", v2Path: "configHardFail", want: true},
	{name: "bindAddress with a node IP becomes nodeIPOverride", v1: "bindAddress: 192.0.2.7\n", v2Path: "nodeIPOverride", want: []any{"192.0.2.7"}, v1Path: "bindAddress", wantV1: "192.0.2.7"},
	{name: "bindAddress 0.0.0.0 means detect: empty nodeIPOverride", v1: "bindAddress: 0.0.0.0\n", v2Path: "nodeIPOverride", want: nil, v1Path: "bindAddress", wantV1: "0.0.0.0"},
	{name: "bindAddress :: means detect too, and comes back as 0.0.0.0", v1: "bindAddress: \"::\"\n", v2Path: "nodeIPOverride", want: nil, v1Path: "bindAddress", wantV1: "0.0.0.0"},
	{name: "ipFamilyPolicy is empty for v1alpha1", v1: "", v2Path: "ipFamilyPolicy", want: ""},
	{name: "ebpf.cgroupPath is kpng's default for v1alpha1 (kube-proxy's type has no ebpf section)", v1: "mode: ebpf\n", v2Path: "ebpf.cgroupPath", want: ""},
	{name: "ebpf.interfaces is kpng's default for v1alpha1", v1: "mode: ebpf\n", v2Path: "ebpf.interfaces", want: []any{"auto"}},
	{name: "ebpf.pinPath is kpng's default for v1alpha1", v1: "mode: ebpf\n", v2Path: "ebpf.pinPath", want: "/sys/fs/bpf/kpng"},

	// Different defaults: migrating keeps v1alpha1's behaviour explicitly.
	{name: "unset iptables.localhostNodePorts keeps v1alpha1's true", v1: "", v2Path: "iptables.localhostNodePorts", want: true, v1Path: "iptables.localhostNodePorts"},
	{name: "iptables.localhostNodePorts false carries over", v1: "iptables:\n  localhostNodePorts: false\n", v2Path: "iptables.localhostNodePorts", want: false, v1Path: "iptables.localhostNodePorts"},
	{name: "unset bindAddressHardFail keeps v1alpha1's false", v1: "", v2Path: "bindAddressHardFail", want: false, v1Path: "bindAddressHardFail"},
	{name: "bindAddressHardFail true carries over", v1: "bindAddressHardFail: true\n", v2Path: "bindAddressHardFail", want: true, v1Path: "bindAddressHardFail"},

	// Dropped.
	{name: "portRange is dropped", v1: "portRange: 30000-32767\n", v2Path: "portRange", want: "<absent>"},
	{name: "bindAddress is dropped from v1alpha2", v1: "bindAddress: 192.0.2.7\n", v2Path: "bindAddress", want: "<absent>"},
	{name: "clusterCIDR is dropped from v1alpha2", v1: "clusterCIDR: 10.0.0.0/8\n", v2Path: "clusterCIDR", want: "<absent>"},
	{name: "conntrack is dropped from the root", v1: "conntrack:\n  min: 1\n", v2Path: "conntrack", want: "<absent>"},
	{name: "iptables.syncPeriod is dropped from the iptables section", v1: "", v2Path: "iptables.syncPeriod", want: "<absent>"},
	{name: "nftables.masqueradeAll is dropped from the nftables section", v1: "", v2Path: "nftables.masqueradeAll", want: "<absent>"},
	{name: "ipvs.minSyncPeriod is dropped from the ipvs section", v1: "", v2Path: "ipvs.minSyncPeriod", want: "<absent>"},

	// Unchanged.
	{name: "featureGates unchanged", v1: "featureGates:\n  SomeGate: true\n", v2Path: "featureGates", want: map[string]any{"SomeGate": true}, v1Path: "featureGates"},
	{name: "clientConnection.kubeconfig unchanged", v1: "clientConnection:\n  kubeconfig: /k\n", v2Path: "clientConnection.kubeconfig", want: "/k", v1Path: "clientConnection.kubeconfig"},
	{name: "clientConnection.acceptContentTypes unchanged", v1: "clientConnection:\n  acceptContentTypes: a/b\n", v2Path: "clientConnection.acceptContentTypes", want: "a/b", v1Path: "clientConnection.acceptContentTypes"},
	{name: "clientConnection.contentType unchanged", v1: "clientConnection:\n  contentType: application/json\n", v2Path: "clientConnection.contentType", want: "application/json", v1Path: "clientConnection.contentType"},
	{name: "clientConnection.qps unchanged", v1: "clientConnection:\n  qps: 7.5\n", v2Path: "clientConnection.qps", want: 7.5, v1Path: "clientConnection.qps"},
	{name: "clientConnection.burst unchanged", v1: "clientConnection:\n  burst: 70\n", v2Path: "clientConnection.burst", want: 70.0, v1Path: "clientConnection.burst"},
	{name: "logging.verbosity unchanged", v1: "logging:\n  verbosity: 3\n", v2Path: "logging.verbosity", want: 3.0, v1Path: "logging.verbosity"},
	{name: "logging.format unchanged", v1: "logging:\n  format: json\n", v2Path: "logging.format", want: "json", v1Path: "logging.format"},
	{name: "logging.vmodule unchanged", v1: "logging:\n  vmodule: [{filePattern: 'proxier*', verbosity: 6}]\n", v2Path: "logging.vmodule", want: []any{map[string]any{"filePattern": "proxier*", "verbosity": 6.0}}, v1Path: "logging.vmodule"},
	{name: "logging.options unchanged", v1: "logging:\n  options:\n    text: {splitStream: true, infoBufferSize: 1Mi}\n", v2Path: "logging.options.text", want: map[string]any{"splitStream": true, "infoBufferSize": "1Mi"}, v1Path: "logging.options.text"},
	{name: "logging.flushFrequency unchanged", v1: "logging:\n  flushFrequency: 9s\n", v2Path: "logging.flushFrequency", want: "9s", v1Path: "logging.flushFrequency"},
	{name: "hostnameOverride unchanged", v1: "hostnameOverride: n1\n", v2Path: "hostnameOverride", want: "n1", v1Path: "hostnameOverride"},
	{name: "healthzBindAddress unchanged", v1: "healthzBindAddress: 192.0.2.1:1\n", v2Path: "healthzBindAddress", want: "192.0.2.1:1", v1Path: "healthzBindAddress"},
	{name: "metricsBindAddress unchanged", v1: "metricsBindAddress: 192.0.2.1:2\n", v2Path: "metricsBindAddress", want: "192.0.2.1:2", v1Path: "metricsBindAddress"},
	{name: "enableProfiling unchanged", v1: "enableProfiling: true\n", v2Path: "enableProfiling", want: true, v1Path: "enableProfiling"},
	{name: "showHiddenMetricsForVersion unchanged", v1: "showHiddenMetricsForVersion: \"1.35\"\n", v2Path: "showHiddenMetricsForVersion", want: "1.35", v1Path: "showHiddenMetricsForVersion"},
	{name: "mode unchanged", v1: "mode: ipvs\n", v2Path: "mode", want: "ipvs", v1Path: "mode"},
	{name: "iptables.masqueradeBit unchanged", v1: "iptables:\n  masqueradeBit: 3\n", v2Path: "iptables.masqueradeBit", want: 3.0, v1Path: "iptables.masqueradeBit"},
	{name: "ipvs.scheduler unchanged", v1: "ipvs:\n  scheduler: lc\n", v2Path: "ipvs.scheduler", want: "lc", v1Path: "ipvs.scheduler"},
	{name: "ipvs.excludeCIDRs unchanged", v1: "ipvs:\n  excludeCIDRs: [10.0.0.0/8]\n", v2Path: "ipvs.excludeCIDRs", want: []any{"10.0.0.0/8"}, v1Path: "ipvs.excludeCIDRs"},
	{name: "ipvs.strictARP unchanged", v1: "ipvs:\n  strictARP: true\n", v2Path: "ipvs.strictARP", want: true, v1Path: "ipvs.strictARP"},
	{name: "ipvs.tcpTimeout unchanged", v1: "ipvs:\n  tcpTimeout: 1m\n", v2Path: "ipvs.tcpTimeout", want: "1m0s", v1Path: "ipvs.tcpTimeout"},
	{name: "ipvs.tcpFinTimeout unchanged", v1: "ipvs:\n  tcpFinTimeout: 2m\n", v2Path: "ipvs.tcpFinTimeout", want: "2m0s", v1Path: "ipvs.tcpFinTimeout"},
	{name: "ipvs.udpTimeout unchanged", v1: "ipvs:\n  udpTimeout: 3m\n", v2Path: "ipvs.udpTimeout", want: "3m0s", v1Path: "ipvs.udpTimeout"},
	{name: "nftables.masqueradeBit unchanged", v1: "nftables:\n  masqueradeBit: 4\n", v2Path: "nftables.masqueradeBit", want: 4.0, v1Path: "nftables.masqueradeBit"},
	{name: "winkernel.networkName unchanged", v1: "winkernel:\n  networkName: l2bridge\n", v2Path: "winkernel.networkName", want: "l2bridge", v1Path: "winkernel.networkName"},
	{name: "winkernel.sourceVip unchanged", v1: "winkernel:\n  sourceVip: 10.0.0.1\n", v2Path: "winkernel.sourceVip", want: "10.0.0.1", v1Path: "winkernel.sourceVip"},
	{name: "winkernel.enableDSR unchanged", v1: "winkernel:\n  enableDSR: true\n", v2Path: "winkernel.enableDSR", want: true, v1Path: "winkernel.enableDSR"},
	{name: "winkernel.rootHnsEndpointName unchanged", v1: "winkernel:\n  rootHnsEndpointName: r\n", v2Path: "winkernel.rootHnsEndpointName", want: "r", v1Path: "winkernel.rootHnsEndpointName"},
	{name: "winkernel.forwardHealthCheckVip unchanged", v1: "winkernel:\n  forwardHealthCheckVip: true\n", v2Path: "winkernel.forwardHealthCheckVip", want: true, v1Path: "winkernel.forwardHealthCheckVip"},
	{name: "detectLocalMode unchanged", v1: "detectLocalMode: NodeCIDR\n", v2Path: "detectLocalMode", want: "NodeCIDR", v1Path: "detectLocalMode"},
	{name: "detectLocal.bridgeInterface unchanged", v1: "detectLocal:\n  bridgeInterface: cbr0\n", v2Path: "detectLocal.bridgeInterface", want: "cbr0", v1Path: "detectLocal.bridgeInterface"},
	{name: "detectLocal.interfaceNamePrefix unchanged", v1: "detectLocal:\n  interfaceNamePrefix: veth\n", v2Path: "detectLocal.interfaceNamePrefix", want: "veth", v1Path: "detectLocal.interfaceNamePrefix"},
	{name: "nodePortAddresses unchanged", v1: "nodePortAddresses: [primary]\n", v2Path: "nodePortAddresses", want: []any{"primary"}, v1Path: "nodePortAddresses"},
	{name: "configSyncPeriod unchanged", v1: "configSyncPeriod: 1h\n", v2Path: "configSyncPeriod", want: "1h0m0s", v1Path: "configSyncPeriod"},
}

// TestV1Alpha1ConversionErrors checks that data v1alpha2 cannot hold is an
// error naming the fields, and data that says nothing new is accepted.
func TestV1Alpha1ConversionErrors(t *testing.T) {
	cases := []struct {
		name    string
		v1      string
		wantErr []string // substrings of the error; none means success
	}{
		{name: "iptables and nftables sync periods that disagree are an error naming both", v1: "iptables:\n  syncPeriod: 30s\nnftables:\n  syncPeriod: 10s\n", wantErr: []string{"nftables.syncPeriod", "iptables.syncPeriod"}},
		{name: "disagreeing sync periods are an error in nftables mode too", v1: "mode: nftables\niptables:\n  syncPeriod: 20s\nnftables:\n  syncPeriod: 10s\n", wantErr: []string{"iptables.syncPeriod", "nftables.syncPeriod"}},
		{name: "a non-default ipvs.minSyncPeriod in iptables mode is an error", v1: "mode: iptables\nipvs:\n  minSyncPeriod: 5s\n", wantErr: []string{"ipvs.minSyncPeriod", "iptables.minSyncPeriod"}},
		{name: "masqueradeAll differing between iptables and nftables is an error", v1: "mode: nftables\niptables:\n  masqueradeAll: true\n", wantErr: []string{"iptables.masqueradeAll", "nftables.masqueradeAll", "linux.masqueradeAll"}},
		{name: "an unparsable bindAddress is an error", v1: "bindAddress: nodeA\n", wantErr: []string{"bindAddress"}},
		{name: "only the active mode's sync period set is accepted", v1: "mode: ipvs\nipvs:\n  syncPeriod: 5s\n  minSyncPeriod: 1s\n"},
		{name: "inactive sync periods equal to the active one are accepted", v1: "iptables:\n  syncPeriod: 5s\nipvs:\n  syncPeriod: 5s\nnftables:\n  syncPeriod: 5s\n"},
		{name: "inactive sync periods spelled as their defaults are accepted", v1: "mode: nftables\nnftables:\n  syncPeriod: 1m\niptables:\n  syncPeriod: 30s\nipvs:\n  syncPeriod: 30s\n"},
		{name: "masqueradeAll true in both sections is accepted", v1: "iptables:\n  masqueradeAll: true\nnftables:\n  masqueradeAll: true\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(v1alpha1Header + tc.v1))
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Load succeeded, want an error")
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

// TestToV1Alpha1Errors checks that v1alpha2 values v1alpha1 cannot express
// are an error naming them.
func TestToV1Alpha1Errors(t *testing.T) {
	cases := []struct {
		name    string
		v2      string
		wantErr []string
	}{
		{name: "two nodeIPOverride IPs do not fit bindAddress", v2: "nodeIPOverride: [192.0.2.1, \"2001:db8::1\"]\n", wantErr: []string{"nodeIPOverride"}},
		{name: "an empty nodeIPOverride entry would come back as none (found by FuzzLoad)", v2: "nodeIPOverride:\n-\n", wantErr: []string{"nodeIPOverride[0]"}},
		{name: "an unspecified nodeIPOverride IP would come back as none", v2: "nodeIPOverride: [0.0.0.0]\n", wantErr: []string{"nodeIPOverride[0]"}},
		{name: "a nodeIPOverride entry that is no IP would not load back", v2: "nodeIPOverride: [node-a]\n", wantErr: []string{"nodeIPOverride[0]"}},
		{name: "an ipFamilyPolicy has no v1alpha1 field", v2: "ipFamilyPolicy: PreferDualStack\n", wantErr: []string{"ipFamilyPolicy"}},
		{name: "configHardFail false has no v1alpha1 field", v2: "configHardFail: false\n", wantErr: []string{"configHardFail"}},
		{name: "an ipvs.masqueradeBit unlike iptables.masqueradeBit has no v1alpha1 field", v2: "ipvs:\n  masqueradeBit: 3\n", wantErr: []string{"ipvs.masqueradeBit", "iptables.masqueradeBit"}},
		{name: "minSyncPeriod 0s in iptables mode would become 1s", v2: "minSyncPeriod: 0s\n", wantErr: []string{"minSyncPeriod"}},
		{name: "every inexpressible field is named at once", v2: "configHardFail: false\nipFamilyPolicy: SingleStack\n", wantErr: []string{"configHardFail", "ipFamilyPolicy"}},
		{name: "an ebpf.cgroupPath has no v1alpha1 field", v2: "mode: ebpf\nebpf:\n  cgroupPath: /sys/fs/cgroup/kpng\n", wantErr: []string{"ebpf.cgroupPath", "/sys/fs/cgroup/kpng", "no ebpf section"}},
		{name: "ebpf.interfaces other than [auto] have no v1alpha1 field", v2: "mode: ebpf\nebpf:\n  interfaces: [eth0]\n", wantErr: []string{"ebpf.interfaces", "eth0"}},
		{name: "no ebpf.interfaces (an empty list) has no v1alpha1 field", v2: "mode: ebpf\nebpf:\n  interfaces: []\n", wantErr: []string{"ebpf.interfaces"}},
		{name: "an ebpf.pinPath has no v1alpha1 field", v2: "mode: ebpf\nebpf:\n  pinPath: /sys/fs/bpf/x\n", wantErr: []string{"ebpf.pinPath", "/sys/fs/bpf/x"}},
		{name: "ebpf fields are refused outside mode ebpf too: the file would lose them", v2: "mode: nftables\nebpf:\n  pinPath: /sys/fs/bpf/x\n  cgroupPath: /c\n  interfaces: [eth1]\n", wantErr: []string{"ebpf.pinPath", "ebpf.cgroupPath", "ebpf.interfaces"}},
		{name: "the default ebpf section converts, written out or not", v2: "mode: ebpf\nebpf:\n  cgroupPath: \"\"\n  interfaces: [auto]\n  pinPath: /sys/fs/bpf/kpng\n"},
		{name: "minSyncPeriod 0s in ipvs mode is fine", v2: "mode: ipvs\nminSyncPeriod: 0s\n"},
		{name: "one nodeIPOverride IP becomes bindAddress", v2: "nodeIPOverride: [\"2001:db8::1\"]\n"},
		{name: "windows.runAsService true is v1alpha1's windowsRunAsService", v2: "windows:\n  runAsService: true\n"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			loaded := mustLoad(t, v1alpha2Header+tc.v2)
			out, err := MarshalV1Alpha1(loaded.Config)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatalf("MarshalV1Alpha1: %v", err)
				}
				// What converts must come back unchanged.
				again := mustLoad(t, string(out))
				if !equality.Semantic.DeepEqual(again.Config, loaded.Config) {
					t.Errorf("v1alpha2 -> v1alpha1 -> hub changed the configuration:\n%s", out)
				}
				return
			}
			if err == nil {
				t.Fatalf("MarshalV1Alpha1 succeeded, want an error:\n%s", out)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not name %q", err, s)
				}
			}
		})
	}
}

// TestConversionDoesNotModifyInput guards the shallow-copy-then-default
// approach of the converters.
func TestConversionDoesNotModifyInput(t *testing.T) {
	loaded := mustLoad(t, v1alpha1Header+"featureGates:\n  A: true\nnodePortAddresses: [10.0.0.0/8]\n")
	before := loaded.Config.DeepCopy()
	v2 := ToV1Alpha2(loaded.Config)
	v2.FeatureGates["B"] = true
	v2.NodePortAddresses[0] = "changed"
	hub := FromV1Alpha2(v2)
	hub.FeatureGates["C"] = true
	if !equality.Semantic.DeepEqual(before, loaded.Config) {
		t.Errorf("conversion shares memory with its input: %#v", loaded.Config)
	}
	if _, ok := v2.FeatureGates["C"]; ok {
		t.Error("FromV1Alpha2 shares the featureGates map with its input")
	}
}

// TestEBPFInterfacesEmptyMeansNone: an unset (or null) ebpf.interfaces
// takes the default [auto], an empty list means no interfaces, and each
// survives a write and a re-read, as minSyncPeriod's null and 0s do.
func TestEBPFInterfacesEmptyMeansNone(t *testing.T) {
	cases := []struct {
		name, doc string
		want      []string
		written   any // ebpf.interfaces in the written v1alpha2 (JSON form)
	}{
		{name: "unset is [auto]", doc: "mode: ebpf\n", want: []string{"auto"}, written: []any{"auto"}},
		{name: "null is [auto]", doc: "mode: ebpf\nebpf:\n  interfaces: null\n", want: []string{"auto"}, written: []any{"auto"}},
		{name: "an empty list is none", doc: "mode: ebpf\nebpf:\n  interfaces: []\n", want: []string{}, written: []any{}},
		{name: "names are kept in order", doc: "mode: ebpf\nebpf:\n  interfaces: [eth1, eth0]\n", want: []string{"eth1", "eth0"}, written: []any{"eth1", "eth0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			loaded := mustLoad(t, v1alpha2Header+tc.doc)
			if got := loaded.Config.EBPF.Interfaces; got == nil || !slices.Equal(got, tc.want) {
				t.Fatalf("interfaces = %#v, want %#v", got, tc.want)
			}
			out := mustMarshal(t, loaded.Config)
			if got, _ := lookup(yamlMap(t, out), "ebpf.interfaces"); !reflect.DeepEqual(got, tc.written) {
				t.Errorf("written interfaces = %#v, want %#v:\n%s", got, tc.written, out)
			}
			again := mustLoad(t, string(out))
			if !slices.Equal(again.Config.EBPF.Interfaces, tc.want) {
				t.Errorf("re-read interfaces = %#v, want %#v", again.Config.EBPF.Interfaces, tc.want)
			}
		})
	}
	// A hub built in Go with a nil list means none too: it is written as
	// [], never as null (which would read back as [auto]).
	c := Default()
	c.EBPF.Interfaces = nil
	if got, _ := lookup(yamlMap(t, mustMarshal(t, c)), "ebpf.interfaces"); !reflect.DeepEqual(got, []any{}) {
		t.Errorf("a nil hub list is written as %#v, want []", got)
	}
}
