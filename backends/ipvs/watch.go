package ipvs

import (
	"context"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"
)

// watchDummy asks the driver for a Resync (on resyncNow) as soon as
// kube-ipvs0 is deleted behind kpng's back: removing kube-proxy's
// leftovers (kpng's --remove-kube-proxy-rules, kpng cleanup) deletes it
// and clears IPVS. The Resync's check then finds the virtual servers or
// addresses missing and rewrites everything, within --min-sync-period
// rather than a --sync-period. IPVS itself sends no notification of a
// change. It stops when ctx ends.
func watchDummy(ctx context.Context, resyncNow chan<- struct{}) error {
	updates := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	context.AfterFunc(ctx, func() { close(done) })
	log := klog.FromContext(ctx)
	err := netlink.LinkSubscribeWithOptions(updates, done, netlink.LinkSubscribeOptions{
		ErrorCallback: func(err error) { log.Error(err, "Watching network interfaces") },
	})
	if err != nil {
		return err
	}
	go func() {
		for u := range updates {
			if u.Header.Type != unix.RTM_DELLINK || u.Attrs().Name != DummyInterface {
				continue
			}
			log.Info("kube-ipvs0 was deleted, repairing")
			select {
			case resyncNow <- struct{}{}:
			default: // one is pending already
			}
		}
	}()
	return nil
}
