package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"time"
)

// oneChangeSyncs are a kpng log's syncs that applied exactly one changed
// Service and nothing else, as the backend driver logs them at -v=2
// (backend/run.go): `"Dataplane synced" revision=12 changes="reset=false
// resync=false node=false set=1 deleted=0" took="412.6µs"`.
var oneChangeSync = regexp.MustCompile(`"Dataplane synced".* changes="reset=false resync=false node=false set=1 deleted=0" took="?([^" ]+)"?`)

// changeSynced matches a sync that applied one Service's change or more.
var changeSynced = regexp.MustCompile(`"Dataplane synced".* changes="[^"]* set=[1-9]`)

// parseOneChangeSyncs returns the "took" of every sync of r that applied
// exactly one changed Service.
func parseOneChangeSyncs(r io.Reader) ([]time.Duration, error) {
	var out []time.Duration
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := oneChangeSync.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		d, err := time.ParseDuration(m[1])
		if err != nil {
			return nil, fmt.Errorf("sync duration %q: %w", m[1], err)
		}
		out = append(out, d)
	}
	return out, sc.Err()
}

// summarizeOneChanges turns the syncs' durations into a OneChangeResult.
func summarizeOneChanges(changes int, took []time.Duration) *OneChangeResult {
	r := &OneChangeResult{Changes: changes, Syncs: len(took)}
	if len(took) == 0 {
		return r
	}
	s := slices.Clone(took)
	slices.Sort(s)
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	ms := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }
	r.P50Ms, r.P99Ms = ms(quantileSorted(s, 0.5)), ms(quantileSorted(s, 0.99))
	r.MeanMs, r.MaxMs = ms(sum)/float64(len(s)), ms(s[len(s)-1])
	return r
}

// oneChanges updates k distinct Services' slices, one endpoint each, one
// at a time, at most rate per second, waits until p caught up, and reads
// from p's log what each sync that applied one of them took. Each change
// must reach the proxy alone: the next one waits for p's sync of it (a
// change made during a sync is applied with the next one) and for 1/rate,
// which leaves room for p's minimum sync period (singlePacing).
func oneChanges(ctx context.Context, cfg *config, cl *cluster, p *proxy, k int, rate float64) (*OneChangeResult, error) {
	offset, err := fileSize(p.logPath)
	if err != nil {
		return nil, err
	}
	order := rand.Perm(len(cl.slices))
	gap := time.Duration(float64(time.Second) / rate)
	for i := range k {
		next := time.Now().Add(gap)
		synced := p.nextLine(changeSynced)
		if err := cl.update(ctx, order[i%len(order)]); err != nil {
			return nil, err
		}
		select {
		case <-synced:
		case <-time.After(cfg.drainTimeout):
			return nil, fmt.Errorf("%s: single change %d of %d: no line matching %q in its log within %v",
				p.kind.Name, i+1, k, changeSynced, cfg.drainTimeout)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		select {
		case <-time.After(time.Until(next)):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	caught := drain(ctx, cfg, []*proxy{p}, cl.lastWriteStart(), time.Now(), nil)
	if caught[0].at.IsZero() {
		return nil, fmt.Errorf("%s did not apply the single changes within %v", p.kind.Name, cfg.drainTimeout)
	}
	f, err := os.Open(p.logPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil, err
	}
	took, err := parseOneChangeSyncs(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", p.logPath, err)
	}
	r := summarizeOneChanges(k, took)
	r.LoadDuring = loadAvg()[0]
	return r, nil
}

// singleStep bounds how long one proxy's single changes take when its
// minimum sync period forces them apart (besides the syncs' own time).
const singleStep = 30 * time.Second

// singlePacing returns how many single changes to make, and at what rate,
// for a proxy with the minimum sync period minSync: k at rate if 1/rate
// is longer than that period, else (kpng-iptables' 1 s, which would hold
// each change anyway) changes spaced 1.25 x minSync, at most what fits in
// singleStep (and at least 10).
func singlePacing(k int, rate float64, minSync time.Duration) (int, float64) {
	gap := 5 * minSync / 4
	if rate <= 0 || time.Duration(float64(time.Second)/rate) >= gap {
		return k, rate
	}
	return min(k, max(10, int(singleStep/gap))), float64(time.Second) / float64(gap)
}

func fileSize(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}
