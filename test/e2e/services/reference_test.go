//go:build e2e

package services

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
	"strings"
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

	"github.com/kpng/kpng/test/e2e/netlab"
	"github.com/kpng/kpng/test/integration/apiserver"
)

// EnvKubeProxy overrides where the kube-proxy binary is looked for
// (default: .cache/bin/kube-proxy at the repository root, built by
// hack/install-test-deps.sh).
const EnvKubeProxy = "KPNG_KUBE_PROXY"

// referenceBackend returns the backend called name that reads a real API
// server: upstream kube-proxy ("kube-proxy-nftables", "kube-proxy-iptables"),
// or kpng's backend B fed by kpng's kube source ("kube-B", e.g. "kube-nft"),
// as a node runs it. It returns nil for other names (kpng's file source).
func referenceBackend(t *testing.T, name string) netlab.Backend {
	if b, ok := strings.CutPrefix(name, "kube-"); ok && !strings.HasPrefix(b, "proxy-") {
		return &kpngKube{backend: b, mirrors: &mirrors{m: map[string]*mirror{}}}
	}
	mode, ok := strings.CutPrefix(name, "kube-proxy-")
	if !ok {
		return nil
	}
	if mode != "nftables" && mode != "iptables" {
		t.Fatalf("unknown reference backend %q: kube-proxy-nftables or kube-proxy-iptables", name)
	}
	return &kubeProxy{mode: mode, mirrors: &mirrors{m: map[string]*mirror{}}}
}

// mirrors are the API servers of a backend, one per state file.
type mirrors struct {
	mu sync.Mutex
	m  map[string]*mirror
}

// forNode returns the mirror of stateFile, started on first use, with a
// forwarder in node.
func (ms *mirrors) forNode(t testing.TB, node *netlab.Node, stateFile string) *mirror {
	t.Helper()
	ms.mu.Lock()
	m := ms.m[stateFile]
	if m == nil {
		m = startMirror(t, stateFile)
		ms.m[stateFile] = m
	}
	ms.mu.Unlock()
	m.forward(t, node)
	return m
}

// kubeProxy is upstream kube-proxy as a Backend: a real kube-apiserver per
// state file mirrors the file's objects, and kube-proxy runs in each node,
// reaching the API server through a forwarder in the node's namespace.
type kubeProxy struct {
	mode    string
	mirrors *mirrors
}

// kpngKube is kpng as a node runs it against a cluster: its kube source
// reading the same mirrored API server as kubeProxy, the brain, and the
// backend, in one process.
type kpngKube struct {
	backend string
	mirrors *mirrors
}

func (k *kpngKube) Name() string       { return "kube-" + k.backend }
func (k *kpngKube) SyncedLine() string { return "Dataplane synced" }

func (k *kpngKube) argv(t testing.TB, node *netlab.Node, kubeconfig string, cfg netlab.ProxyConfig) []string {
	return append([]string{netlab.KpngBinary(t), "--v=2", "kube", "--kubeconfig", kubeconfig,
		"to-local", "--node-name", node.Name, "to-" + k.backend}, cfg.Flags()...)
}

func (k *kpngKube) Start(t testing.TB, node *netlab.Node, stateFile string, cfg netlab.ProxyConfig) *netlab.Process {
	t.Helper()
	m := k.mirrors.forNode(t, node, stateFile)
	return node.Start(t, k.argv(t, node, m.server.KubeconfigPath, cfg)...)
}

func (k *kpngKube) Cleanup(t testing.TB, node *netlab.Node, stateFile string, cfg netlab.ProxyConfig) {
	t.Helper()
	if out, err := node.Run(netlab.KpngBinary(t), "file", "--input", stateFile, "to-local", "--node-name", node.Name, "to-"+k.backend, "--cleanup"); err != nil {
		t.Fatalf("node %s: kpng to-%s --cleanup: %v\n%s", node.Name, k.backend, err, out)
	}
}

