//go:build !kpngmutation

package brain

// mutated reports whether the planted bug name is active. Outside the
// kpngmutation build (hack/difftest's mutation check) never: the constant
// false compiles the planted branches away.
func mutated(string) bool { return false }
