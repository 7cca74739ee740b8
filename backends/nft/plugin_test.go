package nft

import (
	"bytes"
	"context"
	"flag"
	"strings"
	"testing"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/host"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{name: "defaults are kube-proxy's nftables defaults"},
		{name: "nodeport CIDRs", args: []string{"--nodeport-addresses=10.0.0.0/8,fd00::/64"}},
		{name: "primary mixed with a CIDR", args: []string{"--nodeport-addresses=primary,10.0.0.0/8"}, wantErr: "neither a CIDR"},
		{name: "bad cluster CIDR", args: []string{"--cluster-cidr=10.0.0.0/33"}, wantErr: "--cluster-cidr"},
		{name: "bridge mode without a bridge", args: []string{"--detect-local-mode=BridgeInterface"}, wantErr: "--pod-bridge-interface"},
		{name: "prefix mode without a prefix", args: []string{"--detect-local-mode=InterfaceNamePrefix"}, wantErr: "--pod-interface-name-prefix"},
		{name: "unknown mode", args: []string{"--detect-local-mode=Magic"}, wantErr: "--detect-local-mode"},
		{name: "unknown family", args: []string{"--ip-families=ipv5"}, wantErr: "--ip-families"},
		{name: "masquerade bit out of range", args: []string{"--iptables-masquerade-bit=32"}, wantErr: "masquerade-bit"},
		{name: "empty table name", args: []string{"--table="}, wantErr: "--table"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Plugin{}
			fs := flag.NewFlagSet("to-nft", flag.ContinueOnError)
			p.BindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := p.Config.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
	d := DefaultConfig()
	if d.Table != "kpng" || strings.Join(d.NodePortAddresses, ",") != "primary" || d.DetectLocalMode != host.LocalModeClusterCIDR ||
		d.MinSyncPeriod.String() != "100ms" || d.SyncPeriod.String() != "30s" || d.FullSyncPeriod.String() != "1h0m0s" || d.HealthzBindAddress != "0.0.0.0:10256" || d.MetricsBindAddress != "127.0.0.1:10249" {
		t.Errorf("defaults differ from kube-proxy's: %+v", d)
	}
	if !d.Netlink {
		t.Error("the netlink path is off by default")
	}
	p := &Plugin{}
	fs := flag.NewFlagSet("to-nft", flag.ContinueOnError)
	p.BindFlags(fs)
	if err := fs.Parse([]string{"--netlink=false"}); err != nil || p.Config.Netlink {
		t.Errorf("--netlink=false: %v, Netlink %v", err, p.Config.Netlink)
	}
}

// TestDryRun: --dry-run prints each transaction and touches no kernel.
func TestDryRun(t *testing.T) {
	var out bytes.Buffer
	p := &Plugin{Out: &out}
	fs := flag.NewFlagSet("to-nft", flag.ContinueOnError)
	p.BindFlags(fs)
	if err := fs.Parse([]string{"--dry-run", "--healthz-bind-address=", "--metrics-bind-address=", "--table=dry"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b, opts, err := p.Open(ctx, backend.Env{NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	st := backend.NewState("node-a")
	st.Node = testNode
	web := richServices()[0]
	st.Services[backend.KeyOf(web)] = web
	if err := b.Sync(ctx, st, backend.Changes{Reset: true}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"# transaction:", "add table ip dry", "add table ip6 dry", "add element ip dry service-ips { 10.96.0.5 . tcp . 80 : goto service-Y6QD5CCT-ns/web/tcp/http }"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("dry-run output lacks %q:\n%s", want, out.String())
		}
	}
	if opts.MinSyncPeriod.String() != "100ms" || opts.ResyncPeriod.String() != "30s" || opts.OnSync == nil || opts.OnQueued == nil || opts.LastSyncFull == nil {
		t.Errorf("Open's options: %+v", opts)
	}
}
