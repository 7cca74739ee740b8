package file

import (
	"bytes"
	"net/netip"
	"os"
	"testing"

	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
)

// FuzzParse feeds arbitrary bytes through the parser, the conversion into
// the cluster model, and the brain: nothing may panic, and whatever comes
// out must be well-formed (every address in the view parses).
func FuzzParse(f *testing.F) {
	if data, err := os.ReadFile("../../examples/cluster.yaml"); err == nil {
		f.Add(data)
	}
	f.Add([]byte(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"a"},"spec":{"clusterIPs":["10.0.0.1","fd00::1"],"ports":[{"port":1,"targetPort":"x"}]}}`))
	f.Add([]byte("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: s, labels: {kubernetes.io/service-name: a}}\naddressType: IPv6\nports: [{name: '', port: 1}]\nendpoints: [{addresses: ['fd00::2'], hints: {forZones: [{name: z}], forNodes: [{name: n}]}}]\n"))
	f.Add([]byte("[{\"kind\":\"List\",\"apiVersion\":\"v1\",\"items\":[null,{}]}]"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, _, err := Parse(bytes.NewReader(data))
		if err != nil {
			return // a read error of the stream itself (e.g. a line too long)
		}
		store := cluster.NewStore()
		(&Source{}).Apply(store, objs)
		store.MarkSynced()
		for _, node := range []string{"", "n", "node-1"} {
			view := brain.NewView(brain.Options{NodeName: node})
			store.View(func(r cluster.Reader) { view.Update(r) })
			for _, se := range view.State().Services {
				if _, err := netip.ParseAddr(se.Service.ClusterIp); err != nil {
					t.Fatalf("view has cluster IP %q", se.Service.ClusterIp)
				}
				for _, ep := range se.Endpoints {
					if _, err := netip.ParseAddr(ep.Ip); err != nil {
						t.Fatalf("view has endpoint IP %q", ep.Ip)
					}
					if !ep.InClusterSet && !ep.InLocalSet {
						t.Fatalf("view lists an endpoint in no set: %v", ep)
					}
				}
			}
		}
	})
}
