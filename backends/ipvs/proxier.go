package ipvs

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/cloudflare/ipvs"
	"github.com/cloudflare/ipvs/netmask"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/host"
)

// proxier programs one IP family, as kube-proxy runs one ipvs proxier per
// family.
type proxier struct {
	ipv6   bool
	family localv1.IPFamily
	cfg    *Config
	ipvs   ipvs.Client
	kern   kernel

	// rec is what each service asked for at the last sync that succeeded.
	rec map[backend.ServiceKey]*rendered
	// owner is the service whose virtual server each is (two Services
	// claiming one address and port: the last one written wins).
	owner map[vsKey]backend.ServiceKey
	// addrRefs and entryRefs count the services holding each address of
	// kube-ipvs0 and each ipset member.
	addrRefs  map[netip.Addr]int
	entryRefs map[setEntry]int
	// terminating are the real servers left with weight 0 when their
	// endpoint went away: removed once their connections drained, as
	// kube-proxy's graceful termination does (TCP only: a UDP or SCTP real
	// server is removed at once).
	terminating map[vsKey]map[netip.AddrPort]bool
	// nodePortAddrs are the addresses node-port virtual servers are on.
	nodePortAddrs []netip.Addr
	// rules is what the last write of the iptables rules left (zero:
	// none yet, or it failed), which every periodic sync compares
	// iptables with.
	rules ruleRecord

	// ops counts the kernel operations of the last sync, by kind (for
	// tests and logs).
	ops opCounts
}

// opCounts counts IPVS operations and the other writes of a sync.
type opCounts struct {
	CreateService, UpdateService, RemoveService int
	CreateDest, UpdateDest, RemoveDest          int
	Addrs, SetEntries                           int
	// RuleWrites counts the iptables-restores of the rules.
	RuleWrites int
	ListDests  int
}

// Total is the number of kernel operations.
func (o opCounts) Total() int {
	return o.CreateService + o.UpdateService + o.RemoveService + o.CreateDest + o.UpdateDest + o.RemoveDest + o.Addrs + o.SetEntries + o.RuleWrites
}

func newProxier(ipv6 bool, cfg *Config, c ipvs.Client, k kernel) *proxier {
	p := &proxier{ipv6: ipv6, family: localv1.IPFamily_IPV4, cfg: cfg, ipvs: c, kern: k}
	if ipv6 {
		p.family = localv1.IPFamily_IPV6
	}
	p.forget()
	return p
}

// forget drops the record: the next sync is a full one.
func (p *proxier) forget() {
	p.rec = map[backend.ServiceKey]*rendered{}
	p.owner = map[vsKey]backend.ServiceKey{}
	p.addrRefs = map[netip.Addr]int{}
	p.entryRefs = map[setEntry]int{}
	p.terminating = map[vsKey]map[netip.AddrPort]bool{}
}

func (p *proxier) ipvsFamily() ipvs.AddressFamily {
	if p.ipv6 {
		return ipvs.INET6
	}
	return ipvs.INET
}

// service is the IPVS virtual server of k with v's settings.
func (p *proxier) service(k vsKey, v virtualServer) ipvs.Service {
	s := ipvs.Service{
		Address:   k.Addr,
		Port:      k.Port,
		Protocol:  k.Proto,
		Family:    p.ipvsFamily(),
		Scheduler: p.cfg.Scheduler,
		Netmask:   netmask.MaskFrom(k.Addr.BitLen(), k.Addr.BitLen()),
	}
	if v.Timeout > 0 {
		s.Flags = ipvs.ServicePersistent
		s.Timeout = v.Timeout
	}
	return s
}

func (p *proxier) dest(d netip.AddrPort, weight uint32) ipvs.Destination {
	return ipvs.Destination{Address: d.Addr(), Port: d.Port(), Family: p.ipvsFamily(), FwdMethod: ipvs.Masquerade, Weight: weight}
}

// env is the rendering environment.
func (p *proxier) env() renderEnv { return renderEnv{nodePortAddrs: p.nodePortAddrs} }

