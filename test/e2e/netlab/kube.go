package netlab

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/kpng/kpng/test/integration/apiserver"
)

// EnvKubeProxy overrides where the kube-proxy binary is looked for
// (default: .cache/bin/kube-proxy at the repository root, built by
// hack/install-test-deps.sh).
const EnvKubeProxy = "KPNG_KUBE_PROXY"

// Mirrors are the API servers of a backend, one per state file: proxies
// that read a real API server get the state file's objects through it.
type Mirrors struct {
	mu sync.Mutex
	m  map[string]*Mirror
}

// NewMirrors returns an empty set of mirrors.
func NewMirrors() *Mirrors { return &Mirrors{m: map[string]*Mirror{}} }

// ForNode returns the mirror of stateFile, started on first use, with a
// forwarder in node.
func (ms *Mirrors) ForNode(t testing.TB, node *Node, stateFile string) *Mirror {
	t.Helper()
	ms.mu.Lock()
	m := ms.m[stateFile]
	if m == nil {
		m = StartMirror(t, stateFile)
		ms.m[stateFile] = m
	}
	ms.mu.Unlock()
	m.Forward(t, node)
	return m
}

// KubeProxyBackend is upstream kube-proxy as a Backend: a real
// kube-apiserver per state file mirrors the file's objects, and kube-proxy
// runs in each node, reaching the API server through a forwarder in the
// node's namespace.
type KubeProxyBackend struct {
	// Mode is kube-proxy's --proxy-mode: nftables or iptables.
	Mode    string
	Mirrors *Mirrors
}

// KubeProxy returns upstream kube-proxy in mode (nftables or iptables) as a
// Backend.
func KubeProxy(mode string) *KubeProxyBackend {
	return &KubeProxyBackend{Mode: mode, Mirrors: NewMirrors()}
}

// KpngKubeBackend is kpng as a node runs it against a cluster: its kube
// source reading the same mirrored API server as KubeProxyBackend, the
// brain, and the backend, in one process.
type KpngKubeBackend struct {
	// Backend is the kpng backend's name, e.g. "nft".
	Backend string
	Mirrors *Mirrors
}

// KpngKube returns kpng's backend fed by kpng's kube source as a Backend,
// named "kube-<backend>".
func KpngKube(backend string) *KpngKubeBackend {
	return &KpngKubeBackend{Backend: backend, Mirrors: NewMirrors()}
}

func (k *KpngKubeBackend) Name() string       { return "kube-" + k.Backend }
func (k *KpngKubeBackend) SyncedLine() string { return "Dataplane synced" }

// Argv is the command line of kpng in node, reading the API server of
// kubeconfig.
func (k *KpngKubeBackend) Argv(t testing.TB, node *Node, kubeconfig string, cfg ProxyConfig) []string {
	return append([]string{KpngBinary(t), "--v=2", "kube", "--kubeconfig", kubeconfig,
		"to-local", "--node-name", node.Name, "to-" + k.Backend}, kpngFlags(t, k.Backend, node, cfg)...)
}

// Cgroups reports whether the backend needs a lab with cgroups.
func (k *KpngKubeBackend) Cgroups() bool { return k.Backend == "ebpf" }

func (k *KpngKubeBackend) Start(t testing.TB, node *Node, stateFile string, cfg ProxyConfig) *Process {
	t.Helper()
	m := k.Mirrors.ForNode(t, node, stateFile)
	return node.Start(t, k.Argv(t, node, m.Server.KubeconfigPath, cfg)...)
}

func (k *KpngKubeBackend) Cleanup(t testing.TB, node *Node, stateFile string, cfg ProxyConfig) {
	t.Helper()
	argv := append([]string{KpngBinary(t), "file", "--input", stateFile, "to-local", "--node-name", node.Name, "to-" + k.Backend}, kpngFlags(t, k.Backend, node, cfg)...)
	if out, err := node.Run(append(argv, "--cleanup")...); err != nil {
		t.Fatalf("node %s: kpng to-%s --cleanup: %v\n%s", node.Name, k.Backend, err, out)
	}
}

func (k *KubeProxyBackend) Name() string       { return "kube-proxy-" + k.Mode }
func (k *KubeProxyBackend) SyncedLine() string { return "SyncProxyRules complete" }

// KubeProxyBinary returns the path of upstream kube-proxy: $KPNG_KUBE_PROXY,
// or .cache/bin/kube-proxy in the repository.
func KubeProxyBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(EnvKubeProxy); p != "" {
		return p
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(root, ".cache", "bin", "kube-proxy")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("kube-proxy binary: %v (run hack/install-test-deps.sh, or set %s)", err, EnvKubeProxy)
	}
	return p
}

// repoRoot is the directory of the go.mod above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// Argv is kube-proxy's command line in node, reading the API server of
// kubeconfig.
func (k *KubeProxyBackend) Argv(t testing.TB, node *Node, kubeconfig string, cfg ProxyConfig) []string {
	return append([]string{KubeProxyBinary(t),
		"--proxy-mode=" + k.Mode,
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + node.Name,
		"--v=2",
		// Leave the conntrack sysctls alone: nf_conntrack_max is global.
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
	}, append(kubeProxySyncPeriod(cfg), cfg.KubeProxyFlags()...)...)
}

func kubeProxySyncPeriod(cfg ProxyConfig) []string {
	if cfg.SyncPeriod == 0 {
		return nil
	}
	return []string{"--iptables-sync-period=" + cfg.SyncPeriod.String()}
}

