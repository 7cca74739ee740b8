// Package guide holds the code of docs/writing-a-backend.md, so that every
// snippet of the guide compiles against the real API and is tested: a
// full-state backend that renders rules through a diffstore, an incremental
// backend, and the plugin that makes one a `to-<name>` command.
package guide

import (
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/client/diffstore"
)

// --- The full-state style, out of process -----------------------------------

// PrintChanges is the smallest out-of-process backend: client.Run connects to
// a kpng server (kpng ... to-api), and calls the handler with the node's
// whole view and what changed since the previous call.
func PrintChanges(ctx context.Context, target, node string, out io.Writer) error {
	return client.Run(ctx, target, node,
		func(ctx context.Context, st *backend.State, ch backend.Changes) error {
			if ch.Reset { // the first call, or after a failure: everything is new
				fmt.Fprintf(out, "reset: %d services\n", len(st.Services))
				return nil
			}
			for _, k := range ch.Set {
				fmt.Fprintf(out, "set %s: %d endpoints\n", k, len(st.Services[k].Endpoints))
			}
			for _, k := range ch.Deleted {
				fmt.Fprintf(out, "deleted %s\n", k)
			}
			return nil
		})
}

// --- Rendering with a diffstore -----------------------------------------------

// Render turns one entry of the view into the dataplane's rules, keyed by
// rule name: here one line per service port, "proto ip:port -> endpoints".
// It reads only what the brain resolved: which endpoints are in the set of
// the traffic policy in force, and whether the port has endpoints at all.
func Render(se *localv1.ServiceEndpoints) map[string]string {
	svc := se.Service
	rules := map[string]string{}
	for _, port := range svc.Ports {
		name := fmt.Sprintf("%s/%s/%s/%s", svc.Namespace, svc.Name, svc.Family, port.Name)
		if !port.HasEndpoints {
			rules[name] = fmt.Sprintf("%s %s reject", port.Protocol, hostPort(svc.ClusterIp, port.Port))
			continue
		}
		var targets []string
		for _, ep := range se.Endpoints {
			if ep.PortName != port.Name || ep.Protocol != port.Protocol {
				continue
			}
			inSet := ep.InClusterSet
			if svc.InternalTrafficPolicy == localv1.TrafficPolicy_LOCAL {
				inSet = ep.InLocalSet
			}
			if inSet {
				targets = append(targets, hostPort(ep.Ip, ep.Port))
			}
		}
		rule := fmt.Sprintf("%s %s -> %s", port.Protocol, hostPort(svc.ClusterIp, port.Port), strings.Join(targets, " "))
		if len(targets) == 0 { // endpoints exist, none for this node's traffic
			rule = fmt.Sprintf("%s %s drop", port.Protocol, hostPort(svc.ClusterIp, port.Port))
		}
		rules[name] = rule
	}
	return rules
}

func hostPort(ip string, port int32) string {
	return net.JoinHostPort(ip, strconv.Itoa(int(port)))
}

func hashString(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// RuleBackend is a full-state backend.Backend: each Sync renders the whole
// view into a diffstore round, and sends the dataplane (here: a map, and a
// log of operations) only the rules the round created, updated or deleted.
type RuleBackend struct {
	store *diffstore.Store[string, string]

	mu     sync.Mutex
	kernel map[string]string // what the "dataplane" holds
	ops    []string          // the operations of the last Sync
}

// NewRuleBackend returns an empty RuleBackend.
func NewRuleBackend() *RuleBackend {
	return &RuleBackend{store: diffstore.New[string](hashString), kernel: map[string]string{}}
}

// Sync implements backend.Backend.
func (b *RuleBackend) Sync(ctx context.Context, st *backend.State, ch backend.Changes) error {
	b.store.Reset()
	for _, se := range st.Services {
		for name, rule := range Render(se) {
			b.store.Set(name, rule)
		}
	}
	b.store.Done()

	b.mu.Lock()
	defer b.mu.Unlock()
	if ch.Reset { // the dataplane may hold anything: rewrite it all
		clear(b.kernel)
		for _, it := range b.store.Unchanged() {
			b.kernel[it.Key] = it.Value
		}
	}
	b.ops = b.ops[:0]
	for _, it := range b.store.Changed() {
		switch it.State {
		case diffstore.Created, diffstore.Updated:
			b.kernel[it.Key] = it.Value
		case diffstore.Deleted:
			delete(b.kernel, it.Key)
		}
		b.ops = append(b.ops, it.State.String()+" "+it.Key)
	}
	slices.Sort(b.ops)
	return nil
}

// Rules returns a copy of what the dataplane holds.
func (b *RuleBackend) Rules() map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return maps.Clone(b.kernel)
}

