//go:build kpngmutation

package main

import (
	"testing"

	"github.com/kpng/kpng/brain"
)

// TestMutations plants each of brain's decision bugs in turn (the
// kpngmutation build) and checks that difftest, on CI's budget, catches
// it: a differential test that cannot fail proves nothing. Run with
//
//	go -C hack/difftest test -tags kpngmutation -run TestMutations
func TestMutations(t *testing.T) {
	quietUpstream(t)
	if len(brain.Mutations) < 5 {
		t.Fatalf("%d planted bugs, want at least 5", len(brain.Mutations))
	}
	for _, m := range brain.Mutations {
		t.Run(m, func(t *testing.T) {
			brain.Mutation = m
			defer func() { brain.Mutation = "" }()
			st, err := Run(Options{N: ciClusters, Seed: ciSeed, Steps: ciSteps, MaxFailures: 1}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Failures) == 0 {
				t.Fatalf("planted bug %q not caught in %d clusters and %d steps", m, st.Clusters, st.Steps)
			}
			f := st.Failures[0]
			t.Logf("caught at cluster %d of %d (seed %d, step %d), shrunk to %d nodes, %d services, %d slices",
				st.Clusters, ciClusters, f.Seed, f.Step, len(f.After.Nodes), len(f.After.Services), len(f.After.Slices))
		})
	}
}
