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
	"strings"
	"time"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/healthcheck"
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

// Config is the backend's configuration.
type Config struct {
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
	// MinSyncPeriod and SyncPeriod drive backend.Run (kube-proxy's names).
	MinSyncPeriod time.Duration
	SyncPeriod    time.Duration
}

// DefaultConfig is the configuration of to-ebpf without flags. A sync
// writes a few map entries per changed Service (microseconds each), so
// 10 ms is enough to batch a burst of changes without holding one back.
func DefaultConfig() Config {
	return Config{PinPath: DefaultPinPath, Interfaces: "auto", MinSyncPeriod: 10 * time.Millisecond, SyncPeriod: 30 * time.Second}
}

// Plugin is the to-ebpf command: its flags, then the backend.
type Plugin struct {
	Config Config
	set    bool
	objs   *Objects // the last Open's
}

// BindFlags implements backend.Plugin.
func (p *Plugin) BindFlags(fs *flag.FlagSet) {
	p.Config, p.set = DefaultConfig(), true
	c := &p.Config
	fs.StringVar(&c.PinPath, "ebpf-pin-path", c.PinPath, "folder on a BPF filesystem where the maps and links are pinned, so that a restart resumes from them")
	fs.StringVar(&c.CgroupPath, "ebpf-cgroup-path", c.CgroupPath, "cgroup v2 whose sockets are balanced (default: the root of the cgroup v2 hierarchy, i.e. every process of the node)")
	fs.StringVar(&c.Interfaces, "ebpf-interfaces", c.Interfaces, `interfaces where packets from outside the node reach NodePorts, external and load-balancer IPs (tcx programs), comma-separated; "auto": those holding the node's addresses; "none": no north-south`)
	fs.DurationVar(&c.MinSyncPeriod, "min-sync-period", c.MinSyncPeriod, "least time from the end of a sync to the start of the next (changes arriving meanwhile are batched)")
	fs.DurationVar(&c.SyncPeriod, "sync-period", c.SyncPeriod, "periodic sync: compare the services map with what was written, and repair it")
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
// them with the view.
func (p *Plugin) Open(ctx context.Context, env backend.Env) (backend.Backend, backend.Options, error) {
	c := p.config()
	if c.PinPath == "" {
		return nil, backend.Options{}, errors.New("--ebpf-pin-path must not be empty")
	}
	cg := c.CgroupPath
	if cg == "" {
		var err error
		if cg, err = CgroupV2Root(); err != nil {
			return nil, backend.Options{}, err
		}
	}
	o, err := Load(c.PinPath)
	if err != nil {
		return nil, backend.Options{}, err
	}
	if err := o.Attach(cg, c.PinPath); err != nil {
		o.Close()
		return nil, backend.Options{}, err
	}
	ifaces, err := c.interfaces()
	if err == nil {
		err = o.AttachInterfaces(ifaces, c.PinPath)
	}
	if err != nil {
		o.Close()
		return nil, backend.Options{}, err
	}
	p.objs = o
	go func() {
		<-ctx.Done()
		o.Close() // the pins keep the maps and links
	}()
	klog.FromContext(ctx).Info("Attached the programs", "cgroup", cg, "interfaces", ifaces, "pinPath", c.PinPath)
	// The health-check node ports of Services with externalTrafficPolicy
	// Local, served as kube-proxy serves them, on the node's primary
	// addresses (where the node ports are); the tc programs let their
	// packets through (they are no frontend).
	hc := healthcheck.NewServiceHealthServer(healthcheck.ServiceOptions{NodePortAddresses: []string{"primary"}})
	context.AfterFunc(ctx, hc.Close)
	d := NewDataplane(o.Maps())
	return d, backend.Options{
		MinSyncPeriod: c.MinSyncPeriod,
		ResyncPeriod:  c.SyncPeriod,
		LastSyncFull:  d.LastSyncFull,
		OnSync:        hc.OnSync,
	}, nil
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
