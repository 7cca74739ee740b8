package backend_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/local"
)

// BenchmarkLocalFeedOneEndpointChange10kServices is the in-process path of
// one EndpointSlice update at 10,000 services x 10 endpoints: store write,
// brain recompute of that service, and the feed's state and changes, as a
// backend receives them.
func BenchmarkLocalFeedOneEndpointChange10kServices(b *testing.B) {
	store := cluster.NewStore()
	store.Update(func(tx *cluster.Tx) {
		for i := range 10000 {
			name := fmt.Sprint("svc-", i)
			tx.SetService(service(name, fmt.Sprintf("10.96.%d.%d", i/256, i%256)))
			var ips []string
			for j := range 10 {
				ips = append(ips, fmt.Sprintf("10.%d.%d.%d", 1+j, i/256, i%256))
			}
			tx.SetEndpointSlice(slice(name, name+"-abcde", ips...))
		}
	})
	store.MarkSynced()
	feed := local.NewFeed(store, brain.Options{NodeName: "n1"})
	ctx := context.Background()
	if _, _, err := feed.Next(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		ips := []string{"10.1.0.7"}
		if i%2 == 0 {
			ips = append(ips, "10.2.0.7")
		}
		store.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(slice("svc-7", "svc-7-abcde", ips...)) })
		_, ch, err := feed.Next(ctx)
		if err != nil || len(ch.Set) != 1 {
			b.Fatalf("changes %v, err %v", ch, err)
		}
	}
}
