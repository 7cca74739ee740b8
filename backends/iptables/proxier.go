package iptables

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/proxyutil/host"
	"github.com/kpng/kpng/proxyutil/nfacct"
)

// proxier programs one IP family's tables (ip or ip6), as kube-proxy runs
// one proxier per family.
type proxier struct {
	ipv6   bool
	family localv1.IPFamily
	cfg    *Config
	run    runner

	rend      renderer
	nodePorts host.NodePorts
	// localhostNodePorts: IPv4 node ports on 127.0.0.0/8 (route_localnet).
	localhostNodePorts bool
	// dropInvalid: nf_conntrack_tcp_be_liberal is off, so INVALID packets
	// are dropped in KPNG-FORWARD (kubernetes#74839).
	dropInvalid bool
	// acct makes kube-proxy's nfacct counters (nil: none, as in tests);
	// invalidAcct: the INVALID drop counts into its counter (the renderer's
	// localhostAcct does the same for localhost node ports); acctFailed:
	// a counter could not be made, said once.
	acct        counterMaker
	invalidAcct bool
	acctFailed  bool
	markMasq    string

	// The in-memory record of what the tables hold: per service, what was
	// written for it; keys sorted (the order of the shared chains).
	services map[backend.ServiceKey]*record
	keys     []backend.ServiceKey
	// nodePortsAll: every local address accepts node ports (but loopback,
	// unless localhostNodePorts); otherwise only nodePortIPs do.
	nodePortsAll bool
	nodePortIPs  []netip.Addr
	// needFull: the record may not match the kernel (a failed restore).
	needFull bool
	// repair: the kernel reported a change behind kpng's back; the next
	// Resync rewrites everything (see watchKernel).
	repair atomic.Bool
	// totals sums the counts of the services in the record.
	totals record
	// lastFull is when the last full sync succeeded; now is the clock.
	lastFull time.Time
	now      func() time.Time

	// buf holds a partial sync's restore input. A full sync's is written
	// as it is read (fullInput); headSize is the size of the part it
	// holds, to allocate the next one at once.
	buf      bytes.Buffer
	headSize int
}

// syncResult describes one sync of one family.
type syncResult struct {
	full bool
	// partialFailed: a partial restore failed (flushed table, or a chain
	// changed behind kpng's back) and a full sync followed.
	partialFailed bool
	// restoreFailures counts the restores of this sync that failed (the
	// partial one and the full one that followed: up to two).
	restoreFailures int
	bytes           int // restore input size
	// rules are the rules kpng owns per table after the sync; written
	// those the sync wrote.
	rules, written map[string]int
	noLocal        [2]int // internal, external
	wrote          bool   // a restore ran
}

func newProxier(ipv6 bool, cfg *Config, run runner) *proxier {
	p := &proxier{ipv6: ipv6, family: localv1.IPFamily_IPV4, cfg: cfg, run: run,
		services: map[backend.ServiceKey]*record{}, needFull: true, now: time.Now}
	if ipv6 {
		p.family = localv1.IPFamily_IPV6
	}
	p.rend = renderer{ipv6: ipv6, masqueradeAll: cfg.MasqueradeAll}
	p.nodePorts = host.NodePortsOf(cfg.NodePortAddresses, ipv6)
	p.localhostNodePorts = !ipv6 && cfg.LocalhostNodePorts && p.nodePorts.ContainsLoopback
	p.markMasq = fmt.Sprintf("%#x", host.MasqueradeMark(cfg.MasqueradeBit))
	p.dropInvalid = true
	p.nodePortsAll = p.nodePorts.All
	return p
}

func (p *proxier) name() string {
	if p.ipv6 {
		return "IPv6"
	}
	return "IPv4"
}

