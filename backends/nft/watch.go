package nft

import (
	"context"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/proxyutil/nfmonitor"
)

// kernelWatch is how the backend hears at once that its tables were
// changed behind its back (a table deleted, a chain flushed, a rule or an
// element deleted): from the kernel's nf_tables notifications. It asks the
// driver for a Resync (backend.Options.ResyncNow), and that Resync reads
// the tables back and repairs them whatever the cheap check would say.
type kernelWatch struct {
	// resyncNow is the driver's ResyncNow.
	resyncNow chan struct{}
	// repair: the next Resync reads the tables back.
	repair atomic.Bool
	// start subscribes (see startAfterFirstSync); nil once done, or when
	// the backend does not watch.
	start func()
}

// startAfterFirstSync subscribes to the kernel's notifications, once,
// after the first successful sync. Subscribed during the cold sync, the
// backend made the kernel build and queue a notification for each of its
// own ~150,000 operations at 10,000 services (one per set element): the
// cold sync took 2.6 times as long, and the socket overflowed, which asked
// for a repair (a read-back of the whole table) right after it
// (docs/performance.md, "Cold start"). Those notifications would all have
// been ignored (they are the backend's own), and the first sync writes
// whatever the table lacks, so nothing is missed until it ends.
func (w *kernelWatch) startAfterFirstSync() {
	if start := w.start; start != nil {
		w.start = nil
		start()
	}
}

// watchKernel subscribes to nf_tables notifications about the backend's
// tables (in the namespace the process runs in) until ctx ends.
func (b *Backend) watchKernel(ctx context.Context) error {
	fams := map[uint8]bool{}
	for _, t := range b.tables {
		if t.fam.model == ipv6.model {
			fams[unix.NFPROTO_IPV6] = true
		} else {
			fams[unix.NFPROTO_IPV4] = true
		}
	}
	match := func(e nfmonitor.Event) bool { return e.Table == b.cfg.Table && fams[e.Family] }
	return nfmonitor.WatchForRepairs(ctx, b.log, "the nftables tables", match,
		func([]nfmonitor.Event) { b.watch.repair.Store(true) }, b.watch.resyncNow)
}
