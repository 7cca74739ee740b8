// Package ebpf is kpng's eBPF backend (to-ebpf): socket-level load
// balancing of Services. Programs attached to a cgroup v2 rewrite a Service
// address to one of its endpoints when a socket of that cgroup connects or
// sends a datagram, and back when it asks for its peer, so that traffic
// from the node and its pods goes straight to the endpoint. The maps are
// filled from the node's view, incrementally, and pinned so that a restart
// of kpng keeps traffic flowing. See README.md.
package ebpf

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

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/host"
	"github.com/kpng/kpng/proxyutil/metrics"
)

func init() {
	backend.Register(backend.Registration{
		Name:  "ebpf",
		Short: "Balance the node's Services at the socket (eBPF cgroup programs: connect, sendmsg, recvmsg, getpeername)",
		New:   func() backend.Plugin { return &Plugin{} },
	})
}

// DefaultPinPath is where the maps and links are pinned.
const DefaultPinPath = "/sys/fs/bpf/kpng"

// Config is the backend's configuration: kube-proxy's settings of the same
// names (host.Config: those BindFlags binds; the masquerade and
// local-traffic ones are unused, as docs/ebpf.md says) and the backend's
// own.
type Config struct {
	host.Config
	// PinPath is a folder on a BPF filesystem for the pinned maps and links.
	PinPath string
	// CgroupPath is the cgroup v2 the programs attach to; "" is the
	// hierarchy's root, where every process of the node is seen.
	CgroupPath string
	// Interfaces are where the node-port programs attach (tcx), for
	// traffic from outside the node: a comma-separated list of names,
	// "auto" for the interfaces holding the node's addresses
	// (NodeInterfaces), "" or "none" for none (socket programs only).
	Interfaces string
}

// DefaultConfig is the configuration of to-ebpf without flags:
// kube-proxy's defaults for the shared settings (as to-nft's), but for
// MinSyncPeriod. A sync writes a few map entries per changed Service
// (microseconds each), so 10 ms is enough to batch a burst of changes
// without holding one back.
func DefaultConfig() Config {
	c := Config{Config: host.Defaults(), PinPath: DefaultPinPath, Interfaces: "auto"}
	c.NodePortAddresses = []string{"primary"} // as kube-proxy's nftables mode
	c.MinSyncPeriod = 10 * time.Millisecond
	return c
}

// Validate checks the configuration.
func (c *Config) Validate() error {
	var errs []error
	if c.PinPath == "" && !c.DryRun {
		errs = append(errs, errors.New("--ebpf-pin-path must not be empty"))
	}
	return errors.Join(append(errs, c.Config.Validate())...)
}

// families are the IP families of IPFamilies, in the model's terms.
func (c *Config) families() []localv1.IPFamily {
	var out []localv1.IPFamily
	if slices.Contains(c.IPFamilies, "ipv4") {
		out = append(out, localv1.IPFamily_IPV4)
	}
	if slices.Contains(c.IPFamilies, "ipv6") {
		out = append(out, localv1.IPFamily_IPV6)
	}
	return out
}

// Plugin is the to-ebpf command: its flags, then the backend.
type Plugin struct {
	Config Config
	// Out receives what --dry-run prints (stdout if nil).
	Out io.Writer

	set       bool
	objs      *Objects   // the last Open's
	destroyer *Destroyer // the last Open's, if the kernel has bpf_sock_destroy
}

// BindFlags implements backend.Plugin.
func (p *Plugin) BindFlags(fs *flag.FlagSet) {
	p.Config, p.set = DefaultConfig(), true
	c := &p.Config
	fs.StringVar(&c.PinPath, "ebpf-pin-path", c.PinPath, "folder on a BPF filesystem where the maps and links are pinned, so that a restart resumes from them")
	fs.StringVar(&c.CgroupPath, "ebpf-cgroup-path", c.CgroupPath, "cgroup v2 whose sockets are balanced (default: the root of the cgroup v2 hierarchy, i.e. every process of the node)")
	fs.StringVar(&c.Interfaces, "ebpf-interfaces", c.Interfaces, `interfaces where packets from outside the node reach NodePorts, external and load-balancer IPs (tcx programs), comma-separated; "auto": those holding the node's addresses; "none": no north-south`)
	// kube-proxy's settings that mean something here. The masquerade
	// and local-traffic ones do not (connections that start on the node
	// are never NAT-ed; from outside, masquerade follows
	// externalTrafficPolicy): without their flags, a configuration that
	// sets them is told so.
	c.Config.BindSomeFlags(fs, "nodeport-addresses", "min-sync-period", "sync-period",
		"healthz-bind-address", "metrics-bind-address", "profiling", "dry-run", "ip-families")
}

