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
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"
	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/host"
	"github.com/kpng/kpng/proxyutil/metrics"
)

func init() {
	backend.Register(backend.Registration{
		Name:  "nft",
		Short: "Program the node's services in nftables (kube-proxy's nftables mode, updated incrementally)",
		New:   func() backend.Plugin { return &Plugin{} },
	})
}

// RetryPeriod and MaxRetryPeriod are the driver's backoff after a failed
// sync (backend.Options): the first retry after 250 ms, then doubling, but
// never more than 1 s apart, so that the tables are whole again within a second
// of the kernel accepting writes again (another process's owner table gone,
// say: the kernel sends no notification of that), as kube-proxy's are: it
// retries at its next sync, at most a second later while changes arrive.
const (
	RetryPeriod    = 250 * time.Millisecond
	MaxRetryPeriod = time.Second
)

// Config is the backend's configuration: kube-proxy's flags of the same
// names (host.Config) and the backend's own.
type Config struct {
	host.Config
	// Table names the backend's tables (one per family).
	Table string
	// Netlink writes the incremental transactions through netlink rather
	// than the nft command (which reads the whole table first).
	Netlink bool
}

// DefaultConfig is kube-proxy v1.36's nftables-mode defaults, but for
// MinSyncPeriod: kube-proxy waits at least 1 s between syncs because each
// of its syncs recomputes every service; a sync here writes only what
// changed, so a tenth of that is enough. The period counts from the end of
// the last sync, so a change after a quiet moment is synced at once; under
// a stream of changes it bounds the kernel commits, each of which walks
// every chain of the namespace (docs/performance.md, "The whole process
// under churn": at 10,000 services and 100 changes/s, 100 ms used 8.75 s of
// CPU in a minute where 10 ms used 19.8 s, and the network-programming p99
// stayed under 0.25 s). kpng proxy uses this default too when its
// configuration leaves minSyncPeriod unset, and honours any value given,
// as kube-proxy does: docs/config.md. FullSyncPeriod is how often a
// periodic sync reads the tables back and repairs any difference; the
// periodic syncs in between only check the tables' fixed chains (see
// check.go).
func DefaultConfig() Config {
	c := Config{Config: host.Defaults(), Table: "kpng", Netlink: true}
	c.NodePortAddresses = []string{"primary"} // kube-proxy's nftables mode
	c.DetectLocalMode = host.LocalModeClusterCIDR
	c.MinSyncPeriod = 100 * time.Millisecond
	return c
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.Table == "" {
		errs = append(errs, errors.New("--table must not be empty"))
	}
	return errors.Join(append(errs, c.Config.Validate())...)
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
	c.Config.BindFlags(fs)
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
	opts, err := host.StartHelpers(ctx, metrics.ModeNFTables, &p.Config.Config, families)
	if err != nil {
		return nil, backend.Options{}, err
	}
	if !p.Config.DryRun {
		b.watch.resyncNow = make(chan struct{}, 1)
		opts.ResyncNow = b.watch.resyncNow
		b.watch.start = func() {
			if err := b.watchKernel(ctx); err != nil {
				b.log.Info("Cannot watch the nftables tables; repairs wait for the periodic check", "err", err)
			}
		}
	}
	// A periodic sync checks the fixed chains and rewrites only when the
	// check fails: the backend tells which it did.
	opts.LastSyncFull = b.LastSyncFull
	opts.RetryPeriod, opts.MaxRetryPeriod = RetryPeriod, MaxRetryPeriod
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
