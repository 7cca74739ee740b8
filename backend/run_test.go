package backend_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/local"
)

// call is one Sync as a recording backend saw it.
type call struct {
	rev        uint64
	services   []string // keys in the state
	changes    backend.Changes
	start, end time.Time
}

// recorder is a Backend that records its calls and can be made to block or
// fail.
type recorder struct {
	mu    sync.Mutex
	calls []call
	gate  chan struct{} // if set, each Sync waits for a receive
	// entered, if set, is sent on when a Sync starts (before the gate).
	entered chan struct{}
	fail    int           // the next fail calls return an error
	delay   time.Duration // each Sync takes this long
	full    bool          // LastSyncFull's answer, when reporting
	got     chan call
}

func newRecorder() *recorder { return &recorder{got: make(chan call, 100)} }

func (r *recorder) Sync(ctx context.Context, st *backend.State, ch backend.Changes) error {
	if r.entered != nil {
		r.entered <- struct{}{}
	}
	if r.gate != nil {
		select {
		case <-r.gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	c := call{rev: st.Revision, changes: ch, start: time.Now()}
	time.Sleep(r.delay)
	for _, se := range st.Sorted() {
		c.services = append(c.services, backend.KeyOf(se).String())
	}
	r.mu.Lock()
	r.calls = append(r.calls, c)
	failNow := r.fail > 0
	if failNow {
		r.fail--
	}
	r.mu.Unlock()
	c.end = time.Now()
	r.got <- c
	if failNow {
		return errors.New("injected failure")
	}
	return nil
}

func (r *recorder) next(t *testing.T) call {
	t.Helper()
	select {
	case c := <-r.got:
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no Sync within 10s")
		return call{}
	}
}

func service(name string, ips ...string) *globalv1.Service {
	return &globalv1.Service{
		Namespace: "ns", Name: name, Type: globalv1.ServiceType_CLUSTER_IP, ClusterIps: ips,
		Ports: []*globalv1.ServicePort{{Name: "http", Protocol: globalv1.Protocol_TCP, Port: 80, TargetPort: 8080}},
	}
}

func slice(svc, name string, ips ...string) *globalv1.EndpointSlice {
	sl := &globalv1.EndpointSlice{
		Namespace: "ns", Name: name, ServiceName: svc, AddressType: globalv1.AddressType_IPV4,
		Ports: []*globalv1.EndpointPort{{Name: proto.String("http"), Protocol: globalv1.Protocol_TCP, Port: 8080}},
	}
	for _, ip := range ips {
		sl.Endpoints = append(sl.Endpoints, &globalv1.Endpoint{Addresses: []string{ip}})
	}
	return sl
}

// start runs rec from a LocalFeed over store until the test ends.
func start(t *testing.T, store *cluster.Store, b backend.Backend, opts backend.Options) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- backend.Run(ctx, local.NewFeed(store, brain.Options{NodeName: "n1"}), b, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

func TestEmptyClusterIsAView(t *testing.T) {
	store := cluster.NewStore()
	rec := newRecorder()
	start(t, store, rec, backend.Options{})
	store.MarkSynced()
	c := rec.next(t)
	if !c.changes.Reset || len(c.services) != 0 {
		t.Fatalf("first sync of an empty cluster: %+v", c)
	}
}

func TestNothingBeforeTheSourceSynced(t *testing.T) {
	store := cluster.NewStore()
	rec := newRecorder()
	start(t, store, rec, backend.Options{})
	store.Update(func(tx *cluster.Tx) { tx.SetService(service("a", "10.96.0.1")) })
	select {
	case c := <-rec.got:
		t.Fatalf("synced a partial state: %+v", c)
	case <-time.After(50 * time.Millisecond):
	}
	store.Update(func(tx *cluster.Tx) { tx.SetService(service("b", "10.96.0.2")) })
	store.MarkSynced()
	if c := rec.next(t); !slices.Equal(c.services, []string{"ns/a/v4", "ns/b/v4"}) || !c.changes.Reset {
		t.Fatalf("first sync: %+v", c)
	}
}

// While a Sync runs, changes accumulate and arrive as one batch.
func TestSlowBackendGetsCoalescedChanges(t *testing.T) {
	store := cluster.NewStore()
	rec := newRecorder()
	rec.gate, rec.entered = make(chan struct{}), make(chan struct{}, 10)
	start(t, store, rec, backend.Options{})
	store.Update(func(tx *cluster.Tx) {
		tx.SetService(service("a", "10.96.0.1"))
		tx.SetService(service("gone", "10.96.0.9"))
	})
	store.MarkSynced()
	rec.gate <- struct{}{}
	rec.next(t)
	<-rec.entered // the first Sync's

	// The second Sync blocks in the gate while three more revisions land.
	store.Update(func(tx *cluster.Tx) { tx.SetService(service("b", "10.96.0.2")) })
	select { // backend.Run is in Sync with the first change
	case <-rec.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no Sync after a change within 10s")
	}
	store.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(slice("a", "a-1", "10.0.0.1")) })
	store.Update(func(tx *cluster.Tx) { tx.DeleteService("ns", "gone") })
	store.Update(func(tx *cluster.Tx) { tx.SetService(service("c", "10.96.0.3")) })
	rec.gate <- struct{}{}
	first := rec.next(t)
	rec.gate <- struct{}{}
	second := rec.next(t)

	v4 := localv1.IPFamily_IPV4
	all := backend.Merge(first.changes, second.changes)
	if want := []backend.ServiceKey{{"ns", "a", v4}, {"ns", "b", v4}, {"ns", "c", v4}}; !slices.Equal(all.Set, want) {
		t.Errorf("set over both syncs = %v, want %v", all.Set, want)
	}
	if want := []backend.ServiceKey{{"ns", "gone", v4}}; !slices.Equal(all.Deleted, want) {
		t.Errorf("deleted = %v, want %v", all.Deleted, want)
	}
	// The feed coalesces too: four store revisions make at most two view
	// revisions after the first.
	if !slices.Equal(second.services, []string{"ns/a/v4", "ns/b/v4", "ns/c/v4"}) || second.rev > 3 {
		t.Errorf("final state %v at revision %d; want a, b, c at revision 3 or less", second.services, second.rev)
	}
	if first.changes.Reset || second.changes.Reset {
		t.Errorf("a reset without a failure: %+v %+v", first.changes, second.changes)
	}
}

// A failed Sync is retried, with Reset, and with what changed meanwhile.
func TestFailedSyncIsRetriedWithReset(t *testing.T) {
	store := cluster.NewStore()
	rec := newRecorder()
	rec.fail = 2
	results := make(chan backend.SyncResult, 100)
	start(t, store, rec, backend.Options{RetryPeriod: 10 * time.Millisecond, OnSync: func(r backend.SyncResult) { results <- r }})
	store.Update(func(tx *cluster.Tx) { tx.SetService(service("a", "10.96.0.1")) })
	store.MarkSynced()
	rec.next(t)
	store.Update(func(tx *cluster.Tx) { tx.SetService(service("b", "10.96.0.2")) })
	for n := 2; ; n++ {
		c := rec.next(t)
		if !c.changes.Reset {
			t.Fatalf("a retry without Reset: %+v", c)
		}
		if n >= 3 && slices.Contains(c.services, "ns/b/v4") {
			break // the first success after two failures
		}
	}
	for i := 0; ; i++ {
		r := <-results
		if (i < 2) != (r.Err != nil) {
			t.Fatalf("OnSync result %d: err %v; want the first two to fail and the third to succeed", i, r.Err)
		}
		if r.Err == nil {
			break
		}
	}
}

func TestResyncAfterQuietPeriod(t *testing.T) {
	store := cluster.NewStore()
	rec := newRecorder()
	start(t, store, rec, backend.Options{ResyncPeriod: 30 * time.Millisecond})
	store.Update(func(tx *cluster.Tx) { tx.SetService(service("a", "10.96.0.1")) })
	store.MarkSynced()
	rec.next(t)
	c := rec.next(t)
	if !c.changes.Resync || c.changes.Reset || len(c.changes.Set) != 0 || !slices.Equal(c.services, []string{"ns/a/v4"}) {
		t.Fatalf("resync call: %+v", c)
	}
}

// Changes arriving within MinSyncPeriod of a sync wait for it and arrive
// together.
func TestMinSyncPeriodCoalesces(t *testing.T) {
	store := cluster.NewStore()
	rec := newRecorder()
	start(t, store, rec, backend.Options{MinSyncPeriod: 300 * time.Millisecond})
	store.MarkSynced()
	rec.next(t)
	for i := range 5 {
		store.Update(func(tx *cluster.Tx) { tx.SetService(service(fmt.Sprint("s", i), fmt.Sprint("10.96.0.", i+1))) })
		time.Sleep(10 * time.Millisecond)
	}
	c := rec.next(t)
	if len(c.changes.Set) != 5 {
		t.Fatalf("changes within the min sync period were not coalesced: %+v", c.changes)
	}
}

// churn updates service "churn" every period until the test ends.
func churn(t *testing.T, store *cluster.Store, period time.Duration) {
	t.Helper()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(period):
			}
			store.Update(func(tx *cluster.Tx) { tx.SetService(service("churn", fmt.Sprint("10.96.1.", i%250+1))) })
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
}