// refreshNodePortAddrs reads the addresses node ports are served on, and
// reports whether they changed.
func (p *proxier) refreshNodePortAddrs(st *backend.State) (bool, error) {
	np := host.NodePortsOf(p.cfg.NodePortAddresses, p.ipv6)
	var primary netip.Addr
	if st.Node != nil {
		for _, s := range st.Node.Addresses {
			if a, err := netip.ParseAddr(s); err == nil && a.Is6() == p.ipv6 {
				primary = a
				break
			}
		}
	}
	local, err := p.kern.nodeAddrs(p.ipv6)
	if err != nil {
		return false, err
	}
	var addrs []netip.Addr
	if np.AllAddresses(primary) {
		addrs = local
	} else {
		addrs = np.Addresses(p.ipv6, primary, local)
	}
	addrs = slices.Clone(addrs)
	slices.SortFunc(addrs, netip.Addr.Compare)
	addrs = slices.Compact(addrs)
	changed := !slices.Equal(addrs, p.nodePortAddrs)
	p.nodePortAddrs = addrs
	return changed, nil
}

// sync applies the changes of st for this family. It returns whether it
// rewrote everything. setSizes lists the ipsets' sizes, for a periodic
// sync's check (one listing for every family).
func (p *proxier) sync(ctx context.Context, st *backend.State, ch backend.Changes, full bool, setSizes func() (map[string]int, error)) (bool, error) {
	p.ops = opCounts{}
	if ch.Reset || ch.NodeChanged || ch.Resync || full {
		changed, err := p.refreshNodePortAddrs(st)
		if err != nil {
			return false, err
		}
		if changed && !ch.Reset && !full {
			// Every node-port virtual server moves: re-render the
			// services that have node ports.
			return p.syncKeys(ctx, st, p.keysWithNodePorts(st, ch))
		}
	}
	if ch.Reset || full {
		return true, p.syncFull(ctx, st)
	}
	if ch.Resync {
		// Periodic syncs (not those of changes, which stay proportional
		// to the change) remove the real servers whose connections
		// drained, as kube-proxy's graceful termination checks them once a
		// minute.
		if err := p.drain(); err != nil {
			return false, err
		}
		drift, err := p.drifted()
		if err != nil {
			return false, err
		}
		if drift != "" {
			klog.FromContext(ctx).Info("IPVS state changed behind kpng's back, rewriting it", "family", p.family, "what", drift)
			return true, p.syncFull(ctx, st)
		}
		// The ipsets and the rules, which send no notification either,
		// cheaply (repair.go); the sets first: the rules name them.
		if err := p.repairSets(ctx, setSizes); err != nil {
			return false, err
		}
	}
	if ch.Resync || ch.NodeChanged {
		// The node's pod CIDRs tell local traffic (NodeCIDR): a node
		// change may change the rules.
		if err := p.writeRules(ctx, st); err != nil {
			return false, err
		}
	}
	return p.syncKeys(ctx, st, p.keysOf(ch))
}

func (p *proxier) keysOf(ch backend.Changes) []backend.ServiceKey {
	var keys []backend.ServiceKey
	for _, k := range slices.Concat(ch.Set, ch.Deleted) {
		if k.Family == p.family {
			keys = append(keys, k)
		}
	}
	return keys
}

