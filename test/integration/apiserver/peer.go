package apiserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Peer is a second kube-apiserver on the Server's etcd, as in a control
// plane of several: what is written through one is read through the other.
// A test uses it to change the cluster while the kube-apiserver that the
// code under test talks to is stopped.
type Peer struct {
	// URL is the peer's address: https://127.0.0.1:port.
	URL string
	// Client is a clientset for the admin user, talking to the peer.
	Client kubernetes.Interface

	proc *process
}

// StartPeer starts a kube-apiserver on the Server's etcd with the Server's
// flags and credentials, on a port of its own, and waits until it is
// ready. It is stopped by Peer.Stop, or with the Server. Like t.Fatal it
// belongs in the test's goroutine.
func (s *Server) StartPeer() *Peer {
	s.t.Helper()
	begin := time.Now()
	p, err := s.startPeer()
	if err != nil {
		s.t.Fatalf("test API server: peer: %v", err)
	}
	s.t.Logf("test API server peer %s ready in %v", p.URL, time.Since(begin).Round(time.Millisecond))
	return p
}

func (s *Server) startPeer() (*Peer, error) {
	s.mu.Lock()
	n := len(s.peers) + 1
	s.mu.Unlock()
	name := "kube-apiserver-peer-" + strconv.Itoa(n)
	dir := filepath.Join(s.dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(1)
		if err != nil {
			return nil, err
		}
		peer := &Peer{URL: "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))}
		config, err := s.writeKubeconfig(filepath.Join(dir, "kubeconfig"), peer.URL, AdminUser, s.creds.adminToken)
		if err != nil {
			return nil, err
		}
		if peer.Client, err = kubernetes.NewForConfig(rest.CopyConfig(config)); err != nil {
			return nil, fmt.Errorf("creating client: %w", err)
		}
		hc, err := rest.HTTPClientFor(rest.CopyConfig(config))
		if err != nil {
			return nil, fmt.Errorf("creating HTTP client: %w", err)
		}
		args := append(s.apiServerArgs(ports[0], dir), s.extraArgs...)
		if peer.proc, err = startProcess(name, filepath.Join(s.dir, name+".log"), s.bins.kubeAPIServer, args...); err != nil {
			return nil, err
		}
		s.mu.Lock()
		s.peers = append(s.peers, peer)
		s.mu.Unlock()
		err = waitUntil(peer.proc, startTimeout, func(ctx context.Context) (bool, string) { return readyz(ctx, hc, peer.URL) })
		if err == nil {
			return peer, nil
		}
		peer.stop()
		if peer.proc.addrInUse() {
			err = fmt.Errorf("%w: %w", errAddrInUse, err)
		}
		if attempt == portAttempts || !errors.Is(err, errAddrInUse) {
			return nil, err
		}
	}
}

// Stop stops the peer. It is safe to call more than once.
func (p *Peer) Stop() { p.stop() }

func (p *Peer) stop() { p.proc.stop(0) }
