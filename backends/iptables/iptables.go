// Package iptables is kpng's iptables backend (to-iptables): kube-proxy's
// iptables mode, rebuilt on kpng's resolved node-local view.
//
// It writes its own chains (all named KPNG-...), reached by jump rules it
// adds to the builtin chains, so it can run beside kube-proxy. Each sync is
// one iptables-restore --noflush per family. The backend keeps a record of
// what it wrote for each service, so a sync after a change rewrites only the
// chains that change (the shared dispatch chains only when a service's rules
// in them change); periodic syncs check a canary chain. The first sync, a
// periodic sync once per --full-sync-period, a missing canary and any
// failure rewrite everything and remove stale chains. See README.md.
package iptables

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"time"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/host"
	"github.com/kpng/kpng/proxyutil/metrics"
	"github.com/kpng/kpng/proxyutil/nfacct"
	"github.com/kpng/kpng/proxyutil/sysctl"
)

func init() {
	backend.Register(backend.Registration{
		Name:  "iptables",
		Short: "Program the node's services with iptables (kube-proxy's iptables mode)",
		New:   func() backend.Plugin { return &Plugin{Config: DefaultConfig()} },
	})
}

// Plugin is the to-iptables command: flags, then a Backend.
type Plugin struct {
	Config Config
	// opts are the driver hooks Open prepared (metrics, health, conntrack).
	opts backend.Options
}

// BindFlags implements backend.Plugin.
func (p *Plugin) BindFlags(fs *flag.FlagSet) { p.Config.BindFlags(fs) }

// Open implements backend.Plugin.
func (p *Plugin) Open(ctx context.Context, env backend.Env) (backend.Backend, backend.Options, error) {
	b, err := p.open(ctx)
	if err != nil {
		return nil, backend.Options{}, err
	}
	return b, p.runOptions(b), nil
}

// RetryPeriod and MaxRetryPeriod are the driver's backoff after a failed
// sync (backend.Options): the first retry after 250 ms, then doubling, but
// never more than 1 s apart, so that the rules are whole again within a second
// of the kernel accepting writes again (another process's owner table gone,
// say: the kernel sends no notification of that), as kube-proxy's are: it
// retries at its next sync, at most a second later while changes arrive.
const (
	RetryPeriod    = 250 * time.Millisecond
	MaxRetryPeriod = time.Second
)

// runOptions are the driver options of b, opened by p: the hooks of the
// helpers, the sync periods, the kernel watch's repair requests.
func (p *Plugin) runOptions(b *Backend) backend.Options {
	o := p.opts
	o.MinSyncPeriod, o.ResyncPeriod = p.Config.MinSyncPeriod, p.Config.SyncPeriod
	o.RetryPeriod, o.MaxRetryPeriod = RetryPeriod, MaxRetryPeriod
	if b.resyncNow != nil {
		o.ResyncNow = b.resyncNow
	}
	// A periodic sync checks the canary and rewrites only when it is
	// gone: the backend tells which it did.
	o.LastSyncFull = b.LastSyncFull
	return o
}

func (p *Plugin) open(ctx context.Context) (*Backend, error) {
	cfg := p.Config
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := klog.FromContext(ctx)
	b := &Backend{cfg: &cfg}
	var v variant
	if !cfg.DryRun {
		var err error
		if v, err = chooseVariant(ctx, cfg.Mode); err != nil {
			return nil, err
		}
		log.Info("Using iptables", "variant", v.name)
	}
	var mu sync.Mutex
	for _, fam := range cfg.IPFamilies {
		ipv6 := fam == "ipv6"
		var run runner
		if cfg.DryRun {
			run = dryRunner{family: fam, mu: &mu, w: os.Stdout}
		} else {
			r := v.runnerFor(ipv6, cfg.LockWait)
			if err := r.save(ctx, io.Discard); err != nil {
				// A node without IPv6 (or without ip6tables) still proxies IPv4.
				log.Error(err, "IP family unavailable, not programming it", "family", fam)
				continue
			}
			run = r
		}
		b.proxiers = append(b.proxiers, newProxier(ipv6, &cfg, run))
	}
	if len(b.proxiers) == 0 {
		return nil, errors.New("no IP family can be programmed")
	}
	if !cfg.DryRun {
		// kube-proxy's nfacct counters, for two of its metrics; without
		// them the rules just do not count.
		if acct, err := nfacct.Open(); err != nil {
			log.Error(err, "No nfacct counters; the metrics that read them will not be updated")
		} else {
			context.AfterFunc(ctx, func() { acct.Close() })
			for _, px := range b.proxiers {
				px.acct = acct
			}
		}
		for _, px := range b.proxiers {
			if px.ipv6 {
				continue
			}
			if px.localhostNodePorts {
				log.Info("Setting route_localnet=1 to allow node ports on localhost; disable with --localhost-nodeports=false or --nodeport-addresses")
				if _, err := sysctl.Ensure("net/ipv4/conf/all/route_localnet", 1); err != nil {
					return nil, err
				}
			}
		}
		if v, err := sysctl.GetInt("net/netfilter/nf_conntrack_tcp_be_liberal"); err == nil && v != 0 {
			log.Info("nf_conntrack_tcp_be_liberal set, not dropping INVALID packets")
			for _, px := range b.proxiers {
				px.dropInvalid = false
			}
		}
	}
	if err := p.startHelpers(ctx, b); err != nil {
		return nil, err
	}
	if !cfg.DryRun && v.name == "nft" {
		b.resyncNow = make(chan struct{}, 1)
		if err := b.watchKernel(ctx); err != nil {
			b.resyncNow = nil
			log.Info("Cannot watch the iptables rules; repairs wait for the periodic sync", "err", err)
		}
	}
	return b, nil
}