// LastOps returns the dataplane operations of the last Sync.
func (b *RuleBackend) LastOps() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.ops)
}

// --- The incremental style -----------------------------------------------------

// Counter is a backend.Incremental: it is told each service and endpoint
// that appeared, changed or went away, then Sync. It keeps the endpoints of
// each service, as a dataplane keyed by service would.
type Counter struct {
	mu        sync.Mutex
	endpoints map[backend.ServiceKey]map[backend.EndpointKey]*localv1.Endpoint
	syncs     int
}

// Reset implements backend.Incremental: what follows is the whole view.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endpoints = map[backend.ServiceKey]map[backend.EndpointKey]*localv1.Endpoint{}
}

// SetService implements backend.Incremental.
func (c *Counter) SetService(svc *localv1.Service) {
	c.mu.Lock()
	defer c.mu.Unlock()
	k := backend.ServiceKey{Namespace: svc.Namespace, Name: svc.Name, Family: svc.Family}
	if c.endpoints[k] == nil {
		c.endpoints[k] = map[backend.EndpointKey]*localv1.Endpoint{}
	}
}

// DeleteService implements backend.Incremental.
func (c *Counter) DeleteService(k backend.ServiceKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.endpoints, k)
}

// SetEndpoint implements backend.Incremental.
func (c *Counter) SetEndpoint(k backend.ServiceKey, ep *localv1.Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.endpoints[k][backend.EndpointKeyOf(ep)] = ep // SetService came first
}

// DeleteEndpoint implements backend.Incremental.
func (c *Counter) DeleteEndpoint(k backend.ServiceKey, ep *localv1.Endpoint) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.endpoints[k], backend.EndpointKeyOf(ep))
}

// Sync implements backend.Incremental: the batch is complete, commit it.
func (c *Counter) Sync() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.syncs++
	return nil
}

// Endpoints returns how many endpoints each service has.
func (c *Counter) Endpoints() map[backend.ServiceKey]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[backend.ServiceKey]int{}
	for k, eps := range c.endpoints {
		out[k] = len(eps)
	}
	return out
}

// RunCounter runs a Counter out of process.
func RunCounter(ctx context.Context, target, node string, c *Counter, opts ...client.Option) error {
	c.Reset()
	return client.RunIncremental(ctx, target, node, c, opts...)
}

// --- In process: a plugin, registered as to-rules ------------------------------

// rulesPlugin makes RuleBackend the command `to-rules` of kpng.
type rulesPlugin struct {
	verbose bool
}

// BindFlags implements backend.Plugin: the flags of `to-rules`.
func (p *rulesPlugin) BindFlags(fs *flag.FlagSet) {
	fs.BoolVar(&p.verbose, "verbose", false, "log every rule written")
}

// Open implements backend.Plugin: check the flags, prepare the dataplane
// for env.NodeName, and return the Backend that kpng drives with the
// options it asks for (here, kube-proxy's default sync periods).
func (p *rulesPlugin) Open(ctx context.Context, env backend.Env) (backend.Backend, backend.Options, error) {
	return NewRuleBackend(), backend.Options{MinSyncPeriod: time.Second, ResyncPeriod: 30 * time.Second}, nil
}

// Cleanup implements backend.Plugin: printed rules leave nothing in the
// kernel to remove.
func (p *rulesPlugin) Cleanup(ctx context.Context) error { return nil }

func init() {
	backend.Register(backend.Registration{
		Name:  "rules",
		Short: "Print service rules (the example of docs/writing-a-backend.md)",
		New:   func() backend.Plugin { return &rulesPlugin{} },
	})
}
