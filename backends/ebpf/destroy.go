package ebpf

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// SocketDestroyer destroys the sockets of stale flows (StaleFlow): the
// Dataplane calls it after a sync that left some.
type SocketDestroyer interface {
	// DestroySockets destroys the sockets of flows and returns how many
	// it destroyed.
	DestroySockets(ctx context.Context, flows []StaleFlow) (int, error)
}

// Destroyer is SocketDestroyer with the iterator programs of
// bpf/destroy.c (bpf_sock_destroy, Linux 6.5+): it writes the flows to a
// map the programs read, runs them in every network namespace of the
// processes of the cgroup the socket programs serve (an iterator walks
// the sockets of the namespace it is opened in), and empties the map.
type Destroyer struct {
	progs  []*ebpf.Program // UDP, then TCP if asked
	stale  *ebpf.Map
	iters  []*link.Iter // one per program
	cgroup string
}

// NewDestroyer loads the iterator programs on o's reverse-translation map
// (the socket programs' record of which socket they connected where) for
// the sockets of cgroup's processes. With tcp, TCP sockets are destroyed
// too (kube-proxy leaves TCP flows alone; see docs/ebpf.md). It fails on
// a kernel without bpf_sock_destroy.
func NewDestroyer(o *Objects, cgroup string, tcp bool) (*Destroyer, error) {
	spec, err := loadDestroy()
	if err != nil {
		return nil, err
	}
	opts := &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{destroyMapKpngRevnat: o.objs.KpngRevnat}}
	var objs struct {
		UDP   *ebpf.Program `ebpf:"kpng_destroy_udp"`
		Stale *ebpf.Map     `ebpf:"kpng_stale"`
	}
	var tcpObjs struct {
		TCP *ebpf.Program `ebpf:"kpng_destroy_tcp"`
	}
	// LoadAndAssign loads only what it assigns: the TCP program is loaded
	// (and verified) only when asked, on the UDP one's map of stale flows.
	err = spec.LoadAndAssign(&objs, opts)
	if err == nil && tcp {
		opts.MapReplacements[destroyMapKpngStale] = objs.Stale
		if err = spec.LoadAndAssign(&tcpObjs, opts); err != nil {
			objs.UDP.Close()
			objs.Stale.Close()
		}
	}
	if err != nil {
		return nil, fmt.Errorf("loading the socket-destroy programs (bpf_sock_destroy needs Linux 6.5+): %w", err)
	}
	d := &Destroyer{progs: []*ebpf.Program{objs.UDP}, stale: objs.Stale, cgroup: cgroup}
	if tcp {
		d.progs = append(d.progs, tcpObjs.TCP)
	}
	for _, p := range d.progs {
		it, err := link.AttachIter(link.IterOptions{Program: p})
		if err != nil {
			d.Close()
			return nil, fmt.Errorf("attaching the socket iterator %s: %w", p, err)
		}
		d.iters = append(d.iters, it)
	}
	return d, nil
}

// Close releases the programs and the iterators' links.
func (d *Destroyer) Close() error {
	var errs []error
	for _, it := range d.iters {
		errs = append(errs, it.Close())
	}
	for _, p := range d.progs {
		errs = append(errs, p.Close())
	}
	d.iters, d.progs = nil, nil
	return errors.Join(append(errs, d.stale.Close())...)
}

func staleKey(f StaleFlow) destroyStaleKey {
	return destroyStaleKey{
		Svc:   destroyEndpoint{Addr: addrKey(f.Frontend.Addr), Port: portKey(f.Frontend.Port)},
		Ep:    destroyEndpoint{Addr: addrKey(f.Endpoint.Addr()), Port: portKey(f.Endpoint.Port())},
		Proto: f.Frontend.Proto,
	}
}