func (k *kubeProxy) Name() string       { return "kube-proxy-" + k.mode }
func (k *kubeProxy) SyncedLine() string { return "SyncProxyRules complete" }

func kubeProxyBinary(t testing.TB) string {
	if p := os.Getenv(EnvKubeProxy); p != "" {
		return p
	}
	p, err := filepath.Abs("../../../.cache/bin/kube-proxy")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("kube-proxy binary: %v (run hack/install-test-deps.sh, or set %s)", err, EnvKubeProxy)
	}
	return p
}

func (k *kubeProxy) argv(t testing.TB, node *netlab.Node, kubeconfig string, cfg netlab.ProxyConfig) []string {
	return append([]string{kubeProxyBinary(t),
		"--proxy-mode=" + k.mode,
		"--kubeconfig=" + kubeconfig,
		"--hostname-override=" + node.Name,
		"--v=2",
		// Leave the conntrack sysctls alone: nf_conntrack_max is global.
		"--conntrack-max-per-core=0",
		"--conntrack-tcp-timeout-established=0",
		"--conntrack-tcp-timeout-close-wait=0",
	}, append(syncPeriodFlag(cfg), cfg.KubeProxyFlags()...)...)
}

func syncPeriodFlag(cfg netlab.ProxyConfig) []string {
	if cfg.SyncPeriod == 0 {
		return nil
	}
	return []string{"--iptables-sync-period=" + cfg.SyncPeriod.String()}
}

func (k *kubeProxy) Start(t testing.TB, node *netlab.Node, stateFile string, cfg netlab.ProxyConfig) *netlab.Process {
	t.Helper()
	m := k.mirrors.forNode(t, node, stateFile)
	return node.Start(t, k.argv(t, node, m.server.KubeconfigPath, cfg)...)
}

func (k *kubeProxy) Cleanup(t testing.TB, node *netlab.Node, _ string, cfg netlab.ProxyConfig) {
	t.Helper()
	if out, err := node.Run(kubeProxyBinary(t), "--cleanup", "--proxy-mode="+k.mode, "--v=2"); err != nil {
		t.Fatalf("node %s: kube-proxy --cleanup: %v\n%s", node.Name, err, out)
	}
}

// mirror keeps a kube-apiserver's Nodes, Services and EndpointSlices equal
// to a state file's.
type mirror struct {
	server *apiserver.Server
	path   string
	last   []byte

	mu        sync.Mutex
	forwarded map[string]bool // nodes with a forwarder (a restarted proxy reuses it)
}

func startMirror(t testing.TB, path string) *mirror {
	t.Helper()
	m := &mirror{server: apiserver.Start(t), path: path, forwarded: map[string]bool{}}
	if err := m.sync(); err != nil {
		t.Fatalf("mirror %s: %v", path, err)
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
				t.Errorf("mirror %s: %v", path, err)
				return
			}
		}
	}()
	return m
}

// forward listens in node's namespace on the API server's loopback address
// and port, and forwards each connection to the API server, so that the
// kubeconfig works unchanged inside the node.
func (m *mirror) forward(t testing.TB, node *netlab.Node) {
	t.Helper()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.forwarded[node.Name] {
		return
	}
	m.forwarded[node.Name] = true
	u, err := url.Parse(m.server.URL)
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
func (m *mirror) sync() error {
	b, err := os.ReadFile(m.path)
	if err != nil {
		return err
	}
	if bytes.Equal(b, m.last) {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := apply(ctx, m.server.Client, b); err != nil {
		return err
	}
	m.last = b
	return nil
}

// apply makes the API server's Nodes, Services (but default/kubernetes)
// and EndpointSlices those of the YAML stream b. ServiceCIDRs are not
// mirrored: the API server's own is the lab's.
func apply(ctx context.Context, c kubernetes.Interface, b []byte) error {
	var nodes []*corev1.Node
	var svcs []*corev1.Service
	var slices []*discoveryv1.EndpointSlice
	r := utilyaml.NewYAMLReader(bufioReader(b))
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

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }
