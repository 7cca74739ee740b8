package kube

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/cluster"
)

// fakeAPI is the least of an API server that client-go's informers need:
// an empty list of Services, EndpointSlices and Nodes, watches that stay
// open and send nothing, and ServiceCIDRs only once served is set (until
// then, 404, as a Kubernetes older than 1.33 answers). A real kube-apiserver
// v1.36 cannot be started without ServiceCIDRs, so this fast layer is the
// only way to test an older one.
type fakeAPI struct {
	served     atomic.Bool
	cidrLists  atomic.Int32 // ServiceCIDR lists answered 404
	watchLists atomic.Int32
}

func (f *fakeAPI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	reply := func(code int, obj any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(obj)
	}
	if strings.HasSuffix(r.URL.Path, "/servicecidrs") && !f.served.Load() {
		if q.Get("watch") == "" {
			f.cidrLists.Add(1)
		}
		reply(http.StatusNotFound, apierrors.NewNotFound(schema.GroupResource{}, "").Status())
		return
	}
	if q.Get("watch") != "" {
		if q.Get("sendInitialEvents") == "true" {
			// Like a server without streaming lists: client-go falls
			// back to LIST then WATCH.
			f.watchLists.Add(1)
			reply(http.StatusBadRequest, apierrors.NewBadRequest("no watch-list here").Status())
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		return
	}
	meta := metav1.ListMeta{ResourceVersion: "1"}
	switch {
	case strings.HasSuffix(r.URL.Path, "/services"):
		reply(http.StatusOK, corev1.ServiceList{TypeMeta: metav1.TypeMeta{Kind: "ServiceList", APIVersion: "v1"}, ListMeta: meta})
	case strings.HasSuffix(r.URL.Path, "/endpointslices"):
		reply(http.StatusOK, discoveryv1.EndpointSliceList{TypeMeta: metav1.TypeMeta{Kind: "EndpointSliceList", APIVersion: "discovery.k8s.io/v1"}, ListMeta: meta})
	case strings.HasSuffix(r.URL.Path, "/nodes"):
		reply(http.StatusOK, corev1.NodeList{TypeMeta: metav1.TypeMeta{Kind: "NodeList", APIVersion: "v1"}, ListMeta: meta})
	case strings.HasSuffix(r.URL.Path, "/servicecidrs"):
		reply(http.StatusOK, networkingv1.ServiceCIDRList{
			TypeMeta: metav1.TypeMeta{Kind: "ServiceCIDRList", APIVersion: "networking.k8s.io/v1"}, ListMeta: meta,
			Items: []networkingv1.ServiceCIDR{{
				ObjectMeta: metav1.ObjectMeta{Name: "kubernetes", ResourceVersion: "1"},
				Spec:       networkingv1.ServiceCIDRSpec{CIDRs: []string{"10.96.0.0/16"}},
			}},
		})
	default:
		http.NotFound(w, r)
	}
}

// Against a server that does not serve ServiceCIDRs, the first view comes
// without them, and they arrive without a restart once the server serves
// them (an upgrade); the 404s are logged once.
func TestServiceCIDRsOfAnOlderServer(t *testing.T) {
	api := &fakeAPI{}
	srv := httptest.NewServer(api)
	defer srv.Close()

	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.Verbosity(0), ktesting.BufferLogs(true)))
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	store := cluster.NewStore()
	src := &Source{Config: &rest.Config{Host: srv.URL, ContentConfig: rest.ContentConfig{ContentType: "application/json"}}, NodeName: "node-1"}
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, store) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	cidrs := func() (out []string) {
		store.View(func(r cluster.Reader) {
			r.ServiceCIDRs(func(c *globalv1.ServiceCIDR) { out = append(out, c.Name) })
		})
		return out
	}
	waitFor(t, "the first view", func() bool { return src.Status().Synced })
	if got := cidrs(); len(got) != 0 {
		t.Fatalf("service CIDRs %v from a server that serves none", got)
	}
	// More than one 404 before the upgrade: the log must not follow them.
	waitFor(t, "a second list of ServiceCIDRs", func() bool { return api.cidrLists.Load() >= 2 })
	api.served.Store(true)
	waitFor(t, "the ServiceCIDRs once served", func() bool { return slices.Equal(cidrs(), []string{"kubernetes"}) })

	var logged []string
	want := []string{
		"The API server does not serve this resource (Kubernetes older than 1.33?); the view has none until it does",
		"Synced with the API server",
		"The API server serves ServiceCIDRs now; they are in the view",
	}
	waitFor(t, "the log of the upgrade", func() bool {
		logged = logged[:0]
		for _, e := range logger.GetSink().(ktesting.Underlier).GetBuffer().Data() {
			logged = append(logged, e.Message)
		}
		return len(logged) >= len(want)
	})
	if !slices.Equal(logged, want) {
		t.Errorf("logged %q, want %q", logged, want)
	}
	if api.watchLists.Load() == 0 {
		t.Error("no streaming list was tried: the fake does not test client-go's fallback")
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not reached after 30s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
