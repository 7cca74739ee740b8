package config

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	logsapi "k8s.io/component-base/logs/api/v1"
	kpv1alpha1 "k8s.io/kube-proxy/config/v1alpha1"

	"github.com/kpng/kpng/config/v1alpha2"
)

// These tests tie the hand-written tables of the other tests to the Go types,
// so that a field added to either version (by a new k8s.io/kube-proxy, or to
// v1alpha2 here) without a conversion test fails a test instead of going
// unnoticed.

// leafPaths lists the JSON paths of the fields of struct type t: structs of
// the configuration's own packages (and the logging configuration) are
// walked into; everything else (durations, lists, maps, the logging
// format options) is a leaf.
func leafPaths(t reflect.Type) []string {
	walkInto := func(t reflect.Type) bool {
		switch t.PkgPath() {
		case "k8s.io/kube-proxy/config/v1alpha1", "github.com/kpng/kpng/config/v1alpha2", "k8s.io/component-base/config/v1alpha1":
			return true
		}
		return t == reflect.TypeFor[logsapi.LoggingConfiguration]()
	}
	var out []string
	var walk func(t reflect.Type, prefix string)
	walk = func(t reflect.Type, prefix string) {
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if f.Type == reflect.TypeFor[metav1.TypeMeta]() || name == "-" {
				continue
			}
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct && walkInto(ft) {
				walk(ft, prefix+name+".")
				continue
			}
			out = append(out, prefix+name)
		}
	}
	walk(t, "")
	slices.Sort(out)
	return out
}

// covers reports whether path is leaf or a field below it.
func covers(path, leaf string) bool {
	return path == leaf || strings.HasPrefix(path, leaf+".")
}

func TestLeafPathsSeesNestedFields(t *testing.T) {
	// The walk itself must see what the coverage tests rely on, or they
	// could pass on an empty list.
	v1, v2 := leafPaths(reflect.TypeFor[kpv1alpha1.KubeProxyConfiguration]()), leafPaths(reflect.TypeFor[v1alpha2.KubeProxyConfiguration]())
	for _, want := range []string{"conntrack.udpStreamTimeout", "clientConnection.kubeconfig", "logging.options", "portRange", "bindAddress"} {
		if !slices.Contains(v1, want) {
			t.Errorf("v1alpha1 leaves %q lack %s", v1, want)
		}
	}
	for _, want := range []string{"linux.conntrack.min", "windows.runAsService", "ipvs.masqueradeBit", "logging.vmodule", "configHardFail"} {
		if !slices.Contains(v2, want) {
			t.Errorf("v1alpha2 leaves %q lack %s", v2, want)
		}
	}
	for _, gone := range []string{"portRange", "bindAddress", "clusterCIDR", "conntrack.min", "iptables.syncPeriod", "nftables.masqueradeAll", "apiVersion", "kind"} {
		if slices.Contains(v2, gone) {
			t.Errorf("v1alpha2 leaves include %s, which KEP-784 drops or moves", gone)
		}
	}
}

