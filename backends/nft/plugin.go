// Package nft is kpng's nftables backend (to-nft): upstream kube-proxy's
// nftables ruleset, packet for packet, written incrementally. It keeps a
// mirror of what it wrote, and each sync sends the kernel one transaction
// with only what changed. See README.md.
package nft

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

func init() {
	backend.Register(backend.Registration{
		Name:  "nft",
		Short: "Program the node's services in nftables (kube-proxy's nftables mode, updated incrementally)",
		New:   func() backend.Plugin { return &Plugin{} },
	})
}

// Detect-local modes, as kube-proxy's --detect-local-mode.
const (
	LocalModeClusterCIDR         = "ClusterCIDR"
	LocalModeNodeCIDR            = "NodeCIDR"
	LocalModeBridgeInterface     = "BridgeInterface"
	LocalModeInterfaceNamePrefix = "InterfaceNamePrefix"
	LocalModeNone                = "None"
)

// Config is the backend's configuration: kube-proxy's flags of the same
// names.
type Config struct {
	Table                  string
	NodePortAddresses      []string // CIDRs, or ["primary"]
	MasqueradeAll          bool
	MasqueradeBit          int
	ClusterCIDRs           []string
	DetectLocalMode        string
	PodBridgeInterface     string
	PodInterfaceNamePrefix string
	MinSyncPeriod          time.Duration
	SyncPeriod             time.Duration
	// FullSyncPeriod is how often a periodic sync reads the tables back
	// and repairs any difference; the periodic syncs in between only check
	// the tables' fixed chains (see check.go).
	FullSyncPeriod     time.Duration
	HealthzBindAddress string
	MetricsBindAddress string
	DryRun             bool
	IPFamilies         []string
	// Netlink writes the incremental transactions through netlink rather
	// than the nft command (which reads the whole table first).
	Netlink bool
}

// DefaultConfig is kube-proxy v1.36's nftables-mode defaults, but for
// MinSyncPeriod: kube-proxy waits at least 1 s between syncs because each
// of its syncs recomputes every service; a sync here writes only what
// changed (milliseconds at 10,000 services), so 100 ms bounds the kernel
// commits to ten a second without making every change wait up to a second.
// (kpng proxy passes the configuration's minSyncPeriod, 1 s by default, as
// kube-proxy does.)
func DefaultConfig() Config {
	return Config{
		Table:              "kpng",
		NodePortAddresses:  []string{"primary"},
		MasqueradeBit:      14,
		DetectLocalMode:    LocalModeClusterCIDR,
		MinSyncPeriod:      100 * time.Millisecond,
		SyncPeriod:         30 * time.Second,
		FullSyncPeriod:     time.Hour,
		HealthzBindAddress: "0.0.0.0:10256",
		MetricsBindAddress: "127.0.0.1:10249",
		IPFamilies:         []string{"ipv4", "ipv6"},
		Netlink:            true,
	}
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.Table == "" {
		errs = append(errs, errors.New("--table must not be empty"))
	}
	if !(len(c.NodePortAddresses) == 1 && c.NodePortAddresses[0] == "primary") {
		for _, s := range c.NodePortAddresses {
			if _, err := netip.ParsePrefix(s); err != nil {
				errs = append(errs, fmt.Errorf("--nodeport-addresses: %q is neither a CIDR nor \"primary\" alone", s))
			}
		}
	}
	for _, s := range c.ClusterCIDRs {
		if _, err := netip.ParsePrefix(s); err != nil {
			errs = append(errs, fmt.Errorf("--cluster-cidr: %w", err))
		}
	}
	if c.MasqueradeBit < 0 || c.MasqueradeBit > 31 {
		errs = append(errs, fmt.Errorf("--iptables-masquerade-bit %d: must be within [0, 31]", c.MasqueradeBit))
	}
	switch c.DetectLocalMode {
	case "", LocalModeClusterCIDR, LocalModeNodeCIDR, LocalModeNone:
	case LocalModeBridgeInterface:
		if c.PodBridgeInterface == "" {
			errs = append(errs, errors.New("--detect-local-mode=BridgeInterface needs --pod-bridge-interface"))
		}
	case LocalModeInterfaceNamePrefix:
		if c.PodInterfaceNamePrefix == "" {
			errs = append(errs, errors.New("--detect-local-mode=InterfaceNamePrefix needs --pod-interface-name-prefix"))
		}
	default:
		errs = append(errs, fmt.Errorf("--detect-local-mode %q: want one of ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix, None", c.DetectLocalMode))
	}
	if len(c.IPFamilies) == 0 {
		errs = append(errs, errors.New("--ip-families must name at least one family"))
	}
	for _, f := range c.IPFamilies {
		if f != "ipv4" && f != "ipv6" {
			errs = append(errs, fmt.Errorf("--ip-families: %q is not ipv4 or ipv6", f))
		}
	}
	if c.MinSyncPeriod < 0 || c.SyncPeriod <= 0 {
		errs = append(errs, errors.New("--min-sync-period must be >= 0 and --sync-period > 0"))
	}
	if c.FullSyncPeriod < 0 {
		errs = append(errs, fmt.Errorf("--full-sync-period %v: must be >= 0", c.FullSyncPeriod))
	}
	return errors.Join(errs...)
}

