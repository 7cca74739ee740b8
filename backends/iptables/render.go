package iptables

import (
	"bytes"
	"cmp"
	"hash/maphash"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/proxyutil/host"
	"github.com/kpng/kpng/proxyutil/nfacct"
)

// shared names a chain that every service writes a fragment of. Their rules
// are the concatenation of the services' fragments (in service order), then
// a fixed tail.
type shared int

const (
	natServices     shared = iota // nat KPNG-SERVICES
	natNodePorts                  // nat KPNG-NODEPORTS
	filterServices                // filter KPNG-SERVICES
	filterExternal                // filter KPNG-EXTERNAL-SERVICES
	filterNodePorts               // filter KPNG-NODEPORTS
	filterFirewall                // filter KPNG-PROXY-FIREWALL
	numShared
)

// sharedChains says, for each shared chain, its table and name.
var sharedChains = [numShared]struct{ table, name string }{
	natServices:     {"nat", chainServices},
	natNodePorts:    {"nat", chainNodePorts},
	filterServices:  {"filter", chainServices},
	filterExternal:  {"filter", chainExternalServices},
	filterNodePorts: {"filter", chainNodePorts},
	filterFirewall:  {"filter", chainProxyFirewall},
}

// rendered is what one Service (in one family) contributes to the tables,
// as the restore lines that write it. It lives for one sync: what the
// backend keeps between syncs is its record.
type rendered struct {
	// frags are the service's rules in the shared chains, one restore line
	// ("-A CHAIN ...") per rule.
	frags [numShared][]byte
	// chains are the service's own nat chains, sorted by name.
	chains []ownChain
	// Services ports whose traffic is dropped for lack of local endpoints
	// (kube-proxy's sync_proxy_rules_no_local_endpoints_total).
	noLocalInternal, noLocalExternal int
	// natRules and filterRules count the rules above, per table.
	natRules, filterRules int
}

// ownChain is one per-service nat chain and its rules.
type ownChain struct {
	name  string
	rules []byte
}

// record is what the backend keeps of a service between syncs, to decide
// what a change rewrites: the exact text of its rules in the shared chains
// (a shared chain is rewritten whole, every service's fragment in it), but
// of its own chains only their names and a hash of their rules. Keeping
// their rules would cost most of the backend's memory (at 10,000 services
// of 10 endpoints, 110,000 chains and 31 MB of text); a full sync renders
// each service again to write them.
type record struct {
	// frags holds the fragments of the shared chains, one after the
	// other: fragment i is frags[ends[i-1]:ends[i]].
	frags []byte
	ends  [numShared]int32
	// chains are the service's own chains, in the order of rendered.chains.
	chains                           []chainSum
	noLocalInternal, noLocalExternal int32
	natRules, filterRules            int32
}

// chainSum names an own chain and sums up its rules.
type chainSum struct {
	name string
	sum  uint64
}

// sumSeed seeds the hashes of chains' rules; they are compared only within
// one process.
var sumSeed = maphash.MakeSeed()

// record returns what the backend keeps of r.
func (r *rendered) record() *record {
	n := 0
	for _, f := range r.frags {
		n += len(f)
	}
	rec := &record{
		chains:          make([]chainSum, len(r.chains)),
		noLocalInternal: int32(r.noLocalInternal), noLocalExternal: int32(r.noLocalExternal),
		natRules: int32(r.natRules), filterRules: int32(r.filterRules),
	}
	if n > 0 {
		rec.frags = make([]byte, 0, n)
	}
	for i, f := range r.frags {
		rec.frags = append(rec.frags, f...)
		rec.ends[i] = int32(len(rec.frags))
	}
	for i, c := range r.chains {
		rec.chains[i] = chainSum{name: c.name, sum: maphash.Bytes(sumSeed, c.rules)}
	}
	return rec
}

// frag is the service's fragment of shared chain i.
func (rec *record) frag(i shared) []byte {
	start := int32(0)
	if i > 0 {
		start = rec.ends[i-1]
	}
	return rec.frags[start:rec.ends[i]]
}