// TestEveryV1Alpha1FieldIsMapped checks that every field of kube-proxy's
// v1alpha1 type has a row in kep784Cases that sets it and follows it back
// (or, for dropped fields, shows it gone from v1alpha2).
func TestEveryV1Alpha1FieldIsMapped(t *testing.T) {
	for _, leaf := range leafPaths(reflect.TypeFor[kpv1alpha1.KubeProxyConfiguration]()) {
		found := false
		for _, c := range kep784Cases {
			back := c.v1Path != "" && covers(c.v1Path, leaf)
			dropped := c.want == "<absent>" && c.v2Path == leaf && strings.Contains(c.v1, strings.Split(leaf, ".")[0]+":")
			if back || dropped {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("v1alpha1 field %s has no row in kep784Cases (TestKEP784FieldMapping)", leaf)
		}
	}
}

// v1alpha2Case sets one v1alpha2 field to a value that is not its default.
type v1alpha2Case struct {
	path  string // dotted, as in the file
	value string // YAML (flow style for lists and maps)
	want  any    // the value at path once written back (JSON form)
}

// v1alpha2Cases set every v1alpha2 field; TestEveryV1Alpha2FieldRoundTrips
// checks each, and that none is missing.
var v1alpha2Cases = []v1alpha2Case{
	{"linux.conntrack.maxPerCore", "7", 7.0},
	{"linux.conntrack.min", "9", 9.0},
	{"linux.conntrack.tcpEstablishedTimeout", "2h", "2h0m0s"},
	{"linux.conntrack.tcpCloseWaitTimeout", "5m", "5m0s"},
	{"linux.conntrack.tcpBeLiberal", "true", true},
	{"linux.conntrack.udpTimeout", "31s", "31s"},
	{"linux.conntrack.udpStreamTimeout", "301s", "5m1s"},
	{"linux.masqueradeAll", "true", true},
	{"linux.oomScoreAdj", "-500", -500.0},
	{"windows.runAsService", "true", true},
	{"featureGates", "{SomeGate: true, Other: false}", map[string]any{"SomeGate": true, "Other": false}},
	{"clientConnection.kubeconfig", "/k", "/k"},
	{"clientConnection.acceptContentTypes", "a/b", "a/b"},
	{"clientConnection.contentType", "application/json", "application/json"},
	{"clientConnection.qps", "7.5", 7.5},
	{"clientConnection.burst", "70", 70.0},
	{"logging.format", "json", "json"},
	{"logging.flushFrequency", "9s", "9s"},
	{"logging.verbosity", "3", 3.0},
	{"logging.vmodule", "[{filePattern: 'proxier*', verbosity: 6}]", []any{map[string]any{"filePattern": "proxier*", "verbosity": 6.0}}},
	{"logging.options", "{text: {splitStream: true, infoBufferSize: 1Mi}}", map[string]any{"text": map[string]any{"splitStream": true, "infoBufferSize": "1Mi"}, "json": map[string]any{"infoBufferSize": "0"}}},
	{"hostnameOverride", "n1", "n1"},
	{"nodeIPOverride", "[192.0.2.1, '2001:db8::1']", []any{"192.0.2.1", "2001:db8::1"}},
	{"ipFamilyPolicy", "RequireDualStack", "RequireDualStack"},
	{"healthzBindAddress", "192.0.2.1:1", "192.0.2.1:1"},
	{"metricsBindAddress", "192.0.2.1:2", "192.0.2.1:2"},
	{"bindAddressHardFail", "false", false},
	{"enableProfiling", "true", true},
	{"showHiddenMetricsForVersion", "'1.35'", "1.35"},
	{"configHardFail", "false", false},
	{"mode", "nftables", "nftables"},
	{"iptables.masqueradeBit", "3", 3.0},
	{"iptables.localhostNodePorts", "true", true},
	{"ipvs.masqueradeBit", "5", 5.0},
	{"ipvs.scheduler", "lc", "lc"},
	{"ipvs.excludeCIDRs", "[10.0.0.0/8]", []any{"10.0.0.0/8"}},
	{"ipvs.strictARP", "true", true},
	{"ipvs.tcpTimeout", "1m", "1m0s"},
	{"ipvs.tcpFinTimeout", "2m", "2m0s"},
	{"ipvs.udpTimeout", "3m", "3m0s"},
	{"nftables.masqueradeBit", "4", 4.0},
	{"winkernel.networkName", "l2bridge", "l2bridge"},
	{"winkernel.sourceVip", "10.0.0.1", "10.0.0.1"},
	{"winkernel.enableDSR", "true", true},
	{"winkernel.rootHnsEndpointName", "r", "r"},
	{"winkernel.forwardHealthCheckVip", "true", true},
	{"ebpf.cgroupPath", "/sys/fs/cgroup/kpng.slice", "/sys/fs/cgroup/kpng.slice"},
	{"ebpf.interfaces", "[eth0, cbr0]", []any{"eth0", "cbr0"}},
	{"ebpf.pinPath", "/sys/fs/bpf/other", "/sys/fs/bpf/other"},
	{"detectLocalMode", "NodeCIDR", "NodeCIDR"},
	{"detectLocal.bridgeInterface", "cbr0", "cbr0"},
	{"detectLocal.clusterCIDRs", "[10.0.0.0/8, 'fd00::/48']", []any{"10.0.0.0/8", "fd00::/48"}},
	{"detectLocal.interfaceNamePrefix", "veth", "veth"},
	{"nodePortAddresses", "[primary]", []any{"primary"}},
	{"syncPeriod", "10s", "10s"},
	{"minSyncPeriod", "0s", "0s"},
	{"configSyncPeriod", "1h", "1h0m0s"},
}

// nested writes value at a dotted path as a YAML document body.
func nested(path, value string) string {
	var b strings.Builder
	keys := strings.Split(path, ".")
	for i, k := range keys {
		b.WriteString(strings.Repeat("  ", i) + k + ":")
		if i == len(keys)-1 {
			b.WriteString(" " + value)
		}
		b.WriteString("\n")
	}
	return b.String()
}

// TestEveryV1Alpha2FieldRoundTrips sets each v1alpha2 field alone to a
// value that is not its default, and checks v1alpha2 -> hub -> v1alpha2
// keeps it at its place, and that loading the result gives the same
// configuration; then that every field of the v1alpha2 type has a case.
func TestEveryV1Alpha2FieldRoundTrips(t *testing.T) {
	defaults := yamlMap(t, mustMarshal(t, Default()))
	for _, c := range v1alpha2Cases {
		t.Run(c.path, func(t *testing.T) {
			loaded := mustLoad(t, v1alpha2Header+nested(c.path, c.value))
			if !loaded.Set.Has(c.path) {
				t.Errorf("Set %q lacks %s", loaded.Set.List(), c.path)
			}
			if def, _ := lookup(defaults, c.path); reflect.DeepEqual(def, c.want) {
				t.Fatalf("the case's value %#v is the default: it cannot show a lost field", c.want)
			}
			out := mustMarshal(t, loaded.Config)
			got, ok := lookup(yamlMap(t, out), c.path)
			if !ok || !reflect.DeepEqual(got, c.want) {
				t.Errorf("written %s = %#v, want %#v:\n%s", c.path, got, c.want, out)
			}
			again := mustLoad(t, string(out))
			if !equality.Semantic.DeepEqual(again.Config, loaded.Config) {
				t.Errorf("re-loading the written file gives another configuration:\n%#v\n%#v", again.Config, loaded.Config)
			}
		})
	}
	for _, leaf := range leafPaths(reflect.TypeFor[v1alpha2.KubeProxyConfiguration]()) {
		if !slices.ContainsFunc(v1alpha2Cases, func(c v1alpha2Case) bool { return covers(c.path, leaf) }) {
			t.Errorf("v1alpha2 field %s has no case in v1alpha2Cases", leaf)
		}
	}
}

// TestEveryFieldFixtureSetsEveryField keeps the every-field fixture (and so
// its golden migration) complete.
func TestEveryFieldFixtureSetsEveryField(t *testing.T) {
	data, err := os.ReadFile("testdata/v1alpha1/every-field.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set := setFromRaw(yamlMap(t, data))
	for _, leaf := range leafPaths(reflect.TypeFor[kpv1alpha1.KubeProxyConfiguration]()) {
		if !set.Has(leaf) {
			t.Errorf("testdata/v1alpha1/every-field.yaml does not set %s", leaf)
		}
	}
}

// mustMarshal is Marshal that fails the test on error.
func mustMarshal(t *testing.T, c *KubeProxyConfiguration) []byte {
	t.Helper()
	out, err := Marshal(c)
	if err != nil {
		t.Fatalf("Marshal: %v", err)
	}
	return out
}

// TestDocsListEveryField checks that docs/config.md's v1alpha2 table and
// v1alpha1 table name every field of their Go type, by full path.
func TestDocsListEveryField(t *testing.T) {
	data, err := os.ReadFile("../docs/config.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	section := func(title string) string {
		start := strings.Index(doc, "\n"+title+"\n")
		if start < 0 {
			t.Fatalf("docs/config.md has no %q section", title)
		}
		rest := doc[start+len(title)+2:]
		if end := strings.Index(rest, "\n## "); end >= 0 {
			rest = rest[:end]
		}
		return rest
	}
	for _, c := range []struct {
		title string
		typ   reflect.Type
	}{
		{"## v1alpha2 fields", reflect.TypeFor[v1alpha2.KubeProxyConfiguration]()},
		{"## v1alpha1 fields", reflect.TypeFor[kpv1alpha1.KubeProxyConfiguration]()},
	} {
		// The names in the first cell of each table row.
		listed := map[string]bool{}
		for _, line := range strings.Split(section(c.title), "\n") {
			cells := strings.Split(line, "|")
			if len(cells) < 3 || cells[0] != "" {
				continue
			}
			for _, m := range regexp.MustCompile("`([^`]+)`").FindAllStringSubmatch(cells[1], -1) {
				listed[m[1]] = true
			}
		}
		for _, leaf := range leafPaths(c.typ) {
			if !listed[leaf] {
				t.Errorf("docs/config.md %q has no row for `%s`", c.title, leaf)
			}
		}
	}
}