func (p *proxier) keysWithNodePorts(st *backend.State, ch backend.Changes) []backend.ServiceKey {
	keys := p.keysOf(ch)
	for k, r := range p.rec {
		if r.NodePorts {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, backend.ServiceKey.Compare)
	return slices.Compact(keys)
}

// syncKeys re-renders the services of keys and sends the kernel what
// differs from the record: a changed endpoint is one real-server
// operation.
func (p *proxier) syncKeys(ctx context.Context, st *backend.State, keys []backend.ServiceKey) (bool, error) {
	var addEntries, delEntries []setEntry
	for _, k := range keys {
		old := p.rec[k]
		var cur *rendered
		if se := st.Services[k]; se != nil {
			cur = render(se, p.env())
		}
		if err := p.applyVS(k, old, cur); err != nil {
			return false, fmt.Errorf("service %s: %w", k, err)
		}
		a, d, err := p.applyRefs(old, cur)
		if err != nil {
			return false, fmt.Errorf("service %s: %w", k, err)
		}
		addEntries, delEntries = append(addEntries, a...), append(delEntries, d...)
		if cur == nil {
			delete(p.rec, k)
		} else {
			p.rec[k] = cur
		}
	}
	p.ops.SetEntries = len(addEntries) + len(delEntries)
	if err := p.kern.ipsetRestore(ctx, setScript(p.ipv6, addEntries, delEntries)); err != nil {
		return false, err
	}
	return false, nil
}

// applyVS changes the virtual servers of service k from old to cur (either
// may be nil).
func (p *proxier) applyVS(k backend.ServiceKey, old, cur *rendered) error {
	var oldVS, curVS map[vsKey]virtualServer
	if old != nil {
		oldVS = old.VS
	}
	if cur != nil {
		curVS = cur.VS
	}
	for _, vk := range slices.SortedFunc(mapKeys(oldVS), vsKey.compare) {
		if _, ok := curVS[vk]; ok || p.owner[vk] != k {
			continue
		}
		if err := p.removeVS(vk); err != nil {
			return err
		}
		delete(p.owner, vk)
	}
	for _, vk := range slices.SortedFunc(mapKeys(curVS), vsKey.compare) {
		v := curVS[vk]
		ov, had := oldVS[vk]
		if !had || p.owner[vk] != k {
			if err := p.createVS(vk, v); err != nil {
				return err
			}
			p.owner[vk] = k
			continue
		}
		if err := p.updateVS(vk, ov, v); err != nil {
			return err
		}
	}
	return nil
}

func (p *proxier) createVS(k vsKey, v virtualServer) error {
	svc := p.service(k, v)
	err := p.ipvs.CreateService(svc)
	if errors.Is(err, unix.EEXIST) {
		// Another service's, or left by an earlier run: take it over.
		if err := p.ipvs.UpdateService(svc); err != nil {
			return fmt.Errorf("update virtual server %s: %w", k, err)
		}
		p.ops.UpdateService++
		return p.reconcileDests(k, v)
	}
	if err != nil {
		return fmt.Errorf("create virtual server %s: %w", k, err)
	}
	p.ops.CreateService++
	delete(p.terminating, k)
	for _, d := range v.Dests {
		if err := p.createDest(svc, k, d); err != nil {
			return err
		}
	}
	return nil
}

func (p *proxier) removeVS(k vsKey) error {
	delete(p.terminating, k)
	err := p.ipvs.RemoveService(p.service(k, virtualServer{}))
	if err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("remove virtual server %s: %w", k, err)
	}
	p.ops.RemoveService++
	return nil
}

// updateVS changes a virtual server of the record from old to cur: its
// settings when they differ, and the real servers that differ.
func (p *proxier) updateVS(k vsKey, old, cur virtualServer) error {
	svc := p.service(k, cur)
	if old.Timeout != cur.Timeout {
		if err := p.ipvs.UpdateService(svc); err != nil {
			return fmt.Errorf("update virtual server %s: %w", k, err)
		}
		p.ops.UpdateService++
	}
	for _, d := range old.Dests {
		if _, found := slices.BinarySearchFunc(cur.Dests, d, netip.AddrPort.Compare); !found {
			if err := p.retireDest(svc, k, d); err != nil {
				return err
			}
		}
	}
	for _, d := range cur.Dests {
		if _, found := slices.BinarySearchFunc(old.Dests, d, netip.AddrPort.Compare); !found {
			if err := p.createDest(svc, k, d); err != nil {
				return err
			}
		}
	}
	return nil
}

// createDest adds real server d, or brings it back from termination.
func (p *proxier) createDest(svc ipvs.Service, k vsKey, d netip.AddrPort) error {
	if p.terminating[k][d] {
		delete(p.terminating[k], d)
		if err := p.ipvs.UpdateDestination(svc, p.dest(d, 1)); err != nil {
			return fmt.Errorf("virtual server %s: restore real server %s: %w", k, d, err)
		}
		p.ops.UpdateDest++
		return nil
	}
	err := p.ipvs.CreateDestination(svc, p.dest(d, 1))
	if errors.Is(err, unix.EEXIST) {
		err = p.ipvs.UpdateDestination(svc, p.dest(d, 1))
	}
	if err != nil {
		return fmt.Errorf("virtual server %s: add real server %s: %w", k, d, err)
	}
	p.ops.CreateDest++
	return nil
}