// A steady stream of changes does not postpone the periodic resync: a
// backend that repairs the kernel on Resync must get the chance to.
func TestResyncIsNotPostponedByChanges(t *testing.T) {
	store := cluster.NewStore()
	rec := newRecorder()
	start(t, store, rec, backend.Options{ResyncPeriod: 200 * time.Millisecond})
	store.MarkSynced()
	first := rec.next(t)
	churn(t, store, 5*time.Millisecond)
	for {
		c := rec.next(t)
		if c.changes.Resync {
			if since := c.start.Sub(first.start); since < 200*time.Millisecond {
				t.Fatalf("resync %v after the first sync, before the resync period", since)
			}
			return
		}
		if c.start.Sub(first.start) > 2*time.Second {
			t.Fatal("no Resync within 2s of churn with a 200ms resync period")
		}
	}
}

// After a failure, changes that keep arriving do not bring the retry
// forward: the backoff holds.
func TestRetryBackoffHoldsUnderChurn(t *testing.T) {
	store := cluster.NewStore()
	rec := newRecorder()
	start(t, store, rec, backend.Options{RetryPeriod: 300 * time.Millisecond})
	store.MarkSynced()
	rec.next(t)
	rec.mu.Lock()
	rec.fail = 1
	rec.mu.Unlock()
	churn(t, store, 5*time.Millisecond)
	failed := rec.next(t)
	retried := rec.next(t)
	if !retried.changes.Reset {
		t.Errorf("the retry is not a Reset: %+v", retried.changes)
	}
	if gap := retried.start.Sub(failed.end); gap < 300*time.Millisecond {
		t.Errorf("retried %v after the failure, under churn; want the 300ms backoff", gap)
	}
}

