package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

const (
	namespace = "default"
	// endpointsPerService is M, the endpoints of each preloaded Service.
	endpointsPerService = 10
	// servicePort is each Service's port; endpointPort its endpoints'.
	servicePort  = 80
	endpointPort = 8080
	// probeService is the Service the dataplane probe connects to; its one
	// endpoint is probePodIP, a pod namespace behind every proxy.
	probeService = "probe"
	probePodIP   = "10.200.0.2"
	probeNodeIP  = "10.200.0.1"
	// triggerTimeAnnotation is what the EndpointSlice controller sets and
	// the proxies measure network programming latency from.
	triggerTimeAnnotation = "endpoints.kubernetes.io/last-change-trigger-time"
	// workers is how many requests the bench keeps in flight to the API
	// server when it creates or updates many objects.
	workers = 32
)

// cluster is the bench's view of the API server's objects: one
// EndpointSlice per Service, the last version the bench wrote, so that an
// update needs no read.
type cluster struct {
	c kubernetes.Interface

	mu     []sync.Mutex // one per preloaded service
	slices []*discoveryv1.EndpointSlice
	gen    atomic.Uint32 // endpoint addresses handed out by updates
	// lastWrite is when the latest write request of a workload began
	// (Unix nanoseconds): no proxy can have applied it before.
	lastWrite atomic.Int64
}

// noteWrite records that a write request begins now.
func (cl *cluster) noteWrite() {
	now := time.Now().UnixNano()
	for {
		old := cl.lastWrite.Load()
		if old >= now || cl.lastWrite.CompareAndSwap(old, now) {
			return
		}
	}
}

// lastWriteStart is when the latest write request began (zero if none).
func (cl *cluster) lastWriteStart() time.Time {
	if ns := cl.lastWrite.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

func newService(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: servicePort,
				TargetPort: intstr.FromInt32(endpointPort)}},
		},
	}
}

func newSlice(service string, addrs []string, node string, trigger bool) *discoveryv1.EndpointSlice {
	ready := true
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: service + "-1",
			Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports: []discoveryv1.EndpointPort{{Name: ptr("http"), Protocol: ptr(corev1.ProtocolTCP),
			Port: ptr(int32(endpointPort))}},
	}
	for j, a := range addrs {
		n := node
		if n == "" {
			n = fmt.Sprintf("node-%d", j%10)
		}
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{a}, NodeName: ptr(n),
			Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &ready, Terminating: ptr(false)}})
	}
	if trigger {
		stamp(s)
	}
	return s
}

// stamp sets the slice's trigger time to now, as the EndpointSlice
// controller does when a pod changes.
func stamp(s *discoveryv1.EndpointSlice) {
	if s.Annotations == nil {
		s.Annotations = map[string]string{}
	}
	s.Annotations[triggerTimeAnnotation] = time.Now().UTC().Format(time.RFC3339Nano)
}

func ptr[T any](v T) *T { return &v }

// preloadAddr is endpoint j of preloaded service i: 10.100.0.0 onwards.
func preloadAddr(i, j int) string {
	k := uint32(i*endpointsPerService + j)
	return netip.AddrFrom4([4]byte{10, 100 + byte(k>>16), byte(k >> 8), byte(k)}).String()
}

// createNode creates the Node every proxy serves.
func createNode(ctx context.Context, c kubernetes.Interface) error {
	ctx, cancel := context.WithTimeout(ctx, 2*requestTimeout)
	defer cancel()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}
	n, err := c.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", nodeName, err)
	}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: probeNodeIP}}
	if _, err := c.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("node %s status: %w", nodeName, err)
	}
	return nil
}

