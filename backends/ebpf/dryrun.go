package ebpf

import (
	"context"
	"fmt"
	"io"

	"github.com/kpng/kpng/backend"
)

// dryRun is --dry-run: the dataplane writes to FakeMaps (which start
// empty: nothing is loaded and no pinned map is read, so the first sync
// prints every entry) and each sync prints the map operations it made,
// one a line, e.g. "put-service 10.96.0.10:53/udp set=1 count=2".
type dryRun struct {
	d    *Dataplane
	fake *FakeMaps
	out  io.Writer
}

// Sync implements backend.Backend.
func (r *dryRun) Sync(ctx context.Context, st *backend.State, ch backend.Changes) error {
	from := len(r.fake.Ops)
	err := r.d.Sync(ctx, st, ch)
	ops := r.fake.Ops[from:]
	fmt.Fprintf(r.out, "# sync: %d map operations\n", len(ops))
	for _, op := range ops {
		fmt.Fprintln(r.out, op)
	}
	r.fake.Ops = r.fake.Ops[:0] // a long dry run does not keep them all
	return err
}
