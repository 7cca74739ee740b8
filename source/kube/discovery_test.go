package kube

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// ServiceCIDRs are watched only when the API server serves them: an older
// server (no networking.k8s.io/v1 servicecidrs, or no such group version at
// all) means no ServiceCIDRs, not an error.
func TestServiceCIDRDiscovery(t *testing.T) {
	for _, tc := range []struct {
		name      string
		resources []string // nil: the group version is not served (404)
		status    int
		want      bool
		wantErr   bool
	}{
		{name: "served (Kubernetes 1.33+)", resources: []string{"ingresses", "servicecidrs", "networkpolicies"}, want: true},
		{name: "group version without servicecidrs", resources: []string{"ingresses", "networkpolicies"}},
		{name: "group version not served", status: http.StatusNotFound},
		{name: "server error", status: http.StatusInternalServerError, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/apis/networking.k8s.io/v1" {
					http.NotFound(w, r)
					return
				}
				if tc.status != 0 {
					http.Error(w, "no", tc.status)
					return
				}
				list := metav1.APIResourceList{GroupVersion: "networking.k8s.io/v1"}
				for _, r := range tc.resources {
					list.APIResources = append(list.APIResources, metav1.APIResource{Name: r, Kind: r, Verbs: []string{"list", "watch"}})
				}
				w.Header().Set("Content-Type", "application/json")
				_ = json.NewEncoder(w).Encode(list)
			}))
			defer srv.Close()
			dc, err := discovery.NewDiscoveryClientForConfig(&rest.Config{Host: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			got, err := servesServiceCIDRs(dc)
			if (err != nil) != tc.wantErr {
				t.Fatalf("error %v, want error: %v", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("serves ServiceCIDRs: %v, want %v", got, tc.want)
			}
		})
	}
}
