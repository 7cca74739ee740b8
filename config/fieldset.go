package config

import (
	"encoding/json"
	"slices"
	"strings"
)

// FieldSet is a set of field paths in v1alpha2 JSON spelling, such as
// "syncPeriod", "linux.conntrack.maxPerCore" or "featureGates.SomeGate".
// The zero value is an empty set.
type FieldSet map[string]struct{}

// Has reports whether path, or any field below it, is in the set: Has("linux")
// is true when the file set linux.conntrack.min.
func (s FieldSet) Has(path string) bool {
	if _, ok := s[path]; ok {
		return true
	}
	prefix := path + "."
	for p := range s {
		if strings.HasPrefix(p, prefix) {
			return true
		}
	}
	return false
}

// List returns the paths in the set, sorted.
func (s FieldSet) List() []string {
	out := make([]string, 0, len(s))
	for p := range s {
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// setFromRaw lists the leaves of a decoded document that hold a non-null
// value. Objects are walked into; lists and scalars are leaves.
func setFromRaw(raw map[string]any) FieldSet {
	set := FieldSet{}
	var walk func(prefix string, m map[string]any)
	walk = func(prefix string, m map[string]any) {
		for k, v := range m {
			p := prefix + k
			switch v := v.(type) {
			case nil:
			case map[string]any:
				walk(p+".", v)
			default:
				set[p] = struct{}{}
			}
		}
	}
	walk("", raw)
	delete(set, "apiVersion")
	delete(set, "kind")
	return set
}

// setFromV1Alpha1 is setFromRaw for a v1alpha1 document, with each path
// renamed to where KEP-784 moved it. Per-backend sync periods and
// masqueradeAll count only for the backend that mode uses, since only that
// value reaches the hub.
func setFromV1Alpha1(raw map[string]any, mode ProxyMode) FieldSet {
	set := FieldSet{}
	for p := range setFromRaw(raw) {
		for _, q := range v1alpha1PathToV1Alpha2(p, mode) {
			set[q] = struct{}{}
		}
	}
	return set
}

// v1alpha1PathToV1Alpha2 maps a v1alpha1 field path to the v1alpha2 paths
// it feeds (none for dropped or ignored fields).
func v1alpha1PathToV1Alpha2(p string, mode ProxyMode) []string {
	switch p {
	case "bindAddress":
		return []string{"nodeIPOverride"}
	case "clusterCIDR":
		return []string{"detectLocal.clusterCIDRs"}
	case "portRange":
		return nil
	case "windowsRunAsService":
		return []string{"windows.runAsService"}
	case "oomScoreAdj":
		return []string{"linux.oomScoreAdj"}
	case "iptables.masqueradeBit":
		// kube-proxy's ipvs mode reads iptables.masqueradeBit.
		return []string{"iptables.masqueradeBit", "ipvs.masqueradeBit"}
	}
	if strings.HasPrefix(p, "conntrack.") {
		return []string{"linux." + p}
	}
	section, name, ok := strings.Cut(p, ".")
	if !ok {
		return []string{p}
	}
	switch name {
	case "syncPeriod", "minSyncPeriod":
		if section == string(activeBackend(mode)) {
			return []string{name}
		}
		if section == string(backendIPTables) || section == string(backendIPVS) || section == string(backendNFTables) {
			return nil
		}
	case "masqueradeAll":
		if section == string(masqueradeBackend(mode)) {
			return []string{"linux.masqueradeAll"}
		}
		if section == string(backendIPTables) || section == string(backendNFTables) {
			return nil
		}
	}
	return []string{p}
}

// known returns the part of raw, a decoded document, that decoding it into
// obj kept: without the unknown fields a lenient decoding dropped, so that
// Set lists only fields the file really set.
func known(raw map[string]any, obj any) map[string]any {
	js, err := json.Marshal(obj)
	if err != nil {
		return raw
	}
	var decoded map[string]any
	if err := json.Unmarshal(js, &decoded); err != nil {
		return raw
	}
	return intersect(raw, decoded)
}

// intersect keeps the keys of raw that decoded has too, walking into
// objects that both hold.
func intersect(raw, decoded map[string]any) map[string]any {
	out := make(map[string]any, len(raw))
	for k, v := range raw {
		d, ok := decoded[k]
		if !ok {
			continue
		}
		rm, rok := v.(map[string]any)
		dm, dok := d.(map[string]any)
		if rok && dok {
			out[k] = intersect(rm, dm)
		} else {
			out[k] = v
		}
	}
	return out
}