// equal says whether two records describe the same rules.
func (rec *record) equal(o *record) bool {
	return bytes.Equal(rec.frags, o.frags) && rec.ends == o.ends && slices.Equal(rec.chains, o.chains) &&
		rec.noLocalInternal == o.noLocalInternal && rec.noLocalExternal == o.noLocalExternal &&
		rec.natRules == o.natRules && rec.filterRules == o.filterRules
}

// countRules counts the rendered rules (for kubeproxy_sync_proxy_rules_iptables_total).
func (r *rendered) countRules(table string) int {
	n := 0
	for i, f := range r.frags {
		if sharedChains[i].table == table {
			n += bytes.Count(f, []byte{'\n'})
		}
	}
	if table == "nat" {
		for _, c := range r.chains {
			n += bytes.Count(c.rules, []byte{'\n'})
		}
	}
	return n
}

// renderer turns a service into rules. Its fields are those of the
// configuration and of the node that rules depend on; when one changes,
// every service is rendered again (a full sync).
type renderer struct {
	ipv6          bool
	masqueradeAll bool
	local         localDetector
	// nodeIP is the node's primary IP of the family (invalid if unknown),
	// for the load-balancer source-range exception of traffic from the node.
	nodeIP netip.Addr
	// localhostAcct: node ports on 127.0.0.0/8 are counted into
	// kube-proxy's nfacct counter (a rule of their own before the port's).
	localhostAcct bool
	// probabilities caches "%0.10f" of 1/n, which is slow to format.
	probabilities []string
	// What render reuses from one service to the next: the frags' and the
	// chains' buffers (a service's text is then copied out in one piece),
	// the chains by name, and the endpoints' chain names.
	frag      [numShared]bytes.Buffer
	bufs      []*bytes.Buffer
	chainBufs map[string]*bytes.Buffer
	seps      map[*localv1.Endpoint]endpointChain
	eps       [2][]*localv1.Endpoint
}

// endpointChain is an endpoint's chain and its DNAT destination.
type endpointChain struct{ name, dest string }

// line accumulates one restore line.
type line struct{ b *bytes.Buffer }

func (l line) w(args ...string) line {
	for _, a := range args {
		l.b.WriteByte(' ')
		l.b.WriteString(a)
	}
	return l
}

func (l line) end() { l.b.WriteByte('\n') }

// add starts a rule "-A chain" in buf.
func add(buf *bytes.Buffer, chain string) line {
	buf.WriteString("-A ")
	buf.WriteString(chain)
	return line{buf}
}

func comment(text string) []string { return []string{"-m", "comment", "--comment", `"` + text + `"`} }

// portName is the service port's name as kube-proxy prints it:
// namespace/name, then :port when the port is named.
func portName(svc *localv1.Service, p *localv1.ServicePort) string {
	s := svc.Namespace + "/" + svc.Name
	if p.Name != "" {
		s += ":" + p.Name
	}
	return s
}

// protoName is p's name in rules; an unknown protocol renders as tcp.
func protoName(p localv1.Protocol) string { return cmp.Or(host.ProtocolName(p), "tcp") }

func (r *renderer) probability(n int) string {
	for len(r.probabilities) <= n {
		k := len(r.probabilities)
		p := "<none>"
		if k > 0 {
			p = strconv.FormatFloat(1/float64(k), 'f', 10, 64)
		}
		r.probabilities = append(r.probabilities, p)
	}
	return r.probabilities[n]
}

// endpointString is ip:port, with brackets for IPv6.
func endpointString(ip string, port int32) string {
	if strings.Contains(ip, ":") {
		return "[" + ip + "]:" + strconv.Itoa(int(port))
	}
	return ip + ":" + strconv.Itoa(int(port))
}

