package apiserver

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AdminUser is the user the Server's client authenticates as. It is in the
// system:masters group, which may do everything.
const AdminUser = "kpng-test-admin"

// The Service cluster IP ranges of every Server: one per family, so that
// Services of any ipFamilyPolicy can be created.
const (
	ServiceCIDRIPv4 = "10.96.0.0/16"
	ServiceCIDRIPv6 = "fd00:10:96::/112"
)

const (
	startTimeout = 60 * time.Second // for each of etcd and kube-apiserver
	etcdGrace    = 5 * time.Second  // between SIGTERM and SIGKILL
	portAttempts = 3                // a free port may be taken before the server binds it
	logTailLines = 80
)

// Option changes how Start runs the servers.
type Option func(*options)

type options struct {
	apiServerArgs []string
}

// WithAPIServerArgs appends command line flags to kube-apiserver's; a flag
// given again overrides the default.
func WithAPIServerArgs(args ...string) Option {
	return func(o *options) { o.apiServerArgs = append(o.apiServerArgs, args...) }
}

// Server is a running etcd and kube-apiserver. StopAPIServer and
// RestartAPIServer fail the test on error, so like t.Fatal they belong in
// the test's goroutine.
type Server struct {
	// URL is kube-apiserver's address: https://127.0.0.1:port.
	URL string
	// EtcdURL is etcd's client address: http://127.0.0.1:port.
	EtcdURL string
	// KubeconfigPath is a kubeconfig file for the admin user, for programs
	// the test runs (kpng itself, kube-proxy).
	KubeconfigPath string
	// Client is a clientset for the admin user.
	Client kubernetes.Interface

	t      testing.TB
	bins   binaries
	dir    string
	config *rest.Config
	http   *http.Client // for /readyz

	creds     *credentials
	extraArgs []string // WithAPIServerArgs, for peers too

	mu        sync.Mutex
	etcd      *process
	apiServer *process
	apiArgs   []string // to restart kube-apiserver identically
	apiPort   int
	peers     []*Peer
}

// Start starts etcd and kube-apiserver and waits until kube-apiserver is
// ready and has created Service default/kubernetes (with no endpoints: see
// --endpoint-reconciler-type below) and ServiceCIDR kubernetes, so that
// every test starts from the same cluster. They are stopped, and their
// files removed, when the test ends; if the test failed, the end of their
// logs is printed first. Start fails the test if it cannot start them,
// including when the binaries are missing.
func Start(t testing.TB, opts ...Option) *Server {
	t.Helper()
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	bins, err := findBinaries()
	if err != nil {
		t.Fatalf("test API server: %v", err)
	}
	s := &Server{t: t, bins: bins, dir: t.TempDir()}
	t.Cleanup(func() {
		if t.Failed() {
			s.printLogs()
		}
		s.Stop()
	})
	if err := s.start(o); err != nil {
		t.Fatalf("test API server: %v", err)
	}
	return s
}

func (s *Server) start(o options) error {
	begin := time.Now()
	if err := s.startEtcd(); err != nil {
		return err
	}
	etcdReady := time.Since(begin)

	creds, err := writeCredentials(s.dir)
	if err != nil {
		return err
	}
	s.creds, s.extraArgs = creds, o.apiServerArgs
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return err
		}
		s.apiPort = ports[0]
		s.URL = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.apiPort))
		if err := s.writeClientConfig(); err != nil {
			return err
		}
		s.apiArgs = append(s.apiServerArgs(s.apiPort, s.dir), s.extraArgs...)
		err = s.startAPIServer()
		if err == nil {
			break
		}
		if attempt == portAttempts || !errors.Is(err, errAddrInUse) {
			return err
		}
	}
	if err := waitUntil(s.apiServer, startTimeout, s.bootstrapped); err != nil {
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	s.t.Logf("test API server %s ready in %v (etcd %v)", s.URL, time.Since(begin).Round(time.Millisecond), etcdReady.Round(time.Millisecond))
	return nil
}

func (s *Server) startEtcd() error {
	dataDir := filepath.Join(s.dir, "etcd")
	logPath := filepath.Join(s.dir, "etcd.log")
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			return err
		}
		client := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		peer := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1]))
		p, err := startProcess("etcd", logPath, s.bins.etcd,
			"--name=kpng-test",
			"--data-dir="+dataDir,
			"--listen-client-urls="+client,
			"--advertise-client-urls="+client,
			"--listen-peer-urls="+peer,
			"--initial-advertise-peer-urls="+peer,
			"--initial-cluster=kpng-test="+peer,
			// A single member elects itself after one election
			// timeout: 100ms instead of the default 1s. With no peers,
			// short timeouts cannot cost it leadership.
			"--heartbeat-interval=10",
			"--election-timeout=100",
			"--logger=zap",
			"--log-outputs=stderr",
		)
		if err != nil {
			return err
		}
		s.mu.Lock()
		s.etcd = p
		s.mu.Unlock()
		s.EtcdURL = client

		err = waitUntil(p, startTimeout, func(ctx context.Context) (bool, string) {
			return etcdHealthy(ctx, client)
		})
		if err == nil {
			return nil
		}
		p.stop(0)
		if attempt == portAttempts || !p.addrInUse() {
			return fmt.Errorf("etcd: %w", err)
		}
		if err := os.RemoveAll(dataDir); err != nil {
			return fmt.Errorf("etcd: removing data dir to retry: %w", err)
		}
	}
}

