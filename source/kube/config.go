package kube

import (
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Defaults of the client connection, kube-proxy's (KubeProxyConfiguration
// v1alpha1 clientConnection).
const (
	DefaultQPS         = 5
	DefaultBurst       = 10
	DefaultContentType = "application/vnd.kubernetes.protobuf"
)

// ClientConfig says how to reach the API server, with kube-proxy's flags.
type ClientConfig struct {
	// Kubeconfig is a kubeconfig file; Master overrides its server address.
	// With neither, the in-cluster configuration (service account) is used.
	Kubeconfig string
	Master     string
	// QPS and Burst limit the requests to the API server. An informer makes
	// a request only to (re)list or (re)watch, so the defaults are plenty.
	QPS   float32
	Burst int
	// ContentType is the encoding asked of the API server: protobuf by
	// default, which costs the server and kpng less than JSON.
	ContentType string
}

// RESTConfig builds the client configuration, as kube-proxy's createClient does.
func (c ClientConfig) RESTConfig() (*rest.Config, error) {
	var config *rest.Config
	var err error
	if c.Kubeconfig == "" && c.Master == "" {
		config, err = rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("neither --kubeconfig nor --master given, and no in-cluster config: %w", err)
		}
	} else {
		config, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(
			&clientcmd.ClientConfigLoadingRules{ExplicitPath: c.Kubeconfig},
			&clientcmd.ConfigOverrides{ClusterInfo: clientcmdapi.Cluster{Server: c.Master}}).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("loading the client config: %w", err)
		}
	}
	config.QPS = c.QPS
	config.Burst = c.Burst
	if c.ContentType != "" {
		config.ContentType = c.ContentType
		// Accept JSON too: a resource without a protobuf encoding (none of
		// ours today) still works.
		config.AcceptContentTypes = c.ContentType
		if c.ContentType != "application/json" {
			config.AcceptContentTypes += ",application/json"
		}
	}
	config.UserAgent = "kpng"
	return config, nil
}