// MinSyncPeriod runs from the end of a sync, as kube-proxy's runner counts
// it: a slow backend under churn still rests between syncs.
func TestMinSyncPeriodCountsFromTheEndOfASync(t *testing.T) {
	store := cluster.NewStore()
	rec := newRecorder()
	rec.delay = 100 * time.Millisecond
	start(t, store, rec, backend.Options{MinSyncPeriod: 150 * time.Millisecond})
	store.MarkSynced()
	prev := rec.next(t)
	churn(t, store, 5*time.Millisecond)
	for range 3 {
		c := rec.next(t)
		if gap := c.start.Sub(prev.end); gap < 150*time.Millisecond {
			t.Fatalf("a sync started %v after the previous one ended; want at least the 150ms min sync period", gap)
		}
		prev = c
	}
}

// lastSyncFull is the recorder's answer to Options.LastSyncFull.
func (r *recorder) lastSyncFull() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.full
}

// SyncResult.Full is what Options.LastSyncFull reports when the backend
// sets it, and Reset or Resync otherwise.
func TestSyncResultFull(t *testing.T) {
	for _, reports := range []bool{false, true} {
		t.Run(fmt.Sprint("reports=", reports), func(t *testing.T) {
			store := cluster.NewStore()
			rec := newRecorder()
			results := make(chan backend.SyncResult, 10)
			opts := backend.Options{ResyncPeriod: 100 * time.Millisecond, OnSync: func(r backend.SyncResult) { results <- r }}
			if reports {
				opts.LastSyncFull = rec.lastSyncFull
			}
			start(t, store, rec, opts)
			store.MarkSynced()
			rec.next(t)
			if r := <-results; r.Full != !reports {
				t.Errorf("first sync (Reset): Full = %v, want %v", r.Full, !reports)
			}
			rec.mu.Lock()
			rec.full = true
			rec.mu.Unlock()
			store.Update(func(tx *cluster.Tx) { tx.SetService(service("a", "10.96.0.1")) })
			rec.next(t)
			if r := <-results; r.Full != reports || r.Changes.Reset || r.Changes.Resync {
				t.Errorf("incremental sync: Full = %v (changes %v), want %v", r.Full, r.Changes, reports)
			}
		})
	}
}

// opLog is an Incremental backend that logs its calls.
type opLog struct {
	ops  []string
	fail bool
}

func (l *opLog) Reset()                             { l.ops = append(l.ops, "reset") }
func (l *opLog) SetService(s *localv1.Service)      { l.ops = append(l.ops, "set-svc "+s.Name) }
func (l *opLog) DeleteService(k backend.ServiceKey) { l.ops = append(l.ops, "del-svc "+k.Name) }
func (l *opLog) SetEndpoint(k backend.ServiceKey, e *localv1.Endpoint) {
	l.ops = append(l.ops, "set-ep "+k.Name+" "+e.Ip)
}
func (l *opLog) DeleteEndpoint(k backend.ServiceKey, e *localv1.Endpoint) {
	l.ops = append(l.ops, "del-ep "+k.Name+" "+e.Ip)
}
func (l *opLog) Sync() error {
	l.ops = append(l.ops, "sync")
	if l.fail {
		l.fail = false
		return errors.New("injected")
	}
	return nil
}

