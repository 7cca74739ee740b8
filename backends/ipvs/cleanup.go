package ipvs

import (
	"context"
	"errors"
	"fmt"

	"github.com/cloudflare/ipvs"
	"github.com/vishvananda/netlink"
)

// cleanupIPVS removes every virtual server outside --ipvs-exclude-cidrs,
// as kube-proxy's ipvs cleanup flushes IPVS, and kube-ipvs0.
func cleanupIPVS(cfg *Config, c ipvs.Client, k kernel) error {
	list, err := listServices(c)
	if err != nil {
		return err
	}
	var errs []error
	for _, s := range list {
		excluded := false
		for _, p := range cfg.excludeCIDRs {
			excluded = excluded || p.Contains(s.Address)
		}
		if excluded {
			continue
		}
		if err := c.RemoveService(s.Service); err != nil {
			errs = append(errs, fmt.Errorf("remove virtual server %s: %w", s.Address, err))
		}
	}
	if _, ok := k.(*hostKernel); ok {
		if l, err := netlink.LinkByName(DummyInterface); err == nil {
			if err := netlink.LinkDel(l); err != nil {
				errs = append(errs, fmt.Errorf("delete %s: %w", DummyInterface, err))
			}
		}
	}
	return errors.Join(errs...)
}

// cleanupRules removes the jumps, the KPNG-IPVS chains and the ipsets, in
// both families.
func cleanupRules(ctx context.Context, k kernel) error {
	var errs []error
	for _, ipv6 := range []bool{false, true} {
		if err := cleanupIPTables(ctx, k, ipv6); err != nil {
			errs = append(errs, err)
		}
		existing, err := k.ipsets(ctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := k.ipsetRestore(ctx, destroyScript(ipv6, existing)); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