// Plugin is the to-nft command: its flags, then the backend.
type Plugin struct {
	Config Config
	// Out receives the transactions printed by --dry-run (stdout if nil).
	Out io.Writer

	set     bool
	backend *Backend
}

// BindFlags implements backend.Plugin.
func (p *Plugin) BindFlags(fs *flag.FlagSet) {
	p.Config = DefaultConfig()
	p.set = true
	c := &p.Config
	fs.StringVar(&c.Table, "table", c.Table, "name of the nftables tables to use (one per family: ip NAME and ip6 NAME)")
	backend.StringsVar(fs, &c.NodePortAddresses, "nodeport-addresses", c.NodePortAddresses,
		`addresses that accept NodePort traffic: CIDRs (the node's addresses within them), or "primary" (the node's primary IP of each family); a family without any CIDR accepts on all its local addresses`)
	fs.BoolVar(&c.MasqueradeAll, "masquerade-all", c.MasqueradeAll, "SNAT all traffic sent to cluster IPs")
	fs.IntVar(&c.MasqueradeBit, "iptables-masquerade-bit", c.MasqueradeBit, "the bit of the packet mark that marks packets to masquerade")
	backend.StringsVar(fs, &c.ClusterCIDRs, "cluster-cidr", c.ClusterCIDRs, "the pod CIDRs of the cluster (for --detect-local-mode=ClusterCIDR): traffic from elsewhere to a cluster IP is masqueraded")
	fs.StringVar(&c.DetectLocalMode, "detect-local-mode", c.DetectLocalMode, "how to tell pod traffic: ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or None")
	fs.StringVar(&c.PodBridgeInterface, "pod-bridge-interface", c.PodBridgeInterface, "the bridge of local pods (--detect-local-mode=BridgeInterface)")
	fs.StringVar(&c.PodInterfaceNamePrefix, "pod-interface-name-prefix", c.PodInterfaceNamePrefix, "the name prefix of local pods' interfaces (--detect-local-mode=InterfaceNamePrefix)")
	fs.DurationVar(&c.MinSyncPeriod, "min-sync-period", c.MinSyncPeriod, "least time between two syncs; changes arriving sooner are batched")
	fs.DurationVar(&c.SyncPeriod, "sync-period", c.SyncPeriod, "how often a periodic sync checks the tables' fixed chains, repairing the tables when they were changed behind kpng's back")
	fs.DurationVar(&c.FullSyncPeriod, "full-sync-period", c.FullSyncPeriod, "how often a periodic sync reads the whole tables back and repairs any difference (kube-proxy: 1h, fixed); 0: every periodic sync")
	fs.StringVar(&c.HealthzBindAddress, "healthz-bind-address", c.HealthzBindAddress, "address of the /healthz and /livez server (empty: none)")
	fs.StringVar(&c.MetricsBindAddress, "metrics-bind-address", c.MetricsBindAddress, "address of the /metrics server (empty: none)")
	fs.BoolVar(&c.DryRun, "dry-run", c.DryRun, "print each transaction instead of running it")
	backend.StringsVar(fs, &c.IPFamilies, "ip-families", c.IPFamilies, "the IP families to program (ipv4, ipv6)")
	fs.BoolVar(&c.Netlink, "netlink", c.Netlink, "write incremental transactions through netlink (false: with the nft command, which first reads the whole table)")
}