// render computes a service's rules, with the semantics of kube-proxy's
// iptables proxier. Every Kubernetes decision (which endpoints serve which
// policy, whether the port has endpoints at all) comes from the model; this
// only chooses the chains that implement them.
func (r *renderer) render(se *localv1.ServiceEndpoints) *rendered {
	out := &rendered{}
	svc := se.Service
	frag := &r.frag
	for i := range frag {
		frag[i].Reset()
	}
	if r.chainBufs == nil {
		r.chainBufs, r.seps = map[string]*bytes.Buffer{}, map[*localv1.Endpoint]endpointChain{}
	}
	chains := r.chainBufs
	clear(chains)
	clear(r.seps)
	used := 0
	chain := func(name string) *bytes.Buffer {
		b := chains[name]
		if b == nil {
			if used == len(r.bufs) {
				r.bufs = append(r.bufs, &bytes.Buffer{})
			}
			b = r.bufs[used]
			used++
			b.Reset()
			chains[name] = b
		}
		return b
	}
	itpLocal := svc.InternalTrafficPolicy == localv1.TrafficPolicy_LOCAL
	etpLocal := svc.ExternalTrafficPolicy == localv1.TrafficPolicy_LOCAL
	affinity := svc.ClientIpAffinitySeconds > 0

	for _, p := range svc.Ports {
		name := portName(svc, p)
		proto := protoName(p.Protocol)
		svcChain, svlChain := chainName(prefixSVC, name, proto), chainName(prefixSVL, name, proto)
		extChain, fwChain := chainName(prefixEXT, name, proto), chainName(prefixFW, name, proto)
		port := strconv.Itoa(int(p.Port))
		l4 := []string{"-m", proto, "-p", proto}

		clusterEps, localEps := r.eps[0][:0], r.eps[1][:0]
		for _, e := range se.Endpoints {
			if e.PortName != p.Name || e.Protocol != p.Protocol {
				continue
			}
			if e.InClusterSet {
				clusterEps = append(clusterEps, e)
			}
			if e.InLocalSet {
				localEps = append(localEps, e)
			}
		}
		hasEndpoints := p.HasEndpoints
		// A policy chain exists only with endpoints in it; the model
		// guarantees the Cluster set is not empty when the port has
		// endpoints and uses it, and the guards below keep a jump from ever
		// naming a chain that was not written.
		internalChain, hasInternal := svcChain, hasEndpoints && len(clusterEps) > 0
		if itpLocal {
			internalChain, hasInternal = svlChain, hasEndpoints && len(localEps) > 0
		}
		externalPolicyChain, hasExternal := svcChain, hasEndpoints && len(clusterEps) > 0
		if etpLocal {
			externalPolicyChain, hasExternal = svlChain, hasEndpoints && len(localEps) > 0
		}
		externallyAccessible := p.NodePort != 0 || len(svc.LoadBalancerIps) > 0 || len(svc.ExternalIps) > 0
		// The external chain's short circuits jump to the Cluster chain,
		// which a port accepting external traffic always has when it has
		// endpoints (it uses the Cluster set, as upstream).
		usesExt := hasEndpoints && externallyAccessible && len(clusterEps) > 0
		usesFW := usesExt && len(svc.LoadBalancerIps) > 0 && len(svc.LoadBalancerSourceRanges) > 0
		lbChain := extChain
		if usesFW {
			lbChain = fwChain
		}

		var internalTarget, internalComment, externalTarget, externalComment string
		if !hasEndpoints {
			internalTarget, externalTarget = "REJECT", "REJECT"
			internalComment = name + " has no endpoints"
			externalComment = internalComment
		} else {
			if !hasInternal {
				internalTarget, internalComment = "DROP", name+" has no local endpoints"
				out.noLocalInternal++
			}
			if !hasExternal {
				externalTarget, externalComment = "DROP", name+" has no local endpoints"
				out.noLocalExternal++
			}
		}

		// Cluster IP.
		if hasInternal {
			add(&frag[natServices], chainServices).w(comment(name+" cluster IP")...).w(l4...).
				w("-d", svc.ClusterIp, "--dport", port, "-j", internalChain).end()
			masq := chain(internalChain)
			if r.masqueradeAll {
				add(masq, internalChain).w(comment(name+" cluster IP")...).w(l4...).
					w("-d", svc.ClusterIp, "--dport", port, "-j", chainMarkMasq).end()
			} else if r.local.implemented() {
				// Off-cluster traffic to a cluster IP (a static route to
				// the service range) may be forwarded off-node: SNAT it.
				add(masq, internalChain).w(comment(name+" cluster IP")...).w(l4...).
					w("-d", svc.ClusterIp, "--dport", port).w(r.local.ifNotLocal...).w("-j", chainMarkMasq).end()
			}
		} else {
			add(&frag[filterServices], chainServices).w(comment(internalComment)...).w(l4...).
				w("-d", svc.ClusterIp, "--dport", port, "-j", internalTarget).end()
		}

		// External IPs.
		for _, ip := range svc.ExternalIps {
			if usesExt {
				add(&frag[natServices], chainServices).w(comment(name+" external IP")...).w(l4...).
					w("-d", ip, "--dport", port, "-j", extChain).end()
			}
			if !hasExternal {
				add(&frag[filterExternal], chainExternalServices).w(comment(externalComment)...).w(l4...).
					w("-d", ip, "--dport", port, "-j", externalTarget).end()
			}
		}

		// Load-balancer IPs.
		for _, ip := range svc.LoadBalancerIps {
			if usesExt {
				add(&frag[natServices], chainServices).w(comment(name+" loadbalancer IP")...).w(l4...).
					w("-d", ip, "--dport", port, "-j", lbChain).end()
			}
			if usesFW {
				// Reached only by packets the FW chain did not DNAT.
				add(&frag[filterFirewall], chainProxyFirewall).w(comment(name+" traffic not accepted by "+fwChain)...).w(l4...).
					w("-d", ip, "--dport", port, "-j", "DROP").end()
			}
		}
		if !hasExternal {
			for _, ip := range svc.LoadBalancerIps {
				add(&frag[filterExternal], chainExternalServices).w(comment(externalComment)...).w(l4...).
					w("-d", ip, "--dport", port, "-j", externalTarget).end()
			}
		}

		// Node port (not subject to loadBalancerSourceRanges, as upstream).
		if p.NodePort != 0 {
			nodePort := strconv.Itoa(int(p.NodePort))
			if usesExt {
				if r.localhostAcct {
					add(&frag[natNodePorts], chainNodePorts).w(comment(name)...).w(l4...).
						w("-d", "127.0.0.0/8", "--dport", nodePort, "-m", "nfacct", "--nfacct-name", nfacct.LocalhostNodePortsAccepted, "-j", extChain).end()
				}
				add(&frag[natNodePorts], chainNodePorts).w(comment(name)...).w(l4...).
					w("--dport", nodePort, "-j", extChain).end()
			}
			if !hasExternal {
				add(&frag[filterExternal], chainExternalServices).w(comment(externalComment)...).
					w("-m", "addrtype", "--dst-type", "LOCAL").w(l4...).
					w("--dport", nodePort, "-j", externalTarget).end()
			}
		}

		// The external chain: masquerade, or the Local policy's short
		// circuits for traffic from this node and its pods.
		if usesExt {
			ext := chain(extChain)
			if !etpLocal {
				add(ext, extChain).w(comment("masquerade traffic for "+name+" external destinations")...).w("-j", chainMarkMasq).end()
			} else {
				if r.local.implemented() {
					// Pod -> external destination acts as if it went out to
					// the load balancer and came back: Cluster policy.
					add(ext, extChain).w(comment("pod traffic for "+name+" external destinations")...).
						w(r.local.ifLocal...).w("-j", svcChain).end()
				}
				// From the node itself the source is a local address (maybe
				// the LB IP): SNAT it and use the Cluster policy.
				add(ext, extChain).w(comment("masquerade LOCAL traffic for "+name+" external destinations")...).
					w("-m", "addrtype", "--src-type", "LOCAL", "-j", chainMarkMasq).end()
				add(ext, extChain).w(comment("route LOCAL traffic for "+name+" external destinations")...).
					w("-m", "addrtype", "--src-type", "LOCAL", "-j", svcChain).end()
			}
			if hasExternal {
				add(ext, extChain).w("-j", externalPolicyChain).end()
			}
		}

		// The firewall chain of loadBalancerSourceRanges.
		if usesFW {
			fw := chain(fwChain)
			allowFromNode := false
			for _, cidr := range svc.LoadBalancerSourceRanges {
				add(fw, fwChain).w(comment(name+" loadbalancer IP")...).w("-s", cidr, "-j", extChain).end()
				if pfx, err := netip.ParsePrefix(cidr); err == nil && r.nodeIP.IsValid() && pfx.Contains(r.nodeIP) {
					allowFromNode = true
				}
			}
			// A VIP-like LB often routes the VIP locally: a request from the
			// node loops back with the VIP as its source.
			if allowFromNode {
				for _, ip := range svc.LoadBalancerIps {
					add(fw, fwChain).w(comment(name+" loadbalancer IP")...).w("-s", ip, "-j", extChain).end()
				}
			}
			add(fw, fwChain).w(comment("other traffic to " + name + " will be dropped by " + chainProxyFirewall)...).end()
		}

		// Policy chains and endpoint chains.
		endpoint := func(e *localv1.Endpoint) endpointChain {
			c, ok := r.seps[e]
			if !ok {
				c.dest = endpointString(e.Ip, e.Port)
				c.name = chainName(prefixSEP, name, proto, c.dest)
				r.seps[e] = c
			}
			return c
		}
		sep := func(e *localv1.Endpoint) string { return endpoint(e).name }
		balance := func(chainName string, eps []*localv1.Endpoint) {
			b := chain(chainName)
			if affinity {
				secs := strconv.Itoa(int(svc.ClientIpAffinitySeconds))
				for _, e := range eps {
					s := sep(e)
					add(b, chainName).w("-m", "recent", "--name", s, "--rcheck", "--seconds", secs, "--reap", "-j", s).end()
				}
			}
			for i, e := range eps {
				l := add(b, chainName)
				if i < len(eps)-1 {
					l.w("-m", "statistic", "--mode", "random", "--probability", r.probability(len(eps)-i))
				}
				l.w("-j", sep(e)).end()
			}
		}
		usedCluster := len(clusterEps) > 0 && (hasInternal && !itpLocal || usesExt)
		usedLocal := len(localEps) > 0 && (hasInternal && itpLocal || usesExt && hasExternal && etpLocal)
		if usedCluster {
			balance(svcChain, clusterEps)
		}
		if usedLocal {
			balance(svlChain, localEps)
		}
		var reachable [][]*localv1.Endpoint
		if usedCluster {
			reachable = append(reachable, clusterEps)
		}
		if usedLocal {
			reachable = append(reachable, localEps)
		}
		for _, set := range reachable {
			for _, e := range set {
				ec := endpoint(e)
				s := ec.name
				if _, written := chains[s]; written {
					continue // in both sets
				}
				b := chain(s)
				add(b, s).w("-s", e.Ip, "-j", chainMarkMasq).end()
				l := add(b, s)
				if affinity {
					l.w("-m", "recent", "--name", s, "--set")
				}
				l.w(l4...).w("-j", "DNAT", "--to-destination", ec.dest).end()
			}
		}
		r.eps = [2][]*localv1.Endpoint{clusterEps[:0], localEps[:0]}
	}

	// A packet to a port the service does not have meets no rule here and
	// goes where the node routes the cluster IP, as in kube-proxy's iptables
	// mode (its nftables mode rejects it; kpng's nft backend does too).
	if svc.HealthCheckNodePort != 0 {
		add(&frag[filterNodePorts], chainNodePorts).w(comment(svc.Namespace+"/"+svc.Name+" health check node port")...).
			w("-m", "tcp", "-p", "tcp", "--dport", strconv.Itoa(int(svc.HealthCheckNodePort)), "-j", "ACCEPT").end()
	}

	// The service's text, in one allocation: the frags, then the chains.
	n := 0
	for i := range frag {
		n += frag[i].Len()
	}
	for _, b := range chains {
		n += b.Len()
	}
	text := make([]byte, 0, n)
	piece := func(b *bytes.Buffer) []byte {
		start := len(text)
		text = append(text, b.Bytes()...)
		return text[start:len(text):len(text)]
	}
	for i := range frag {
		out.frags[i] = piece(&frag[i])
	}
	out.chains = make([]ownChain, 0, len(chains))
	for n := range chains {
		out.chains = append(out.chains, ownChain{name: n})
	}
	slices.SortFunc(out.chains, func(a, b ownChain) int { return strings.Compare(a.name, b.name) })
	for i := range out.chains {
		out.chains[i].rules = piece(chains[out.chains[i].name])
	}
	out.natRules, out.filterRules = out.countRules("nat"), out.countRules("filter")
	return out
}
