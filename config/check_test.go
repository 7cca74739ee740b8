package config

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

func TestCheck(t *testing.T) {
	t.Run("a valid configuration passes unchanged", func(t *testing.T) {
		c := Default()
		got, warnings, err := Check(c)
		if err != nil || len(warnings) != 0 || got != c {
			t.Fatalf("Check = %v, %v, %v", got, warnings, err)
		}
	})
	t.Run("configHardFail true makes any error fatal and names the field", func(t *testing.T) {
		c := Default()
		c.Linux.OOMScoreAdj = 5000
		_, _, err := Check(c)
		if err == nil || !strings.Contains(err.Error(), "linux.oomScoreAdj") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("configHardFail false resets bad fields to defaults and warns", func(t *testing.T) {
		c := Default()
		c.ConfigHardFail = false
		c.Linux.OOMScoreAdj = 5000
		c.NodeIPOverride = []string{"192.0.2.1", "bogus"}
		c.FeatureGates = map[string]bool{"Good": true, "bad gate": true}
		c.Mode = ProxyModeIPVS
		c.IPVS.ExcludeCIDRs = []string{"nope"}
		c.HostnameOverride = "kept"
		before := c.DeepCopy()

		got, warnings, err := Check(c)
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		if !equality.Semantic.DeepEqual(c, before) {
			t.Error("Check modified its input")
		}
		if got.Linux.OOMScoreAdj != -999 || got.NodeIPOverride != nil || got.IPVS.ExcludeCIDRs != nil {
			t.Errorf("bad fields not reset: oom %d, nodeIPOverride %q, excludeCIDRs %q", got.Linux.OOMScoreAdj, got.NodeIPOverride, got.IPVS.ExcludeCIDRs)
		}
		if !got.FeatureGates["Good"] || len(got.FeatureGates) != 1 {
			t.Errorf("featureGates = %v, want only the bad gate dropped", got.FeatureGates)
		}
		if got.HostnameOverride != "kept" || got.Mode != ProxyModeIPVS || got.ConfigHardFail {
			t.Errorf("good fields changed: %+v", got)
		}
		var fields []string
		for _, w := range warnings {
			fields = append(fields, w.Field)
		}
		for _, f := range []string{"linux.oomScoreAdj", "nodeIPOverride[1]", "featureGates[bad gate]", "ipvs.excludeCIDRs[0]"} {
			if !strings.Contains(strings.Join(fields, " "), f) {
				t.Errorf("warnings %q do not name %q", fields, f)
			}
		}
	})
	t.Run("related fields are reset together", func(t *testing.T) {
		c := Default()
		c.ConfigHardFail = false
		c.SyncPeriod = 500 * time.Millisecond // valid alone, but below the default minSyncPeriod
		c.MinSyncPeriod = time.Minute
		c.DetectLocalMode = LocalModeBridgeInterface
		got, warnings, err := Check(c)
		if err != nil {
			t.Fatalf("Check: %v", err)
		}
		if got.SyncPeriod != 30*time.Second || got.MinSyncPeriod != time.Second || got.DetectLocalMode != "" {
			t.Errorf("got sync %v min %v detectLocalMode %q", got.SyncPeriod, got.MinSyncPeriod, got.DetectLocalMode)
		}
		if len(warnings) == 0 {
			t.Error("no warnings")
		}
	})
	t.Run("configHardFail false resets a bad ebpf field alone", func(t *testing.T) {
		c := Default()
		c.ConfigHardFail = false
		c.Mode = ProxyModeEBPF
		c.EBPF = EBPFConfiguration{CgroupPath: "/sys/fs/cgroup/kpng", Interfaces: []string{"eth0", "bad name"}, PinPath: "relative"}
		got, warnings, err := CheckModes(c, ProxyModeEBPF)
		if err != nil {
			t.Fatalf("CheckModes: %v", err)
		}
		want := EBPFConfiguration{CgroupPath: "/sys/fs/cgroup/kpng", Interfaces: []string{"auto"}, PinPath: "/sys/fs/bpf/kpng"}
		if !equality.Semantic.DeepEqual(got.EBPF, want) {
			t.Errorf("ebpf = %+v, want %+v (the good cgroupPath kept, the bad fields at their defaults)", got.EBPF, want)
		}
		var fields []string
		for _, w := range warnings {
			fields = append(fields, w.Field)
		}
		if !slices.Contains(fields, "ebpf.interfaces[1]") || !slices.Contains(fields, "ebpf.pinPath") {
			t.Errorf("warnings name %q, want ebpf.interfaces[1] and ebpf.pinPath", fields)
		}
	})
	t.Run("a nil configuration is an error", func(t *testing.T) {
		if _, _, err := Check(nil); err == nil {
			t.Error("no error")
		}
	})
	t.Run("an error that resetting cannot fix stays fatal", func(t *testing.T) {
		c := Default()
		c.ConfigHardFail = false
		c.Mode = "bogus"
		// A validator that never accepts the result stands in for a rule
		// the reset table does not cover.
		_, _, err := check(c, func(*KubeProxyConfiguration) field.ErrorList {
			return field.ErrorList{field.Invalid(field.NewPath("mode"), "x", "always wrong")}
		})
		if err == nil || !strings.Contains(err.Error(), "even after resetting") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestCheckModes(t *testing.T) {
	c := Default()
	c.Mode = ProxyModeEBPF
	if _, _, err := Check(c); err == nil || !strings.Contains(err.Error(), `mode: Unsupported value: "ebpf"`) {
		t.Errorf("Check of mode ebpf: err = %v, want it refused as kube-proxy refuses it", err)
	}
	got, warnings, err := CheckModes(c, ProxyModeNFTables, ProxyModeEBPF)
	if err != nil || len(warnings) != 0 || got.Mode != ProxyModeEBPF {
		t.Errorf("CheckModes(ebpf) = %v, %v, %v; want the mode accepted", got, warnings, err)
	}
	c.Mode = "bogus"
	if _, _, err := CheckModes(c, ProxyModeEBPF); err == nil || !strings.Contains(err.Error(), `"ebpf"`) {
		t.Errorf("CheckModes of an unknown mode: err = %v, want it refused, naming ebpf among the valid ones", err)
	}
}