// Open implements backend.Plugin.
func (p *Plugin) Open(ctx context.Context, env backend.Env) (backend.Backend, backend.Options, error) {
	if !p.set {
		p.Config = DefaultConfig()
		p.set = true
	}
	if err := p.Config.Validate(); err != nil {
		return nil, backend.Options{}, err
	}
	var tables []*table
	for _, fam := range p.families() {
		var nft knftables.Interface
		var read reader
		var count ruleCounter
		if p.Config.DryRun {
			fake := knftables.NewFake(fam.nft, p.Config.Table)
			out := p.Out
			if out == nil {
				out = os.Stdout
			}
			nft, read, count = &printer{Fake: fake, out: out}, fakeReader(fake), fakeCounter(fake)
		} else {
			var err error
			real, err := knftables.New(fam.nft, p.Config.Table)
			if err != nil {
				return nil, backend.Options{}, fmt.Errorf("nftables %s: %w", fam, err)
			}
			nft = nftCommand{real}
			read, count = nftReader(fam.nft, p.Config.Table), netlinkCounter(fam, p.Config.Table)
		}
		t := newTable(fam, nft, read)
		t.count = count
		if p.Config.Netlink && !p.Config.DryRun {
			t.nl = newNLTable(fam, p.Config.Table)
		}
		tables = append(tables, t)
	}
	b := NewBackend(p.Config, tables...)
	b.log = klog.FromContext(ctx).WithName("nft")
	if p.Config.MetricsBindAddress != "" {
		registerMetrics()
	}
	p.backend = b
	var families []localv1.IPFamily
	for _, t := range tables {
		families = append(families, t.fam.model)
	}
	opts, err := p.startHelpers(ctx, families)
	if err != nil {
		return nil, backend.Options{}, err
	}
	if !p.Config.DryRun {
		b.watch.resyncNow = make(chan struct{}, 1)
		if err := b.watchKernel(ctx); err != nil {
			b.watch.resyncNow = nil
			b.log.Info("Cannot watch the nftables tables; repairs wait for the periodic check", "err", err)
		}
	}
	if b.watch.resyncNow != nil {
		opts.ResyncNow = b.watch.resyncNow
	}
	// A periodic sync checks the fixed chains and rewrites only when the
	// check fails: the backend tells which it did.
	opts.LastSyncFull = b.LastSyncFull
	return b, opts, nil
}

// Cleanup implements backend.Plugin: it deletes the tables.
func (p *Plugin) Cleanup(ctx context.Context) error {
	if !p.set {
		p.Config = DefaultConfig()
	}
	var errs []error
	for _, fam := range p.families() {
		nft, err := knftables.New(fam.nft, p.Config.Table)
		if err != nil {
			errs = append(errs, fmt.Errorf("nftables %s: %w", fam, err))
			continue
		}
		if err := deleteTable(ctx, nft); err != nil {
			errs = append(errs, fmt.Errorf("deleting table %s %s: %w", fam.nft, p.Config.Table, err))
		}
	}
	return errors.Join(errs...)
}

// deleteTable deletes a table; a missing table is not an error.
func deleteTable(ctx context.Context, nft knftables.Interface) error {
	tx := nft.NewTransaction()
	tx.Delete(&knftables.Table{})
	if err := nft.Run(ctx, tx); err != nil && !knftables.IsNotFound(err) {
		return err
	}
	return nil
}

func (p *Plugin) families() []family {
	var out []family
	if slices.Contains(p.Config.IPFamilies, "ipv4") {
		out = append(out, ipv4)
	}
	if slices.Contains(p.Config.IPFamilies, "ipv6") {
		out = append(out, ipv6)
	}
	return out
}

// printer is --dry-run: it prints each transaction and applies it to a
// fake, which checks it and keeps the state the next one builds on.
type printer struct {
	*knftables.Fake
	out io.Writer
}

func (p *printer) Run(ctx context.Context, tx *knftables.Transaction) error {
	fmt.Fprintf(p.out, "# transaction: %d operations\n%s", tx.NumOperations(), strings.TrimSuffix(tx.String(), "\n")+"\n")
	return p.Fake.Run(ctx, tx)
}
