package ebpf

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/cilium/ebpf"
)

// WriteTable prints the pinned maps under pinPath as a table: one line per
// frontend with the endpoints of its set, by slot; "outside" frontends are
// those of packets from outside the node, whose SOURCE is masqueraded or
// the client's. It reads the kernel's maps, not kpng's memory, so it shows
// what the programs see (kpng ebpf-maps).
func WriteTable(w io.Writer, pinPath string) error {
	var km kernelMaps
	for _, m := range []struct {
		name string
		dst  **ebpf.Map
	}{{"kpng_services", &km.services}, {"kpng_slots", &km.slots}, {"kpng_members", &km.members}} {
		pm, err := ebpf.LoadPinnedMap(filepath.Join(pinPath, m.name), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			return fmt.Errorf("opening the pinned map %s: %w", m.name, err)
		}
		defer pm.Close()
		*m.dst = pm
	}
	svcs, sets, err := km.Dump()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "FRONTEND\tSET\tCOUNT\tAFFINITY\tSOURCE\tENDPOINTS")
	var errs []error
	for _, f := range sortedFrontends(svcs) {
		v := svcs[f]
		eps := sets[v.Set].Endpoints
		var list []string
		for i := range v.Count {
			if int(i) >= len(eps) || !eps[i].IsValid() {
				list = append(list, "<missing>")
				errs = append(errs, fmt.Errorf("frontend %s: set %d lacks slot %d", f, v.Set, i))
				continue
			}
			list = append(list, eps[i].String())
		}
		what := strings.Join(list, " ")
		if v.Count == 0 {
			what = "(none: refused)"
			if v.Drop {
				what = "(none for this node: dropped, ETIMEDOUT)"
			}
		}
		aff := "-"
		if v.AffinitySec > 0 {
			aff = fmt.Sprintf("%ds", v.AffinitySec)
		}
		// From outside: masqueraded to the node, or the client's kept.
		src := "-"
		if f.Outside {
			src = "client"
			if v.Masquerade {
				src = "masquerade"
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\n", f, v.Set, v.Count, aff, src, what)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return errors.Join(errs...)
}