func (k *KubeProxyBackend) Start(t testing.TB, node *Node, stateFile string, cfg ProxyConfig) *Process {
	t.Helper()
	m := k.Mirrors.ForNode(t, node, stateFile)
	return node.Start(t, k.Argv(t, node, m.Server.KubeconfigPath, cfg)...)
}

func (k *KubeProxyBackend) Cleanup(t testing.TB, node *Node, _ string, cfg ProxyConfig) {
	t.Helper()
	if out, err := node.Run(KubeProxyBinary(t), "--cleanup", "--proxy-mode="+k.Mode, "--v=2"); err != nil {
		t.Fatalf("node %s: kube-proxy --cleanup: %v\n%s", node.Name, err, out)
	}
}

// Mirror keeps a kube-apiserver's Nodes, Services and EndpointSlices equal
// to a state file's: each time the file changes, the API server's objects
// are made the file's.
type Mirror struct {
	// Server is the API server.
	Server *apiserver.Server
	path   string
	last   []byte

	mu        sync.Mutex
	forwarded map[string]bool // nodes with a forwarder (a restarted proxy reuses it)
}

// StartMirror starts an API server holding stateFile's objects and keeps
// them equal to the file's until the test ends.
func StartMirror(t testing.TB, stateFile string) *Mirror {
	t.Helper()
	m := &Mirror{Server: apiserver.Start(t), path: stateFile, forwarded: map[string]bool{}}
	if err := m.sync(); err != nil {
		t.Fatalf("mirror %s: %v", stateFile, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(50 * time.Millisecond): // the file has no event we could wait on here
			}
			if err := m.sync(); err != nil {
				t.Errorf("mirror %s: %v", stateFile, err)
				return
			}
		}
	}()
	return m
}

// Forward listens in node's namespace on the API server's loopback address
// and port, and forwards each connection to the API server, so that the
// kubeconfig works unchanged inside the node.
func (m *Mirror) Forward(t testing.TB, node *Node) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.forwarded[node.Name] {
		return
	}
	m.forwarded[node.Name] = true
	u, err := url.Parse(m.Server.URL)
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	if err := node.Do(func() error {
		var err error
		l, err = net.Listen("tcp", u.Host)
		return err
	}); err != nil {
		t.Fatalf("forwarder in %s: %v", node.Name, err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", u.Host) // from the root namespace
				if err != nil {
					return
				}
				defer out.Close()
				go func() { io.Copy(out, in); out.(*net.TCPConn).CloseWrite() }()
				io.Copy(in, out)
			}()
		}
	}()
}

// sync applies the file to the API server if it changed.
func (m *Mirror) sync() error {
	b, err := os.ReadFile(m.path)
	if err != nil {
		return err
	}
	if bytes.Equal(b, m.last) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := ApplyState(ctx, m.Server.Client, b); err != nil {
		return err
	}
	m.last = b
	return nil
}

// ApplyState makes the API server's Nodes, Services (but
// default/kubernetes) and EndpointSlices those of the YAML stream b (see
// State.Marshal). ServiceCIDRs are not mirrored: the API server's own is the
// lab's.
func ApplyState(ctx context.Context, c kubernetes.Interface, b []byte) error {
	var nodes []*corev1.Node
	var svcs []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return err
		}
		var obj any
		switch tm.Kind {
		case "Node":
			o := &corev1.Node{}
			nodes, obj = append(nodes, o), o
		case "Service":
			o := &corev1.Service{}
			svcs, obj = append(svcs, o), o
		case "EndpointSlice":
			o := &discoveryv1.EndpointSlice{}
			slices, obj = append(slices, o), o
		default:
			continue
		}
		if err := yaml.Unmarshal(doc, obj); err != nil {
			return err
		}
	}

	for _, n := range nodes {
		cur, err := c.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cur, err = c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		}
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Name, err)
		}
		cur.Status = n.Status
		if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s status: %w", n.Name, err)
		}
	}

	want := map[string]bool{"default/kubernetes": true}
	for _, s := range svcs {
		want[s.Namespace+"/"+s.Name] = true
		api := c.CoreV1().Services(s.Namespace)
		cur, err := api.Get(ctx, s.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			cur, err = api.Create(ctx, s, metav1.CreateOptions{})
		case err == nil:
			cur.Spec = s.Spec
			cur, err = api.Update(ctx, cur, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("service %s/%s: %w", s.Namespace, s.Name, err)
		}
		cur.Status = s.Status
		if _, err := api.UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("service %s/%s status: %w", s.Namespace, s.Name, err)
		}
	}
	have, err := c.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, s := range have.Items {
		if !want[s.Namespace+"/"+s.Name] {
			if err := c.CoreV1().Services(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}

	want = map[string]bool{}
	for _, s := range slices {
		want[s.Namespace+"/"+s.Name] = true
		api := c.DiscoveryV1().EndpointSlices(s.Namespace)
		cur, err := api.Get(ctx, s.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			_, err = api.Create(ctx, s, metav1.CreateOptions{})
		case err == nil:
			cur.Labels, cur.AddressType, cur.Endpoints, cur.Ports = s.Labels, s.AddressType, s.Endpoints, s.Ports
			_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("endpointslice %s/%s: %w", s.Namespace, s.Name, err)
		}
	}
	haveSlices, err := c.DiscoveryV1().EndpointSlices("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, s := range haveSlices.Items {
		if s.Labels[discoveryv1.LabelManagedBy] == "" && !want[s.Namespace+"/"+s.Name] {
			if err := c.DiscoveryV1().EndpointSlices(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}
