package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/globalv1"
)

func svc(ns, name, ip string) *globalv1.Service {
	return &globalv1.Service{Namespace: ns, Name: name, Type: globalv1.ServiceType_CLUSTER_IP, ClusterIps: []string{ip}}
}

func epSlice(ns, name, service string, ips ...string) *globalv1.EndpointSlice {
	sl := &globalv1.EndpointSlice{Namespace: ns, Name: name, ServiceName: service, AddressType: globalv1.AddressType_IPV4}
	for _, ip := range ips {
		sl.Endpoints = append(sl.Endpoints, &globalv1.Endpoint{Addresses: []string{ip}})
	}
	return sl
}

func revision(s *Store) uint64 { return s.Stats().Revision }

// changesSince returns the changes after rev, or nil and false when the log
// no longer reaches back that far.
func changesSince(s *Store, rev uint64) (out []Change, complete bool) {
	s.View(func(r Reader) {
		complete = r.ChangesSince(rev, func(c Change) { out = append(out, c) })
	})
	return out, complete
}

func sliceNames(s *Store, key string) []string {
	var names []string
	s.View(func(r Reader) {
		for _, sl := range r.EndpointSlices(key) {
			names = append(names, sl.Name)
		}
	})
	slices.Sort(names)
	return names
}

// A reader never sees half a batch: a writer rewrites every service (and its
// slice) in one batch per generation, while readers check that all of them,
// and the revision, agree on the generation. Run with -race.
func TestUpdateIsAtomicForReaders(t *testing.T) {
	const services, generations, readers = 50, 200, 4
	s := NewStore()
	write := func(gen int) {
		s.Update(func(tx *Tx) {
			for i := range services {
				name := fmt.Sprintf("s%d", i)
				tx.SetService(&globalv1.Service{Namespace: "ns", Name: name, HealthCheckNodePort: int32(gen)})
				tx.SetEndpointSlice(&globalv1.EndpointSlice{Namespace: "ns", Name: name + "-1", ServiceName: name,
					Ports: []*globalv1.EndpointPort{{Port: int32(gen)}}})
			}
		})
	}
	write(1)
	var wg sync.WaitGroup
	errs := make(chan error, readers)
	done := make(chan struct{})
	for range readers {
		wg.Go(func() {
			for {
				var err error
				s.View(func(r Reader) {
					gen := r.Service("ns/s0").HealthCheckNodePort
					if uint64(gen) != r.Revision() {
						err = fmt.Errorf("revision %d with generation %d", r.Revision(), gen)
						return
					}
					for i := range services {
						key := Key("ns", fmt.Sprintf("s%d", i))
						sls := r.EndpointSlices(key)
						if g := r.Service(key).HealthCheckNodePort; g != gen {
							err = fmt.Errorf("%s at generation %d, s0 at %d", key, g, gen)
							return
						}
						if len(sls) != 1 || sls[0].Ports[0].Port != gen {
							err = fmt.Errorf("%s's slices %v at generation %d", key, sls, gen)
							return
						}
					}
				})
				if err != nil {
					errs <- err
					return
				}
				select {
				case <-done:
					return
				default:
				}
			}
		})
	}
	for gen := 2; gen <= generations; gen++ {
		write(gen)
	}
	close(done)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := revision(s); got != generations {
		t.Errorf("revision %d after %d changing batches", got, generations)
	}
}

func TestIdenticalWritesMoveNoRevision(t *testing.T) {
	s := NewStore()
	write := func() {
		// New objects each time: equality is by content, not by pointer.
		s.Update(func(tx *Tx) {
			tx.SetService(svc("ns", "a", "10.0.0.1"))
			tx.SetEndpointSlice(epSlice("ns", "a-1", "a", "10.1.0.1"))
			tx.SetNode(&globalv1.Node{Name: "n1", Zone: "z"})
			tx.SetServiceCIDR(&globalv1.ServiceCIDR{Name: "c", Cidrs: []string{"10.0.0.0/16"}})
		})
	}
	write()
	rev := revision(s)
	if rev != 1 {
		t.Fatalf("revision %d after one changing batch", rev)
	}
	update := func(fn func(tx *Tx)) func() { return func() { s.Update(fn) } }
	for _, tc := range []struct {
		name   string
		do     func()
		events uint64
	}{
		{"the same batch again", write, 4},
		{"an identical service", update(func(tx *Tx) { tx.SetService(svc("ns", "a", "10.0.0.1")) }), 1},
		{"an identical slice", update(func(tx *Tx) { tx.SetEndpointSlice(epSlice("ns", "a-1", "a", "10.1.0.1")) }), 1},
		{"an identical node", update(func(tx *Tx) { tx.SetNode(&globalv1.Node{Name: "n1", Zone: "z"}) }), 1},
		{"an identical ServiceCIDR", update(func(tx *Tx) {
			tx.SetServiceCIDR(&globalv1.ServiceCIDR{Name: "c", Cidrs: []string{"10.0.0.0/16"}})
		}), 1},
		{"an empty batch", update(func(*Tx) {}), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.Stats().Events
			tc.do()
			if got := revision(s); got != rev {
				t.Errorf("revision moved from %d to %d", rev, got)
			}
			if ch, _ := changesSince(s, rev); len(ch) != 0 {
				t.Errorf("changes logged: %v", ch)
			}
			if got := s.Stats().Events - before; got != tc.events {
				t.Errorf("%d events counted, want %d", got, tc.events)
			}
		})
	}
}

func TestRevisionMovesOncePerChangingBatch(t *testing.T) {
	s := NewStore()
	s.Update(func(tx *Tx) {
		tx.SetService(svc("ns", "a", "10.0.0.1"))
		tx.SetService(svc("ns", "b", "10.0.0.2"))
		tx.SetEndpointSlice(epSlice("ns", "a-1", "a", "10.1.0.1"))
		tx.SetEndpointSlice(epSlice("ns", "a-2", "a", "10.1.0.2"))
		tx.SetNode(&globalv1.Node{Name: "n1"})
		tx.SetServiceCIDR(&globalv1.ServiceCIDR{Name: "c"})
	})
	if got := revision(s); got != 1 {
		t.Fatalf("revision %d after one batch", got)
	}
	// One entry per changed key, at the batch's revision, in write order.
	want := []Change{{1, ServiceChanged, "ns/a"}, {1, ServiceChanged, "ns/b"}, {1, NodeChanged, "n1"}, {1, ServiceCIDRChanged, "c"}}
	if got, complete := changesSince(s, 0); !complete || !slices.Equal(got, want) {
		t.Fatalf("changes %v (complete %v), want %v", got, complete, want)
	}

	// A batch mixing no-ops and one real change moves the revision by one.
	s.Update(func(tx *Tx) {
		tx.SetService(svc("ns", "a", "10.0.0.1"))
		tx.DeleteService("ns", "unknown")
		tx.SetService(svc("ns", "b", "10.0.0.3"))
	})
	if got := revision(s); got != 2 {
		t.Fatalf("revision %d after a second changing batch", got)
	}
	if got, _ := changesSince(s, 1); !slices.Equal(got, []Change{{2, ServiceChanged, "ns/b"}}) {
		t.Fatalf("changes since 1: %v", got)
	}
	s.View(func(r Reader) {
		if ip := r.Service("ns/b").ClusterIps[0]; ip != "10.0.0.3" {
			t.Errorf("ns/b has cluster IP %s", ip)
		}
	})

	// Every kind of change, one batch each.
	for i, fn := range []func(tx *Tx){
		func(tx *Tx) { tx.SetEndpointSlice(epSlice("ns", "a-1", "a", "10.1.0.9")) },
		func(tx *Tx) { tx.DeleteEndpointSlice("ns", "a-2") },
		func(tx *Tx) { tx.SetNode(&globalv1.Node{Name: "n1", Zone: "z"}) },
		func(tx *Tx) { tx.DeleteNode("n1") },
		func(tx *Tx) { tx.SetServiceCIDR(&globalv1.ServiceCIDR{Name: "c", Cidrs: []string{"10.0.0.0/8"}}) },
		func(tx *Tx) { tx.DeleteServiceCIDR("c") },
		func(tx *Tx) { tx.DeleteService("ns", "a") },
	} {
		s.Update(fn)
		if got, want := revision(s), uint64(3+i); got != want {
			t.Fatalf("write %d: revision %d, want %d", i, got, want)
		}
	}
	s.View(func(r Reader) {
		if r.Service("ns/a") != nil || r.Node("n1") != nil {
			t.Error("deleted objects still there")
		}
		r.ServiceCIDRs(func(c *globalv1.ServiceCIDR) { t.Errorf("deleted ServiceCIDR %v still there", c) })
		if sls := r.EndpointSlices("ns/a"); len(sls) != 1 || sls[0].Endpoints[0].Addresses[0] != "10.1.0.9" {
			t.Errorf("ns/a's slices: %v", sls)
		}
	})
}

func TestDeleteOfUnknownObjectsIsANoOp(t *testing.T) {
	s := NewStore()
	s.Update(func(tx *Tx) { tx.SetService(svc("ns", "a", "10.0.0.1")) })
	s.Update(func(tx *Tx) {
		tx.DeleteService("ns", "b")
		tx.DeleteService("other", "a") // same name, other namespace
		tx.DeleteEndpointSlice("ns", "a")
		tx.DeleteNode("n1")
		tx.DeleteServiceCIDR("c")
	})
	if got := revision(s); got != 1 {
		t.Errorf("revision %d, want 1", got)
	}
	if ch, _ := changesSince(s, 1); len(ch) != 0 {
		t.Errorf("changes logged: %v", ch)
	}
	s.View(func(r Reader) {
		if r.Service("ns/a") == nil {
			t.Error("ns/a was deleted")
		}
	})
}

func TestStatsEventsCountEveryWrite(t *testing.T) {
	s := NewStore()
	s.Update(func(tx *Tx) {
		tx.SetService(svc("ns", "a", "10.0.0.1"))
		tx.SetService(svc("ns", "a", "10.0.0.1")) // no-op
		tx.DeleteService("ns", "x")               // no-op
		tx.SetEndpointSlice(epSlice("ns", "a-1", "a"))
		tx.DeleteEndpointSlice("ns", "x")
		tx.SetNode(&globalv1.Node{Name: "n"})
		tx.DeleteNode("x")
		tx.SetServiceCIDR(&globalv1.ServiceCIDR{Name: "c"})
		tx.DeleteServiceCIDR("x")
	})
	s.Update(func(tx *Tx) { tx.DeleteService("ns", "a") })
	s.MarkSynced()
	if got, want := s.Stats(), (Stats{Events: 10, Revision: 3}); got != want {
		t.Errorf("stats %+v, want %+v", got, want)
	}
}

func TestMarkSyncedMovesTheRevisionOnce(t *testing.T) {
	s := NewStore()
	s.View(func(r Reader) {
		if r.Synced() {
			t.Error("a new store is synced")
		}
	})
	s.MarkSynced()
	s.MarkSynced()
	if got := revision(s); got != 1 {
		t.Errorf("revision %d after MarkSynced twice, want 1", got)
	}
	s.View(func(r Reader) {
		if !r.Synced() {
			t.Error("not synced after MarkSynced")
		}
	})
	// The synced revision logs no change: there is nothing to recompute.
	if ch, complete := changesSince(s, 0); !complete || len(ch) != 0 {
		t.Errorf("changes %v (complete %v)", ch, complete)
	}
}

func TestWait(t *testing.T) {
	canceled := func() context.Context {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		return ctx
	}

	t.Run("does not return before the store is synced, even when content changed", func(t *testing.T) {
		s := NewStore()
		s.Update(func(tx *Tx) { tx.SetService(svc("ns", "a", "10.0.0.1")) })
		if rev, err := s.Wait(canceled(), 0); !errors.Is(err, context.Canceled) {
			t.Fatalf("Wait returned revision %d, %v", rev, err)
		}
	})

	t.Run("returns at once when synced and past the given revision", func(t *testing.T) {
		s := NewStore()
		s.Update(func(tx *Tx) { tx.SetService(svc("ns", "a", "10.0.0.1")) })
		s.MarkSynced()
		// A canceled context does not win over a revision already there.
		if rev, err := s.Wait(canceled(), 1); err != nil || rev != 2 {
			t.Fatalf("Wait: %d, %v; want 2", rev, err)
		}
	})

	t.Run("an empty cluster is woken by MarkSynced", func(t *testing.T) {
		s := NewStore()
		got := make(chan uint64)
		go func() {
			rev, _ := s.Wait(context.Background(), 0)
			got <- rev
		}()
		s.MarkSynced()
		if rev := <-got; rev != 1 {
			t.Fatalf("Wait returned %d, want 1", rev)
		}
	})

	t.Run("returns on the next change", func(t *testing.T) {
		s := NewStore()
		s.MarkSynced()
		got := make(chan uint64)
		go func() {
			rev, _ := s.Wait(context.Background(), 1)
			got <- rev
		}()
		s.Update(func(tx *Tx) { tx.SetService(svc("ns", "a", "10.0.0.1")) })
		if rev := <-got; rev != 2 {
			t.Fatalf("Wait returned %d, want 2", rev)
		}
	})

	t.Run("no-op batches do not end the wait; the context does", func(t *testing.T) {
		s := NewStore()
		s.Update(func(tx *Tx) { tx.SetService(svc("ns", "a", "10.0.0.1")) })
		s.MarkSynced()
		ctx, cancel := context.WithCancel(context.Background())
		type result struct {
			rev uint64
			err error
		}
		got := make(chan result)
		go func() {
			rev, err := s.Wait(ctx, 2)
			got <- result{rev, err}
		}()
		for range 100 {
			s.Update(func(tx *Tx) {
				tx.SetService(svc("ns", "a", "10.0.0.1"))
				tx.DeleteNode("unknown")
			})
		}
		cancel()
		if r := <-got; !errors.Is(r.err, context.Canceled) || r.rev != 0 {
			t.Fatalf("Wait returned %d, %v; want context.Canceled", r.rev, r.err)
		}
	})
}

func TestChangesSince(t *testing.T) {
	t.Run("oldest first, only after the given revision, complete", func(t *testing.T) {
		s := NewStore()
		for i := range 5 {
			s.Update(func(tx *Tx) { tx.SetService(svc("ns", fmt.Sprint(i), "10.0.0.1")) })
		}
		got, complete := changesSince(s, 2)
		want := []Change{{3, ServiceChanged, "ns/2"}, {4, ServiceChanged, "ns/3"}, {5, ServiceChanged, "ns/4"}}
		if !complete || !slices.Equal(got, want) {
			t.Fatalf("changes %v (complete %v), want %v", got, complete, want)
		}
		for _, rev := range []uint64{5, 6, 100} {
			if got, complete := changesSince(s, rev); !complete || len(got) != 0 {
				t.Errorf("at or past the current revision, since %d: %v (complete %v)", rev, got, complete)
			}
		}
	})

	t.Run("incomplete once the log wrapped past the revision, complete for recent ones", func(t *testing.T) {
		s := NewStore()
		s.log = make([]Change, 4) // a small log, to wrap it
		for i := 1; i <= 10; i++ {
			s.Update(func(tx *Tx) { tx.SetNode(&globalv1.Node{Name: fmt.Sprint(i)}) })
		}
		// The log holds revisions 7-10.
		for rev := uint64(0); rev <= 6; rev++ {
			if got, complete := changesSince(s, rev); complete || len(got) != 0 {
				t.Errorf("since %d: %v, complete %v; want incomplete and nothing", rev, got, complete)
			}
		}
		got, complete := changesSince(s, 7)
		want := []Change{{8, NodeChanged, "8"}, {9, NodeChanged, "9"}, {10, NodeChanged, "10"}}
		if !complete || !slices.Equal(got, want) {
			t.Errorf("since 7: %v (complete %v), want %v", got, complete, want)
		}
	})

	t.Run("a batch larger than the log cannot be caught up on", func(t *testing.T) {
		s := NewStore()
		s.log = make([]Change, 4)
		s.Update(func(tx *Tx) { tx.SetNode(&globalv1.Node{Name: "first"}) })
		s.Update(func(tx *Tx) {
			for i := range 6 {
				tx.SetNode(&globalv1.Node{Name: fmt.Sprint(i)})
			}
		})
		if got, complete := changesSince(s, 1); complete {
			t.Errorf("since 1: complete with %v, but 2 of the batch's 6 changes were overwritten", got)
		}
		if got, complete := changesSince(s, 2); !complete || len(got) != 0 {
			t.Errorf("since 2: %v, complete %v", got, complete)
		}
	})

	t.Run("the log wraps many times and stays in order", func(t *testing.T) {
		s := NewStore()
		s.log = make([]Change, 5)
		for i := 1; i <= 23; i++ {
			s.Update(func(tx *Tx) {
				tx.SetService(svc("ns", fmt.Sprint(i), "10.0.0.1"))
				if i%2 == 0 {
					tx.SetNode(&globalv1.Node{Name: fmt.Sprint(i)})
				}
			})
		}
		// The last 5 changes: rev 21 (1), 22 (2), 23 (1); 20's were partly overwritten.
		if _, complete := changesSince(s, 19); complete {
			t.Error("since 19: complete, but revision 20's service change was overwritten")
		}
		got, complete := changesSince(s, 20)
		want := []Change{{21, ServiceChanged, "ns/21"}, {22, ServiceChanged, "ns/22"}, {22, NodeChanged, "22"}, {23, ServiceChanged, "ns/23"}}
		if !complete || !slices.Equal(got, want) {
			t.Errorf("since 20: %v (complete %v), want %v", got, complete, want)
		}
	})
}

func TestEndpointSlicesAreIndexedByService(t *testing.T) {
	s := NewStore()
	s.Update(func(tx *Tx) {
		tx.SetEndpointSlice(epSlice("ns", "web-1", "web", "10.1.0.1"))
		tx.SetEndpointSlice(epSlice("ns", "web-2", "web", "10.1.0.2"))
		tx.SetEndpointSlice(epSlice("other", "web-1", "web", "10.2.0.1")) // same names, other namespace
	})
	if got := sliceNames(s, "ns/web"); !slices.Equal(got, []string{"web-1", "web-2"}) {
		t.Fatalf("ns/web's slices: %v", got)
	}
	if got := sliceNames(s, "other/web"); !slices.Equal(got, []string{"web-1"}) {
		t.Fatalf("other/web's slices: %v", got)
	}

	t.Run("a slice arriving before its service lists the service's key", func(t *testing.T) {
		var keys []string
		s.View(func(r Reader) { r.ServiceKeys(func(k string) { keys = append(keys, k) }) })
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"ns/web", "other/web"}) {
			t.Errorf("service keys %v", keys)
		}
	})

	t.Run("a slice whose service label changes moves, and both services change", func(t *testing.T) {
		rev := revision(s)
		s.Update(func(tx *Tx) { tx.SetEndpointSlice(epSlice("ns", "web-2", "api", "10.1.0.2")) })
		if got := sliceNames(s, "ns/web"); !slices.Equal(got, []string{"web-1"}) {
			t.Errorf("ns/web's slices after the move: %v", got)
		}
		if got := sliceNames(s, "ns/api"); !slices.Equal(got, []string{"web-2"}) {
			t.Errorf("ns/api's slices after the move: %v", got)
		}
		want := []Change{{rev + 1, ServiceChanged, "ns/web"}, {rev + 1, ServiceChanged, "ns/api"}}
		if got, _ := changesSince(s, rev); !slices.Equal(got, want) {
			t.Errorf("changes %v, want %v", got, want)
		}
	})

	t.Run("writing the moved slice again, unchanged, is a no-op", func(t *testing.T) {
		rev := revision(s)
		s.Update(func(tx *Tx) { tx.SetEndpointSlice(epSlice("ns", "web-2", "api", "10.1.0.2")) })
		if got := revision(s); got != rev {
			t.Errorf("revision moved from %d to %d", rev, got)
		}
	})

	t.Run("deleting a moved slice removes it from its new service only", func(t *testing.T) {
		rev := revision(s)
		s.Update(func(tx *Tx) { tx.DeleteEndpointSlice("ns", "web-2") })
		if got := sliceNames(s, "ns/api"); len(got) != 0 {
			t.Errorf("ns/api's slices after delete: %v", got)
		}
		if got := sliceNames(s, "ns/web"); !slices.Equal(got, []string{"web-1"}) {
			t.Errorf("ns/web's slices after delete: %v", got)
		}
		if got, _ := changesSince(s, rev); !slices.Equal(got, []Change{{rev + 1, ServiceChanged, "ns/api"}}) {
			t.Errorf("changes %v", got)
		}
		// A service without slices is no longer listed.
		var keys []string
		s.View(func(r Reader) { r.ServiceKeys(func(k string) { keys = append(keys, k) }) })
		if slices.Contains(keys, "ns/api") {
			t.Errorf("service keys %v still list ns/api", keys)
		}
		// And deleting it again is a no-op.
		s.Update(func(tx *Tx) { tx.DeleteEndpointSlice("ns", "web-2") })
		if got := revision(s); got != rev+1 {
			t.Errorf("deleting again moved the revision to %d", got)
		}
	})

	t.Run("a slice moved away and back within one batch logs each service once", func(t *testing.T) {
		rev := revision(s)
		s.Update(func(tx *Tx) {
			tx.SetEndpointSlice(epSlice("ns", "web-1", "api", "10.1.0.1"))
			tx.SetEndpointSlice(epSlice("ns", "web-1", "web", "10.1.0.1"))
		})
		if got := sliceNames(s, "ns/web"); !slices.Equal(got, []string{"web-1"}) {
			t.Errorf("ns/web's slices: %v", got)
		}
		if got := sliceNames(s, "ns/api"); len(got) != 0 {
			t.Errorf("ns/api's slices: %v", got)
		}
		want := []Change{{rev + 1, ServiceChanged, "ns/web"}, {rev + 1, ServiceChanged, "ns/api"}}
		if got, _ := changesSince(s, rev); !slices.Equal(got, want) {
			t.Errorf("changes %v, want %v", got, want)
		}
	})
}

// BenchmarkUpdateOneSlice is the store's share of one endpoint change in a
// cluster of 10,000 services of 10 endpoints: one slice replaced, compared
// with the old one, logged.
func BenchmarkUpdateOneSlice(b *testing.B) {
	const services, endpoints = 10000, 10
	s := NewStore()
	mkSlice := func(i int, ready bool) *globalv1.EndpointSlice {
		sl := epSlice("ns", fmt.Sprintf("s%d-1", i), fmt.Sprintf("s%d", i))
		for j := range endpoints {
			sl.Endpoints = append(sl.Endpoints, &globalv1.Endpoint{Addresses: []string{fmt.Sprintf("10.%d.%d.%d", i/256, i%256, j)},
				Ready: &ready, NodeName: fmt.Sprintf("node-%d", j)})
		}
		return sl
	}
	s.Update(func(tx *Tx) {
		for i := range services {
			tx.SetService(svc("ns", fmt.Sprintf("s%d", i), "10.0.0.1"))
			tx.SetEndpointSlice(mkSlice(i, true))
		}
	})
	s.MarkSynced()
	versions := []*globalv1.EndpointSlice{mkSlice(services/2, false), mkSlice(services/2, true)}

	b.Run("changed", func(b *testing.B) {
		b.ReportAllocs()
		start := revision(s)
		for i := 0; b.Loop(); i++ {
			s.Update(func(tx *Tx) { tx.SetEndpointSlice(versions[i%2]) })
		}
		if revision(s) == start {
			b.Fatal("no revision moved")
		}
	})
	b.Run("identical", func(b *testing.B) {
		b.ReportAllocs()
		s.Update(func(tx *Tx) { tx.SetEndpointSlice(versions[1]) })
		start := revision(s)
		same := proto.Clone(versions[1]).(*globalv1.EndpointSlice) // equal content, another object, as a source sends it
		for b.Loop() {
			s.Update(func(tx *Tx) { tx.SetEndpointSlice(same) })
		}
		if revision(s) != start {
			b.Fatal("an identical write moved the revision")
		}
	})
}

// A batch that panics (a source's bug, e.g. writing a nil object) and is
// recovered must not leave the store locked, nor leave the writes it made
// before panicking in the store unannounced.
func TestUpdateThatPanicsLeavesTheStoreUsable(t *testing.T) {
	s := NewStore()
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("SetService(nil) did not panic")
			}
		}()
		s.Update(func(tx *Tx) {
			tx.SetService(svc("ns", "a", "10.0.0.1"))
			tx.SetService(nil)
		})
	}()
	if !s.mu.TryLock() {
		t.Fatal("the store is still locked after a batch panicked")
	}
	s.mu.Unlock()
	if got, complete := changesSince(s, 0); !complete || !slices.Equal(got, []Change{{1, ServiceChanged, "ns/a"}}) {
		t.Fatalf("changes %v (complete %v): the write made before the panic is not logged", got, complete)
	}
	s.Update(func(tx *Tx) { tx.SetService(svc("ns", "b", "10.0.0.2")) })
	if got := revision(s); got != 2 {
		t.Fatalf("revision %d, want 2", got)
	}
}

// FuzzStore runs random batches of writes over a few keys against a plain
// model of what the store should hold, and checks after each batch: the
// content (including which service owns which slice), that the revision
// moved by one exactly when the content changed, that the change log names
// every key whose content changed, and the event count.
func FuzzStore(f *testing.F) {
	f.Add([]byte{0, 1, 1, 8, 2, 0, 1, 8, 2, 0, 1, 1, 9, 3, 0, 0, 8})
	f.Add([]byte{2, 3, 1, 2, 3, 1, 2, 7, 2, 8, 3, 3, 0, 4, 1, 1, 5, 1, 1, 6, 2, 2, 7, 2, 0, 9, 8})
	f.Add([]byte{2, 0x10, 1, 8, 2, 0x11, 1, 8, 2, 0x10, 1, 3, 0x11, 0, 8})
	f.Fuzz(func(t *testing.T, data []byte) {
		type sliceState struct {
			owner   string // service key
			variant int32
		}
		var (
			s        = NewStore()
			services = map[string]int32{}      // key -> variant
			slicesOf = map[string]sliceState{} // "ns/slice" -> state
			nodes    = map[string]int32{}
			cidrs    = map[string]int32{}
			events   uint64
			rev      uint64
			synced   bool
			touched  = map[Change]int{} // writes to each key in the current batch
		)
		ns := func(b byte) string { return fmt.Sprintf("ns%d", b>>4&1) }
		name := func(b byte) string { return fmt.Sprintf("o%d", b&3) }
		// content renders the model of one service key, node or CIDR, to
		// compare before and after a batch.
		content := func(c Change) string {
			switch c.Kind {
			case ServiceChanged:
				out := fmt.Sprint(services[c.Key], " ")
				if _, ok := services[c.Key]; !ok {
					out = "- "
				}
				var sls []string
				for k, st := range slicesOf {
					if st.owner == c.Key {
						sls = append(sls, fmt.Sprint(k, "=", st.variant))
					}
				}
				slices.Sort(sls)
				return out + fmt.Sprint(sls)
			case NodeChanged:
				v, ok := nodes[c.Key]
				return fmt.Sprint(v, ok)
			default:
				v, ok := cidrs[c.Key]
				return fmt.Sprint(v, ok)
			}
		}
		allKeys := func() []Change {
			var keys []Change
			for _, n := range []string{"ns0", "ns1"} {
				for i := range 4 {
					keys = append(keys, Change{Kind: ServiceChanged, Key: Key(n, fmt.Sprintf("o%d", i))})
				}
			}
			for i := range 4 {
				keys = append(keys, Change{Kind: NodeChanged, Key: fmt.Sprintf("o%d", i)}, Change{Kind: ServiceCIDRChanged, Key: fmt.Sprintf("o%d", i)})
			}
			return keys
		}
		snapshot := func() map[Change]string {
			m := map[Change]string{}
			for _, k := range allKeys() {
				m[k] = content(k)
			}
			return m
		}

		check := func(before map[Change]string) {
			t.Helper()
			after := snapshot()
			var changed []Change
			for _, k := range allKeys() {
				if before[k] != after[k] {
					changed = append(changed, k)
				}
			}
			st := s.Stats()
			if st.Events != events {
				t.Fatalf("events %d, want %d", st.Events, events)
			}
			if len(changed) > 0 && st.Revision != rev+1 {
				t.Fatalf("content of %v changed, revision %d -> %d", changed, rev, st.Revision)
			}
			if len(changed) == 0 && st.Revision != rev && st.Revision != rev+1 {
				t.Fatalf("revision %d -> %d without a change", rev, st.Revision)
			}
			logged := map[Change]bool{}
			complete := false
			s.View(func(r Reader) {
				complete = r.ChangesSince(rev, func(c Change) {
					if c.Rev != st.Revision {
						t.Fatalf("change %v logged at revision %d, batch at %d", c, c.Rev, st.Revision)
					}
					c.Rev = 0
					if logged[c] {
						t.Fatalf("change %v logged twice in one batch", c)
					}
					logged[c] = true
				})
				for k, v := range services {
					if got := r.Service(k); got == nil || got.HealthCheckNodePort != v {
						t.Fatalf("service %s is %v, want variant %d", k, got, v)
					}
				}
				keys := map[string]bool{}
				r.ServiceKeys(func(k string) {
					if keys[k] {
						t.Fatalf("service key %s listed twice", k)
					}
					keys[k] = true
					if r.Service(k) == nil && len(r.EndpointSlices(k)) == 0 {
						t.Fatalf("service key %s listed with neither service nor slices", k)
					}
				})
				for _, k := range allKeys() {
					if k.Kind != ServiceChanged {
						continue
					}
					_, hasSvc := services[k.Key]
					if r.Service(k.Key) != nil != hasSvc {
						t.Fatalf("service %s present %v, want %v", k.Key, !hasSvc, hasSvc)
					}
					var got []string
					for _, sl := range r.EndpointSlices(k.Key) {
						if sl.ServiceName != k.Key[strings.IndexByte(k.Key, '/')+1:] || sl.Namespace+"/" != k.Key[:strings.IndexByte(k.Key, '/')+1] {
							t.Fatalf("slice %s/%s of service %s listed under %s", sl.Namespace, sl.Name, sl.ServiceName, k.Key)
						}
						got = append(got, fmt.Sprint(Key(sl.Namespace, sl.Name), "=", sl.Ports[0].Port))
					}
					slices.Sort(got)
					if want := after[k][strings.IndexByte(after[k], ' ')+1:]; fmt.Sprint(got) != want {
						t.Fatalf("slices of %s: %v, want %s", k.Key, got, want)
					}
					if (hasSvc || len(got) > 0) != keys[k.Key] {
						t.Fatalf("service key %s listed %v", k.Key, keys[k.Key])
					}
				}
				for k, v := range nodes {
					if got := r.Node(k); got == nil || got.Zone != fmt.Sprint(v) {
						t.Fatalf("node %s is %v, want variant %d", k, got, v)
					}
				}
				n := 0
				r.Nodes(func(*globalv1.Node) { n++ })
				if n != len(nodes) {
					t.Fatalf("%d nodes, want %d", n, len(nodes))
				}
				n = 0
				r.ServiceCIDRs(func(c *globalv1.ServiceCIDR) {
					n++
					if v, ok := cidrs[c.Name]; !ok || c.Cidrs[0] != fmt.Sprint(v) {
						t.Fatalf("ServiceCIDR %v, want variant %d (present %v)", c, v, ok)
					}
				})
				if n != len(cidrs) {
					t.Fatalf("%d ServiceCIDRs, want %d", n, len(cidrs))
				}
				if r.Synced() != synced {
					t.Fatalf("synced %v, want %v", r.Synced(), synced)
				}
			})
			if !complete {
				t.Fatalf("change log incomplete after one batch")
			}
			for _, k := range changed {
				if !logged[k] {
					t.Fatalf("%v changed but was not logged (logged %v)", k, logged)
				}
			}
			for k := range logged {
				// A key written several times in the batch may end where
				// it started (set then delete) and still be logged; a key
				// written once without changing must not be.
				if !slices.Contains(changed, k) && touched[k] < 2 {
					t.Fatalf("%v logged without a change (%d writes)", k, touched[k])
				}
			}
			rev = st.Revision
		}

		before := snapshot()
		touch := func(kind ChangeKind, key string) { touched[Change{Kind: kind, Key: key}]++ }
		var ops []func(tx *Tx)
		flush := func() {
			if len(ops) == 0 {
				return
			}
			s.Update(func(tx *Tx) {
				for _, op := range ops {
					op(tx)
				}
			})
			ops = nil
			check(before)
			before = snapshot()
			clear(touched)
		}
		for len(data) >= 3 {
			op, k, v := data[0], data[1], int32(data[2]%3)
			data = data[3:]
			n, nm := ns(k), name(k)
			switch op % 10 {
			case 0:
				touch(ServiceChanged, Key(n, nm))
				services[Key(n, nm)] = v
				ops = append(ops, func(tx *Tx) {
					tx.SetService(&globalv1.Service{Namespace: n, Name: nm, HealthCheckNodePort: v})
				})
			case 1:
				touch(ServiceChanged, Key(n, nm))
				delete(services, Key(n, nm))
				ops = append(ops, func(tx *Tx) { tx.DeleteService(n, nm) })
			case 2:
				// The slice's name comes from v's high bits: several slices
				// per service, and one slice may move between services.
				sl := fmt.Sprintf("sl%d", data2(k))
				if old, ok := slicesOf[Key(n, sl)]; ok {
					touch(ServiceChanged, old.owner)
				}
				touch(ServiceChanged, Key(n, nm))
				slicesOf[Key(n, sl)] = sliceState{owner: Key(n, nm), variant: v}
				ops = append(ops, func(tx *Tx) {
					tx.SetEndpointSlice(&globalv1.EndpointSlice{Namespace: n, Name: sl, ServiceName: nm,
						Ports: []*globalv1.EndpointPort{{Port: v}}})
				})
			case 3:
				sl := fmt.Sprintf("sl%d", data2(k))
				if old, ok := slicesOf[Key(n, sl)]; ok {
					touch(ServiceChanged, old.owner)
				}
				delete(slicesOf, Key(n, sl))
				ops = append(ops, func(tx *Tx) { tx.DeleteEndpointSlice(n, sl) })
			case 4:
				touch(NodeChanged, nm)
				nodes[nm] = v
				ops = append(ops, func(tx *Tx) { tx.SetNode(&globalv1.Node{Name: nm, Zone: fmt.Sprint(v)}) })
			case 5:
				touch(NodeChanged, nm)
				delete(nodes, nm)
				ops = append(ops, func(tx *Tx) { tx.DeleteNode(nm) })
			case 6:
				touch(ServiceCIDRChanged, nm)
				cidrs[nm] = v
				ops = append(ops, func(tx *Tx) {
					tx.SetServiceCIDR(&globalv1.ServiceCIDR{Name: nm, Cidrs: []string{fmt.Sprint(v)}})
				})
			case 7:
				touch(ServiceCIDRChanged, nm)
				delete(cidrs, nm)
				ops = append(ops, func(tx *Tx) { tx.DeleteServiceCIDR(nm) })
			case 8:
				flush()
				continue
			case 9:
				flush()
				s.MarkSynced()
				if !synced {
					synced = true
					rev++
				}
				if got := revision(s); got != rev {
					t.Fatalf("revision %d after MarkSynced, want %d", got, rev)
				}
				continue
			}
			events++
		}
		flush()
	})
}

// data2 picks a slice name (one of three) from a key byte's bits 2-3.
func data2(k byte) byte { return k >> 2 & 3 % 3 }
