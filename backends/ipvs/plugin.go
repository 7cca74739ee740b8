// Package ipvs is kpng's IPVS backend (to-ipvs): kube-proxy's ipvs mode,
// rebuilt on kpng's resolved node-local view.
//
// Service addresses are bound to the dummy interface kube-ipvs0; each
// service address and port is an IPVS virtual server whose real servers
// are the endpoints of the view's set in force; ipsets and a few iptables
// rules (chains KPNG-IPVS-*) do what IPVS cannot: masquerade, node ports
// under the Local policy, loadBalancerSourceRanges. The backend keeps a
// record of what it wrote, so a change costs IPVS operations about that
// change only (one endpoint: one real-server operation); a full sync reads
// the kernel back and fixes it, never flushing. See README.md.
package ipvs

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/cloudflare/ipvs"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/host"
	"github.com/kpng/kpng/proxyutil/leftovers"
	"github.com/kpng/kpng/proxyutil/sysctl"
)

func init() {
	backend.Register(backend.Registration{
		Name:  "ipvs",
		Short: "Program the node's services with IPVS (kube-proxy's ipvs mode)",
		New:   func() backend.Plugin { return &Plugin{Config: DefaultConfig()} },
	})
}

// Config is the backend's configuration: kube-proxy's ipvs-mode settings
// (those of host.Config it uses, and the ipvs ones).
type Config struct {
	host.Config
	// Scheduler is IPVS's scheduler for every virtual server (rr, lc,
	// dh, sh, sed, nq, mh, ...; kube-proxy's ipvs.scheduler, "" is rr).
	Scheduler string
	// StrictARP sets arp_ignore=1 and arp_announce=2, so that the node
	// does not answer ARP for kube-ipvs0's addresses (MetalLB needs it).
	StrictARP bool
	// TCPTimeout, TCPFinTimeout and UDPTimeout are IPVS's idle timeouts
	// (0: leave the kernel's).
	TCPTimeout, TCPFinTimeout, UDPTimeout time.Duration
	// ExcludeCIDRs are ranges whose virtual servers kpng never removes
	// (those of another IPVS user).
	ExcludeCIDRs []string

	excludeCIDRs []netip.Prefix
	dropInvalid  bool
}

// DefaultConfig is kube-proxy's defaults.
func DefaultConfig() Config {
	return Config{Config: host.Defaults(), Scheduler: "rr", dropInvalid: true}
}

// hostFlags are the kube-proxy settings of host.Config this backend uses.
var hostFlags = []string{
	"nodeport-addresses", "masquerade-all", "iptables-masquerade-bit", "cluster-cidr",
	"detect-local-mode", "pod-bridge-interface", "pod-interface-name-prefix",
	"min-sync-period", "sync-period", "full-sync-period",
	"healthz-bind-address", "metrics-bind-address", "profiling", "ip-families",
}

// BindFlags adds the flags to fs, with c's values as defaults.
func (c *Config) BindFlags(fs *flag.FlagSet) {
	c.Config.BindSomeFlags(fs, hostFlags...)
	fs.DurationVar(&c.SyncPeriod, "ipvs-sync-period", c.SyncPeriod, "kube-proxy's name of --sync-period in ipvs mode")
	fs.DurationVar(&c.MinSyncPeriod, "ipvs-min-sync-period", c.MinSyncPeriod, "kube-proxy's name of --min-sync-period in ipvs mode")
	fs.StringVar(&c.Scheduler, "ipvs-scheduler", c.Scheduler, "the IPVS scheduler of every virtual server: rr, wrr, lc, wlc, lblc, lblcr, dh, sh, sed, nq, mh (empty: rr)")
	fs.BoolVar(&c.StrictARP, "ipvs-strict-arp", c.StrictARP, "set arp_ignore=1 and arp_announce=2 so that the node answers no ARP for kube-ipvs0's addresses")
	fs.DurationVar(&c.TCPTimeout, "ipvs-tcp-timeout", c.TCPTimeout, "IPVS's idle timeout of TCP connections (0: the kernel's)")
	fs.DurationVar(&c.TCPFinTimeout, "ipvs-tcpfin-timeout", c.TCPFinTimeout, "IPVS's timeout of TCP connections after a FIN (0: the kernel's)")
	fs.DurationVar(&c.UDPTimeout, "ipvs-udp-timeout", c.UDPTimeout, "IPVS's timeout of UDP flows (0: the kernel's)")
	backend.StringsVar(fs, &c.ExcludeCIDRs, "ipvs-exclude-cidrs", c.ExcludeCIDRs, "CIDRs whose IPVS virtual servers kpng leaves alone when it removes those it does not want")
}

