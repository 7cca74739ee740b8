package main

import (
	"github.com/spf13/cobra"

	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/source/kube"
)

func kubeCommand() *cobra.Command {
	cc := kube.ClientConfig{QPS: kube.DefaultQPS, Burst: kube.DefaultBurst, ContentType: kube.DefaultContentType}
	cmd := &cobra.Command{
		Use:   "kube [--kubeconfig FILE] <sink>",
		Short: "Watch a Kubernetes API server: Services, EndpointSlices, Nodes and ServiceCIDRs",
		Long: `Watch the cluster's API server, with kube-proxy's selectors: Services without the
service.kubernetes.io/service-proxy-name label (or with the sink's --service-proxy-name),
except headless ones; EndpointSlices without the service.kubernetes.io/headless label;
the sink's node (--node-name) only; ServiceCIDRs when the server has them.
Nothing is published before every watch has delivered its first complete list. While
the API server is unreachable the last state is kept, and retried with backoff.

  kpng kube --kubeconfig ~/.kube/config to-file --node-name node-1 --output -`,
		Args: cobra.NoArgs,
	}
	fs := cmd.PersistentFlags()
	fs.StringVar(&cc.Kubeconfig, "kubeconfig", "", "kubeconfig file (with neither --kubeconfig nor --master: the in-cluster config)")
	fs.StringVar(&cc.Master, "master", "", "the API server's address, overriding the kubeconfig's")
	fs.Float32Var(&cc.QPS, "kube-api-qps", cc.QPS, "requests per second to the API server")
	fs.IntVar(&cc.Burst, "kube-api-burst", cc.Burst, "burst of requests to the API server")
	fs.StringVar(&cc.ContentType, "kube-api-content-type", cc.ContentType, "content type of requests to the API server")
	cmd.AddCommand(sinkCommands(func(o sourceOptions) (cluster.Stage, error) {
		config, err := cc.RESTConfig()
		if err != nil {
			return nil, err
		}
		return &kube.Source{Config: config, NodeName: o.NodeName, ServiceProxyName: o.ServiceProxyName}, nil
	})...)
	return cmd
}