func (p *Plugin) config() Config {
	if !p.set {
		p.Config, p.set = DefaultConfig(), true
	}
	return p.Config
}

// Open implements backend.Plugin: it loads the programs with their pinned
// maps and attaches them: the socket programs to the cgroup, the node-port
// programs to the interfaces (of the calling thread's network namespace).
// The maps keep what an earlier run wrote until the first sync reconciles
// them with the view. With DryRun it loads nothing: each sync prints the
// map writes it would make (see dryRun).
func (p *Plugin) Open(ctx context.Context, env backend.Env) (backend.Backend, backend.Options, error) {
	c := p.config()
	if err := c.Validate(); err != nil {
		return nil, backend.Options{}, err
	}
	p.objs, p.destroyer = nil, nil
	var b backend.Backend
	var d *Dataplane
	if c.DryRun {
		out := p.Out
		if out == nil {
			out = os.Stdout
		}
		fake := NewFakeMaps()
		d = NewDataplane(fake)
		b = &dryRun{d: d, fake: fake, out: out}
	} else {
		o, err := p.attach(ctx, c)
		if err != nil {
			return nil, backend.Options{}, err
		}
		d = NewDataplane(o.Maps())
		d.SetLinkChecker(o)
		if p.destroyer != nil {
			d.SetSocketDestroyer(p.destroyer, false)
		}
		b = d
	}
	d.Families = c.families()
	d.NodePorts = NewNodePortAddrs(c.NodePortAddresses)
	// The proxy's /healthz and /livez, /metrics, and the health-check node
	// ports of Services with externalTrafficPolicy Local, on the addresses
	// of --nodeport-addresses (where the node ports are; the tc programs
	// let their packets through: they are no frontend). No conntrack
	// cleaner: the socket programs connect straight to the endpoint and
	// the tc programs translate before netfilter, so conntrack never holds
	// a flow to a Service address of to-ebpf's, which is all the cleaner
	// deletes; a connected UDP socket keeps its endpoint whatever
	// conntrack holds (docs/ebpf.md).
	opts, err := host.StartHelpersWith(ctx, metrics.ModeEBPF, &c.Config, d.Families, host.HelperOptions{NoConntrackCleaner: true})
	if err != nil {
		if p.objs != nil {
			p.objs.Close()
		}
		if p.destroyer != nil {
			p.destroyer.Close()
		}
		return nil, backend.Options{}, err
	}
	opts.LastSyncFull = d.LastSyncFull
	return b, opts, nil
}

// attach loads and attaches the programs (Open without DryRun).
func (p *Plugin) attach(ctx context.Context, c Config) (*Objects, error) {
	cg := c.CgroupPath
	if cg == "" {
		var err error
		if cg, err = CgroupV2Root(); err != nil {
			return nil, err
		}
	}
	o, err := Load(c.PinPath)
	if err != nil {
		return nil, err
	}
	repaired, err := o.Attach(cg, c.PinPath)
	if err != nil {
		o.Close()
		return nil, err
	}
	ifaces, err := c.interfaces()
	if err == nil {
		var more []string
		more, err = o.AttachInterfaces(ifaces, c.PinPath)
		repaired = append(repaired, more...)
	}
	if err != nil {
		o.Close()
		return nil, err
	}
	if len(repaired) > 0 {
		klog.FromContext(ctx).Info("Repaired the programs' links an earlier run pinned", "links", repaired)
	}
	p.objs = o
	// Connected UDP sockets to endpoints that stop serving are destroyed
	// after a sync, as kube-proxy deletes their conntrack entries; on an
	// older kernel they keep their endpoint (docs/ebpf.md).
	des, err := NewDestroyer(o, cg, false)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Connected UDP sockets will keep endpoints that stop serving")
	}
	p.destroyer = des
	go func() {
		<-ctx.Done()
		o.Close() // the pins keep the maps and links
		if des != nil {
			des.Close()
		}
	}()
	klog.FromContext(ctx).Info("Attached the programs", "cgroup", cg, "interfaces", ifaces, "pinPath", c.PinPath)
	return o, nil
}

// interfaces resolves Interfaces, in the calling thread's network
// namespace.
func (c Config) interfaces() ([]string, error) {
	switch c.Interfaces {
	case "", "none":
		return nil, nil
	case "auto":
		return NodeInterfaces()
	}
	var names []string
	for _, n := range strings.Split(c.Interfaces, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	return names, nil
}

// Cleanup implements backend.Plugin: it detaches the programs and deletes
// the pins.
func (p *Plugin) Cleanup(ctx context.Context) error {
	c := p.config()
	if err := Remove(c.PinPath); err != nil {
		return fmt.Errorf("removing %s: %w", c.PinPath, err)
	}
	return nil
}
