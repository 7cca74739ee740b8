package kube

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/cluster"
)

// writer writes informer events to the store, one event per batch: the
// store counts every write (Stats().Events) and moves its revision only for
// those that change something.
type writer struct {
	store  *cluster.Store
	logger klog.Logger
}

// setFunc converts an API object and stores it.
type setFunc[T metav1.Object] func(tx *cluster.Tx, obj T) (cluster.Warnings, error)

// deleteFunc removes an object from the store by key.
type deleteFunc func(tx *cluster.Tx, namespace, name string)

// handler returns the event handler of one informer.
func handler[T metav1.Object](w *writer, set setFunc[T], del deleteFunc) cache.ResourceEventHandler {
	apply := func(obj any) {
		o, ok := obj.(T)
		if !ok {
			w.logger.Error(nil, "Unexpected object from an informer", "type", fmt.Sprintf("%T", obj))
			return
		}
		write(w, o, set, del)
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    apply,
		UpdateFunc: func(_, obj any) { apply(obj) },
		DeleteFunc: func(obj any) {
			key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
			if err != nil {
				w.logger.Error(err, "Deleted object without a key")
				return
			}
			ns, name, err := cache.SplitMetaNamespaceKey(key)
			if err != nil {
				w.logger.Error(err, "Deleted object with a bad key", "key", key)
				return
			}
			w.store.Update(func(tx *cluster.Tx) { del(tx, ns, name) })
		},
	}
}

// write stores an object; one that cannot be used (it no longer converts)
// is removed, so that no stale version of it stays in the view.
func write[T metav1.Object](w *writer, o T, set setFunc[T], del deleteFunc) {
	var warn cluster.Warnings
	var err error
	w.store.Update(func(tx *cluster.Tx) {
		if warn, err = set(tx, o); err != nil {
			del(tx, o.GetNamespace(), o.GetName())
		}
	})
	if err != nil {
		w.logger.Error(err, "Ignoring an object kpng cannot use", "namespace", o.GetNamespace(), "name", o.GetName())
	}
	for _, msg := range warn {
		w.logger.Info("Ignoring part of an object", "problem", msg)
	}
}

// serviceSetter stores a Service, unless it is labelled for another proxy:
// that one is removed (its label changed) or never stored.
func serviceSetter(proxyName string) setFunc[*corev1.Service] {
	return func(tx *cluster.Tx, in *corev1.Service) (cluster.Warnings, error) {
		if v, ok := in.Labels[cluster.LabelServiceProxyName]; ok && v != proxyName {
			tx.DeleteService(in.Namespace, in.Name)
			return nil, nil
		}
		return setService(tx, in)
	}
}

func setService(tx *cluster.Tx, in *corev1.Service) (cluster.Warnings, error) {
	out, warn, err := cluster.ServiceFromK8s(in)
	if err == nil {
		tx.SetService(out)
	}
	return warn, err
}

func setEndpointSlice(tx *cluster.Tx, in *discoveryv1.EndpointSlice) (cluster.Warnings, error) {
	out, warn, err := cluster.EndpointSliceFromK8s(in)
	if err == nil {
		tx.SetEndpointSlice(out)
	}
	return warn, err
}

func setNode(tx *cluster.Tx, in *corev1.Node) (cluster.Warnings, error) {
	out, warn, err := cluster.NodeFromK8s(in)
	if err == nil {
		tx.SetNode(out)
	}
	return warn, err
}

func setServiceCIDR(tx *cluster.Tx, in *networkingv1.ServiceCIDR) (cluster.Warnings, error) {
	out, warn, err := cluster.ServiceCIDRFromK8s(in)
	if err == nil {
		tx.SetServiceCIDR(out)
	}
	return warn, err
}
