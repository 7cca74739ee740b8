package nft

import (
	"context"
	"errors"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/kpng/kpng/backend"
)

// refusing fails every transaction, as a kernel refusing it would.
type refusing struct{ *knftables.Fake }

func (refusing) Run(context.Context, *knftables.Transaction) error {
	return errors.New("refused")
}

// TestKernelWatchStartsAfterTheFirstSync: the backend subscribes to the
// kernel's notifications once its first sync has succeeded, not before (a
// failed first sync does not subscribe), and only once.
func TestKernelWatchStartsAfterTheFirstSync(t *testing.T) {
	fake := knftables.NewFake(knftables.IPv4Family, "kpng")
	empty := func(context.Context) (*snapshot, error) { return newSnapshot(), nil }
	tb := newTable(ipv4, refusing{fake}, empty)
	b := NewBackend(testConfig(), tb)
	started := 0
	b.watch.start = func() { started++ }
	st := benchState(3, 2)
	ctx := context.Background()

	if err := b.Sync(ctx, st, backend.Changes{Reset: true}); err == nil {
		t.Fatal("the refused sync succeeded")
	}
	if started != 0 {
		t.Fatalf("subscribed after a failed first sync (%d times)", started)
	}
	tb.nft = discard{fake}
	for range 3 {
		if err := b.Sync(ctx, st, backend.Changes{Reset: true}); err != nil {
			t.Fatal(err)
		}
	}
	if started != 1 {
		t.Fatalf("subscribed %d times over three successful syncs, want once", started)
	}
}
