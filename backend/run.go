package backend

import (
	"context"
	"errors"
	"slices"
	"time"

	"k8s.io/klog/v2"
)

// Feed delivers a node's view to Run. The in-process feed computes it with
// the brain from a cluster store (LocalFeed); the gRPC client receives it.
type Feed interface {
	// Next blocks until the view differs from the one of the previous call
	// (the first call: until there is a complete view), then returns it
	// with what changed. The State is the feed's own: it stays valid until
	// the next call of Next. A Next cancelled through ctx returns ctx's
	// error and may be called again; nothing is lost.
	Next(ctx context.Context) (*State, Changes, error)
}

// Options tune Run.
type Options struct {
	// MinSyncPeriod is the least time between the starts of two syncs
	// (kube-proxy's minSyncPeriod): changes arriving sooner are coalesced.
	// Zero syncs as soon as a change arrives.
	MinSyncPeriod time.Duration
	// ResyncPeriod is the longest time without a sync (kube-proxy's
	// syncPeriod): when it passes, Sync is called with Changes.Resync. Zero
	// never resyncs.
	ResyncPeriod time.Duration
	// RetryPeriod is the first wait after a failed sync; it doubles on each
	// further failure up to ResyncPeriod (or a minute). Zero means a second.
	RetryPeriod time.Duration
	// OnQueued, if set, is called when the feed delivers a change, before it
	// is synced (for kube-proxy's last_queued_timestamp and
	// *_changes_pending metrics, and the /healthz staleness check).
	OnQueued func(state *State, changes Changes)
	// OnSync, if set, is called after each sync with its outcome.
	OnSync func(SyncResult)
}

// SyncResult describes one call of Sync.
type SyncResult struct {
	// State is the state synced (valid during the OnSync call only).
	State    *State
	Revision uint64
	Changes  Changes
	Start    time.Time
	Duration time.Duration
	Err      error
}

// Run drives backend b from feed until ctx ends (returning nil) or the feed
// fails (returning its error). A failing Sync is retried with backoff, with
// Changes.Reset set, while changes keep accumulating; Run never gives up on
// a backend.
func Run(ctx context.Context, feed Feed, b Backend, opts Options) error {
	retry := cmpOr(opts.RetryPeriod, time.Second)
	maxRetry := cmpOr(opts.ResyncPeriod, time.Minute)
	log := klog.FromContext(ctx)

	pending := Changes{Reset: true}
	var state *State
	var lastStart time.Time
	var due time.Time // a retry or a resync
	failures := 0
	synced := false // a sync has succeeded
	for {
		// Wait for a change, or for the due time of a retry or resync.
		waitCtx, cancel := ctx, context.CancelFunc(func() {})
		if !due.IsZero() {
			waitCtx, cancel = context.WithDeadline(ctx, due)
		} else if opts.ResyncPeriod > 0 && state != nil {
			waitCtx, cancel = context.WithDeadline(ctx, lastStart.Add(opts.ResyncPeriod))
		}
		st, ch, err := feed.Next(waitCtx)
		deadline := waitCtx.Err() != nil && ctx.Err() == nil
		cancel()
		switch {
		case err == nil:
			state = st
			pending = merge(pending, ch)
			if opts.OnQueued != nil {
				opts.OnQueued(st, ch)
			}
		case ctx.Err() != nil:
			return nil
		case deadline && errors.Is(err, context.DeadlineExceeded):
			if failures == 0 {
				pending.Resync = true
			}
		default:
			return err
		}
		if state == nil {
			continue
		}

		// Coalesce changes that arrive within MinSyncPeriod of the last sync.
		if next := lastStart.Add(opts.MinSyncPeriod); failures == 0 && time.Until(next) > 0 {
			for {
				waitCtx, cancel := context.WithDeadline(ctx, next)
				st, ch, err := feed.Next(waitCtx)
				cancel()
				if err != nil {
					if ctx.Err() != nil {
						return nil
					}
					if errors.Is(err, context.DeadlineExceeded) {
						break
					}
					return err
				}
				state, pending = st, merge(pending, ch)
				if opts.OnQueued != nil {
					opts.OnQueued(st, ch)
				}
			}
		}

		lastStart = time.Now()
		res := SyncResult{State: state, Revision: state.Revision, Changes: pending, Start: lastStart}
		res.Err = b.Sync(ctx, state, pending)
		res.Duration = time.Since(lastStart)
		if opts.OnSync != nil {
			opts.OnSync(res)
		}
		if res.Err != nil {
			if ctx.Err() != nil {
				return nil
			}
			wait := min(retry<<min(failures, 16), maxRetry)
			failures++
			log.Error(res.Err, "Sync failed, will retry", "revision", state.Revision, "changes", pending.String(), "retryIn", wait)
			pending = Changes{Reset: true}
			due = time.Now().Add(wait)
			continue
		}
		switch {
		case !synced:
			log.Info("Dataplane synced", "revision", state.Revision, "services", len(state.Services), "took", res.Duration)
		case failures > 0:
			log.Info("Dataplane synced again", "revision", state.Revision, "failures", failures)
		default:
			log.V(2).Info("Dataplane synced", "revision", state.Revision, "changes", pending.String(), "took", res.Duration)
		}
		synced = true
		failures = 0
		due = time.Time{}
		pending = Changes{}
	}
}

// merge folds the changes b that happened after a into one Changes.
func merge(a, b Changes) Changes {
	out := Changes{Reset: a.Reset || b.Reset, Resync: a.Resync || b.Resync, NodeChanged: a.NodeChanged || b.NodeChanged}
	if out.Reset {
		return out // a reset re-reads the whole state anyway
	}
	set := make(map[ServiceKey]bool, len(a.Set)+len(b.Set))
	for _, k := range a.Set {
		set[k] = true
	}
	for _, k := range a.Deleted {
		set[k] = false
	}
	for _, k := range b.Set {
		set[k] = true
	}
	for _, k := range b.Deleted {
		set[k] = false
	}
	for k, isSet := range set {
		if isSet {
			out.Set = append(out.Set, k)
		} else {
			out.Deleted = append(out.Deleted, k)
		}
	}
	slices.SortFunc(out.Set, ServiceKey.Compare)
	slices.SortFunc(out.Deleted, ServiceKey.Compare)
	return out
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}
