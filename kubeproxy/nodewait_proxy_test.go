package kubeproxy

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/config"
	"github.com/kpng/kpng/source/file"
)

// TestProxyWithoutItsNode: kpng proxy on a node name no Node object has
// waits for it as kube-proxy does, then programs the Services anyway and
// logs an error naming the node; with detectLocalMode NodeCIDR it fails
// with kube-proxy's error instead.
func TestProxyWithoutItsNode(t *testing.T) {
	defer func(w, p time.Duration) { nodeWaitTimeout, podCIDRWaitTimeout = w, p }(nodeWaitTimeout, podCIDRWaitTimeout)
	nodeWaitTimeout, podCIDRWaitTimeout = 300*time.Millisecond, 300*time.Millisecond

	run := func(extra string) (*backend.State, time.Duration, string, error) {
		cfgFile := writeFile(t, "kp.yaml", v1alpha1Header+"mode: nftables\nhostnameOverride: ghost\nmetricsBindAddress: \"\"\nhealthzBindAddress: \"\"\n"+extra)
		plugin := newFakePlugin(nftFlags...)
		deps := proxyDeps{
			source: func(*config.KubeProxyConfiguration, string, string) (cluster.Stage, error) {
				return &file.Source{Path: "../examples/cluster.yaml"}, nil
			},
			setupHost: func(context.Context, *config.KubeProxyConfiguration) error { return nil },
		}
		logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
		ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
		defer cancel()
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- runCommand(ctx, testRoot(testProxy(deps, withPlugin(plugin))), "--config", cfgFile) }()
		var state *backend.State
		var err error
		select {
		case state = <-plugin.syncs:
			took := time.Since(start)
			cancel()
			err = <-done
			var logs []string
			for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
				logs = append(logs, fmt.Sprint(e.Type, " ", e.Message, " ", e.WithKVList, e.ParameterKVList))
			}
			return state, took, strings.Join(logs, "\n"), err
		case err = <-done:
			return nil, time.Since(start), "", err
		case <-time.After(30 * time.Second):
			t.Fatal("kpng proxy neither synced nor ended")
		}
		return nil, 0, "", nil
	}

	state, took, logs, err := run("")
	if err != nil {
		t.Fatalf("kpng proxy: %v", err)
	}
	if took < nodeWaitTimeout {
		t.Errorf("synced after %s, before the wait (%s) ran out", took, nodeWaitTimeout)
	}
	if state.Node != nil || len(state.Services) == 0 {
		t.Errorf("synced node %v with %d services; want no Node and the Services", state.Node, len(state.Services))
	}
	named := false
	for _, line := range strings.Split(logs, "\n") {
		named = named || strings.HasPrefix(line, "ERROR Timed out waiting for node to exist") && strings.Contains(line, "[node ghost]")
	}
	if !named {
		t.Errorf("no error naming the node in the log:\n%s", logs)
	}

	if _, _, _, err := run("detectLocalMode: NodeCIDR\n"); err == nil || !strings.Contains(err.Error(), `timeout waiting for node "ghost" to exist`) {
		t.Errorf("NodeCIDR: error %v, want kube-proxy's", err)
	}
}