// apiServerArgs returns the flags of a kube-apiserver serving on port. The
// reasons for the less obvious ones are in the comments.
func (s *Server) apiServerArgs(port int, certDir string) []string {
	c := s.creds
	return []string{
		"--etcd-servers=" + s.EtcdURL,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		// Without an advertise address kube-apiserver picks the host's
		// first interface address (and fails on a host without one), and
		// publishes it as the endpoint of Service default/kubernetes.
		// Tests get a fixed address instead, and no endpoints for that
		// Service: an endpoint may not be a loopback address, and a
		// proxy under test must not send traffic anywhere but loopback.
		"--advertise-address=127.0.0.1",
		"--endpoint-reconciler-type=none",
		"--cert-dir=" + certDir,
		"--tls-cert-file=" + c.servingCertFile,
		"--tls-private-key-file=" + c.servingKeyFile,
		"--token-auth-file=" + c.tokenFile,
		"--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + c.saKeyFile,
		"--service-account-signing-key-file=" + c.saKeyFile,
		"--service-cluster-ip-range=" + ServiceCIDRIPv4 + "," + ServiceCIDRIPv6,
		// Only what a real cluster would reject Services and
		// EndpointSlices with; the others watch objects kpng never
		// writes and slow the start.
		"--enable-admission-plugins=NamespaceLifecycle",
		"--disable-admission-plugins=" + strings.Join(defaultAdmissionPluginsOff, ","),
		// API Priority and Fairness adds seconds to every start, to
		// bootstrap its configuration objects, and tests do not need it.
		"--enable-priority-and-fairness=false",
		"--profiling=false",
	}
}

// defaultAdmissionPluginsOff are kube-apiserver's default admission plugins
// other than NamespaceLifecycle.
var defaultAdmissionPluginsOff = []string{
	"LimitRanger", "ServiceAccount", "DefaultStorageClass",
	"PersistentVolumeClaimResize", "DefaultTolerationSeconds",
	"MutatingAdmissionWebhook", "ValidatingAdmissionWebhook",
	"ResourceQuota", "StorageObjectInUseProtection", "PodGroupProtection",
	"Priority", "TaintNodesByCondition", "RuntimeClass",
	"CertificateApproval", "CertificateSigning", "ClusterTrustBundleAttest",
	"CertificateSubjectRestriction", "DefaultIngressClass", "PodSecurity",
	"PodTopologyLabels", "MutatingAdmissionPolicy",
	"ValidatingAdmissionPolicy", "PodGroupWorkloadExists",
	"NodeDeclaredFeatureValidator", "JobValidation", "PodResizeValidator",
}

// writeClientConfig writes the admin kubeconfig and builds the client from
// it, so that the file tests hand to other programs is the one in use.
func (s *Server) writeClientConfig() error {
	s.KubeconfigPath = filepath.Join(s.dir, "kubeconfig")
	config, err := s.writeKubeconfig(s.KubeconfigPath, s.URL, AdminUser, s.creds.adminToken)
	if err != nil {
		return err
	}
	s.config = config
	if s.Client, err = kubernetes.NewForConfig(rest.CopyConfig(config)); err != nil {
		return fmt.Errorf("creating client: %w", err)
	}
	if s.http, err = rest.HTTPClientFor(rest.CopyConfig(config)); err != nil {
		return fmt.Errorf("creating HTTP client: %w", err)
	}
	return nil
}

// writeKubeconfig writes a kubeconfig for the kube-apiserver at url, with a
// bearer token, and loads it back.
func (s *Server) writeKubeconfig(path, url, user, token string) (*rest.Config, error) {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kpng-test"] = &clientcmdapi.Cluster{Server: url, CertificateAuthorityData: s.creds.caPEM}
	kc.AuthInfos[user] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["kpng-test"] = &clientcmdapi.Context{Cluster: "kpng-test", AuthInfo: user}
	kc.CurrentContext = "kpng-test"
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		return nil, fmt.Errorf("writing kubeconfig: %w", err)
	}
	config, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig %s: %w", path, err)
	}
	// client-go's default of 5 requests per second would make tests
	// measure the client, not the code under test.
	config.QPS, config.Burst = 1000, 2000
	config.UserAgent = "kpng-integration-test"
	return config, nil
}

// errAddrInUse marks a start that failed because another process took a
// port the server was given: the caller may retry with other ports.
var errAddrInUse = errors.New("lost a free port to another process")

