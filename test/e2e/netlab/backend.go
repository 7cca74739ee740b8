package netlab

import (
	"bytes"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kpng/kpng/internal/netnstest"
)

// Backend is a dataplane under test, as an e2e suite sees it: something that,
// started in a node, makes that node's kernel implement the services of a
// cluster-state file (see [State]). A suite is written once against Backend
// and run for each backend:
//
//	func TestClusterIP(t *testing.T) {
//		for _, b := range []netlab.Backend{netlab.Kpng("nft"), netlab.Kpng("iptables")} {
//			t.Run(b.Name(), func(t *testing.T) {
//				lab := netlab.New(t, netlab.DefaultSpec())
//				state := netlab.NewState(t, lab)
//				svc := state.AddService("web", netlab.TCPPort("http", 80, 8080))
//				state.SetEndpoints(svc, netlab.Ready(lab.Pod("pod-b"), lab.Pod("pod-c"))...)
//				state.Write(t)
//				for _, n := range lab.Nodes {
//					b.Start(t, n, state.Path, netlab.ProxyConfig{}).WaitOutput(t, b.SyncedLine(), time.Minute)
//				}
//				client := lab.Pod("pod-a")
//				vip := netlab.ClusterIP(svc, 4, 80)
//				netlab.Eventually(t, 10*time.Second, func() netlab.Result { return client.TCP(vip) }, netlab.Answered())
//				got := netlab.Spread(100, func() netlab.Result { return client.TCP(vip) })
//				...
//			})
//		}
//	}
type Backend interface {
	// Name names the backend in subtest names, e.g. "nft".
	Name() string
	// Start starts the proxy for node with cfg, fed from stateFile (cluster
	// state in the format of `kpng file --input`, which the proxy follows as
	// it changes), as a process owned by the node's lab (see Node.Start),
	// and returns once it is started. That the dataplane is programmed is
	// for the suite to observe, with WaitOutput(SyncedLine()) or Eventually.
	Start(t testing.TB, node *Node, stateFile string, cfg ProxyConfig) *Process
	// SyncedLine is what the proxy prints after each successful sync.
	SyncedLine() string
	// Cleanup runs the proxy's cleanup in node (removing everything it put
	// in the kernel) to completion, and fails the test if it fails.
	Cleanup(t testing.TB, node *Node, stateFile string, cfg ProxyConfig)
}

// ProxyConfig is what a suite asks of a proxy beyond the cluster state, in
// kube-proxy's terms; each Backend turns it into its own flags.
type ProxyConfig struct {
	// NodePortAddresses restricts node ports to these CIDRs (or "primary"),
	// kube-proxy's --nodeport-addresses. Empty: every node address.
	NodePortAddresses []string
	// MasqueradeAll masquerades all traffic to services (--masquerade-all).
	MasqueradeAll bool
	// DetectLocalMode is how traffic from local pods is told apart
	// (--detect-local-mode: ClusterCIDR, NodeCIDR, BridgeInterface,
	// InterfaceNamePrefix). Empty: the proxy's default.
	DetectLocalMode string
	// ClusterCIDRs are the cluster's pod ranges (--cluster-cidr), for
	// DetectLocalMode ClusterCIDR.
	ClusterCIDRs []netip.Prefix
	// SyncPeriod is the longest time between two syncs, after which a
	// periodic sync repairs what was changed behind the proxy's back
	// (kpng's --sync-period; kube-proxy's --iptables-sync-period). Zero:
	// the proxy's default.
	SyncPeriod time.Duration
	// Extra are more command-line arguments, appended as they are.
	Extra []string
}

// KubeProxyFlags returns cfg as kube-proxy's command-line flags, which
// kpng's backends share, but SyncPeriod (see Flags).
func (cfg ProxyConfig) KubeProxyFlags() []string {
	c := cfg
	c.SyncPeriod = 0
	return c.Flags()
}

