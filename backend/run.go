package backend

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"
)

// Feed delivers a node's view to Run. The in-process feed (package local)
// computes it with the brain from a cluster store; the gRPC client (package
// client) receives it from a kpng server.
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
	// MinSyncPeriod is the least time between the end of a sync and the
	// start of the next (kube-proxy's minSyncPeriod, as its v1.36 runner
	// counts it): changes arriving sooner are coalesced. Zero syncs as soon
	// as a change arrives.
	MinSyncPeriod time.Duration
	// ResyncPeriod is how often Sync is called with Changes.Resync, with
	// or without changes, counted from the start of the last Reset or
	// Resync (kube-proxy's syncPeriod): a steady stream of changes does not
	// postpone it. Zero never resyncs.
	ResyncPeriod time.Duration
	// RetryPeriod is the first wait after a failed sync; it doubles on each
	// further failure up to MaxRetryPeriod. Changes arriving meanwhile
	// wait for the retry. Zero means a second.
	RetryPeriod time.Duration
	// MaxRetryPeriod bounds the wait between retries: it is how long a
	// dataplane stays unrepaired, at most, once the kernel accepts the
	// backend's writes again. Zero means ResyncPeriod (or a minute).
	MaxRetryPeriod time.Duration
	// OnQueued, if set, is called when the feed delivers a change, before it
	// is synced (for kube-proxy's last_queued_timestamp and
	// *_changes_pending metrics, and the /healthz staleness check).
	OnQueued func(state *State, changes Changes)
	// OnSync, if set, is called after each sync with its outcome.
	OnSync func(SyncResult)
	// ResyncNow, if set, asks for a Resync at once instead of at the next
	// ResyncPeriod: a backend that watches the kernel sends on it when its
	// rules were changed behind its back, so that the repair takes
	// milliseconds, not a sync period. MinSyncPeriod spaces requested
	// Resyncs from each other (someone rewriting the rules in a loop gets
	// two repairs per MinSyncPeriod), not from the syncs of changes: a
	// repair does not wait out the rate limit of endpoint churn. Before the
	// first sync it is ignored (the first sync writes everything anyway).
	ResyncNow <-chan struct{}
	// LastSyncFull, if set, is asked after each Sync whether that Sync
	// rewrote the whole dataplane, for SyncResult.Full. A backend sets it
	// when it decides within Sync: one that checks the kernel cheaply on a
	// Resync and rewrites only when the check fails, or that turns a
	// partial sync into a full one after a conflict. Without it, a sync is
	// full when it was asked to be (Changes.Reset or Changes.Resync). A
	// sync that put missing rules back must be reported full: the conntrack
	// cleaner (proxyutil/conntrack) then deletes the handshakes that began
	// while they were missing, which NAT would otherwise never see again.
	LastSyncFull func() bool
	// Logger receives Run's log lines; nil means slog.Default(). A line of
	// klog verbosity n is logged at slog.Level(-n), as logr's slog bridge
	// maps it back (so kpng's -v flag keeps its meaning).
	Logger *slog.Logger
}

// SyncResult describes one call of Sync.
type SyncResult struct {
	// State is the state synced (valid during the OnSync call only).
	State    *State
	Revision uint64
	Changes  Changes
	// Full: the sync rewrote the whole dataplane, as Options.LastSyncFull
	// says, or else as asked (Changes.Reset or Changes.Resync).
	Full     bool
	Start    time.Time
	Duration time.Duration
	Err      error
}

// errResyncNow is the cause of a wait ended by Options.ResyncNow.
var errResyncNow = errors.New("resync requested")