// validate checks c and completes its parsed fields.
func (c *Config) validate() error {
	errs := []error{c.Config.Validate()}
	if c.Scheduler == "" {
		c.Scheduler = "rr"
	}
	c.excludeCIDRs = nil
	for _, s := range c.ExcludeCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			errs = append(errs, fmt.Errorf("--ipvs-exclude-cidrs: %w", err))
			continue
		}
		c.excludeCIDRs = append(c.excludeCIDRs, p.Masked())
	}
	for name, d := range map[string]time.Duration{"--ipvs-tcp-timeout": c.TCPTimeout, "--ipvs-tcpfin-timeout": c.TCPFinTimeout, "--ipvs-udp-timeout": c.UDPTimeout} {
		if d < 0 || d%time.Second != 0 {
			errs = append(errs, fmt.Errorf("%s %v: must be whole seconds, >= 0", name, d))
		}
	}
	return errors.Join(errs...)
}

// Plugin is the to-ipvs command: flags, then a Backend.
type Plugin struct {
	Config Config
}

// KeepKubeProxyObjects implements kubeproxy.KeepsKubeProxyObjects: this
// backend's dataplane is kube-ipvs0 and IPVS's virtual servers, as kube-proxy's
// ipvs mode's, so removing kube-proxy's leftovers leaves them (the first
// sync already removed the virtual servers kpng does not want).
func (p *Plugin) KeepKubeProxyObjects() leftovers.Keep { return leftovers.Keep{IPVS: true} }

// BindFlags implements backend.Plugin.
func (p *Plugin) BindFlags(fs *flag.FlagSet) { p.Config.BindFlags(fs) }

// Open implements backend.Plugin: it loads IPVS, sets the sysctls
// kube-proxy's ipvs mode sets, and starts the health and metrics servers.
func (p *Plugin) Open(ctx context.Context, env backend.Env) (backend.Backend, backend.Options, error) {
	cfg := p.Config
	if err := cfg.validate(); err != nil {
		return nil, backend.Options{}, err
	}
	cfg.IPFamilies = availableFamilies(ctx, cfg.IPFamilies)
	if len(cfg.IPFamilies) == 0 {
		return nil, backend.Options{}, errors.New("no IP family can be programmed")
	}
	c, err := ipvs.New()
	if err != nil {
		return nil, backend.Options{}, fmt.Errorf("IPVS (is the ip_vs module available?): %w", err)
	}
	if err := setupKernel(ctx, &cfg, c); err != nil {
		return nil, backend.Options{}, err
	}
	b := New(&cfg, c, &hostKernel{})
	var families []localv1.IPFamily
	for _, px := range b.proxiers {
		families = append(families, px.family)
	}
	opts, err := host.StartHelpers(ctx, "ipvs", &cfg.Config, families)
	if err != nil {
		return nil, backend.Options{}, err
	}
	opts.MinSyncPeriod, opts.ResyncPeriod = cfg.MinSyncPeriod, cfg.SyncPeriod
	opts.LastSyncFull = b.LastSyncFull
	resyncNow := make(chan struct{}, 1)
	if err := watchDummy(ctx, resyncNow); err != nil {
		klog.FromContext(ctx).Info("Cannot watch kube-ipvs0; repairs wait for the periodic sync", "err", err)
	} else {
		opts.ResyncNow = resyncNow
	}
	return b, opts, nil
}

// availableFamilies drops IPv6 from families when the node has none
// (disabled, or a kernel without it): a node without IPv6 still proxies
// IPv4, as kube-proxy runs only the proxiers it can.
func availableFamilies(ctx context.Context, families []string) []string {
	var out []string
	for _, f := range families {
		if f == "ipv6" {
			if _, err := os.Stat("/proc/sys/net/ipv6/conf/all/forwarding"); err != nil {
				klog.FromContext(ctx).Error(err, "IP family unavailable, not programming it", "family", f)
				continue
			}
		}
		out = append(out, f)
	}
	return out
}