// sync brings the family's tables to state. A change-only sync writes the
// changed services' chains, and the shared chains only if a fragment of
// theirs changed; a periodic sync also checks the canary chains. Anything
// else (first sync, failure, node change, a canary gone, and a periodic
// sync once per FullSyncPeriod) rewrites everything and removes stale
// chains.
func (p *proxier) sync(ctx context.Context, state *backend.State, changes backend.Changes) (syncResult, error) {
	full := changes.Reset || changes.NodeChanged || p.needFull
	if changes.Resync && p.repair.Swap(false) {
		full = true
	}
	if changes.Resync && !full {
		full = p.cfg.FullSyncPeriod == 0 || p.now().Sub(p.lastFull) >= p.cfg.FullSyncPeriod
	}
	if !full {
		res, err := p.partialSync(ctx, state, changes, changes.Resync)
		if err == nil {
			return res, nil
		}
		klog.FromContext(ctx).Info("Partial sync failed, syncing everything", "family", p.name(), "err", err)
		full, err := p.fullSync(ctx, state)
		full.partialFailed = true
		full.restoreFailures += res.restoreFailures
		return full, err
	}
	return p.fullSync(ctx, state)
}

// setNode updates what rules depend on in the node and the cluster.
func (p *proxier) setNode(state *backend.State) {
	var primary netip.Addr
	var podCIDRs []string
	if n := state.Node; n != nil {
		for _, a := range n.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil && ip.Is6() == p.ipv6 {
				primary = ip
				break
			}
		}
		podCIDRs = n.PodCidrs
	}
	p.rend.nodeIP = primary
	p.rend.local = localMatch(host.DetectLocal(&p.cfg.Config, p.ipv6, podCIDRs))
	p.nodePortIPs = nil
	// "primary" is one CIDR per family of the node's primary IP (not
	// loopback), as kube-proxy turns it; a family without one has no CIDR,
	// so it matches all local addresses, as kube-proxy's does.
	p.nodePortsAll = p.nodePorts.AllAddresses(primary)
	if !p.nodePortsAll {
		ips, err := p.nodePortAddresses(primary)
		if err != nil {
			klog.Background().Error(err, "Node ports will not be reachable", "family", p.name())
		}
		p.nodePortIPs = ips
	}
}

// nodePortAddresses returns the addresses that accept node ports when not
// all do: the primary IP, or the interface addresses within the CIDRs.
func (p *proxier) nodePortAddresses(primary netip.Addr) ([]netip.Addr, error) {
	var local []netip.Addr
	if !p.nodePorts.Primary {
		var err error
		if local, err = host.InterfaceAddrs(); err != nil {
			return nil, err
		}
	}
	return p.nodePorts.Addresses(p.ipv6, primary, local), nil
}