// startHelpers starts what runs beside the rules, as kube-proxy does
// (host.StartHelpers), for b's families, and keeps the driver hooks that
// feed them. Servers stop when ctx ends.
func (p *Plugin) startHelpers(ctx context.Context, b *Backend) error {
	var families []localv1.IPFamily
	for _, px := range b.proxiers {
		families = append(families, px.family)
	}
	opts, err := host.StartHelpers(ctx, metrics.ModeIPTables, &p.Config.Config, families)
	p.opts = opts
	return err
}

func chooseVariant(ctx context.Context, mode string) (variant, error) {
	if mode != "auto" {
		v := variants[mode]
		if _, err := exec.LookPath(v.restore4); err != nil {
			return variant{}, fmt.Errorf("--iptables-mode=%s: %w", mode, err)
		}
		return v, nil
	}
	return detectVariant(ctx)
}

// Cleanup implements backend.Plugin: it removes every KPNG- chain and
// every jump to one, in both families and both iptables variants.
func (p *Plugin) Cleanup(ctx context.Context) error {
	var errs []error
	for _, v := range []variant{variants["nft"], variants["legacy"]} {
		for _, ipv6 := range []bool{false, true} {
			r := v.runnerFor(ipv6, p.Config.LockWait)
			if _, err := exec.LookPath(r.saveCmd); err != nil {
				continue
			}
			if err := cleanup(ctx, r); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", r.restoreCmd, err))
			}
		}
	}
	return errors.Join(errs...)
}

func cleanup(ctx context.Context, r runner) error {
	var saved bytes.Buffer
	if err := r.save(ctx, &saved); err != nil {
		return err
	}
	in := cleanupInput(saved.Bytes())
	if len(in) == 0 {
		return nil
	}
	return r.restore(ctx, text(in))
}

// Backend implements backend.Backend with one proxier per IP family.
type Backend struct {
	cfg      *Config
	proxiers []*proxier
	// lastFull: the last Sync rewrote a family's tables in full.
	lastFull bool
	// resyncNow is the driver's ResyncNow, for watchKernel.
	resyncNow chan struct{}
}

// LastSyncFull is backend.Options.LastSyncFull: whether the last Sync
// rewrote the tables of a family in full. A periodic sync that only checked
// the canary was partial; a change-only sync whose canary failed was full.
// kube-proxy records this per family; SyncResult has one Full for every
// family, so one family's full sync makes the whole sync full.
func (b *Backend) LastSyncFull() bool { return b.lastFull }

// Sync implements backend.Backend.
func (b *Backend) Sync(ctx context.Context, state *backend.State, changes backend.Changes) error {
	var errs []error
	b.lastFull = false
	for _, p := range b.proxiers {
		res, err := p.sync(ctx, state, changes)
		b.lastFull = b.lastFull || res.full
		fam := metrics.FamilyLabel(p.family)
		if res.partialFailed {
			metrics.IPTablesPartialRestoreFailuresTotal.WithLabelValues(fam).Inc()
		}
		if res.restoreFailures > 0 {
			metrics.IPTablesRestoreFailuresTotal.WithLabelValues(fam).Add(float64(res.restoreFailures))
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if res.wrote {
			for _, tbl := range []string{"filter", "nat"} {
				metrics.IPTablesRulesTotal.WithLabelValues(tbl, fam).Set(float64(res.rules[tbl]))
				metrics.IPTablesRulesLastSync.WithLabelValues(tbl, fam).Set(float64(res.written[tbl]))
			}
		}
	}
	return errors.Join(errs...)
}
