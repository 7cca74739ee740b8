package main

import (
	"fmt"
	"maps"
	"slices"
)

// Options say what a run compares.
type Options struct {
	// N clusters, drawn from seeds Seed, Seed+1, ... Seed+N-1.
	N    int
	Seed uint64
	// Steps of random updates applied to each cluster after it was
	// compared whole; every step is compared.
	Steps int
	// MaxFailures stops the run after that many failing clusters (0: no
	// limit).
	MaxFailures int
	// NoShrink reports failures as found, unshrunk.
	NoShrink bool
}

// Stats count what a run compared.
type Stats struct {
	Clusters int // clusters compared whole
	Steps    int // incremental steps compared
	// Ports is the number of (node, service port, family) decisions
	// compared; Proxied of them were proxied by both.
	Ports, Proxied int
	// NotProxied counts the (node, service port) decisions where neither
	// proxies the port at all (ExternalName, headless, another proxy's).
	NotProxied int
	// Ambiguous counts the (node, service port) decisions whose endpoints
	// were not compared because upstream's answer is undefined there (see
	// Ambiguous); whether they are proxied, and their service facts, were.
	Ambiguous int
	// GatesOff counts the clusters compared with a settable decision gate
	// off (AllowServiceExternalIPs=false).
	GatesOff int
	Failures []Failure
}

// Failure is one cluster on which kpng and kube-proxy disagree.
type Failure struct {
	Seed uint64
	// Step is 0 when the whole state disagrees, k when the k-th update of
	// the sequence does (and the whole state computed afresh agrees).
	Step int
	// Diffs are the differences on the shrunk cluster, by node.
	Diffs map[string][]string
	// Before is the state before the failing update (nil for Step 0);
	// After the state that disagrees. Both shrunk.
	Before, After *Cluster
	// Reproduced is false when the shrunk pair did not reproduce an
	// incremental failure on a fresh view (its history mattered): Before
	// and After are then the unshrunk states.
	Reproduced bool
}

// compare compares every node's decisions of c, skipping ambiguous ports,
// and returns the differences by node.
func compare(c *Cluster, kp map[string]Result, st *Stats) (map[string][]string, error) {
	if err := setUpstreamGates(c.Gates); err != nil {
		return nil, err
	}
	nodes := slices.Sorted(maps.Keys(kp))
	up := Upstream(c, nodes)
	skip := Ambiguous(c)
	diffs := map[string][]string{}
	for _, n := range nodes {
		a, b := withoutEndpoints(kp[n], skip), withoutEndpoints(up[n], skip)
		if st != nil {
			st.Ports += max(len(a), len(b))
			for k := range a {
				if skip[k] {
					st.Ambiguous++
				}
			}
			present := map[string]bool{}
			for k := range a {
				present[keyService(k)] = true
				if _, ok := b[k]; ok {
					st.Proxied++
				}
			}
			for k := range b {
				present[keyService(k)] = true
			}
			for _, s := range c.Services {
				if !present[s.Namespace+"/"+s.Name] {
					st.NotProxied += len(s.Spec.Ports)
				}
			}
		}
		if d := Diff(a, b); len(d) > 0 {
			diffs[n] = d
		}
	}
	return diffs, nil
}

// wholeDiffs computes c afresh on both sides and compares.
func wholeDiffs(c *Cluster, st *Stats) (map[string][]string, error) {
	kp, err := KpngWhole(c)
	if err != nil {
		return nil, err
	}
	return compare(c, kp, st)
}

// pairDiffs feeds before then after to fresh views, and compares after.
func pairDiffs(before, after *Cluster) (map[string][]string, error) {
	after = after.DeepCopy()
	after.Gates = before.Gates // gates are the process's: one per run
	k := NewKpng(before)
	if _, err := k.Apply(before); err != nil {
		return nil, err
	}
	kp, err := k.Apply(after)
	if err != nil {
		return nil, err
	}
	return compare(after, kp, nil)
}

// Run compares o.N random clusters, whole and through o.Steps updates each.
// An error is a fault of the harness itself (a generated object kpng's
// converters refuse, a gate kube-proxy refuses), never a mismatch.
func Run(o Options, progress func(Stats)) (Stats, error) {
	var st Stats
	for i := range o.N {
		if o.MaxFailures > 0 && len(st.Failures) >= o.MaxFailures {
			break
		}
		seed := o.Seed + uint64(i)
		f, err := runOne(seed, o, &st)
		if err != nil {
			return st, fmt.Errorf("seed %d: %w", seed, err)
		}
		if f != nil {
			st.Failures = append(st.Failures, *f)
		}
		if progress != nil {
			progress(st)
		}
	}
	return st, nil
}

// runOne compares one cluster whole, then through its update sequence,
// and returns its first failure (shrunk), if any.
func runOne(seed uint64, o Options, st *Stats) (*Failure, error) {
	g := newGen(seed)
	c := g.cluster()
	st.Clusters++
	if c.Gates != (Gates{}) {
		st.GatesOff++
	}
	diffs, err := wholeDiffs(c, st)
	if err != nil {
		return nil, err
	}
	if len(diffs) > 0 {
		return wholeFailure(seed, 0, c, o)
	}

	k := NewKpng(c)
	if _, err := k.Apply(c); err != nil {
		return nil, err
	}
	prev := c
	for step := 1; step <= o.Steps; step++ {
		next := g.step(prev)
		next.Gates = c.Gates
		kp, err := k.Apply(next)
		if err != nil {
			return nil, err
		}
		st.Steps++
		diffs, err := compare(next, kp, st)
		if err != nil {
			return nil, err
		}
		if len(diffs) == 0 {
			prev = next
			continue
		}
		if whole, err := wholeDiffs(next, nil); err != nil {
			return nil, err
		} else if len(whole) > 0 {
			return wholeFailure(seed, step, next, o)
		}
		return pairFailure(seed, step, prev, next, diffs, o)
	}
	return nil, nil
}

func wholeFailure(seed uint64, step int, c *Cluster, o Options) (*Failure, error) {
	var harnessErr error
	fails := func(c *Cluster) bool {
		d, err := wholeDiffs(c, nil)
		if err != nil && harnessErr == nil {
			harnessErr = err
		}
		return len(d) > 0
	}
	if !o.NoShrink {
		c = shrink(c, fails)
	}
	if harnessErr != nil {
		return nil, harnessErr
	}
	diffs, err := wholeDiffs(c, nil)
	if err != nil {
		return nil, err
	}
	return &Failure{Seed: seed, Step: step, Diffs: diffs, After: c, Reproduced: true}, nil
}

func pairFailure(seed uint64, step int, before, after *Cluster, diffs map[string][]string, o Options) (*Failure, error) {
	f := &Failure{Seed: seed, Step: step, Diffs: diffs, Before: before, After: after}
	d, err := pairDiffs(before, after)
	if err != nil {
		return nil, err
	}
	if len(d) == 0 {
		return f, nil // history beyond one update matters: report as found
	}
	f.Reproduced, f.Diffs = true, d
	if o.NoShrink {
		return f, nil
	}
	var harnessErr error
	fails := func(b, a *Cluster) bool {
		d, err := pairDiffs(b, a)
		if err != nil && harnessErr == nil {
			harnessErr = err
		}
		return len(d) > 0
	}
	f.Before, f.After = shrinkPair(before, after, fails)
	if harnessErr != nil {
		return nil, harnessErr
	}
	if f.Diffs, err = pairDiffs(f.Before, f.After); err != nil {
		return nil, err
	}
	return f, nil
}