// preload creates n Services "svc-<i>", each with one EndpointSlice of 10
// ready endpoints, with many requests in flight, and the probe Service.
func preload(ctx context.Context, c kubernetes.Interface, n int, progress func(done int)) (*cluster, error) {
	cl := &cluster{c: c, mu: make([]sync.Mutex, n), slices: make([]*discoveryv1.EndpointSlice, n)}
	var done atomic.Int64
	err := parallel(ctx, n, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("svc-%d", i)
		if err := retry(ctx, apierrors.IsAlreadyExists, func(ctx context.Context) error {
			_, err := c.CoreV1().Services(namespace).Create(ctx, newService(name), metav1.CreateOptions{})
			return err
		}); err != nil {
			return fmt.Errorf("service %s: %w", name, err)
		}
		addrs := make([]string, endpointsPerService)
		for j := range addrs {
			addrs[j] = preloadAddr(i, j)
		}
		err := retry(ctx, nil, func(ctx context.Context) error {
			s, err := c.DiscoveryV1().EndpointSlices(namespace).Create(ctx, newSlice(name, addrs, "", false), metav1.CreateOptions{})
			if apierrors.IsAlreadyExists(err) {
				s, err = c.DiscoveryV1().EndpointSlices(namespace).Get(ctx, name+"-1", metav1.GetOptions{})
			}
			cl.slices[i] = s
			return err
		})
		if err != nil {
			return fmt.Errorf("endpointslice of %s: %w", name, err)
		}
		if d := done.Add(1); d%500 == 0 {
			progress(int(d))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := retry(ctx, apierrors.IsAlreadyExists, func(ctx context.Context) error {
		_, err := c.CoreV1().Services(namespace).Create(ctx, newService(probeService), metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, fmt.Errorf("service %s: %w", probeService, err)
	}
	if err := retry(ctx, apierrors.IsAlreadyExists, func(ctx context.Context) error {
		_, err := c.DiscoveryV1().EndpointSlices(namespace).Create(ctx, newSlice(probeService, []string{probePodIP}, nodeName, false), metav1.CreateOptions{})
		return err
	}); err != nil {
		return nil, fmt.Errorf("endpointslice of %s: %w", probeService, err)
	}
	return cl, nil
}

// requestTimeout bounds each API request: client-go sets none, and a
// request lost to a stuck API server would hang the bench.
const requestTimeout = 30 * time.Second

// retry runs fn until it succeeds, up to 5 times with a growing pause, each
// attempt given requestTimeout: on a loaded machine etcd may time out a
// request ("etcdserver: request timed out"), which is the API server's
// trouble, not the proxies'. ok tells which errors mean the previous
// attempt was applied after all (a create that finds the object, a delete
// that does not).
func retry(ctx context.Context, ok func(error) bool, fn func(ctx context.Context) error) error {
	var err error
	for attempt := range 5 {
		actx, cancel := context.WithTimeout(ctx, requestTimeout)
		err = fn(actx)
		cancel()
		if err == nil || (attempt > 0 && ok != nil && ok(err)) {
			return nil
		}
		if apierrors.IsConflict(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-time.After(time.Duration(200<<attempt) * time.Millisecond):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

// parallel runs fn(i) for i in [0, n) on `workers` goroutines and returns
// the first error.
func parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				if err := fn(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	return context.Cause(ctx)
}

// update moves one endpoint of preloaded service i to a new address, with
// a trigger time, as a pod replaced by another would.
func (cl *cluster) update(ctx context.Context, i int) error {
	cl.mu[i].Lock()
	defer cl.mu[i].Unlock()
	g := cl.gen.Add(1)
	s := cl.slices[i].DeepCopy()
	j := int(g) % len(s.Endpoints)
	s.Endpoints[j].Addresses = []string{netip.AddrFrom4([4]byte{10, 150 + byte(g>>16), byte(g >> 8), byte(g)}).String()}
	var out *discoveryv1.EndpointSlice
	err := retry(ctx, nil, func(ctx context.Context) error {
		stamp(s)
		var err error
		cl.noteWrite()
		out, err = cl.c.DiscoveryV1().EndpointSlices(namespace).Update(ctx, s, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			// Only the bench writes slices: a conflict means an attempt
			// that timed out was applied. Refresh and write again.
			var cur *discoveryv1.EndpointSlice
			if cur, err = cl.c.DiscoveryV1().EndpointSlices(namespace).Get(ctx, s.Name, metav1.GetOptions{}); err == nil {
				s.ResourceVersion = cur.ResourceVersion
				cl.noteWrite()
				out, err = cl.c.DiscoveryV1().EndpointSlices(namespace).Update(ctx, s, metav1.UpdateOptions{})
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("update endpointslice %s: %w", s.Name, err)
	}
	cl.slices[i] = out
	return nil
}

// churn updates a random service's slice `rate` times per second for d,
// each update in its own goroutine so that a slow API server does not
// lower the rate. It returns how many updates were made.
func (cl *cluster) churn(ctx context.Context, rate float64, d time.Duration) (int, error) {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	end := time.After(d)
	var wg sync.WaitGroup
	var n, failed atomic.Int64
	var firstErr error
	var errOnce sync.Once
	for {
		select {
		case <-tick.C:
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := cl.update(ctx, rand.IntN(len(cl.slices))); err != nil {
					// One lost update does not spoil the phase: it is
					// counted out of the changes, and logged.
					errOnce.Do(func() { firstErr = err })
					failed.Add(1)
					return
				}
				n.Add(1)
			}()
			continue
		case <-end:
		case <-ctx.Done():
		}
		break
	}
	wg.Wait()
	if firstErr != nil {
		logf("churn: %d of %d updates failed, the first with: %v", failed.Load(), n.Load()+failed.Load(), firstErr)
	}
	if n.Load() == 0 {
		return 0, firstErr
	}
	return int(n.Load()), nil
}

// burst makes k updates at once (as fast as `workers` requests in flight
// allow), over distinct services as long as there are enough.
func (cl *cluster) burst(ctx context.Context, k int) error {
	order := rand.Perm(len(cl.slices))
	return parallel(ctx, k, func(ctx context.Context, i int) error {
		return cl.update(ctx, order[i%len(order)])
	})
}

// createServices creates k new Services "new-<i>" with their slices (with
// a trigger time), `rate` per second.
func (cl *cluster) createServices(ctx context.Context, k int, rate float64) error {
	return paced(ctx, k, rate, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("new-%d", i)
		if err := retry(ctx, apierrors.IsAlreadyExists, func(ctx context.Context) error {
			cl.noteWrite()
			_, err := cl.c.CoreV1().Services(namespace).Create(ctx, newService(name), metav1.CreateOptions{})
			return err
		}); err != nil {
			return fmt.Errorf("service %s: %w", name, err)
		}
		addrs := make([]string, endpointsPerService)
		for j := range addrs {
			addrs[j] = netip.AddrFrom4([4]byte{10, 140, byte(i), byte(j + 1)}).String()
		}
		if err := retry(ctx, apierrors.IsAlreadyExists, func(ctx context.Context) error {
			cl.noteWrite()
			_, err := cl.c.DiscoveryV1().EndpointSlices(namespace).Create(ctx, newSlice(name, addrs, "", true), metav1.CreateOptions{})
			return err
		}); err != nil {
			return fmt.Errorf("endpointslice of %s: %w", name, err)
		}
		return nil
	})
}

// deleteServices deletes what createServices created, `rate` per second.
func (cl *cluster) deleteServices(ctx context.Context, k int, rate float64) error {
	return paced(ctx, k, rate, func(ctx context.Context, i int) error {
		name := fmt.Sprintf("new-%d", i)
		if err := retry(ctx, apierrors.IsNotFound, func(ctx context.Context) error {
			cl.noteWrite()
			return cl.c.DiscoveryV1().EndpointSlices(namespace).Delete(ctx, name+"-1", metav1.DeleteOptions{})
		}); err != nil {
			return fmt.Errorf("endpointslice of %s: %w", name, err)
		}
		if err := retry(ctx, apierrors.IsNotFound, func(ctx context.Context) error {
			cl.noteWrite()
			return cl.c.CoreV1().Services(namespace).Delete(ctx, name, metav1.DeleteOptions{})
		}); err != nil {
			return fmt.Errorf("service %s: %w", name, err)
		}
		return nil
	})
}

// paced runs fn(0..k-1) one at a time, `rate` per second.
func paced(ctx context.Context, k int, rate float64, fn func(ctx context.Context, i int) error) error {
	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	for i := range k {
		if err := fn(ctx, i); err != nil {
			return err
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}
