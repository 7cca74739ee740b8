package kubeproxy

import (
	"slices"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/kpng/kpng/backends/ipvs"
)

// A kube-proxy configuration of mode ipvs sets the ipvs backend's flags:
// kube-proxy's file, unchanged, drives kpng's to-ipvs.
func TestConfigureBackendIPVS(t *testing.T) {
	p := &ipvs.Plugin{Config: ipvs.DefaultConfig()}
	fs := pflag.NewFlagSet("to-ipvs", pflag.ContinueOnError)
	fs.AddGoFlagSet(PluginFlags("ipvs", p))
	doc := v1alpha1Header + `mode: ipvs
iptables:
  masqueradeBit: 12
ipvs:
  scheduler: lc
  excludeCIDRs: [10.200.0.0/16]
  strictARP: true
  tcpTimeout: 900s
  tcpFinTimeout: 120s
  udpTimeout: 300s
  syncPeriod: 45s
  minSyncPeriod: 2s
`
	set, warnings, err := configureBackend("ipvs", fs, loadConfig(t, doc))
	if err != nil || len(warnings) > 0 {
		t.Fatalf("configureBackend: %v, warnings %q", err, warnings)
	}
	c := p.Config
	if c.Scheduler != "lc" || !c.StrictARP || c.TCPTimeout != 900*time.Second || c.TCPFinTimeout != 120*time.Second ||
		c.UDPTimeout != 300*time.Second || !slices.Equal(c.ExcludeCIDRs, []string{"10.200.0.0/16"}) ||
		c.MasqueradeBit != 12 || c.SyncPeriod != 45*time.Second || c.MinSyncPeriod != 2*time.Second {
		t.Errorf("the backend's configuration after %q:\n%+v", set, c)
	}

	// The defaults leave the backend's: rr, no strict ARP, the kernel's
	// timeouts.
	p = &ipvs.Plugin{Config: ipvs.DefaultConfig()}
	fs = pflag.NewFlagSet("to-ipvs", pflag.ContinueOnError)
	fs.AddGoFlagSet(PluginFlags("ipvs", p))
	if _, warnings, err := configureBackend("ipvs", fs, loadConfig(t, v1alpha1Header+"mode: ipvs\n")); err != nil || len(warnings) > 0 {
		t.Fatalf("configureBackend of the defaults: %v, warnings %q", err, warnings)
	}
	if c := p.Config; c.Scheduler != "rr" || c.StrictARP || c.TCPTimeout != 0 || c.MasqueradeBit != 14 {
		t.Errorf("the backend's configuration from the defaults: %+v", c)
	}
}

// Removing kube-proxy's leftovers keeps IPVS for the ipvs backend, whose
// dataplane it is, and for no other.
func TestKeepForIPVS(t *testing.T) {
	if k := keepFor(&ipvs.Plugin{}); !k.IPVS {
		t.Errorf("keepFor(ipvs) = %+v, want IPVS kept", k)
	}
	if k := keepFor(newFakePlugin()); k.IPVS {
		t.Errorf("keepFor(another backend) = %+v, want nothing kept", k)
	}
}