func TestIncrementalAdapterSendsOnlyTheDifference(t *testing.T) {
	store := cluster.NewStore()
	feed := local.NewFeed(store, brain.Options{NodeName: "n1"})
	log := &opLog{}
	b := backend.FromIncremental(log)
	ctx := context.Background()
	step := func(fn func(tx *cluster.Tx), want ...string) {
		t.Helper()
		if fn != nil {
			store.Update(fn)
		}
		st, ch, err := feed.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if log.ops = nil; b.Sync(ctx, st, ch) != nil && !slices.Contains(want, "sync") {
			t.Fatal("sync failed")
		}
		if !slices.Equal(log.ops, want) {
			t.Errorf("ops = %q\nwant %q", log.ops, want)
		}
	}

	store.Update(func(tx *cluster.Tx) {
		tx.SetService(service("a", "10.96.0.1"))
		tx.SetEndpointSlice(slice("a", "a-1", "10.0.0.1", "10.0.0.2"))
	})
	store.MarkSynced()
	st, ch, _ := feed.Next(ctx)
	ch.Reset = true // as backend.Run does on the first call
	if err := b.Sync(ctx, st, ch); err != nil {
		t.Fatal(err)
	}
	if want := []string{"reset", "set-svc a", "set-ep a 10.0.0.1", "set-ep a 10.0.0.2", "sync"}; !slices.Equal(log.ops, want) {
		t.Errorf("first ops = %q, want %q", log.ops, want)
	}

	// One endpoint replaced: the service is not re-sent.
	step(func(tx *cluster.Tx) { tx.SetEndpointSlice(slice("a", "a-1", "10.0.0.1", "10.0.0.3")) },
		"set-ep a 10.0.0.3", "del-ep a 10.0.0.2", "sync")
	// The service itself changes (a new port), its endpoints do not.
	step(func(tx *cluster.Tx) {
		s := service("a", "10.96.0.1")
		s.Ports[0].Port = 81
		tx.SetService(s)
	}, "set-svc a", "sync")
	// Deleted: its endpoints go first.
	step(func(tx *cluster.Tx) { tx.DeleteService("ns", "a") },
		"del-ep a 10.0.0.1", "del-ep a 10.0.0.3", "del-svc a", "sync")
}

// A request on ResyncNow brings a Resync at once, long before ResyncPeriod,
// and without a change of the view; the view is kept intact.
func TestResyncNow(t *testing.T) {
	store := cluster.NewStore()
	rec := newRecorder()
	kick := make(chan struct{}, 1)
	start(t, store, rec, backend.Options{ResyncPeriod: time.Hour, ResyncNow: kick})
	store.Update(func(tx *cluster.Tx) { tx.SetService(service("a", "10.96.0.1")) })
	store.MarkSynced()
	if c := rec.next(t); !c.changes.Reset {
		t.Fatalf("first sync: %+v", c)
	}
	for i := range 3 {
		kick <- struct{}{}
		c := rec.next(t)
		if !c.changes.Resync || c.changes.Reset || len(c.changes.Set) != 0 || !slices.Equal(c.services, []string{"ns/a/v4"}) {
			t.Fatalf("sync %d after a request: %+v", i, c)
		}
	}
	// A change still arrives as a change after all that.
	store.Update(func(tx *cluster.Tx) { tx.SetService(service("b", "10.96.0.2")) })
	if c := rec.next(t); c.changes.Resync || len(c.changes.Set) != 1 {
		t.Fatalf("change after the requests: %+v", c)
	}
}