// startAPIServer starts kube-apiserver with s.apiArgs and waits until it is
// ready. An error wraps errAddrInUse when this run lost its port.
func (s *Server) startAPIServer() error {
	p, err := startProcess("kube-apiserver", filepath.Join(s.dir, "kube-apiserver.log"), s.bins.kubeAPIServer, s.apiArgs...)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.apiServer = p
	s.mu.Unlock()
	if err := waitUntil(p, startTimeout, func(ctx context.Context) (bool, string) { return readyz(ctx, s.http, s.URL) }); err != nil {
		p.stop(0)
		if p.addrInUse() {
			return fmt.Errorf("kube-apiserver: %w: %w", errAddrInUse, err)
		}
		return fmt.Errorf("kube-apiserver: %w", err)
	}
	return nil
}

// readyz reports whether the /readyz of the kube-apiserver at url says it
// is ready.
func readyz(ctx context.Context, hc *http.Client, url string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/readyz", nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := hc.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	return resp.StatusCode == http.StatusOK, fmt.Sprintf("/readyz: %s: %s", resp.Status, body)
}

// bootstrapped reports whether the objects kube-apiserver creates for itself
// after it is ready exist, so that every test starts from the same cluster.
func (s *Server) bootstrapped(ctx context.Context) (bool, string) {
	if _, err := s.Client.CoreV1().Services(metav1.NamespaceDefault).Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
		return false, fmt.Sprintf("Service default/kubernetes: %v", err)
	}
	if _, err := s.Client.NetworkingV1().ServiceCIDRs().Get(ctx, "kubernetes", metav1.GetOptions{}); err != nil {
		return false, fmt.Sprintf("ServiceCIDR kubernetes: %v", err)
	}
	return true, ""
}

// RESTConfig returns a copy of the admin's client configuration.
func (s *Server) RESTConfig() *rest.Config {
	return rest.CopyConfig(s.config)
}

// StopAPIServer kills kube-apiserver and leaves etcd running, to simulate
// an API server outage. Clients see their connections closed and new ones
// refused until RestartAPIServer.
//
// It kills rather than terminates: a graceful shutdown holds open watches
// for seconds, and kube-apiserver keeps no state of its own to save.
func (s *Server) StopAPIServer() {
	s.t.Helper()
	s.mu.Lock()
	p := s.apiServer
	s.apiServer = nil
	s.mu.Unlock()
	if p == nil {
		s.t.Fatalf("test API server: StopAPIServer: kube-apiserver is not running")
	}
	p.stop(0)
}

// APIServerRunning reports whether kube-apiserver runs (it does from Start
// until StopAPIServer, and again from RestartAPIServer).
func (s *Server) APIServerRunning() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.apiServer != nil
}

// RestartAPIServer starts kube-apiserver again after StopAPIServer, on the
// same address with the same etcd, and waits until it is ready.
func (s *Server) RestartAPIServer() {
	s.t.Helper()
	s.mu.Lock()
	running := s.apiServer != nil
	s.mu.Unlock()
	if running {
		s.t.Fatalf("test API server: RestartAPIServer: kube-apiserver is running; call StopAPIServer first")
	}
	begin := time.Now()
	if err := s.startAPIServer(); err != nil {
		s.t.Fatalf("test API server: restarting: %v", err)
	}
	s.t.Logf("test API server %s ready again in %v", s.URL, time.Since(begin).Round(time.Millisecond))
}

// Stop stops kube-apiserver, its peers and etcd. It is safe to call more
// than once; Start arranges for it to run when the test ends.
func (s *Server) Stop() {
	s.mu.Lock()
	api, etcd, peers := s.apiServer, s.etcd, s.peers
	s.apiServer, s.etcd, s.peers = nil, nil, nil
	s.mu.Unlock()
	for _, p := range peers {
		p.stop()
	}
	if api != nil {
		api.stop(0)
	}
	if etcd != nil {
		etcd.stop(etcdGrace)
	}
}

// printLogs logs the end of each server's log.
func (s *Server) printLogs() {
	peers, _ := filepath.Glob(filepath.Join(s.dir, "kube-apiserver-peer-*.log"))
	logs := append([]string{filepath.Join(s.dir, "etcd.log"), filepath.Join(s.dir, "kube-apiserver.log")}, peers...)
	for _, path := range logs {
		p := &process{logPath: path}
		if _, err := os.Stat(p.logPath); err != nil {
			continue
		}
		s.t.Logf("last %d lines of %s:\n%s", logTailLines, p.logPath, p.tailLog(logTailLines))
	}
}

// waitUntil polls cond every 100ms until it returns true, p exits, or
// timeout passes. The error carries cond's last message.
func waitUntil(p *process, timeout time.Duration, cond func(context.Context) (bool, string)) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	last := "not checked yet"
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		ok, msg := cond(ctx)
		cancel()
		if ok {
			return nil
		}
		last = msg
		if err := p.exitError(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %v: %s", timeout, last)
		}
		select {
		case <-tick.C:
		case <-p.done:
		}
	}
}

// etcdHealthy reports whether etcd's /health says it is healthy.
func etcdHealthy(ctx context.Context, clientURL string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientURL+"/health", nil)
	if err != nil {
		return false, err.Error()
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
	return resp.StatusCode == http.StatusOK && strings.Contains(string(body), `"health":"true"`),
		fmt.Sprintf("/health: %s: %s", resp.Status, body)
}

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago. Another process may take one before the server binds it, which the
// callers detect and retry.
func freePorts(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
