package kube

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kpng/kpng/cluster"
)

// The server-side selectors, as kube-proxy (cmd/kube-proxy/app/server.go,
// v1.36) sets them, so that the API server sends kpng only what a proxy can
// use and kpng serves exactly the Services kube-proxy would.

// serviceSelector returns the list selector of the Services watch. Without
// a proxy name it is kube-proxy's: the service.kubernetes.io/service-proxy-name
// label absent. With one, a label selector cannot say "absent, or equal to
// X" (and two watches, one for each, would race when a Service's label
// moves it from one to the other), so the watch takes every proxy name and
// serviceSetter drops the other proxies' Services. Either way headless
// Services (clusterIP None), which DNS serves and no proxy does, are left
// out, as kube-proxy does.
func serviceSelector(proxyName string) (selector, error) {
	notHeadless := fields.OneTermNotEqualSelector("spec.clusterIP", corev1.ClusterIPNone).String()
	if proxyName == "" {
		return selector{label: mustRequirement(cluster.LabelServiceProxyName, selection.DoesNotExist), field: notHeadless}, nil
	}
	if errs := validation.IsValidLabelValue(proxyName); len(errs) > 0 {
		return selector{}, fmt.Errorf("service proxy name %q: %s", proxyName, strings.Join(errs, "; "))
	}
	return selector{field: notHeadless}, nil
}

// endpointSliceSelector leaves out the slices of headless Services, which
// the EndpointSlice controller labels service.kubernetes.io/headless. Like
// kube-proxy, it does not filter on the proxy name: a slice whose Service
// is not served is ignored by the brain.
func endpointSliceSelector() selector {
	return selector{label: mustRequirement(cluster.LabelHeadless, selection.DoesNotExist)}
}

// nodeSelector watches only this node in node-local mode (nodeName set),
// every node otherwise (fan-out).
func nodeSelector(nodeName string) selector {
	if nodeName == "" {
		return selector{}
	}
	return selector{field: fields.OneTermEqualSelector("metadata.name", nodeName).String()}
}

// selector is the label and field selectors of one list/watch.
type selector struct{ label, field string }

func mustRequirement(key string, op selection.Operator) string {
	r, err := labels.NewRequirement(key, op, nil)
	if err != nil {
		panic(err) // a programming error: the keys are constants
	}
	return labels.NewSelector().Add(*r).String()
}
