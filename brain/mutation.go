//go:build kpngmutation

package brain

// Mutation is the decision bug planted in this build, one of Mutations, or
// "" for none. Only the kpngmutation build has it: hack/difftest's
// mutation check plants each bug in turn and shows that difftest catches
// it. A release build has no such variable, and no planted branch.
var Mutation string

// Mutations are the bugs that can be planted: each changes one decision.
var Mutations = []string{
	"zone-hints-partial",          // zone hints used though an endpoint has none
	"node-hints-ignored",          // PreferSameNode hints never used
	"fallback-ignores-serving",    // not-serving terminating endpoints in the fallback
	"local-set-serving-not-ready", // the local set takes serving endpoints, not ready ones
	"node-port-not-external",      // a node port does not make a port externally accessible
	"empty-proxy-name-proxied",    // an empty service-proxy-name label is ignored
	"terminating-duplicate-wins",  // a terminating duplicate beats a live one
	"headless-slices-used",        // slices labelled headless are merged
	"proxy-mode-ingress-captured", // ipMode Proxy load-balancer IPs get rules
	"external-ips-gate-ignored",   // AllowServiceExternalIPs off has no effect
	"zone-change-not-recomputed",  // the node's new zone recomputes nothing
}

func mutated(name string) bool { return Mutation == name }
