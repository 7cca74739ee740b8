package main

import (
	"fmt"
	"maps"
	"net"
	"slices"
	"strconv"
	"strings"
)

// Result is one node's decisions: every proxied service port, by
// portKey. A port that is not proxied is absent.
type Result map[string]Port

// Port is what a proxy decides for one service port in one IP family.
type Port struct {
	// Service is the port's service-level facts, as one string (cluster
	// IP, node port, external and load-balancer IPs, source ranges,
	// policies, affinity, health check node port).
	Service string
	// Cluster and Local are the endpoint sets for Cluster and Local
	// traffic (sorted; each endpoint with its flags).
	Cluster, Local []string
	// HasAny: the port has a usable endpoint somewhere in the cluster.
	HasAny bool
}

// portKey names a service port in one family: "IPv4 ns/name:port/TCP".
func portKey(family, ns, name, port, protocol string) string {
	return fmt.Sprintf("%s %s/%s:%s/%s", family, ns, name, port, protocol)
}

// serviceFacts is Port.Service. ips are sorted copies.
func serviceFacts(clusterIP string, port, nodePort int, externalIPs, lbIPs, sourceRanges []string,
	etpLocal, itpLocal bool, affinity, hcNodePort int) string {
	sorted := func(s []string) []string { s = slices.Clone(s); slices.Sort(s); return s }
	return fmt.Sprintf("clusterIP=%s port=%d nodePort=%d externalIPs=%v lbIPs=%v sourceRanges=%v externalLocal=%t internalLocal=%t affinity=%d healthCheckNodePort=%d",
		clusterIP, port, nodePort, sorted(externalIPs), sorted(lbIPs), sorted(sourceRanges), etpLocal, itpLocal, affinity, hcNodePort)
}

// endpointString is an endpoint with the flags backends read: L(ocal),
// R(eady), S(erving), T(erminating).
func endpointString(ip string, port int, local, ready, serving, terminating bool) string {
	flags := []byte("----")
	for i, on := range []bool{local, ready, serving, terminating} {
		if on {
			flags[i] = "LRST"[i]
		}
	}
	return net.JoinHostPort(ip, strconv.Itoa(port)) + "[" + string(flags) + "]"
}

// Diff lists how two results differ, one line per difference, sorted.
func Diff(kp, up Result) []string {
	var out []string
	keys := slices.Sorted(maps.Keys(kp))
	for k := range up {
		if _, ok := kp[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		a, inA := kp[k]
		b, inB := up[k]
		switch {
		case !inB:
			out = append(out, fmt.Sprintf("%s: kpng proxies it, kube-proxy does not", k))
		case !inA:
			out = append(out, fmt.Sprintf("%s: kube-proxy proxies it, kpng does not", k))
		default:
			if a.Service != b.Service {
				out = append(out, fmt.Sprintf("%s: service facts: kpng %s; kube-proxy %s", k, a.Service, b.Service))
			}
			if !slices.Equal(a.Cluster, b.Cluster) {
				out = append(out, fmt.Sprintf("%s: cluster endpoints: kpng %v; kube-proxy %v", k, a.Cluster, b.Cluster))
			}
			if !slices.Equal(a.Local, b.Local) {
				out = append(out, fmt.Sprintf("%s: local endpoints: kpng %v; kube-proxy %v", k, a.Local, b.Local))
			}
			if a.HasAny != b.HasAny {
				out = append(out, fmt.Sprintf("%s: has any endpoint: kpng %t; kube-proxy %t", k, a.HasAny, b.HasAny))
			}
		}
	}
	return out
}

// withoutEndpoints returns r with the endpoints of the ports in skip
// (portKeys) left out: whether those ports are proxied, and their service
// facts, are still compared.
func withoutEndpoints(r Result, skip map[string]bool) Result {
	if len(skip) == 0 {
		return r
	}
	out := Result{}
	for k, v := range r {
		if skip[k] {
			v = Port{Service: v.Service}
		}
		out[k] = v
	}
	return out
}

func sortedStrings(s []string) []string {
	slices.Sort(s)
	return s
}

func familyName(v6 bool) string {
	if v6 {
		return "IPv6"
	}
	return "IPv4"
}

// keyService is the "ns/name" of a portKey.
func keyService(k string) string {
	_, rest, _ := strings.Cut(k, " ")
	svc, _, _ := strings.Cut(rest, ":")
	return svc
}