// A repair requested on ResyncNow does not wait out MinSyncPeriod after a
// sync of changes (a rate limit meant for churn), but repairs still come at
// most two per MinSyncPeriod, so that someone rewriting the rules in a loop
// does not keep the backend rewriting them too.
func TestResyncNowIsNotHeldByTheSyncOfAChange(t *testing.T) {
	const minSync = 2 * time.Second
	store := cluster.NewStore()
	rec := newRecorder()
	kick := make(chan struct{}, 1)
	start(t, store, rec, backend.Options{MinSyncPeriod: minSync, ResyncPeriod: time.Hour, ResyncNow: kick})
	store.Update(func(tx *cluster.Tx) { tx.SetService(service("a", "10.96.0.1")) })
	store.MarkSynced()
	rec.next(t) // the first sync
	// A repair: at once, however recent the first sync.
	kick <- struct{}{}
	repair := rec.next(t)
	if !repair.changes.Resync {
		t.Fatalf("sync after a request: %+v", repair)
	}
	// A change: held for MinSyncPeriod after the repair.
	store.Update(func(tx *cluster.Tx) { tx.SetService(service("b", "10.96.0.2")) })
	change := rec.next(t)
	if len(change.changes.Set) != 1 || change.start.Sub(repair.end) < minSync-50*time.Millisecond {
		t.Fatalf("change synced %v after the repair, want at least %v: %+v", change.start.Sub(repair.end), minSync, change)
	}
	// A repair right after that change: not held by it. The last repair
	// ended more than MinSyncPeriod ago.
	kick <- struct{}{}
	second := rec.next(t)
	if !second.changes.Resync {
		t.Fatalf("sync after the second request: %+v", second)
	}
	if held := second.start.Sub(change.end); held > minSync/2 {
		t.Errorf("a repair waited %v after a change's sync; want it at once", held)
	}
	// A third repair at once too: two repairs may come within one
	// MinSyncPeriod (a damage done in two steps, such as a chain flushed,
	// then deleted) ...
	kick <- struct{}{}
	third := rec.next(t)
	if held := third.start.Sub(second.end); held > minSync/2 {
		t.Errorf("the second repair of a period waited %v; want it at once", held)
	}
	// ... but not three: the fourth waits until MinSyncPeriod after the
	// second.
	kick <- struct{}{}
	fourth := rec.next(t)
	if held := fourth.start.Sub(second.end); held < minSync-50*time.Millisecond {
		t.Errorf("three repairs within %v, want at most two per %v", held, minSync)
	}
}

// A sync that failed is retried at once, not after its backoff, when the
// backend then reports its dataplane changed behind its back: the change
// may be why it failed (iptables-restore computed from a listing that a
// damage's second step changed under it). Once: a second failure waits
// for the backoff, however many requests come.
func TestFailedSyncIsRetriedAtOnceAfterAChangeBehindTheBackendsBack(t *testing.T) {
	rec, kick := failingAfterFirstSync(t, backend.Options{RetryPeriod: time.Hour, ResyncPeriod: time.Hour}, 2)
	kick <- struct{}{}
	failed := rec.next(t)
	kick <- struct{}{}
	retried := rec.next(t) // within the hour's backoff: at once
	if !retried.changes.Reset {
		t.Errorf("the retry is not a Reset: %+v", retried.changes)
	}
	if gap := retried.start.Sub(failed.end); gap > 5*time.Second {
		t.Errorf("retried %v after the failure and a request; want at once", gap)
	}
	kick <- struct{}{}
	again := rec.next(t) // a second failure, and a change: at once too
	if gap := again.start.Sub(retried.end); gap > 5*time.Second {
		t.Errorf("a second failure retried %v after a request; want at once", gap)
	}
}

// Kicks retry a failing sync at once no more often than repairs run: two
// per MinSyncPeriod. Between, the backoff holds.
func TestKicksRetryAFailingSyncAtTheRepairsRate(t *testing.T) {
	rec, kick := failingAfterFirstSync(t, backend.Options{RetryPeriod: time.Hour, ResyncPeriod: time.Hour, MinSyncPeriod: time.Hour}, 5)
	kick <- struct{}{}
	rec.next(t) // a repair, failing
	kick <- struct{}{}
	rec.next(t) // the first failure's retry on a request: at once, failing
	kick <- struct{}{}
	select {
	case c := <-rec.got:
		t.Fatalf("a third repair within MinSyncPeriod ran: %+v", c)
	case <-time.After(300 * time.Millisecond): // the absence of a sync: nothing to wait on
	}
}

// failingAfterFirstSync runs the driver with opts and a ResyncNow channel,
// the backend's requests, which it returns with the recorder: once the
// first sync is done, the next fails syncs fail.
func failingAfterFirstSync(t *testing.T, opts backend.Options, fails int) (*recorder, chan struct{}) {
	t.Helper()
	store := cluster.NewStore()
	rec := newRecorder()
	kick := make(chan struct{}, 1)
	opts.ResyncNow = kick
	start(t, store, rec, opts)
	store.Update(func(tx *cluster.Tx) { tx.SetService(service("a", "10.96.0.1")) })
	store.MarkSynced()
	rec.next(t) // the first sync
	rec.mu.Lock()
	rec.fail = fails
	rec.mu.Unlock()
	return rec, kick
}
