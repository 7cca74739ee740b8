package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/leftovers"
)

// CleanupNode removes the rules of backends (each with its default
// settings) and, if kubeProxy, kube-proxy's (every mode's: its iptables
// chains, its nftables tables, IPVS's kube-ipvs0 and virtual servers), going
// on past errors, as kube-proxy --cleanup does.
func CleanupNode(ctx context.Context, backends []backend.Registration, kubeProxy bool) error {
	var errs []error
	for _, reg := range backends {
		if err := reg.New().Cleanup(ctx); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", reg.Name, err))
		}
	}
	if kubeProxy {
		if err := removeKubeProxyRules(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// KeepsKubeProxyObjects is implemented by a backend.Plugin whose dataplane
// is built from objects of kube-proxy's that removing its leftovers would
// delete (the ipvs backend's kube-ipvs0 and virtual servers): the removal
// keeps them.
type KeepsKubeProxyObjects interface {
	KeepKubeProxyObjects() leftovers.Keep
}

// keepFor is what removing kube-proxy's leftovers keeps for plugin.
func keepFor(plugin backend.Plugin) leftovers.Keep {
	if k, ok := plugin.(KeepsKubeProxyObjects); ok {
		return k.KeepKubeProxyObjects()
	}
	return leftovers.Keep{}
}

// removeKubeProxyRules removes kube-proxy's leftovers but keep and logs
// what it removed.
func removeKubeProxyRules(ctx context.Context, keep ...leftovers.Keep) error {
	logger := klog.FromContext(ctx)
	removed, err := leftovers.Remove(ctx, keep...)
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
// first successful sync (the backend's rules are in place), removes kube-proxy's
// leftovers once, in the background: from then on a packet meets the backend's
// rules, and before it kube-proxy's, never neither. A failure is logged,
// and tried again after the next successful sync.
func removeKubeProxyAfterFirstSync(ctx context.Context, keep leftovers.Keep) func(backend.SyncResult) {
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
			err := removeKubeProxyRules(ctx, keep)
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
