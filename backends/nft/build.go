package nft

import (
	"net/netip"
	"strings"
	"time"

	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/proxyutil/host"
)

// family is what differs between the IPv4 and the IPv6 table.
type family struct {
	model     localv1.IPFamily
	nft       knftables.Family // "ip" or "ip6"
	ipX       string           // "ip" or "ip6" in match expressions
	addrType  string           // "ipv4_addr" or "ipv6_addr"
	localhost string           // matches a destination that is not loopback
}

var (
	ipv4 = family{model: localv1.IPFamily_IPV4, nft: knftables.IPv4Family, ipX: "ip", addrType: "ipv4_addr", localhost: "ip daddr != 127.0.0.0/8"}
	ipv6 = family{model: localv1.IPFamily_IPV6, nft: knftables.IPv6Family, ipX: "ip6", addrType: "ipv6_addr", localhost: "ip6 daddr != ::1"}
)

func (f family) String() string {
	if f.model == localv1.IPFamily_IPV6 {
		return "IPv6"
	}
	return "IPv4"
}

// has reports whether addr is of this family.
func (f family) has(addr netip.Addr) bool {
	return addr.IsValid() && addr.Unmap().Is4() == (f.model == localv1.IPFamily_IPV4)
}

// env is everything besides a service that its rules depend on. It is
// computed from the flags and the node at each sync; a change of env
// rebuilds every part (a rare event: the node's addresses or pod CIDRs).
type env struct {
	family
	masqueradeBits uint32 // the mark that asks for masquerading
	masqueradeMark string // "0x00004000"
	masqueradeRule string // "mark set mark or 0x00004000"
	masqueradeAll  bool
	// local is how to tell local traffic; ifLocal and ifNotLocal are its
	// matches, nil when it cannot be told in this family.
	local               host.LocalTraffic
	ifLocal, ifNotLocal []string
	// nodeIP is the node's primary address in this family (may be invalid).
	nodeIP netip.Addr
	// nodePortAll: node ports are open on every local address (except
	// loopback); otherwise only on nodePortIPs.
	nodePortAll  bool
	nodePortIPs  []string
	serviceCIDRs []string
}

// equal reports whether two envs build the same rules.
func (e *env) equal(o *env) bool {
	return e.family == o.family && e.masqueradeMark == o.masqueradeMark && e.masqueradeAll == o.masqueradeAll &&
		strings.Join(e.ifLocal, " ") == strings.Join(o.ifLocal, " ") &&
		strings.Join(e.ifNotLocal, " ") == strings.Join(o.ifNotLocal, " ") &&
		e.nodeIP == o.nodeIP && e.nodePortAll == o.nodePortAll &&
		strings.Join(e.nodePortIPs, ",") == strings.Join(o.nodePortIPs, ",") &&
		strings.Join(e.serviceCIDRs, ",") == strings.Join(o.serviceCIDRs, ",")
}

type baseChainSpec struct {
	name string
	hook hook
}

var baseChains = []baseChainSpec{
	// Filtering on the destination before DNAT, for loadBalancerSourceRanges.
	{filterPreroutingPreDNATChain, hook{knftables.FilterType, knftables.PreroutingHook, knftables.DNATPriority + "-10"}},
	{filterOutputPreDNATChain, hook{knftables.FilterType, knftables.OutputHook, knftables.DNATPriority + "-10"}},
	{filterInputChain, hook{knftables.FilterType, knftables.InputHook, knftables.FilterPriority}},
	{filterForwardChain, hook{knftables.FilterType, knftables.ForwardHook, knftables.FilterPriority}},
	{filterOutputChain, hook{knftables.FilterType, knftables.OutputHook, knftables.FilterPriority}},
	{natPreroutingChain, hook{knftables.NATType, knftables.PreroutingHook, knftables.DNATPriority}},
	{natOutputChain, hook{knftables.NATType, knftables.OutputHook, knftables.DNATPriority}},
	{natPostroutingChain, hook{knftables.NATType, knftables.PostroutingHook, knftables.SNATPriority}},
}

