package main

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/spf13/cobra"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/leftovers"
)

// cleanupCommand is `kpng cleanup`: remove what proxies left in the kernel
// and exit, as `kube-proxy --cleanup` does.
func cleanupCommand() *cobra.Command {
	kpng, kubeProxy := true, true
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove kpng's rules (every backend's) and kube-proxy's (every mode's) from this node, then exit",
		Long: `Remove kpng's rules (every backend's) and kube-proxy's (every mode's: its
iptables chains, its kube-proxy nftables tables, IPVS's kube-ipvs0 and
virtual servers) from this node, then exit, as kube-proxy --cleanup does.

To go back from kpng to kube-proxy without a moment with neither set of rules:
stop kpng, start kube-proxy, and once kube-proxy has synced its rules run
kpng cleanup --kube-proxy=false.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return cleanupNode(cmd.Context(), kpng, kubeProxy)
		},
	}
	cmd.Flags().BoolVar(&kpng, "kpng", kpng, "remove kpng's rules, of every backend")
	cmd.Flags().BoolVar(&kubeProxy, "kube-proxy", kubeProxy, "remove kube-proxy's rules, of every mode")
	return cmd
}

// cleanupNode removes kpng's rules (each registered backend's, with its
// default settings) and kube-proxy's, as asked, going on past errors.
func cleanupNode(ctx context.Context, kpng, kubeProxy bool) error {
	var errs []error
	if kpng {
		for _, reg := range backend.Registered() {
			if err := reg.New().Cleanup(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", reg.Name, err))
			}
		}
	}
	if kubeProxy {
		if err := removeKubeProxyRules(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// removeKubeProxyRules removes kube-proxy's leftovers and logs what it
// removed.
func removeKubeProxyRules(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	removed, err := leftovers.Remove(ctx)
	if !removed.Empty() {
		logger.Info("Removed kube-proxy's rules", "iptablesChains", len(removed.Iptables), "nftablesTables", removed.NftTables,
			"ipvsDummyInterface", removed.IPVSDummy, "ipvsServices", removed.IPVSServices)
	}
	if err != nil {
		return fmt.Errorf("removing kube-proxy's rules: %w", err)
	}
	return nil
}

// removeKubeProxyAfterFirstSync returns an OnSync hook that, after the
// first successful sync (kpng's rules are in place), removes kube-proxy's
// leftovers once, in the background: from then on a packet meets kpng's
// rules, and before it kube-proxy's, never neither. A failure is logged,
// and tried again after the next successful sync.
func removeKubeProxyAfterFirstSync(ctx context.Context) func(backend.SyncResult) {
	var mu sync.Mutex
	state := 0 // 0: not yet, 1: running, 2: done
	return func(res backend.SyncResult) {
		if res.Err != nil {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if state != 0 {
			return
		}
		state = 1
		go func() {
			err := removeKubeProxyRules(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil && ctx.Err() == nil {
				klog.FromContext(ctx).Error(err, "Failed to remove kube-proxy's rules; trying again after the next sync")
				state = 0
				return
			}
			state = 2
		}()
	}
}
