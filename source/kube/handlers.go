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

// cached is what an informer keeps of an API object: its identity (the
// informer keys objects by their metadata) and the object as the cluster
// store holds it, or why it cannot be held. The API object itself is
// dropped once converted, so that the store's object is the only copy: at
// 10,000 Services the informers' copies of the API objects were some 35
// MB of a 100 MB heap.
type cached struct {
	metav1.ObjectMeta // name, namespace and resource version only
	// set writes the converted object to the store (or, for a Service
	// labelled for another proxy, removes it).
	set  func(tx *cluster.Tx)
	warn cluster.Warnings
	err  error
}

// converter turns an API object into what writes it to the store.
type converter[T metav1.Object] func(obj T) (set func(tx *cluster.Tx), warn cluster.Warnings, err error)

// convertWith is the informers' transform: API objects of type T become
// *cached, converted once, as they enter the informer. It is idempotent,
// as client-go asks, and leaves anything else (tombstones) alone.
func convertWith[T metav1.Object](conv converter[T]) cache.TransformFunc {
	return func(obj any) (any, error) {
		o, ok := obj.(T)
		if !ok {
			return obj, nil
		}
		c := &cached{ObjectMeta: metav1.ObjectMeta{Namespace: o.GetNamespace(), Name: o.GetName(), ResourceVersion: o.GetResourceVersion()}}
		c.set, c.warn, c.err = conv(o)
		return c, nil
	}
}

// writer writes informer events to the store, one event per batch: the
// store counts every write (Stats().Events) and moves its revision only for
// those that change something.
type writer struct {
	store  *cluster.Store
	logger klog.Logger
}

// deleteFunc removes an object from the store by key.
type deleteFunc func(tx *cluster.Tx, namespace, name string)

// handler returns the event handler of one informer, whose objects are
// *cached (see convertWith).
func handler(w *writer, del deleteFunc) cache.ResourceEventHandler {
	apply := func(obj any) {
		c, ok := obj.(*cached)
		if !ok {
			w.logger.Error(nil, "Unexpected object from an informer", "type", fmt.Sprintf("%T", obj))
			return
		}
		w.write(c, del)
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
func (w *writer) write(c *cached, del deleteFunc) {
	w.store.Update(func(tx *cluster.Tx) {
		if c.err != nil {
			del(tx, c.Namespace, c.Name)
			return
		}
		c.set(tx)
	})
	if c.err != nil {
		w.logger.Error(c.err, "Ignoring an object kpng cannot use", "namespace", c.Namespace, "name", c.Name)
	}
	for _, msg := range c.warn {
		w.logger.Info("Ignoring part of an object", "problem", msg)
	}
}

// convertService stores a Service, unless it is labelled for another
// proxy: that one is removed (its label changed) or never stored.
func convertService(proxyName string) converter[*corev1.Service] {
	return func(in *corev1.Service) (func(*cluster.Tx), cluster.Warnings, error) {
		if v, ok := in.Labels[cluster.LabelServiceProxyName]; ok && v != proxyName {
			ns, name := in.Namespace, in.Name
			return func(tx *cluster.Tx) { tx.DeleteService(ns, name) }, nil, nil
		}
		out, warn, err := cluster.ServiceFromK8s(in)
		return func(tx *cluster.Tx) { tx.SetService(out) }, warn, err
	}
}

func convertEndpointSlice(in *discoveryv1.EndpointSlice) (func(*cluster.Tx), cluster.Warnings, error) {
	out, warn, err := cluster.EndpointSliceFromK8s(in)
	return func(tx *cluster.Tx) { tx.SetEndpointSlice(out) }, warn, err
}

func convertNode(in *corev1.Node) (func(*cluster.Tx), cluster.Warnings, error) {
	out, warn, err := cluster.NodeFromK8s(in)
	return func(tx *cluster.Tx) { tx.SetNode(out) }, warn, err
}

func convertServiceCIDR(in *networkingv1.ServiceCIDR) (func(*cluster.Tx), cluster.Warnings, error) {
	out, warn, err := cluster.ServiceCIDRFromK8s(in)
	return func(tx *cluster.Tx) { tx.SetServiceCIDR(out) }, warn, err
}