// retireDest takes real server d out of service: a TCP one gets weight 0
// (no new connections) and stays until its connections drain; others go
// at once (with expire_nodest_conn, their flows end at the next packet).
func (p *proxier) retireDest(svc ipvs.Service, k vsKey, d netip.AddrPort) error {
	if k.Proto != ipvs.TCP {
		return p.removeDest(svc, k, d)
	}
	if err := p.ipvs.UpdateDestination(svc, p.dest(d, 0)); err != nil {
		return fmt.Errorf("virtual server %s: set real server %s's weight to 0: %w", k, d, err)
	}
	p.ops.UpdateDest++
	if p.terminating[k] == nil {
		p.terminating[k] = map[netip.AddrPort]bool{}
	}
	p.terminating[k][d] = true
	return nil
}

func (p *proxier) removeDest(svc ipvs.Service, k vsKey, d netip.AddrPort) error {
	err := p.ipvs.RemoveDestination(svc, p.dest(d, 0))
	if err != nil && !errors.Is(err, unix.ENOENT) && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("virtual server %s: remove real server %s: %w", k, d, err)
	}
	p.ops.RemoveDest++
	return nil
}

// drain removes the terminating real servers whose connections are gone.
func (p *proxier) drain() error {
	for _, k := range slices.SortedFunc(mapKeys(p.terminating), vsKey.compare) {
		ds := p.terminating[k]
		if len(ds) == 0 {
			delete(p.terminating, k)
			continue
		}
		svc := p.service(k, virtualServer{})
		list, err := listDests(p.ipvs, svc)
		p.ops.ListDests++
		if err != nil {
			if errors.Is(err, unix.ESRCH) {
				delete(p.terminating, k)
				continue
			}
			return fmt.Errorf("virtual server %s: list real servers: %w", k, err)
		}
		present := map[netip.AddrPort]ipvs.DestinationExtended{}
		for _, d := range list {
			present[netip.AddrPortFrom(d.Address, d.Port)] = d
		}
		for d := range ds {
			kd, ok := present[d]
			switch {
			case !ok:
				delete(ds, d)
			case kd.ActiveConnections+kd.InactiveConnections == 0:
				if err := p.removeDest(svc, k, d); err != nil {
					return err
				}
				delete(ds, d)
			}
		}
		if len(ds) == 0 {
			delete(p.terminating, k)
		}
	}
	return nil
}

// applyRefs moves the reference counts of kube-ipvs0's addresses and the
// ipset members from old to cur, adding and removing addresses at once,
// and returns the members to add and to delete.
func (p *proxier) applyRefs(old, cur *rendered) (add, del []setEntry, err error) {
	var oldAddrs, curAddrs []netip.Addr
	var oldEntries, curEntries []setEntry
	if old != nil {
		oldAddrs, oldEntries = old.Addrs, old.Entries
	}
	if cur != nil {
		curAddrs, curEntries = cur.Addrs, cur.Entries
	}
	for _, a := range curAddrs {
		if p.addrRefs[a]++; p.addrRefs[a] == 1 {
			if err := p.kern.addAddr(a); err != nil {
				return nil, nil, err
			}
			p.ops.Addrs++
		}
	}
	for _, a := range oldAddrs {
		if p.addrRefs[a]--; p.addrRefs[a] <= 0 {
			delete(p.addrRefs, a)
			if err := p.kern.delAddr(a); err != nil {
				return nil, nil, err
			}
			p.ops.Addrs++
		}
	}
	for _, e := range curEntries {
		if p.entryRefs[e]++; p.entryRefs[e] == 1 {
			add = append(add, e)
		}
	}
	for _, e := range oldEntries {
		if p.entryRefs[e]--; p.entryRefs[e] <= 0 {
			delete(p.entryRefs, e)
			if !slices.Contains(add, e) {
				del = append(del, e)
			}
		}
	}
	// An entry both added and deleted in this batch stays.
	add = slices.DeleteFunc(add, func(e setEntry) bool { return p.entryRefs[e] == 0 })
	return add, del, nil
}

// excluded reports whether a virtual server's address is one kpng leaves
// alone (--ipvs-exclude-cidrs), as kube-proxy does.
func (p *proxier) excluded(a netip.Addr) bool {
	for _, c := range p.cfg.excludeCIDRs {
		if c.Contains(a) {
			return true
		}
	}
	return false
}

