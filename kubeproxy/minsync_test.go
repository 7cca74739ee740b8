package kubeproxy

import (
	"slices"
	"testing"
	"time"

	"github.com/kpng/kpng/backends/iptables"
	"github.com/kpng/kpng/backends/nft"
)

// TestMinSyncPeriodUnsetTakesTheBackendDefault: a configuration whose file
// and flags leave minSyncPeriod unset runs with the default of its mode's
// backend (the nft backend's is far below kube-proxy's 1 s, its syncs
// writing only what changed); any value given is honoured as kube-proxy
// honours it, v1alpha1's "0s means 1s" included. Presence decides, not the
// value: an explicit 1s stays 1s.
func TestMinSyncPeriodUnsetTakesTheBackendDefault(t *testing.T) {
	nftDefault := nft.DefaultConfig().MinSyncPeriod
	iptablesDefault := iptables.DefaultConfig().MinSyncPeriod
	if nftDefault >= time.Second || iptablesDefault != time.Second {
		t.Fatalf("backend defaults: nft %v (want under kube-proxy's 1s), iptables %v (want kube-proxy's 1s)", nftDefault, iptablesDefault)
	}
	const (
		v1nft = v1alpha1Header + "mode: nftables\n"
		v1ipt = v1alpha1Header + "mode: iptables\n"
		v2nft = v1alpha2Header + "mode: nftables\n"
	)
	cases := []struct {
		name string
		file string // none when empty
		args []string
		want time.Duration
	}{
		{name: "no file, no flag: the nft backend's default", args: []string{"--proxy-mode", "nftables"}, want: nftDefault},
		{name: "no file, no flag, iptables mode: the iptables backend's default", args: []string{"--proxy-mode", "iptables"}, want: iptablesDefault},
		{name: "no file, an explicit 1s flag is kept", args: []string{"--proxy-mode", "nftables", "--iptables-min-sync-period", "1s"}, want: time.Second},
		{name: "no file, an explicit 0s flag is kept", args: []string{"--proxy-mode", "nftables", "--iptables-min-sync-period", "0s"}, want: 0},
		{name: "no file, the ipvs flag does not set nftables mode's", args: []string{"--proxy-mode", "nftables", "--ipvs-min-sync-period", "2s"}, want: nftDefault},

		{name: "v1alpha1 without the field: the backend's default", file: v1nft, want: nftDefault},
		{name: "v1alpha1 explicit 1s is kept", file: v1nft + "nftables: {minSyncPeriod: 1s}\n", want: time.Second},
		{name: "v1alpha1 explicit 0s becomes 1s, as kube-proxy's defaulting makes it", file: v1nft + "nftables: {minSyncPeriod: 0s}\n", want: time.Second},
		{name: "v1alpha1 explicit 250ms is kept", file: v1nft + "nftables: {minSyncPeriod: 250ms}\n", want: 250 * time.Millisecond},
		{name: "v1alpha1 the inactive mode's section does not count", file: v1nft + "iptables: {minSyncPeriod: 1s}\n", want: nftDefault},
		{name: "v1alpha1 other fields of the section do not count", file: v1nft + "nftables: {syncPeriod: 20s}\n", want: nftDefault},
		{name: "v1alpha1 iptables mode without the field: the iptables backend's default", file: v1ipt, want: iptablesDefault},
		{name: "v1alpha1 --proxy-mode picks the section that counts", file: v1ipt + "nftables: {minSyncPeriod: 1s}\n", args: []string{"--proxy-mode", "nftables"}, want: time.Second},
		{name: "v1alpha1 a flag sets it over an absent field", file: v1nft, args: []string{"--iptables-min-sync-period", "300ms"}, want: 300 * time.Millisecond},

		{name: "v1alpha2 without the field: the backend's default", file: v2nft, want: nftDefault},
		{name: "v1alpha2 null is absent", file: v2nft + "minSyncPeriod: null\n", want: nftDefault},
		{name: "v1alpha2 explicit 0s is kept", file: v2nft + "minSyncPeriod: 0s\n", want: 0},
		{name: "v1alpha2 explicit 1s is kept", file: v2nft + "minSyncPeriod: 1s\n", want: time.Second},
		{name: "v1alpha2 a flag sets it over an absent field", file: v2nft, args: []string{"--iptables-min-sync-period", "1s"}, want: time.Second},
		{name: "v1alpha2 the default never exceeds syncPeriod", file: v2nft + "syncPeriod: 1ms\n", want: min(nftDefault, time.Millisecond)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := slices.Clone(tc.args)
			if tc.file != "" {
				args = append(args, "--config", writeFile(t, "kp.yaml", tc.file))
			}
			if got := resolved(t, args...).MinSyncPeriod; got != tc.want {
				t.Errorf("minSyncPeriod = %v, want %v", got, tc.want)
			}
		})
	}
}