// Flags returns cfg as kpng's backend flags: kube-proxy's names, and
// --sync-period.
func (cfg ProxyConfig) Flags() []string {
	var args []string
	if cfg.SyncPeriod > 0 {
		args = append(args, "--sync-period="+cfg.SyncPeriod.String())
	}
	if len(cfg.NodePortAddresses) > 0 {
		args = append(args, "--nodeport-addresses="+strings.Join(cfg.NodePortAddresses, ","))
	}
	if cfg.MasqueradeAll {
		args = append(args, "--masquerade-all")
	}
	if cfg.DetectLocalMode != "" {
		args = append(args, "--detect-local-mode="+cfg.DetectLocalMode)
	}
	if len(cfg.ClusterCIDRs) > 0 {
		cidrs := make([]string, len(cfg.ClusterCIDRs))
		for i, c := range cfg.ClusterCIDRs {
			cidrs[i] = c.String()
		}
		args = append(args, "--cluster-cidr="+strings.Join(cidrs, ","))
	}
	return append(args, cfg.Extra...)
}

// Kpng is the Backend that runs kpng itself, as a node runs it, fed by the
// file source:
//
//	kpng --v=2 file --input <stateFile> to-local --node-name <node> to-<name> [flags...] [extraArgs...]
//
// with the kpng binary built from this module by KpngBinary. At -v=2 the
// backend driver logs "Dataplane synced" after every successful sync.
func Kpng(name string, extraArgs ...string) Backend {
	return kpngBackend{name: name, extra: extraArgs}
}

type kpngBackend struct {
	name  string
	extra []string
}

func (b kpngBackend) Name() string       { return b.name }
func (b kpngBackend) SyncedLine() string { return "Dataplane synced" }

// Applied implements StateLoader.
func (b kpngBackend) Applied(run string, since int, digest string) bool {
	return KpngApplied(run, since, digest)
}

// StateLoader is a Backend whose proxy logs enough to tell when the
// content of the state file it loaded is in its dataplane: the first sync
// logged after a write may be an earlier content's (a periodic sync, a
// line still in the pipe), and a write that leaves a node's view as it was
// brings no sync at all.
type StateLoader interface {
	// Applied reports whether run, the output of the proxy's current run,
	// shows the content named digest (State.Digest) in the dataplane;
	// since is where the output printed after the write begins.
	Applied(run string, since int, digest string) bool
}

var (
	// kpng's lines (source/file, local, backend): "Loaded" names the
	// cluster revision that holds the content; "Node view changed" and
	// "Node view unchanged" the node view revision computed at a cluster
	// revision; "Dataplane synced" the view revision it applied.
	kpngLoaded = regexp.MustCompile(`"Loaded" .*digest="([0-9a-f]+)" clusterRevision=(\d+)`)
	kpngView   = regexp.MustCompile(`"Node view (?:un)?changed" .*clusterRevision=(\d+) viewRevision=(\d+)`)
	kpngSynced = regexp.MustCompile(`"Dataplane synced(?: again)?" revision=(\d+)`)
)

// KpngApplied is StateLoader.Applied for kpng fed by its file source: the
// last load of digest after since gives a cluster revision; the first view
// computed at that revision or later gives a view revision; and a sync of
// that view revision or a later one, anywhere in the run (an unchanged
// view may have been synced before the write), puts it in the dataplane.
func KpngApplied(run string, since int, digest string) bool {
	cluster, ok := uint64(0), false
	for _, m := range kpngLoaded.FindAllStringSubmatch(run[since:], -1) {
		if m[1] == digest {
			cluster, ok = atou(m[2]), true
		}
	}
	if !ok {
		return false
	}
	view, ok := uint64(0), false
	for _, m := range kpngView.FindAllStringSubmatch(run, -1) {
		if atou(m[1]) >= cluster {
			view, ok = atou(m[2]), true
			break
		}
	}
	if !ok {
		return false
	}
	for _, m := range kpngSynced.FindAllStringSubmatch(run, -1) {
		if atou(m[1]) >= view {
			return true
		}
	}
	return false
}

func atou(s string) uint64 {
	n, _ := strconv.ParseUint(s, 10, 64)
	return n
}

func (b kpngBackend) argv(t testing.TB, node *Node, stateFile string, cfg ProxyConfig) []string {
	argv := []string{KpngBinary(t), "--v=2", "file", "--input", stateFile, "to-local", "--node-name", node.Name, "to-" + b.name}
	argv = append(argv, kpngFlags(t, b.name, node, cfg)...)
	return append(argv, b.extra...)
}

// Cgroups reports whether the backend needs a lab with cgroups.
func (b kpngBackend) Cgroups() bool { return b.name == "ebpf" }