// Run drives backend b from feed until ctx ends (returning nil) or the feed
// fails (returning its error). A failing Sync is retried with backoff, with
// Changes.Reset set, while changes keep accumulating; Run never gives up on
// a backend.
func Run(ctx context.Context, feed Feed, b Backend, opts Options) error {
	retry := cmpOr(opts.RetryPeriod, time.Second)
	maxRetry := cmpOr(opts.MaxRetryPeriod, cmpOr(opts.ResyncPeriod, time.Minute))
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}

	var pending queue
	pending.add(Changes{Reset: true})
	var state *State
	var lastEnd time.Time    // of the last sync
	var lastResync time.Time // start of the last successful Reset or Resync
	var retryAt time.Time    // after a failure
	// repairs are the ends of the last two syncs requested on ResyncNow,
	// older first: repairs come at most two per MinSyncPeriod, so that a
	// damage done in two steps (a chain flushed, then deleted) is repaired
	// at once both times, while a writer that rewrites the rules in a loop
	// still gets no more.
	var repairs [2]time.Time
	repair := false // a sync is requested on ResyncNow
	failures := 0
	synced := false // a sync has succeeded

	// next waits for the feed until deadline (none if zero), or a request
	// on ResyncNow (which it records in pending). It reports whether the
	// deadline passed; an error is the feed's or ctx's.
	next := func(deadline time.Time) (bool, error) {
		waitCtx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		if !deadline.IsZero() {
			var cancelDeadline context.CancelFunc
			waitCtx, cancelDeadline = context.WithDeadline(waitCtx, deadline)
			defer cancelDeadline()
		}
		var kicked, watching chan struct{}
		if opts.ResyncNow != nil && state != nil {
			kicked = make(chan struct{})
			watching = make(chan struct{})
			go func() {
				defer close(watching)
				select {
				case <-opts.ResyncNow:
					close(kicked)
					cancel(errResyncNow)
				case <-waitCtx.Done():
				}
			}()
		}
		st, ch, err := feed.Next(waitCtx)
		cancel(nil) // stops the watcher; a request it took is in kicked
		if kicked != nil {
			<-watching
			select {
			case <-kicked:
				pending.flags.Resync, repair = true, true
				log.Log(ctx, levelV(2), "Resync requested by the backend")
			default:
			}
		}
		switch {
		case err == nil:
			state = st
			pending.add(ch)
			if opts.OnQueued != nil {
				opts.OnQueued(st, ch)
			}
			return false, nil
		case ctx.Err() != nil:
			return false, ctx.Err()
		case errors.Is(context.Cause(waitCtx), errResyncNow):
			return false, nil
		case waitCtx.Err() != nil && errors.Is(err, context.DeadlineExceeded):
			return true, nil
		}
		return false, err
	}
	// resyncDue is when the next periodic Resync is due (zero: never).
	resyncDue := func() time.Time {
		if opts.ResyncPeriod <= 0 || lastResync.IsZero() {
			return time.Time{}
		}
		return lastResync.Add(opts.ResyncPeriod)
	}

	for {
		// Wait until there is something to do: a change, or the time of a
		// retry or of a periodic resync.
		if state == nil || pending.empty() {
			deadline := resyncDue()
			if failures > 0 {
				deadline = retryAt
			}
			timedOut, err := next(deadline)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if state == nil {
				continue
			}
			if timedOut && failures == 0 {
				pending.flags.Resync = true
			}
		}

		// Hold the sync until MinSyncPeriod has passed since the last one
		// ended (after a failure: until the retry is due, but for a first
		// failure followed by a request on ResyncNow; for a repair
		// requested on ResyncNow, even one requested meanwhile: since the
		// last repair), coalescing what arrives meanwhile.
		holdUntil := func() time.Time {
			switch {
			case failures == 1 && repair:
				// The backend saw its dataplane changed behind its back
				// since (or while) the sync failed: a sync computed from
				// a listing that changed under it can fail (the first
				// step of a damage done in two, repaired as the second
				// lands). Once, at once.
				return lastEnd
			case failures > 1 && repair:
				// Failing still, and the dataplane changed again behind
				// the backend's back (its own writes do not count): what
				// refused the syncs may be gone (an owner's table that
				// went with its owner, a writer that stopped). Try at
				// once rather than at the backoff's time, but no more
				// often than repairs: two per MinSyncPeriod.
				if due := repairs[0].Add(opts.MinSyncPeriod); due.After(lastEnd) {
					return due
				}
				return lastEnd
			case failures > 0:
				return retryAt
			case repair:
				return repairs[0].Add(opts.MinSyncPeriod)
			}
			return lastEnd.Add(opts.MinSyncPeriod)
		}
		for hold := holdUntil(); time.Until(hold) > 0; hold = holdUntil() {
			if _, err := next(hold); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
		}

		start := time.Now()
		if due := resyncDue(); failures == 0 && !due.IsZero() && !start.Before(due) {
			pending.flags.Resync = true // changes never postpone a resync
		}
		changes := pending.changes()
		res := SyncResult{State: state, Revision: state.Revision, Changes: changes, Start: start}
		res.Err = b.Sync(ctx, state, changes)
		lastEnd = time.Now()
		if repair {
			repairs, repair = [2]time.Time{repairs[1], lastEnd}, false
		}
		res.Duration = lastEnd.Sub(start)
		res.Full = changes.Reset || changes.Resync
		if opts.LastSyncFull != nil {
			res.Full = opts.LastSyncFull()
		}
		if opts.OnSync != nil {
			opts.OnSync(res)
		}
		if res.Err != nil {
			if ctx.Err() != nil {
				return nil
			}
			// Never less than the failed sync took: a backend whose sync
			// is long (a full read-back of a large table) does not spend
			// its time retrying.
			wait := max(min(retry<<min(failures, 16), maxRetry), res.Duration)
			failures++
			log.Error("Sync failed, will retry", "err", res.Err, "revision", state.Revision, "changes", changes.String(), "took", res.Duration, "retryIn", wait)
			pending.reset(Changes{Reset: true})
			retryAt = lastEnd.Add(wait)
			continue
		}
		switch {
		case !synced:
			log.Info("Dataplane synced", "revision", state.Revision, "services", len(state.Services), "took", res.Duration)
		case failures > 0:
			log.Info("Dataplane synced again", "revision", state.Revision, "failures", failures, "took", res.Duration)
		default:
			log.Log(ctx, levelV(2), "Dataplane synced", "revision", state.Revision, "changes", changes.String(), "took", res.Duration)
		}
		if changes.Reset || changes.Resync {
			lastResync = start
		}
		synced = true
		failures = 0
		pending.reset(Changes{})
	}
}