// setupKernel sets what kube-proxy's ipvs mode sets once: IPVS's
// sysctls, forwarding, strict ARP and the IPVS timeouts.
func setupKernel(ctx context.Context, cfg *Config, c ipvs.Client) error {
	log := klog.FromContext(ctx)
	settings := []struct {
		name  string
		value int
	}{
		// IPVS connections get conntrack entries, so iptables can
		// masquerade them.
		{"net/ipv4/vs/conntrack", 1},
		// Packets of a connection whose real server is gone are dropped,
		// so that clients reconnect (to another one) at once.
		{"net/ipv4/vs/expire_nodest_conn", 1},
		// Persistence templates of a real server of weight 0 expire, so
		// affinity does not pin clients to a terminating endpoint.
		{"net/ipv4/vs/expire_quiescent_template", 1},
		{"net/ipv4/ip_forward", 1},
	}
	for _, f := range cfg.IPFamilies {
		if f == "ipv6" {
			settings = append(settings, struct {
				name  string
				value int
			}{"net/ipv6/conf/all/forwarding", 1})
		}
	}
	if cfg.StrictARP {
		settings = append(settings, []struct {
			name  string
			value int
		}{{"net/ipv4/conf/all/arp_ignore", 1}, {"net/ipv4/conf/all/arp_announce", 2}}...)
	}
	for _, s := range settings {
		if _, err := sysctl.Ensure(s.name, s.value); err != nil {
			return err
		}
	}
	if v, err := sysctl.GetInt("net/netfilter/nf_conntrack_tcp_be_liberal"); err == nil && v != 0 {
		log.Info("nf_conntrack_tcp_be_liberal set, not dropping INVALID packets")
		cfg.dropInvalid = false
	}
	if cfg.TCPTimeout > 0 || cfg.TCPFinTimeout > 0 || cfg.UDPTimeout > 0 {
		// The kernel leaves a zero value as it is.
		if err := c.SetConfig(ipvs.Config{
			TCPTimeout:    uint32(cfg.TCPTimeout / time.Second),
			TCPFinTimeout: uint32(cfg.TCPFinTimeout / time.Second),
			UDPTimeout:    uint32(cfg.UDPTimeout / time.Second),
		}); err != nil {
			return fmt.Errorf("set IPVS timeouts: %w", err)
		}
	}
	return nil
}

// Backend is the IPVS dataplane of a node: one proxier per family.
type Backend struct {
	mu       sync.Mutex
	cfg      *Config
	kern     kernel
	proxiers []*proxier
	lastFull time.Time
	wasFull  bool
}

// New returns a Backend writing through c (IPVS) and k (the rest of the
// kernel). Sync's first call writes everything.
func New(cfg *Config, c ipvs.Client, k kernel) *Backend {
	b := &Backend{cfg: cfg, kern: k}
	for _, f := range cfg.IPFamilies {
		b.proxiers = append(b.proxiers, newProxier(f == "ipv6", cfg, c, k))
	}
	return b
}

// Sync implements backend.Backend.
func (b *Backend) Sync(ctx context.Context, st *backend.State, ch backend.Changes) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	// Once per --full-sync-period a periodic sync reads everything back.
	full := ch.Resync && (b.cfg.FullSyncPeriod == 0 || time.Since(b.lastFull) >= b.cfg.FullSyncPeriod)
	b.wasFull = false
	// One listing of the ipsets' headers serves every family's check.
	setSizes := sync.OnceValues(func() (map[string]int, error) { return b.kern.ipsetSizes(ctx) })
	for _, px := range b.proxiers {
		wasFull, err := px.sync(ctx, st, ch, full, setSizes)
		if err != nil {
			px.forget()
			return fmt.Errorf("%s: %w", px.family, err)
		}
		b.wasFull = b.wasFull || wasFull
	}
	if b.wasFull {
		b.lastFull = time.Now()
	}
	return nil
}

// LastSyncFull reports whether the last Sync rewrote everything.
func (b *Backend) LastSyncFull() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.wasFull
}

// lastOps is the operation count of the last sync, all families.
func (b *Backend) lastOps() opCounts {
	var o opCounts
	for _, px := range b.proxiers {
		p := px.ops
		o.CreateService += p.CreateService
		o.UpdateService += p.UpdateService
		o.RemoveService += p.RemoveService
		o.CreateDest += p.CreateDest
		o.UpdateDest += p.UpdateDest
		o.RemoveDest += p.RemoveDest
		o.Addrs += p.Addrs
		o.SetEntries += p.SetEntries
		o.RuleWrites += p.RuleWrites
		o.ListDests += p.ListDests
	}
	return o
}

// Cleanup implements backend.Plugin: it removes the virtual servers on
// kube-ipvs0's addresses and the node's (kpng's, those it can tell),
// kube-ipvs0, the KPNG-IPVS chains, their jumps and the ipsets.
func (p *Plugin) Cleanup(ctx context.Context) error {
	cfg := p.Config
	if err := cfg.validate(); err != nil {
		return err
	}
	var errs []error
	if c, err := ipvs.New(); err == nil {
		errs = append(errs, cleanupIPVS(&cfg, c, &hostKernel{}))
	}
	errs = append(errs, cleanupRules(ctx, &hostKernel{}))
	return errors.Join(errs...)
}
