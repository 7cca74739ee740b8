package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/source/file"
)

// CI's budget: the fixed seeds every run compares (hack/test.sh).
const (
	ciSeed     = 1
	ciClusters = 300
	ciSteps    = 8
)

func quietUpstream(t *testing.T) {
	t.Helper()
	klog.SetLogger(logr.Discard())
	if err := checkUpstreamGates(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := setUpstreamGates(Gates{}); err != nil {
			t.Error(err)
		}
	})
}

// TestAgreesWithKubeProxy is difftest on CI's budget: kpng's brain and
// kube-proxy 1.36's pkg/proxy agree on every compared decision.
func TestAgreesWithKubeProxy(t *testing.T) {
	quietUpstream(t)
	st, err := Run(Options{N: ciClusters, Seed: ciSeed, Steps: ciSteps, MaxFailures: 3}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range st.Failures {
		var buf bytes.Buffer
		report(&buf, f)
		t.Error(buf.String())
	}
	t.Logf("%d clusters, %d steps, %d decisions compared (%d proxied), %d ambiguous skipped, %d clusters with a gate off",
		st.Clusters, st.Steps, st.Ports, st.Proxied, st.Ambiguous, st.GatesOff)
	// The generator must reach what the comparison is about, or a pass
	// means little.
	if st.Proxied < 10*ciClusters || st.NotProxied < ciClusters || st.GatesOff == 0 || st.Ambiguous == 0 {
		t.Errorf("generator too narrow: %+v", st)
	}
}

// TestReportReadsBackAsTheCluster: the YAML a mismatch prints is what
// `kpng file` reads, object for object.
func TestReportReadsBackAsTheCluster(t *testing.T) {
	for seed := uint64(1); seed <= 200; seed++ {
		c := newGen(seed).cluster()
		want, err := Objects(c)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		y, err := YAML(c, "seed")
		if err != nil {
			t.Fatal(err)
		}
		got, problems, err := file.Parse(bytes.NewReader(y))
		if err != nil || len(problems) > 0 {
			t.Fatalf("seed %d: %v %v\n%s", seed, err, problems, y)
		}
		same := len(got.Services) == len(want.Services) && len(got.EndpointSlices) == len(want.EndpointSlices) && len(got.Nodes) == len(want.Nodes)
		for i := 0; same && i < len(got.Services); i++ {
			same = proto.Equal(got.Services[i], want.Services[i])
		}
		for i := 0; same && i < len(got.EndpointSlices); i++ {
			same = proto.Equal(got.EndpointSlices[i], want.EndpointSlices[i])
		}
		for i := 0; same && i < len(got.Nodes); i++ {
			same = proto.Equal(got.Nodes[i], want.Nodes[i])
		}
		if !same {
			t.Fatalf("seed %d: the printed YAML reads back differently:\n%s", seed, y)
		}
	}
}

// TestShrinkKeepsTheFailure: shrinking a failing cluster keeps it failing
// and makes it smaller.
func TestShrinkKeepsTheFailure(t *testing.T) {
	// A made-up failure: "a Service in namespace prod with an external
	// IP"; the shrunk cluster should be that Service alone.
	fails := func(c *Cluster) bool {
		for _, s := range c.Services {
			if s.Namespace == "prod" && len(s.Spec.ExternalIPs) > 0 {
				return true
			}
		}
		return false
	}
	for seed := uint64(1); seed <= 500; seed++ {
		c := newGen(seed).cluster()
		if !fails(c) {
			continue
		}
		got := shrink(c, fails)
		if !fails(got) || len(got.Services) != 1 || len(got.Slices) != 0 || len(got.Nodes) != 0 {
			t.Fatalf("seed %d: shrunk to %d services, %d slices, %d nodes", seed, len(got.Services), len(got.Slices), len(got.Nodes))
		}
		return
	}
	t.Fatal("no seed drew a failing cluster")
}

// TestRunReportsAMismatch: a disagreement is reported with its seed and a
// cluster file, and the exit code says so.
func TestRunReportsAMismatch(t *testing.T) {
	quietUpstream(t)
	// Make kpng wrong by hand: a result with an extra port.
	kp := map[string]Result{"n": {"IPv4 a/b:c/TCP": Port{}}}
	c := &Cluster{}
	d, err := compare(c, kp, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(d["n"]) != 1 || !strings.Contains(d["n"][0], "kpng proxies it, kube-proxy does not") {
		t.Fatalf("diffs %v", d)
	}
	var buf bytes.Buffer
	report(&buf, Failure{Seed: 42, Diffs: d, After: newGen(42).cluster(), Reproduced: true})
	for _, want := range []string{"MISMATCH seed=42", "-seed 42 -n 1", "kind: Service", "--node-name n"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, buf.String())
		}
	}
}