// queue holds what was delivered since the last sync: the flags, and each
// Service's last word (set or deleted). Folding a change in costs what the
// change holds, not what is already pending: a minimum sync period of a
// second under a burst of thousands of changes stays linear.
type queue struct {
	flags Changes             // Reset, Resync, NodeChanged only
	keys  map[ServiceKey]bool // true: set, false: deleted
}

// add folds c, which happened after what q holds, in.
func (q *queue) add(c Changes) {
	q.flags.Reset = q.flags.Reset || c.Reset
	q.flags.Resync = q.flags.Resync || c.Resync
	q.flags.NodeChanged = q.flags.NodeChanged || c.NodeChanged
	if q.flags.Reset {
		clear(q.keys) // a reset re-reads the whole state anyway
		return
	}
	if q.keys == nil {
		q.keys = make(map[ServiceKey]bool, len(c.Set)+len(c.Deleted))
	}
	for _, k := range c.Set {
		q.keys[k] = true
	}
	for _, k := range c.Deleted {
		q.keys[k] = false
	}
}

// empty reports whether nothing changed and nothing is asked.
func (q *queue) empty() bool { return q.flags.Empty() && len(q.keys) == 0 }

// changes returns what q holds as one Changes, its lists sorted.
func (q *queue) changes() Changes {
	out := q.flags
	for k, isSet := range q.keys {
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

// reset empties q, then asks for what c asks.
func (q *queue) reset(c Changes) {
	q.flags = Changes{}
	clear(q.keys)
	q.add(c)
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// levelV is the slog level of klog's verbosity v.
func levelV(v int) slog.Level { return slog.Level(-v) }