// jumps are the rules of the base chains, in order. Reject is only valid in
// input, forward and output hooks on kernels before 5.9, hence the
// endpoint checks there and not in prerouting.
var jumps = []struct{ from, to, match string }{
	{filterInputChain, nodePortEndpointsCheckChain, "ct state new"},
	{filterInputChain, serviceEndpointsCheckChain, "ct state new"},
	{filterForwardChain, serviceEndpointsCheckChain, "ct state new"},
	{filterOutputChain, serviceEndpointsCheckChain, "ct state new"},
	{filterPreroutingPreDNATChain, firewallCheckChain, "ct state new"},
	{filterOutputPreDNATChain, firewallCheckChain, "ct state new"},
	{natOutputChain, servicesChain, ""},
	{natPreroutingChain, servicesChain, ""},
	{natPostroutingChain, masqueradingChain, ""},
	{filterForwardChain, clusterIPsCheckChain, "ct state new"},
	{filterOutputChain, clusterIPsCheckChain, "ct state new"},
}

// fixedPart is the ruleset every node has, whatever its services: the
// base chains, the dispatch maps and the checks.
func fixedPart(e *env) *part {
	p := &part{}
	chains := map[string]*chain{}
	get := func(name string) *chain {
		if c, ok := chains[name]; ok {
			return c
		}
		c := &chain{name: name}
		chains[name] = c
		p.chains = append(p.chains, c)
		return c
	}
	add := func(name, text, comment string) {
		c := get(name)
		c.rules = append(c.rules, rule{text: text, comment: comment})
	}
	for _, bc := range baseChains {
		get(bc.name).hook = &hook{bc.hook.typ, bc.hook.hook, bc.hook.priority}
	}
	for _, j := range jumps {
		add(j.from, knftables.Concat(j.match, "jump", j.to), "")
	}
	ipX, addr := e.ipX, e.addrType

	// Masquerading: packets marked on the way in, and hairpin connections
	// (a pod reaching itself through a service).
	add(masqueradingChain, knftables.Concat("mark and", e.masqueradeMark, "!=", "0",
		"mark set mark xor", e.masqueradeMark, "masquerade fully-random"), "")
	add(masqueradingChain, knftables.Concat("ct status dnat",
		ipX, "saddr .", ipX, "daddr . meta l4proto . th dport", "@"+hairpinConnectionsSet,
		"masquerade fully-random"), "")
	p.sets = append(p.sets,
		&set{name: hairpinConnectionsSet, typ: addr + " . " + addr + " . inet_proto . inet_service", comment: "service hairpin connections"},
		&set{name: clusterIPsSet, typ: addr, comment: "Active ClusterIPs"},
		&set{name: nodePortIPsSet, typ: addr, comment: "IPs that accept NodePort traffic"},
		&set{name: noEndpointServicesMap, isMap: true, typ: addr + " . inet_proto . inet_service : verdict", comment: "vmap to drop or reject packets to services with no endpoints"},
		&set{name: noEndpointNodePortsMap, isMap: true, typ: "inet_proto . inet_service : verdict", comment: "vmap to drop or reject packets to service nodeports with no endpoints"},
		&set{name: firewallIPsMap, isMap: true, typ: addr + " . inet_proto . inet_service : verdict", comment: "destinations that are subject to LoadBalancerSourceRanges"},
		&set{name: serviceIPsMap, isMap: true, typ: addr + " . inet_proto . inet_service : verdict", comment: "ClusterIP, ExternalIP and LoadBalancer IP traffic"},
		&set{name: serviceNodePortsMap, isMap: true, typ: "inet_proto . inet_service : verdict", comment: "NodePort traffic"},
	)

	// Cluster IPs: reject unknown ports, drop unallocated addresses.
	add(clusterIPsCheckChain, knftables.Concat(ipX, "daddr", "@"+clusterIPsSet, "reject"), "Reject traffic to invalid ports of ClusterIPs")
	if len(e.serviceCIDRs) > 0 {
		add(clusterIPsCheckChain, knftables.Concat(ipX, "daddr {", strings.Join(e.serviceCIDRs, ", "), "} drop"), "Drop traffic to unallocated ClusterIPs")
	}

	if !e.nodePortAll {
		for _, ip := range e.nodePortIPs {
			p.elems = append(p.elems, elem{elemID: elemID{nodePortIPsSet, ip}})
		}
	}

	// No endpoints: reject or drop, in the filter hooks.
	add(rejectChain, "reject", "")
	add(serviceEndpointsCheckChain, knftables.Concat(ipX, "daddr . meta l4proto . th dport vmap", "@"+noEndpointServicesMap), "")
	nodePortDest := knftables.Concat(ipX, "daddr", "@"+nodePortIPsSet)
	if e.nodePortAll {
		nodePortDest = e.localhost
	}
	add(nodePortEndpointsCheckChain, knftables.Concat(nodePortDest, "meta l4proto . th dport vmap", "@"+noEndpointNodePortsMap), "")

	add(firewallCheckChain, knftables.Concat(ipX, "daddr . meta l4proto . th dport vmap", "@"+firewallIPsMap), "")

	// Dispatch.
	if e.masqueradeAll {
		add(servicesChain, knftables.Concat(ipX, "daddr", "@"+clusterIPsSet, e.masqueradeRule), "masquerade all clusterIP traffic")
	} else if e.ifNotLocal != nil {
		// Off-cluster traffic to a cluster IP (someone routed the service
		// range to this node) may be sent to another node: masquerade it.
		add(servicesChain, knftables.Concat(ipX, "daddr", "@"+clusterIPsSet, e.ifNotLocal, e.masqueradeRule), "masquerade clusterIP traffic from outside cluster")
	}
	add(servicesChain, knftables.Concat(ipX, "daddr . meta l4proto . th dport vmap", "@"+serviceIPsMap), "")
	if e.nodePortAll {
		add(servicesChain, knftables.Concat("fib daddr type local", e.localhost, "meta l4proto . th dport vmap", "@"+serviceNodePortsMap), "")
	} else {
		add(servicesChain, knftables.Concat(ipX, "daddr", "@"+nodePortIPsSet, "meta l4proto . th dport vmap", "@"+serviceNodePortsMap), "")
	}

	// firewall-check etc. exist even when empty of services.
	for _, name := range []string{servicesChain, clusterIPsCheckChain, masqueradingChain, firewallCheckChain} {
		get(name)
	}
	for _, c := range p.chains {
		c.seal()
	}
	return p
}

