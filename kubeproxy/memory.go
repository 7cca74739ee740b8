package kubeproxy

import (
	"context"

	"k8s.io/klog/v2"

	"github.com/kpng/kpng/backend"
)

// The process's memory policy once a backend runs (RunBackend): the
// collector's percent after the first sync, and the release of a large
// sync's garbage. docs/config.md, "The Go collector", says it for
// operators.

// steadyGCPercent is the collector's GOGC once the first sync is done,
// unless GOGC is set: the heap may then grow to 1.5 times what is live
// between collections, where the default lets it double. The cold start,
// whose garbage is most of what it allocates, keeps the default and its
// speed. After it, a proxy allocates little per change (in the trial of
// docs/performance.md, "The process's memory in the bench", the CPU under
// churn did not rise).
const steadyGCPercent = 50

// steadyGC sets the collector's percent to steadyGCPercent unless the
// environment's GOGC says otherwise.
func steadyGC(ctx context.Context, getenv func(string) (string, bool), set func(int) int) {
	if v, ok := getenv("GOGC"); ok {
		klog.FromContext(ctx).V(2).Info("GOGC set: the collector is left as it says", "GOGC", v)
		return
	}
	set(steadyGCPercent)
	klog.FromContext(ctx).V(2).Info("First sync done: collector percent lowered", "GOGC", steadyGCPercent)
}

// largeSync is the number of services changed in one sync from which the
// sync's garbage is returned to the kernel at once, as a full sync's is.
// Such batches come after the proxy could not keep up: a burst, a pause,
// the API server back after an outage. At 10,000 services, the two nft
// syncs that caught up with 6,000 changes after a 67 s pause (2,828 and
// 2,258 services) grew the RSS from 181 to 338 MiB, where it stayed: the
// heap goal they set was never reached again by one-change syncs.
const largeSync = 1000

// releaseAfterLargeSync returns an OnSync that calls release (the
// runtime's debug.FreeOSMemory) after a successful sync that rewrote or
// read back the whole dataplane, or changed largeSync services or more.
// Such a sync's garbage (at 10,000 services, some 180 MB for nft's cold
// one) grows the heap well past what the process keeps, and the runtime
// returns the difference to the kernel only slowly: without this the RSS
// stayed near the cold sync's peak. A release costs a collection and the
// madvise of the freed pages (42-65 ms at 10,000 services, nft's
// BenchmarkKernel), once per such sync; one-change syncs never pay it.
func releaseAfterLargeSync(release func()) func(backend.SyncResult) {
	return func(res backend.SyncResult) {
		if res.Err == nil && (res.Full || len(res.Changes.Set)+len(res.Changes.Deleted) >= largeSync) {
			release()
		}
	}
}