// kernelServices lists IPVS's virtual servers of this family, by key.
func (p *proxier) kernelServices() (map[vsKey]ipvs.ServiceExtended, error) {
	list, err := listServices(p.ipvs)
	if err != nil {
		return nil, err
	}
	m := map[vsKey]ipvs.ServiceExtended{}
	for _, s := range list {
		if s.Family != p.ipvsFamily() || s.FWMark != 0 {
			continue
		}
		m[vsKey{Addr: s.Address, Port: s.Port, Proto: s.Protocol}] = s
	}
	return m, nil
}

// wanted is every virtual server of the record.
func (p *proxier) wanted() map[vsKey]virtualServer {
	m := map[vsKey]virtualServer{}
	for k, r := range p.rec {
		for vk, v := range r.VS {
			if p.owner[vk] == k {
				m[vk] = v
			}
		}
	}
	return m
}

// sameSettings reports whether a kernel virtual server has the settings
// kpng writes for v.
func (p *proxier) sameSettings(s ipvs.Service, want ipvs.Service) bool {
	const mask = ipvs.ServicePersistent | ipvs.ServiceOnePacket
	return s.Scheduler == want.Scheduler && s.Flags&mask == want.Flags&mask && (want.Flags&ipvs.ServicePersistent == 0 || s.Timeout == want.Timeout)
}

// drifted tells (cheaply: one dump of the virtual servers, one of
// kube-ipvs0's addresses) whether the kernel lost or gained virtual
// servers or addresses behind kpng's back; "" when not.
func (p *proxier) drifted() (string, error) {
	have, err := p.kernelServices()
	if err != nil {
		return "", err
	}
	want := p.wanted()
	for k, v := range want {
		s, ok := have[k]
		if !ok {
			return "virtual server " + k.String() + " missing", nil
		}
		if !p.sameSettings(s.Service, p.service(k, v)) {
			return "virtual server " + k.String() + " changed", nil
		}
	}
	for k := range have {
		if _, ok := want[k]; !ok && !p.excluded(k.Addr) {
			return "unknown virtual server " + k.String(), nil
		}
	}
	addrs, err := p.kern.dummyAddrs(p.ipv6)
	if err != nil {
		return "", err
	}
	if len(addrs) != len(p.addrRefs) {
		return fmt.Sprintf("%s has %d addresses, want %d", DummyInterface, len(addrs), len(p.addrRefs)), nil
	}
	for _, a := range addrs {
		if p.addrRefs[a] == 0 {
			return "unknown address " + a.String() + " on " + DummyInterface, nil
		}
	}
	return "", nil
}

// syncFull renders every service and makes the kernel match: virtual
// servers and real servers read back and fixed one by one (kpng's and
// those an earlier kube-proxy or kpng left; a real server of weight 0 that
// is not wanted keeps draining), kube-ipvs0's addresses, every ipset
// rewritten, the iptables rules and jumps. Nothing is flushed: traffic to
// unchanged services goes on.
func (p *proxier) syncFull(ctx context.Context, st *backend.State) error {
	start := time.Now()
	p.forget()
	for k, se := range st.Services {
		if k.Family != p.family {
			continue
		}
		r := render(se, p.env())
		p.rec[k] = r
		for _, a := range r.Addrs {
			p.addrRefs[a]++
		}
		for _, e := range r.Entries {
			p.entryRefs[e]++
		}
	}
	// Two services claiming one virtual server: the first by key wins, as
	// stable an answer as any.
	for _, k := range slices.SortedFunc(mapKeys(p.rec), backend.ServiceKey.Compare) {
		for vk := range p.rec[k].VS {
			if _, taken := p.owner[vk]; !taken {
				p.owner[vk] = k
			}
		}
	}

	if err := p.kern.ensureDummy(); err != nil {
		return err
	}
	have, err := p.kernelServices()
	if err != nil {
		return err
	}
	want := p.wanted()
	for k := range have {
		if _, ok := want[k]; !ok && !p.excluded(k.Addr) {
			if err := p.removeVS(k); err != nil {
				return err
			}
		}
	}
	for _, k := range slices.SortedFunc(mapKeys(want), vsKey.compare) {
		v := want[k]
		s, ok := have[k]
		if !ok {
			if err := p.createVS(k, v); err != nil {
				return err
			}
			continue
		}
		if svc := p.service(k, v); !p.sameSettings(s.Service, svc) {
			if err := p.ipvs.UpdateService(svc); err != nil {
				return fmt.Errorf("update virtual server %s: %w", k, err)
			}
			p.ops.UpdateService++
		}
		if err := p.reconcileDests(k, v); err != nil {
			return err
		}
	}

	addrs, err := p.kern.dummyAddrs(p.ipv6)
	if err != nil {
		return err
	}
	for _, a := range addrs {
		if p.addrRefs[a] == 0 {
			if err := p.kern.delAddr(a); err != nil {
				return err
			}
			p.ops.Addrs++
		}
	}
	for a := range p.addrRefs {
		if !slices.Contains(addrs, a) {
			if err := p.kern.addAddr(a); err != nil {
				return err
			}
			p.ops.Addrs++
		}
	}

	p.ops.SetEntries = len(p.entryRefs)
	existing, err := p.kern.ipsets(ctx)
	if err != nil {
		return err
	}
	if err := p.kern.ipsetRestore(ctx, fullSetScript(p.ipv6, p.entryRefs, existing)); err != nil {
		return err
	}
	if err := p.writeRules(ctx, st); err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Full IPVS sync", "family", p.family, "services", len(p.rec), "virtualServers", len(want), "took", time.Since(start))
	return nil
}

