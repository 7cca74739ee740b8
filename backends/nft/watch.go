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
}

// watchKernel subscribes to nf_tables notifications about the backend's
// tables (in the namespace the process runs in) until ctx ends.
func (b *Backend) watchKernel(ctx context.Context) error {
	w, err := nfmonitor.Open()
	if err != nil {
		return err
	}
	fams := map[uint8]bool{}
	for _, t := range b.tables {
		if t.fam.model == ipv6.model {
			fams[unix.NFPROTO_IPV6] = true
		} else {
			fams[unix.NFPROTO_IPV4] = true
		}
	}
	match := func(e nfmonitor.Event) bool { return e.Table == b.cfg.Table && fams[e.Family] }
	go func() {
		defer w.Close()
		err := w.Run(ctx, match, func(evs []nfmonitor.Event) {
			first := "notifications lost"
			if len(evs) > 0 {
				first = evs[0].String()
			}
			b.log.Info("The nftables table was changed behind kpng's back; repairing it now", "changes", len(evs), "first", first)
			b.watch.repair.Store(true)
			select {
			case b.watch.resyncNow <- struct{}{}:
			default: // a request is pending already
			}
		})
		if err != nil {
			b.log.Error(err, "Watching the nftables tables stopped; repairs wait for the periodic check")
		}
	}()
	return nil
}
