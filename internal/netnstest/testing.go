package netnstest

import (
	"os"
	"strings"
	"testing"
)

// RequireRoot fails the test, with a message saying why, unless it runs as
// root: namespaces need root, and kernel tests must not silently skip.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("this test needs root (it creates network namespaces): run kernel tests as root, e.g. sudo go test -tags e2e, or hack/test.sh")
	}
}

// Prepare fails the test unless it runs as root, then runs sweep ([Sweep],
// or a harness's own that sweeps more) and logs what it removed.
func Prepare(t testing.TB, sweep func() ([]string, error)) {
	t.Helper()
	RequireRoot(t)
	if swept, err := sweep(); err != nil {
		t.Fatalf("sweep leftover namespaces: %v", err)
	} else if len(swept) > 0 {
		t.Logf("netnstest: removed %d namespaces left by dead runs: %s", len(swept), strings.Join(swept, " "))
	}
}

// New creates a namespace for the test, "kpnl-<run>-<label>-<random>", with
// its loopback up, and deletes it (killing what still runs in it) with
// t.Cleanup, whether the test passes, fails or panics. It first sweeps the
// namespaces of dead runs.
func New(t testing.TB, label string) *Netns {
	t.Helper()
	Prepare(t, Sweep)
	run, err := RunID()
	if err != nil {
		t.Fatal(err)
	}
	id, err := randomHex(2)
	if err != nil {
		t.Fatal(err)
	}
	n, err := Create(Prefix + run + "-" + label + "-" + id)
	if n != nil {
		t.Cleanup(func() {
			if err := Delete(n.Name); err != nil {
				t.Errorf("netnstest: %v", err)
			}
		})
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}