// reconcileDests makes the real servers of an existing virtual server
// those of v, reading them back.
func (p *proxier) reconcileDests(k vsKey, v virtualServer) error {
	svc := p.service(k, v)
	list, err := listDests(p.ipvs, svc)
	p.ops.ListDests++
	if err != nil {
		return fmt.Errorf("virtual server %s: list real servers: %w", k, err)
	}
	have := map[netip.AddrPort]ipvs.DestinationExtended{}
	for _, d := range list {
		have[netip.AddrPortFrom(d.Address, d.Port)] = d
	}
	for d, kd := range have {
		if _, found := slices.BinarySearchFunc(v.Dests, d, netip.AddrPort.Compare); found {
			continue
		}
		if kd.Weight == 0 && k.Proto == ipvs.TCP {
			// Draining already (an earlier run retired it): keep
			// waiting for its connections.
			if p.terminating[k] == nil {
				p.terminating[k] = map[netip.AddrPort]bool{}
			}
			p.terminating[k][d] = true
			continue
		}
		if err := p.retireDest(svc, k, d); err != nil {
			return err
		}
	}
	for _, d := range v.Dests {
		kd, ok := have[d]
		switch {
		case !ok:
			if err := p.createDest(svc, k, d); err != nil {
				return err
			}
		case kd.Weight != 1 || kd.FwdMethod != ipvs.Masquerade:
			if err := p.ipvs.UpdateDestination(svc, p.dest(d, 1)); err != nil {
				return fmt.Errorf("virtual server %s: update real server %s: %w", k, d, err)
			}
			p.ops.UpdateDest++
		}
	}
	return nil
}

// writeRules makes the iptables rules of the family and the jumps to them
// what st asks for: written when iptables differs from what the last write
// left (ensureRules).
func (p *proxier) writeRules(ctx context.Context, st *backend.State) error {
	var podCIDRs []string
	if st.Node != nil {
		podCIDRs = st.Node.PodCidrs
	}
	rc := ruleConfig{
		ipv6:          p.ipv6,
		masqueradeAll: p.cfg.MasqueradeAll,
		mark:          host.MasqueradeMark(p.cfg.MasqueradeBit),
		local:         host.DetectLocal(&p.cfg.Config, p.ipv6, podCIDRs),
		dropInvalid:   p.cfg.dropInvalid,
	}
	return p.ensureRules(ctx, rulesScript(rc))
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// listServices lists IPVS's virtual servers. The library reports an empty
// dump as os.ErrNotExist: that is no virtual server.
func listServices(c ipvs.Client) ([]ipvs.ServiceExtended, error) {
	list, err := c.Services()
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list virtual servers: %w", err)
	}
	return list, nil
}

// listDests lists a virtual server's real servers (an empty dump, which
// the library reports as os.ErrNotExist, is none; a missing virtual server
// is ESRCH).
func listDests(c ipvs.Client, svc ipvs.Service) ([]ipvs.DestinationExtended, error) {
	list, err := c.Destinations(svc)
	if errors.Is(err, os.ErrNotExist) && !errors.Is(err, unix.ESRCH) {
		return nil, nil
	}
	return list, err
}