// servicePart is what one service (in this family) needs: its chains,
// affinity sets and map elements. It is upstream's syncProxyRules body for
// one service, with every decision taken from the model.
//
// held says what the kernel holds of the service's endpoint maps, as far
// as the sync knows (nil: nothing), so that endpoints keep their slots
// (see slotOrder).
func servicePart(e *env, se *localv1.ServiceEndpoints, held heldElems) *part {
	svc := se.Service
	p := &part{}
	clusterIP, ok := parseAddr(svc.ClusterIp, e.family)
	if !ok {
		return p
	}
	externalIPs := addrs(svc.ExternalIps, e.family)
	lbIPs := addrs(svc.LoadBalancerIps, e.family)
	affinity := svc.ClientIpAffinitySeconds > 0
	internalLocal := svc.InternalTrafficPolicy == localv1.TrafficPolicy_LOCAL
	externalLocal := svc.ExternalTrafficPolicy == localv1.TrafficPolicy_LOCAL

	// The elements, at most: the mirror keeps the part, so its slice is
	// sized once rather than grown (at 10,000 services, growing it was a
	// sixth of a cold sync's garbage and left unused capacity behind).
	nElems := 0
	for _, ep := range se.Endpoints {
		nElems += boolInt(ep.InClusterSet) + boolInt(ep.InLocalSet) + boolInt(ep.OnThisNode)
	}
	nElems += len(svc.Ports) * (3 + 2*len(externalIPs) + 3*len(lbIPs))
	p.elems = make([]elem, 0, nElems)

	for _, port := range svc.Ports {
		proto := protoName(port.Protocol)
		if proto == "" {
			continue
		}
		portStr := itoa(int64(port.Port))
		spn := svc.Namespace + "/" + svc.Name + ":" + port.Name
		base := portBaseName(svc.Namespace, svc.Name, proto, port.Name)
		clusterChain := clusterChainPrefix + base
		localChain := localChainPrefix + base
		extChain := externalChainPrefix + base
		fwChain := firewallChainPrefix + base

		var cluster, local []*endpoint
		for _, ep := range se.Endpoints {
			if ep.PortName != port.Name || ep.Protocol != port.Protocol {
				continue
			}
			ip, ok := parseAddr(ep.Ip, e.family)
			if !ok {
				continue
			}
			x := &endpoint{ip: ip, port: ep.Port}
			if affinity { // endpoint chains exist only for affinity
				eb := endpointBaseName(svc.Namespace, svc.Name, proto, port.Name, ip, ep.Port)
				x.chain, x.set = endpointChainPrefix+eb, affinitySetPrefix+eb
			}
			if ep.InClusterSet {
				cluster = append(cluster, x)
			}
			if ep.InLocalSet {
				local = append(local, x)
			}
			if ep.OnThisNode {
				p.elems = append(p.elems, elem{elemID: elemID{hairpinConnectionsSet,
					joinKey(ip.String(), ip.String(), proto, itoa(int64(ep.Port)))}})
			}
			if affinity {
				p.sets = append(p.sets, &set{name: x.set, typ: e.addrType,
					flags:   []knftables.SetFlag{knftables.DynamicFlag, knftables.TimeoutFlag},
					timeout: time.Duration(svc.ClientIpAffinitySeconds) * time.Second, dynamic: true})
				p.chains = append(p.chains, (&chain{name: x.chain, rules: []rule{
					typed(updateSaddr{e.family, x.set}, ""),
					typed(dnatTo{proto, netip.AddrPortFrom(ip, uint16(ep.Port))}, ""),
				}}).seal())
			}
		}
		hasClusterChain, hasLocalChain := len(cluster) > 0, len(local) > 0
		if hasClusterChain {
			policyChain(e, p, clusterChain, proto, cluster, affinity, held)
		}
		if hasLocalChain {
			policyChain(e, p, localChain, proto, local, affinity, held)
		}

		hasEndpoints := port.HasEndpoints
		internalChain, hasInternal := clusterChain, hasEndpoints && hasClusterChain
		if internalLocal {
			internalChain, hasInternal = localChain, hasEndpoints && hasLocalChain
		}
		externalPolicyChain, hasExternal := clusterChain, hasEndpoints && hasClusterChain
		if externalLocal {
			externalPolicyChain, hasExternal = localChain, hasEndpoints && hasLocalChain
		}
		externallyAccessible := port.NodePort != 0 || len(lbIPs) > 0 || len(externalIPs) > 0
		usesExt := hasEndpoints && externallyAccessible

		// Without any endpoint: reject. With endpoints, but none for this
		// traffic's policy (Local, none here): drop.
		internalVerdict, externalVerdict := "goto "+rejectChain, "goto "+rejectChain
		if hasEndpoints {
			internalVerdict, externalVerdict = "drop", "drop"
		}
		noEndpoints := func(set string, isMap bool, verdict string, key ...string) {
			p.elems = append(p.elems, elem{elemID: elemID{set, joinKey(key...)}, isMap: isMap, value: verdict, comment: spn})
		}
		dispatch := func(set string, target string, key ...string) {
			p.elems = append(p.elems, elem{elemID: elemID{set, joinKey(key...)}, isMap: true, value: "goto " + target})
		}

		p.elems = append(p.elems, elem{elemID: elemID{clusterIPsSet, clusterIP.String()}})
		if hasInternal {
			dispatch(serviceIPsMap, internalChain, clusterIP.String(), proto, portStr)
		} else {
			noEndpoints(noEndpointServicesMap, true, internalVerdict, clusterIP.String(), proto, portStr)
		}
		for _, ip := range externalIPs {
			if usesExt {
				dispatch(serviceIPsMap, extChain, ip.String(), proto, portStr)
			}
			if !hasExternal {
				noEndpoints(noEndpointServicesMap, true, externalVerdict, ip.String(), proto, portStr)
			}
		}
		usesFW := len(lbIPs) > 0 && len(svc.LoadBalancerSourceRanges) > 0
		for _, ip := range lbIPs {
			if usesExt {
				dispatch(serviceIPsMap, extChain, ip.String(), proto, portStr)
			}
			if usesFW {
				dispatch(firewallIPsMap, fwChain, ip.String(), proto, portStr)
			}
			if !hasExternal {
				noEndpoints(noEndpointServicesMap, true, externalVerdict, ip.String(), proto, portStr)
			}
		}
		if port.NodePort != 0 {
			np := itoa(int64(port.NodePort))
			if usesExt {
				dispatch(serviceNodePortsMap, extChain, proto, np)
			}
			if !hasExternal {
				noEndpoints(noEndpointNodePortsMap, true, externalVerdict, proto, np)
			}
		}

		if usesExt {
			c := &chain{name: extChain}
			if !externalLocal {
				// The endpoint may be on another node: masquerade so that
				// the reply comes back through this one.
				c.rules = append(c.rules, typed(setMark{false, e.masqueradeBits}, "masquerade"))
			} else {
				if e.local.Detected() && hasClusterChain {
					// A pod reaching an external address of the service
					// behaves as if it went out and came back: no policy.
					c.rules = append(c.rules, typed(localGoto{e.family, e.local, clusterChain}, "short-circuit pod traffic"))
				}
				// The node itself: its source would be the local VIP, so
				// masquerade, and do not apply the Local policy.
				c.rules = append(c.rules, typed(setMark{true, e.masqueradeBits}, "masquerade local traffic"))
				if hasClusterChain {
					c.rules = append(c.rules, typed(gotoChain{true, clusterChain}, "short-circuit local traffic"))
				}
			}
			if hasExternal {
				c.rules = append(c.rules, typed(gotoChain{false, externalPolicyChain}, ""))
			}
			p.chains = append(p.chains, c.seal())
		}

		if usesFW {
			sources := append([]string(nil), svc.LoadBalancerSourceRanges...)
			fromNode := false
			for _, r := range svc.LoadBalancerSourceRanges {
				if pfx, err := netip.ParsePrefix(r); err == nil && e.nodeIP.IsValid() && pfx.Contains(e.nodeIP) {
					fromNode = true
				}
			}
			// A VIP that the node holds as a local address: a request from
			// the node loops back with the VIP as its source; let it in.
			if fromNode {
				for _, ip := range lbIPs {
					sources = append(sources, ip.String())
				}
			}
			p.chains = append(p.chains, (&chain{name: fwChain, rules: []rule{
				typed(sourceRangesDrop{e.family, sources}, ""),
			}}).seal())
		}
	}
	return p
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// endpoint is an endpoint of one service port, with its object names.
type endpoint struct {
	ip         netip.Addr
	port       int32
	chain, set string
}

// Endpoint maps. A connection goes to one of the endpoints at random:
// `numgen random mod 65536` looked up in a map of the chain's own (see
// endpointMapName), whose elements split 0-65535 into one interval per endpoint
// (equal to within one in 65,536). The rule never changes with the
// endpoints; an endpoint change rewrites elements only. That matters to the
// kernel: at each commit that adds a rule with a dnat or a verdict, it
// validates every chain reachable from the base chains (~10 ms at 10,000
// services), and it does not for data elements (a fraction of a
// millisecond). Upstream writes `numgen random mod N vmap` rules instead,
// which change with N.
const endpointSlots = 65536

// endpointMapTypeOf declares an endpoint map of protocol proto (nft wants
// the protocol of the port as the rule's "meta l4proto" has it);
// endpointMapType is how nft lists its type.
func (f family) endpointMapTypeOf(proto string) string {
	return "numgen random mod " + itoa(endpointSlots) + " : " + f.ipX + " daddr . " + proto + " dport"
}
func (f family) endpointMapType() string { return "integer : " + f.addrType + " . inet_service" }

// serviceProtocols are the protocols of service ports (see protoName).
var serviceProtocols = []string{"tcp", "udp", "sctp"}

// listedTypes maps the typeof declarations we write to their listed types
// (for knftables' fake, which keeps the declaration).
var listedTypes = func() map[string]string {
	m := map[string]string{}
	for _, f := range []family{ipv4, ipv6} {
		for _, proto := range serviceProtocols {
			m[f.endpointMapTypeOf(proto)] = f.endpointMapType()
		}
	}
	return m
}()

// endpointSlot is the key of endpoint i of n in an endpoint map: its
// interval of 0-65535, as nft prints it.
func endpointSlot(i, n int) string {
	lo, hi := endpointSlots*i/n, endpointSlots*(i+1)/n-1
	if lo == hi {
		return itoa(int64(lo))
	}
	return itoa(int64(lo)) + "-" + itoa(int64(hi))
}

// heldElems returns the value of an element the kernel holds, as far as
// the sync knows.
type heldElems func(id elemID) (value string, ok bool)

// keepSlots deals the slots of an endpoint map (els, its elements, slot i
// holding endpoint i) so that an endpoint the map holds (held) at a slot
// of the same number of endpoints keeps it; the others fill the free slots
// in their order. The brain sorts endpoints by address, and a new pod's
// address falls anywhere among them: slot i for endpoint i rewrote every
// element whose rank moved (2 to 20 operations, a median of 14, for one
// replaced endpoint of ten in the bench), where keeping the slots rewrites
// one. Any
// assignment balances the same: each slot is an equal share of numgen's
// range.
func keepSlots(els []elem, held heldElems) {
	if order := slotOrder(els, held); order != nil {
		values := make([]string, len(els))
		for s, i := range order {
			values[s] = els[i].value
		}
		for s := range els {
			els[s].value = values[s]
		}
	}
}

// slotOrder returns, for each slot of els, the index of the element whose
// value goes there (see keepSlots), or nil when held holds none of them
// (the common case of a cold start, which then allocates nothing).
func slotOrder(els []elem, held heldElems) []int {
	n := len(els)
	var order []int
	var placed []bool
	var byValue map[string][]int // for many endpoints: unplaced indexes by value
	for s := range els {
		v, ok := held(els[s].elemID)
		if !ok {
			continue
		}
		i := -1
		if n <= 32 {
			for j := range els {
				if (placed == nil || !placed[j]) && els[j].value == v {
					i = j
					break
				}
			}
		} else {
			if byValue == nil {
				byValue = make(map[string][]int, n)
				for j := n - 1; j >= 0; j-- {
					byValue[els[j].value] = append(byValue[els[j].value], j)
				}
			}
			if js := byValue[v]; len(js) > 0 {
				i, byValue[v] = js[len(js)-1], js[:len(js)-1]
			}
		}
		if i < 0 {
			continue
		}
		if order == nil {
			order, placed = make([]int, n), make([]bool, n)
			for k := range order {
				order[k] = -1
			}
		}
		order[s], placed[i] = i, true
	}
	if order == nil {
		return nil
	}
	next := 0
	for s := range order {
		if order[s] >= 0 {
			continue
		}
		for placed[next] {
			next++
		}
		order[s], placed[next] = next, true
	}
	return order
}

// policyChain sends a connection to one of eps at random; with affinity,
// first to the endpoint this client was sent to before. It adds the chain
// and what it uses to p.
func policyChain(e *env, p *part, name, proto string, eps []*endpoint, affinity bool, held heldElems) {
	c := &chain{name: name}
	switch {
	case !affinity && len(eps) <= endpointSlots:
		m := endpointMapName(name)
		p.sets = append(p.sets, &set{name: m, isMap: true, typ: e.endpointMapType(), typeOf: e.endpointMapTypeOf(proto),
			flags: []knftables.SetFlag{knftables.IntervalFlag}})
		first := len(p.elems)
		for i, ep := range eps {
			p.elems = append(p.elems, elem{elemID: elemID{m, endpointSlot(i, len(eps))}, isMap: true,
				value: joinKey(ep.ip.String(), itoa(int64(ep.port)))})
		}
		if held != nil {
			keepSlots(p.elems[first:], held)
		}
		c.rules = append(c.rules, typed(endpointMapDNAT{e.family, proto, m}, ""))
	case !affinity:
		// More endpoints than slots: a constant map of them all.
		targets := make([]netip.AddrPort, len(eps))
		for i, ep := range eps {
			targets[i] = netip.AddrPortFrom(ep.ip, uint16(ep.port))
		}
		c.rules = append(c.rules, typed(dnatMap{e.family, proto, targets}, ""))
	default:
		chains := make([]string, len(eps))
		for i, ep := range eps {
			c.rules = append(c.rules, typed(saddrSetGoto{e.family, ep.set, ep.chain}, ""))
			chains[i] = ep.chain
		}
		c.rules = append(c.rules, typed(vmapGoto{chains}, ""))
	}
	p.chains = append(p.chains, c.seal())
}

// protoName is p's name in rules, "" for an unknown protocol (skipped).
func protoName(p localv1.Protocol) string { return host.ProtocolName(p) }

// parseAddr parses an address of family f into its canonical form (the
// form nft lists it in).
func parseAddr(s string, f family) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}, false
	}
	a = a.Unmap()
	return a, f.has(a)
}

func addrs(in []string, f family) []netip.Addr {
	var out []netip.Addr
	for _, s := range in {
		if a, ok := parseAddr(s, f); ok {
			out = append(out, a)
		}
	}
	return out
}
