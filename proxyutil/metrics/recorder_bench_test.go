package metrics

import (
	"fmt"
	"testing"
	"time"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// BenchmarkRecorderOneChange: the hooks' cost for a one-endpoint change in
// a view of 10,000 services (it must not grow with the view).
func BenchmarkRecorderOneChange(b *testing.B) {
	Register(ModeNFTables)
	v4 := localv1.IPFamily_IPV4
	st := backend.NewState("n1")
	for i := range 10000 {
		name := fmt.Sprintf("s%d", i)
		st.Services[key(name, v4)] = entry(name, v4, localv1.TrafficPolicy_LOCAL, time.Now(), ep("10.1.0.1", false), ep("10.1.0.2", true))
	}
	r := NewRecorder(ModeNFTables, v4)
	r.OnQueued(st, backend.Changes{Reset: true})
	r.OnSync(backend.SyncResult{State: st, Changes: backend.Changes{Reset: true}})
	k := key("s42", v4)
	ch := backend.Changes{Set: []backend.ServiceKey{k}}
	b.ResetTimer()
	for i := range b.N {
		st.Services[k] = entry("s42", v4, localv1.TrafficPolicy_LOCAL, time.Now(), ep("10.1.0.1", false), ep(fmt.Sprintf("10.1.%d.%d", i/250%250, i%250), i%2 == 0))
		r.OnQueued(st, ch)
		r.OnSync(backend.SyncResult{State: st, Changes: ch})
	}
}
