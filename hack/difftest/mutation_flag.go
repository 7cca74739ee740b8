//go:build kpngmutation

package main

import (
	"flag"
	"strings"

	"github.com/kpng/kpng/brain"
)

// In the kpngmutation build, -mutation plants one of brain's decision bugs
// so that a run shows what a mismatch report looks like.
func init() {
	flag.Func("mutation", "plant one of brain's decision bugs: "+strings.Join(brain.Mutations, ", "), func(s string) error {
		brain.Mutation = s
		rerunBuild, rerunFlags = "-tags kpngmutation ", "-mutation "+s+" "
		return nil
	})
}