func (p *proxier) fullSync(ctx context.Context, state *backend.State) (syncResult, error) {
	res := syncResult{full: true}
	p.setNode(state)
	p.ensureCounters(ctx)
	var saved saveParser
	if err := p.run.save(ctx, &saved); err != nil {
		p.needFull = true
		return res, err
	}
	existing := saved.done()

	keys := make([]backend.ServiceKey, 0, len(state.Services))
	for k := range state.Services {
		if k.Family == p.family {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, backend.ServiceKey.Compare)
	// Every service is rendered and only its record kept (the previous
	// record when it says the same, so that a resync leaves the record as
	// it was); its own chains' rules, which come last, are rendered again
	// as they are written (fullInput).
	services := make(map[backend.ServiceKey]*record, len(keys))
	chainBytes, chainRules := 0, 0
	for _, k := range keys {
		r := p.rend.render(state.Services[k])
		rec := r.record()
		if old := p.services[k]; old != nil && old.equal(rec) {
			rec = old
		}
		services[k] = rec
		for _, c := range r.chains {
			chainBytes += len(c.rules)
			chainRules += bytes.Count(c.rules, []byte{'\n'})
		}
	}

	var b bytes.Buffer
	b.Grow(p.headSize + p.headSize/16)
	var stale []string
	for _, tbl := range []string{"filter", "nat"} {
		b.WriteString("*" + tbl + "\n")
		declared := map[string]bool{}
		declare := func(c string) {
			declared[c] = true
			b.WriteString(":")
			b.WriteString(c)
			b.WriteString(" - [0:0]\n")
		}
		for _, c := range p.fixedChains(tbl) {
			declare(c)
		}
		if tbl == "nat" {
			for _, k := range keys {
				for _, c := range services[k].chains {
					declare(c.name)
				}
			}
		}
		stale = stale[:0]
		for _, c := range existing[tbl].ownChains() {
			if !declared[c] {
				stale = append(stale, c)
			}
		}
		slices.Sort(stale)
		for _, c := range stale {
			b.WriteString(":" + c + " - [0:0]\n") // flushes it
		}
		// Jumps from the builtin chains: remove those that are not ours
		// any more (or duplicated), add the missing ones at the top.
		present := map[string]bool{}
		for _, r := range existing[tbl].builtinJumps() {
			from, to := ruleChain(r)
			key := p.jumpKey(tbl, from, to)
			if key == "" || present[key] {
				b.WriteString("-D" + r[2:] + "\n")
				continue
			}
			present[key] = true
		}
		js := p.jumps(tbl)
		for i := len(js) - 1; i >= 0; i-- {
			if !present[js[i].from+" "+js[i].to] {
				b.WriteString("-I " + js[i].from + " 1 " + js[i].args() + "\n")
			}
		}
		p.writeFixed(&b, tbl)
		p.writeSharedChains(&b, tbl, func(shared) bool { return true }, keys, services)
		if tbl == "filter" {
			endTable(&b, stale)
		}
	}
	// The nat table's end: its services' chains, then the stale chains'
	// deletion.
	var tail bytes.Buffer
	endTable(&tail, stale)
	p.headSize = b.Len()
	in := &fullInput{head: b.Bytes(), tail: tail.Bytes(), rend: &p.rend, keys: keys, state: state.Services, services: services}
	res.bytes = b.Len() + chainBytes + tail.Len()
	res.written = countWritten(b.Bytes())
	res.written["nat"] += chainRules
	if err := p.restore(ctx, &res, "full", in); err != nil {
		return res, err
	}
	p.services, p.keys, p.needFull = services, keys, false
	p.lastFull = p.now()
	p.totals = record{}
	for _, r := range services {
		p.total(r, 1)
	}
	res.rules, res.noLocal = p.counts()
	return res, nil
}

// endTable ends a table's restore input: the deletion of the chains named
// in gone, COMMIT.
func endTable(b *bytes.Buffer, gone []string) {
	for _, c := range gone {
		b.WriteString("-X " + c + "\n")
	}
	b.WriteString("COMMIT\n")
}

// restore runs the restore input for a sync of kind (full or partial),
// whose size and rules written are in res; a failure makes the next sync
// a full one.
func (p *proxier) restore(ctx context.Context, res *syncResult, kind string, in input) error {
	res.wrote = true
	if err := p.run.restore(ctx, in); err != nil {
		p.needFull = true
		res.restoreFailures++
		return fmt.Errorf("%s %s sync: %w", p.name(), kind, err)
	}
	return nil
}

// jumpKey names a builtin jump that kpng wants ("" for one it does not).
func (p *proxier) jumpKey(tbl, from, to string) string {
	for _, j := range p.jumps(tbl) {
		if j.from == from && j.to == to {
			return from + " " + to
		}
	}
	return ""
}

func (p *proxier) jumps(tbl string) []builtinJump {
	var out []builtinJump
	for _, j := range jumps {
		if j.table == tbl {
			out = append(out, j)
		}
	}
	if tbl == "filter" && p.localhostNodePorts {
		out = append(out, firewallJumps...)
	}
	return out
}

// fixedChains are the chains of a table that exist whatever the services.
func (p *proxier) fixedChains(tbl string) []string {
	if tbl == "nat" {
		return []string{chainServices, chainNodePorts, chainPostrouting, chainMarkMasq, chainCanary}
	}
	out := []string{chainServices, chainExternalServices, chainNodePorts, chainForward, chainProxyFirewall, chainCanary}
	if p.localhostNodePorts {
		out = append(out, chainFirewall)
	}
	return out
}

// writeFixed writes the rules of the chains that do not depend on services.
func (p *proxier) writeFixed(b *bytes.Buffer, tbl string) {
	mark := p.markMasq + "/" + p.markMasq
	if tbl == "nat" {
		add(b, chainPostrouting).w("-m", "mark", "!", "--mark", mark, "-j", "RETURN").end()
		// Clear the mark so a packet that traverses the stack again is not
		// masqueraded twice.
		add(b, chainPostrouting).w("-j", "MARK", "--xor-mark", p.markMasq).end()
		add(b, chainPostrouting).w(comment("kubernetes service traffic requiring SNAT")...).w("-j", "MASQUERADE", "--random-fully").end()
		add(b, chainMarkMasq).w("-j", "MARK", "--or-mark", p.markMasq).end()
		return
	}
	if p.dropInvalid {
		l := add(b, chainForward).w("-m", "conntrack", "--ctstate", "INVALID")
		if p.invalidAcct {
			l = l.w("-m", "nfacct", "--nfacct-name", nfacct.InvalidDropped)
		}
		l.w("-j", "DROP").end()
	}
	add(b, chainForward).w(comment("kubernetes forwarding rules")...).w("-m", "mark", "--mark", mark, "-j", "ACCEPT").end()
	add(b, chainForward).w(comment("kubernetes forwarding conntrack rule")...).w("-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT").end()
	if p.localhostNodePorts {
		// CVE-2020-8558: route_localnet=1 must not let other hosts reach
		// 127.0.0.0/8; only DNATed (node port) connections may.
		add(b, chainFirewall).w(comment("block incoming localnet connections")...).
			w("-d", "127.0.0.0/8", "!", "-s", "127.0.0.0/8", "-m", "conntrack", "!", "--ctstate", "RELATED,ESTABLISHED,DNAT", "-j", "DROP").end()
	}
}

// writeSharedChains writes the shared chains of table tbl that want
// names.
func (p *proxier) writeSharedChains(b *bytes.Buffer, tbl string, want func(shared) bool, keys []backend.ServiceKey, services map[backend.ServiceKey]*record) {
	for i := range numShared {
		if want(i) && sharedChains[i].table == tbl {
			p.writeShared(b, i, keys, services)
		}
	}
}

// writeShared writes a shared chain's rules: every service's fragment, in
// key order, then the chain's tail.
func (p *proxier) writeShared(b *bytes.Buffer, i shared, keys []backend.ServiceKey, services map[backend.ServiceKey]*record) {
	for _, k := range keys {
		b.Write(services[k].frag(i))
	}
	switch i {
	case natServices:
		// Node ports last: a node port must not shadow a service IP.
		c := comment("kubernetes service nodeports; NOTE: this must be the last rule in this chain")
		if p.nodePortsAll {
			l := add(b, chainServices).w(c...).w("-m", "addrtype", "--dst-type", "LOCAL")
			if p.ipv6 {
				l.w("!", "-d", "::1/128")
			} else if !p.localhostNodePorts {
				l.w("!", "-d", "127.0.0.0/8")
			}
			l.w("-j", chainNodePorts).end()
			return
		}
		for _, ip := range p.nodePortIPs {
			if ip.IsLoopback() && !p.localhostNodePorts {
				continue // IPv6, or localhost node ports off
			}
			add(b, chainServices).w(c...).w("-d", ip.String(), "-j", chainNodePorts).end()
		}
	}
}

// partialSync writes only what the changed services changed. With canary,
// it runs a restore even when nothing changed, to check the canary chains.
func (p *proxier) partialSync(ctx context.Context, state *backend.State, changes backend.Changes, canary bool) (syncResult, error) {
	var res syncResult
	type change struct {
		key backend.ServiceKey
		old *record
		// new is the service's rendering, rec its record (nil: deleted).
		new *rendered
		rec *record
	}
	var chs []change
	for _, list := range [][]backend.ServiceKey{changes.Set, changes.Deleted} {
		for _, k := range list {
			if k.Family != p.family {
				continue
			}
			c := change{key: k, old: p.services[k]}
			if se := state.Services[k]; se != nil {
				c.new = p.rend.render(se)
				c.rec = c.new.record()
			}
			chs = append(chs, c)
		}
	}
	var dirty [numShared]bool
	if canary && !p.nodePorts.All && !p.nodePorts.Primary {
		// A periodic sync follows the interface addresses that accept
		// node ports, as kube-proxy reads them at each sync.
		if ips, err := p.nodePortAddresses(netip.Addr{}); err == nil && !slices.Equal(ips, p.nodePortIPs) {
			p.nodePortIPs = ips
			dirty[natServices] = true
		}
	}
	var writeChains []ownChain
	var deleteChains []string
	for _, c := range chs {
		var oldR, newR record
		if c.old != nil {
			oldR = *c.old
		}
		if c.rec != nil {
			newR = *c.rec
		}
		for i := range numShared {
			if !bytes.Equal(oldR.frag(i), newR.frag(i)) {
				dirty[i] = true
			}
		}
		oldChains := map[string]uint64{}
		for _, oc := range oldR.chains {
			oldChains[oc.name] = oc.sum
		}
		for j, nc := range newR.chains {
			if prev, ok := oldChains[nc.name]; !ok || prev != nc.sum {
				writeChains = append(writeChains, c.new.chains[j])
			}
			delete(oldChains, nc.name)
		}
		for n := range oldChains {
			deleteChains = append(deleteChains, n)
		}
	}
	anyDirty := slices.Contains(dirty[:], true)
	if !anyDirty && len(writeChains) == 0 && len(deleteChains) == 0 && !canary {
		return res, nil // e.g. an endpoint that no traffic from here uses
	}
	slices.Sort(deleteChains)

	// The record after this sync, to write the shared chains from.
	services := p.services
	keys := p.keys
	newKeys := false
	for _, c := range chs {
		_, had := services[c.key]
		if (c.rec != nil) != had {
			newKeys = true
		}
	}
	if newKeys || anyDirty {
		services = make(map[backend.ServiceKey]*record, len(p.services)+len(chs))
		for k, v := range p.services {
			services[k] = v
		}
		for _, c := range chs {
			if c.rec != nil {
				services[c.key] = c.rec
			} else {
				delete(services, c.key)
			}
		}
	}
	if newKeys {
		keys = slices.SortedFunc(maps.Keys(services), backend.ServiceKey.Compare)
	}

	b := &p.buf
	b.Reset()
	for _, tbl := range []string{"filter", "nat"} {
		b.WriteString("*" + tbl + "\n")
		for i := range numShared {
			if dirty[i] && sharedChains[i].table == tbl {
				b.WriteString(":" + sharedChains[i].name + " - [0:0]\n")
			}
		}
		if tbl == "nat" {
			for _, c := range writeChains {
				b.WriteString(":" + c.name + " - [0:0]\n")
			}
			for _, c := range deleteChains {
				b.WriteString(":" + c + " - [0:0]\n")
			}
		}
		// The canary: fails, and so fails the whole restore, if the table
		// was flushed behind kpng's back.
		b.WriteString("-F " + chainCanary + "\n")
		p.writeSharedChains(b, tbl, func(i shared) bool { return dirty[i] }, keys, services)
		if tbl == "nat" {
			for _, c := range writeChains {
				b.Write(c.rules)
			}
			endTable(b, deleteChains)
		} else {
			endTable(b, nil)
		}
	}
	res.bytes, res.written = b.Len(), countWritten(b.Bytes())
	err := p.restore(ctx, &res, "partial", text(b.Bytes()))
	if b.Cap() > 1<<20 {
		// Shared chains rewritten at scale: do not keep megabytes for the
		// next one-endpoint change.
		p.buf = bytes.Buffer{}
	}
	if err != nil {
		return res, err
	}
	for _, c := range chs {
		p.total(c.old, -1)
		p.total(c.rec, 1)
	}
	if !newKeys && !anyDirty {
		// Same services, same shared fragments: update in place.
		for _, c := range chs {
			if c.rec != nil {
				p.services[c.key] = c.rec
			} else {
				delete(p.services, c.key)
			}
		}
	} else {
		p.services, p.keys = services, keys
	}
	res.rules, res.noLocal = p.counts()
	return res, nil
}

// countWritten counts the rules ("-A" lines) of restore input per table
// (filter, nat).
func countWritten(in []byte) map[string]int {
	out := map[string]int{"filter": 0, "nat": 0}
	tbl := ""
	for l := range bytes.Lines(in) {
		switch {
		case bytes.HasPrefix(l, []byte("*")):
			tbl = string(bytes.TrimSpace(l[1:]))
		case bytes.HasPrefix(l, []byte("-A ")) && tbl != "":
			out[tbl]++
		}
	}
	return out
}

// total adds (sign 1) or removes (-1) a service's counts from p.totals.
func (p *proxier) total(r *record, sign int32) {
	if r == nil {
		return
	}
	p.totals.natRules += sign * r.natRules
	p.totals.filterRules += sign * r.filterRules
	p.totals.noLocalInternal += sign * r.noLocalInternal
	p.totals.noLocalExternal += sign * r.noLocalExternal
}

// counts returns the rules per table and the services without local
// endpoints, from the record.
func (p *proxier) counts() (map[string]int, [2]int) {
	rules := map[string]int{}
	// The fixed chains and the shared chains' tails.
	var fixed bytes.Buffer
	p.writeFixed(&fixed, "filter")
	p.writeShared(&fixed, filterServices, nil, nil)
	rules["filter"] = bytes.Count(fixed.Bytes(), []byte{'\n'})
	fixed.Reset()
	p.writeFixed(&fixed, "nat")
	p.writeShared(&fixed, natServices, nil, nil)
	rules["nat"] = bytes.Count(fixed.Bytes(), []byte{'\n'})
	rules["nat"] += int(p.totals.natRules)
	rules["filter"] += int(p.totals.filterRules)
	return rules, [2]int{int(p.totals.noLocalInternal), int(p.totals.noLocalExternal)}
}

// cleanupInput returns the restore input that removes everything kpng
// created in a family's tables, given iptables-save's output.
func cleanupInput(saved []byte) []byte {
	var b bytes.Buffer
	tables := parseSave(saved)
	for _, tbl := range []string{"filter", "nat", "mangle"} {
		t := tables[tbl]
		own := t.ownChains()
		jumps := t.builtinJumps()
		if len(own) == 0 && len(jumps) == 0 {
			continue
		}
		slices.Sort(own)
		b.WriteString("*" + tbl + "\n")
		for _, c := range own {
			b.WriteString(":" + c + " - [0:0]\n")
		}
		for _, r := range jumps {
			b.WriteString("-D" + strings.TrimPrefix(r, "-A") + "\n")
		}
		for _, c := range own {
			b.WriteString("-X " + c + "\n")
		}
		b.WriteString("COMMIT\n")
	}
	return b.Bytes()
}

// counterMaker makes an nfacct counter unless it exists (nfacct.Client).
type counterMaker interface{ Ensure(name string) error }

// ensureCounters makes kube-proxy's nfacct counters, as it does before
// each full sync, so that its metrics
// (kubeproxy_iptables_localhost_nodeports_accepted_packets_total,
// kubeproxy_iptables_ct_state_invalid_dropped_packets_total) count; the
// rules count only into counters that exist (iptables refuses a rule
// naming a missing one).
func (p *proxier) ensureCounters(ctx context.Context) {
	made := func(name string) bool {
		if p.acct == nil {
			return false
		}
		err := p.acct.Ensure(name)
		if err != nil && !p.acctFailed {
			p.acctFailed = true
			klog.FromContext(ctx).Error(err, "Failed to create nfacct counter; the corresponding metric will not be updated", "counter", name, "family", p.name())
		}
		return err == nil
	}
	p.rend.localhostAcct = p.localhostNodePorts && made(nfacct.LocalhostNodePortsAccepted)
	p.invalidAcct = p.dropInvalid && made(nfacct.InvalidDropped)
}
