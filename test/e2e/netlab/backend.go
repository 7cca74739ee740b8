package netlab

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
)

// Backend is a dataplane under test, as an e2e suite sees it: something that,
// started in a node, makes that node's kernel implement the services of a
// cluster-state file. A suite is written once against Backend and run for
// each backend:
//
//	func TestClusterIP(t *testing.T) {
//		for _, b := range []netlab.Backend{netlab.Kpng("nft"), netlab.Kpng("iptables")} {
//			t.Run(b.Name(), func(t *testing.T) {
//				lab := netlab.New(t, netlab.DefaultSpec())
//				state := writeState(t, lab) // Nodes, Services, EndpointSlices
//				for _, n := range lab.Nodes {
//					b.Start(t, n, state)
//				}
//				vip := netip.MustParseAddrPort("10.96.0.10:80")
//				client := lab.Pod("pod-a")
//				netlab.Eventually(t, 10*time.Second, func() netlab.Result { return client.TCP(vip) }, netlab.Answered())
//				got := netlab.Spread(100, func() netlab.Result { return client.TCP(vip) })
//				...
//			})
//		}
//	}
type Backend interface {
	// Name names the backend in subtest names, e.g. "nft".
	Name() string
	// Start starts the proxy for node, fed from stateFile (cluster state in
	// the format of `kpng file --input`), as a process owned by the node's
	// lab (see Node.Start), and returns once it is started. That the
	// dataplane is programmed is for the suite to observe, with Eventually.
	Start(t testing.TB, node *Node, stateFile string) *Process
}

// Command is a Backend that runs a command line in the node's namespace.
type Command struct {
	// BackendName is what Name returns.
	BackendName string
	// Argv returns the command line for a node and state file.
	Argv func(t testing.TB, node *Node, stateFile string) []string
}

// Name implements Backend.
func (c Command) Name() string { return c.BackendName }

// Start implements Backend.
func (c Command) Start(t testing.TB, node *Node, stateFile string) *Process {
	t.Helper()
	return node.Start(t, c.Argv(t, node, stateFile)...)
}

// Kpng is the Backend that runs kpng itself, fed by the file source:
//
//	kpng file --input <stateFile> to-<sink> --node-name <node> [extraArgs...]
//
// with the kpng binary built from this module by KpngBinary.
func Kpng(sink string, extraArgs ...string) Backend {
	return Command{
		BackendName: sink,
		Argv: func(t testing.TB, node *Node, stateFile string) []string {
			argv := []string{KpngBinary(t), "file", "--input", stateFile, "to-" + sink, "--node-name", node.Name}
			return append(argv, extraArgs...)
		},
	}
}

var (
	kpngOnce sync.Once
	kpngPath string
	kpngErr  error
)

// KpngBinary builds ./cmd/kpng of this module once per test process and
// returns the binary's path. Each test process builds its own (from Go's
// build cache, so quickly) in the user cache directory, so a stale binary is
// never tested; Sweep removes those of dead runs.
func KpngBinary(t testing.TB) string {
	t.Helper()
	kpngOnce.Do(func() { kpngPath, kpngErr = buildKpng() })
	if kpngErr != nil {
		t.Fatalf("netlab: %v", kpngErr)
	}
	return kpngPath
}

// kpngBinaryPrefix starts the name of each run's kpng binary; the run id
// follows.
const kpngBinaryPrefix = "kpng."

// binDir is where KpngBinary puts binaries.
func binDir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(cache, "kpng-netlab"), nil
}

func buildKpng() (string, error) {
	dir, err := binDir()
	if err != nil {
		return "", fmt.Errorf("build kpng: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build kpng: %w", err)
	}
	run, err := currentRun()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, kpngBinaryPrefix+run)
	cmd := exec.Command("go", "build", "-o", path, "github.com/kpng/kpng/cmd/kpng")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build kpng: %w: %s", err, bytes.TrimSpace(out))
	}
	return path, nil
}