// NeedsCgroups reports whether b hooks sockets by cgroup (to-ebpf), and so
// runs only in a lab with cgroups ([Spec].Cgroups): a Backend says so with
// a method Cgroups() bool.
func NeedsCgroups(b Backend) bool {
	c, ok := b.(interface{ Cgroups() bool })
	return ok && c.Cgroups()
}

// kpngFlags returns the flags of kpng's backend name in node for cfg.
//
// to-ebpf gets the node's own cgroup (Node.Cgroup, never a root), pin
// folder (Node.PinPath) and interfaces (the node's uplink and pod bridge,
// the interfaces of the node's namespace that hold addresses: what "auto"
// picks there), and only the kube-proxy settings it has flags for:
// kube-proxy's masquerade and local-traffic detection settings
// (MasqueradeAll, DetectLocalMode, ClusterCIDRs) are not flags of to-ebpf,
// which never NATs a connection that starts on the node (docs/ebpf.md), so
// they are left out; a suite expects what to-ebpf does instead.
func kpngFlags(t testing.TB, name string, node *Node, cfg ProxyConfig) []string {
	t.Helper()
	if name != "ebpf" {
		return cfg.Flags()
	}
	if node.Cgroup == "" || node.BPFFS == "" {
		t.Fatalf("netlab: to-ebpf in node %s: the lab has no cgroups (build it with Spec.Cgroups; see NeedsCgroups): its socket programs would attach to the machine's cgroup v2 root", node.Name)
	}
	c := cfg
	c.MasqueradeAll, c.DetectLocalMode, c.ClusterCIDRs = false, "", nil
	return append([]string{
		"--ebpf-cgroup-path=" + node.Cgroup,
		"--ebpf-pin-path=" + node.PinPath(),
		"--ebpf-interfaces=" + NodeInterface + "," + PodBridge,
	}, c.Flags()...)
}

func (b kpngBackend) Start(t testing.TB, node *Node, stateFile string, cfg ProxyConfig) *Process {
	t.Helper()
	return node.Start(t, b.argv(t, node, stateFile, cfg)...)
}

func (b kpngBackend) Cleanup(t testing.TB, node *Node, stateFile string, cfg ProxyConfig) {
	t.Helper()
	if out, err := node.Run(append(b.argv(t, node, stateFile, cfg), "--cleanup")...); err != nil {
		t.Fatalf("node %s: %s --cleanup: %v\n%s", node.Name, b.name, err, out)
	}
}

// KpngBackends returns the names of the backends the kpng binary offers: its
// to-<name> commands under to-local.
func KpngBackends(t testing.TB) []string {
	t.Helper()
	out, err := exec.Command(KpngBinary(t), "file", "--input", "-", "to-local", "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("netlab: kpng file to-local --help: %v\n%s", err, out)
	}
	var names []string
	inCommands := false
	for _, line := range strings.Split(string(out), "\n") {
		switch {
		case strings.HasPrefix(line, "Available Commands:"):
			inCommands = true
		case inCommands && strings.TrimSpace(line) == "":
			inCommands = false
		case inCommands:
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "to-") {
				names = append(names, strings.TrimPrefix(f[0], "to-"))
			}
		}
	}
	return names
}

var (
	kpngOnce sync.Once
	kpngPath string
	kpngErr  error
)

// KpngBinaryEnv names a kpng binary built beforehand from this tree, for a
// test process that should not build its own: one in hack/vm.sh's
// emulated VM, where linking kpng takes minutes. hack/test.sh builds it
// on the host just before.
const KpngBinaryEnv = "KPNG_NETLAB_KPNG"

// KpngBinary builds ./cmd/kpng of this module once per test process and
// returns the binary's path. Each test process builds its own (from Go's
// build cache, so quickly) in the user cache directory, so a stale binary is
// never tested; Sweep removes those of dead runs. With KpngBinaryEnv set,
// it returns that binary instead.
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
	if path := os.Getenv(KpngBinaryEnv); path != "" {
		fi, err := os.Stat(path)
		if err != nil {
			return "", fmt.Errorf("%s: %w", KpngBinaryEnv, err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("%s: %s is not an executable file", KpngBinaryEnv, path)
		}
		return path, nil
	}
	dir, err := binDir()
	if err != nil {
		return "", fmt.Errorf("build kpng: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("build kpng: %w", err)
	}
	run, err := netnstest.RunID()
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