// DestroySockets implements SocketDestroyer. A namespace that cannot be
// entered (its last process ended meanwhile) is skipped; other failures
// are returned after every namespace was tried.
func (d *Destroyer) DestroySockets(ctx context.Context, flows []StaleFlow) (int, error) {
	if len(flows) == 0 {
		return 0, nil
	}
	// Only these flows: what an earlier run could not delete goes first.
	if err := clearStale(d.stale); err != nil {
		return 0, fmt.Errorf("emptying the stale flows: %w", err)
	}
	keys := make([]destroyStaleKey, len(flows))
	vals := make([]uint8, len(flows))
	for i, f := range flows {
		keys[i] = staleKey(f)
	}
	if _, err := d.stale.BatchUpdate(keys, vals, nil); err != nil {
		return 0, fmt.Errorf("writing the stale flows: %w", err)
	}
	n, err := d.destroy(ctx)
	if derr := batchDelete(d.stale, keys); derr != nil {
		err = errors.Join(err, fmt.Errorf("deleting the stale flows: %w", derr))
	}
	return n, err
}

func (d *Destroyer) destroy(ctx context.Context) (int, error) {
	namespaces, err := cgroupNetns(d.cgroup)
	if err != nil {
		return 0, err
	}
	var n int
	var errs []error
	for _, ns := range namespaces {
		if err := ctx.Err(); err != nil {
			return n, err
		}
		m, err := d.destroyIn(ns)
		n += m
		if err != nil && !errors.Is(err, fs.ErrNotExist) && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, err)
		}
	}
	return n, errors.Join(errs...)
}

// clearStale deletes every entry of the stale flows' map (none, unless a
// deletion failed before).
func clearStale(m *ebpf.Map) error {
	var k destroyStaleKey
	for {
		err := m.NextKey(nil, &k)
		if errors.Is(err, ebpf.ErrKeyNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := m.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return err
		}
	}
}

// destroyIn runs the iterators in the network namespace at path (a
// /proc/PID/ns/net) and returns how many sockets they destroyed (each
// writes the cookie of one).
func (d *Destroyer) destroyIn(path string) (int, error) {
	type result struct {
		n   int
		err error
	}
	res := make(chan result, 1)
	go func() {
		// The thread enters the namespace and is never given back: it
		// ends with this goroutine (LockOSThread without Unlock), so no
		// other goroutine ever runs in the namespace.
		runtime.LockOSThread()
		ns, err := os.Open(path)
		if err != nil {
			res <- result{err: err}
			return
		}
		err = unix.Setns(int(ns.Fd()), unix.CLONE_NEWNET)
		ns.Close()
		if err != nil {
			res <- result{err: fmt.Errorf("entering %s: %w", path, err)}
			return
		}
		var n int
		for _, it := range d.iters {
			// The iterator walks the sockets of the namespace of the
			// thread that opens it.
			rc, err := it.Open()
			if err != nil {
				res <- result{n: n, err: fmt.Errorf("opening the socket iterator in %s: %w", path, err)}
				return
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			n += len(b) / 8
			if err != nil {
				res <- result{n: n, err: fmt.Errorf("running the socket iterator in %s: %w", path, err)}
				return
			}
		}
		res <- result{n: n}
	}()
	r := <-res
	return r.n, r.err
}

// cgroupNetns returns the network namespaces of the processes of cgroup
// and its descendants, one /proc/PID/ns/net per namespace. A socket may
// outlive its process's stay in the cgroup, or be in a namespace its
// process left; such sockets are not found (docs/ebpf.md).
func cgroupNetns(cgroup string) ([]string, error) {
	type nsID struct{ dev, ino uint64 }
	seen := map[nsID]bool{}
	var out []string
	err := filepath.WalkDir(cgroup, func(path string, e fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && path != cgroup {
				return nil // a cgroup removed meanwhile
			}
			return err
		}
		if !e.IsDir() {
			return nil
		}
		f, err := os.Open(filepath.Join(path, "cgroup.procs"))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			pid, err := strconv.Atoi(strings.TrimSpace(sc.Text()))
			if err != nil || pid <= 0 {
				continue
			}
			p := "/proc/" + strconv.Itoa(pid) + "/ns/net"
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				continue // ended meanwhile, or a kernel thread
			}
			id := nsID{st.Dev, st.Ino}
			if !seen[id] {
				seen[id] = true
				out = append(out, p)
			}
		}
		if err := sc.Err(); err != nil && !errors.Is(err, syscall.ENODEV) {
			return fmt.Errorf("%s: %w", path, err)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("the network namespaces of cgroup %s: %w", cgroup, err)
	}
	return out, nil
}
