package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/internal/cgrouptest"
	"github.com/kpng/kpng/internal/netnstest"
)

// ebpfInterfaces are where kpng-ebpf attaches its north-south (tcx)
// programs: every interface of its node namespace, the one to the bench
// bridge and the one to its pod, as `auto` plus the pod-facing interface
// would be on a real node. The probe's packets (both to the ClusterIP and
// to the pod IP) cross pod0 either way, so the comparison carries their
// cost on both sides.
const ebpfInterfaces = "eth0,pod0"

// ebpfNode is what the bench makes for a kpng-ebpf proxy: a cgroup v2 of
// its node, which the socket programs attach to and the probe client
// runs in, and a BPF filesystem of its own for the pins.
type ebpfNode struct {
	// root is the cgroup v2 hierarchy, mounted on a private folder;
	// cgroup a child of it (checked a strict descendant: a program
	// attached to the root would see every process of the machine).
	root, cgroup string
	// bpffs is a BPF filesystem instance of the bench's; pinPath the
	// proxy's --ebpf-pin-path in it.
	bpffs, pinPath string
}

// newEBPFNode mounts the cgroup v2 hierarchy and a BPF filesystem, and
// creates the node's cgroup, all named after the bench's run
// (internal/cgrouptest), so that what a killed run left is removed by the
// next one (cgrouptest.Sweep). tb.Cleanup removes it all, in reverse: the
// pins (which detaches the links kpng left pinned), the cgroup (killing
// what still runs in it), the mounts.
func newEBPFNode(tb *runTB, what string) (*ebpfNode, error) {
	root, err := cgrouptest.MountHierarchy(what)
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() {
		if err := cgrouptest.Unmount(root); err != nil {
			logf("cleanup: %v", err)
		}
	})
	if swept, err := cgrouptest.Sweep(root); err != nil {
		logf("sweeping dead runs' cgroups and mounts: %v", err)
	} else if len(swept) > 0 {
		logf("removed what dead runs left: %s", strings.Join(swept, " "))
	}
	sweepMountFolders(what)
	pattern, err := cgrouptest.Name(what)
	if err != nil {
		return nil, err
	}
	cg, err := cgrouptest.Create(root, root, "", pattern)
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() {
		if err := cgrouptest.Remove(cg); err != nil {
			logf("cleanup: %v", err)
		}
	})
	bpffs, err := cgrouptest.MountBPFFS(what)
	if err != nil {
		return nil, err
	}
	tb.Cleanup(func() {
		if err := cgrouptest.Unmount(bpffs); err != nil {
			logf("cleanup: %v", err)
		}
	})
	return &ebpfNode{root: root, cgroup: cg, bpffs: bpffs, pinPath: filepath.Join(bpffs, "kpng")}, nil
}

// sweepMountFolders removes the folders a killed run mounted on: the
// mounts went with the bench's mount namespace (`ip netns exec` makes
// one), which cgrouptest.Sweep, reading this namespace's mounts, cannot
// see, but the empty folders stay in the temporary folder. Only a dead
// run's, and only empty folders (rmdir).
func sweepMountFolders(what string) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), netnstest.Prefix+"*-"+what+"-*"))
	for _, d := range dirs {
		if netnstest.RunAlive(netnstest.RunOf(filepath.Base(d))) {
			continue
		}
		if err := os.Remove(d); err == nil {
			logf("removed %s, left by a dead run", d)
		}
	}
}

// check fails unless the node's cgroup is still a strict descendant of
// the hierarchy's root: checked again just before a program may attach.
func (e *ebpfNode) check() error { return cgrouptest.CheckDescendant(e.root, e.cgroup) }

// openCgroup opens the node's cgroup, for a child process to be started
// in it (CLONE_INTO_CGROUP): its sockets are then the programs' from the
// first one.
func (e *ebpfNode) openCgroup() (*os.File, error) {
	if err := e.check(); err != nil {
		return nil, err
	}
	return os.Open(e.cgroup)
}

// cleanupPins runs kpng's own cleanup (the proxy's command line with
// --cleanup: detach the programs, delete the pins) once the proxy has
// stopped; the unmount of the BPF filesystem then finds nothing left, or
// removes what it missed.
func cleanupPins(argv []string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	argv = append(argv[:len(argv):len(argv)], "--cleanup")
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		logf("cleanup: %s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(string(out)))
	}
}

// mapsMemory returns the memory the kernel charges for each map pinned
// under the proxy's pin path (memlock in the map's fdinfo, what
// backends/ebpf's TestConnectLatency reads), by map name.
func (e *ebpfNode) mapsMemory() (map[string]int64, error) {
	return pinnedMapsMemory(e.pinPath)
}

func pinnedMapsMemory(dir string) (map[string]int64, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	var errs []error
	for _, ent := range entries {
		if strings.HasPrefix(ent.Name(), "link_") || ent.IsDir() {
			continue
		}
		m, err := ebpf.LoadPinnedMap(filepath.Join(dir, ent.Name()), &ebpf.LoadPinOptions{ReadOnly: true})
		if err != nil {
			errs = append(errs, fmt.Errorf("pinned map %s: %w", ent.Name(), err))
			continue
		}
		info, err := m.Info()
		m.Close()
		if err != nil {
			errs = append(errs, fmt.Errorf("pinned map %s: %w", ent.Name(), err))
			continue
		}
		// 0 is a figure: an LPM trie (kpng_source_ranges) allocates
		// per entry, and an empty one is charged nothing.
		b, _ := info.Memlock()
		out[ent.Name()] = int64(b)
	}
	if len(out) == 0 && len(errs) == 0 {
		errs = append(errs, fmt.Errorf("no map pinned under %s", dir))
	}
	return out, errors.Join(errs...)
}

// sumMemory is the total of a map name → bytes table, and its largest
// entries as text ("kpng_ct 8.0 MiB, ...").
func sumMemory(m map[string]int64) (total int64, largest string) {
	names := make([]string, 0, len(m))
	for n, b := range m {
		total += b
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if m[names[i]] != m[names[j]] {
			return m[names[i]] > m[names[j]]
		}
		return names[i] < names[j]
	})
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s %.1f MiB", n, mb(m[n])))
	}
	return total, strings.Join(parts, ", ")
}

// programRuns returns the kernel's run-time statistics of every program
// attached by a link pinned under the proxy's pin path, named by its
// links ("connect4"; "tcx_in_eth0+tcx_in_pod0" for one program that two
// links attach, whose statistics are the program's, not each link's): the
// counters grow only while BPF_ENABLE_STATS is held (enableProgramStats),
// so two readings around a span give the programs' own cost in it.
func (e *ebpfNode) programRuns() (map[string]ProgramRun, error) {
	pins, err := filepath.Glob(filepath.Join(e.pinPath, "link_*"))
	if err != nil {
		return nil, err
	}
	links := map[ebpf.ProgramID][]string{}
	runs := map[ebpf.ProgramID]ProgramRun{}
	var errs []error
	for _, pin := range pins {
		name := strings.TrimPrefix(filepath.Base(pin), "link_")
		id, run, err := linkedProgramRun(pin)
		if err != nil {
			errs = append(errs, fmt.Errorf("pinned link %s: %w", name, err))
			continue
		}
		links[id] = append(links[id], name)
		runs[id] = run
	}
	out := map[string]ProgramRun{}
	for id, names := range links {
		sort.Strings(names)
		out[strings.Join(names, "+")] = runs[id]
	}
	return out, errors.Join(errs...)
}

func linkedProgramRun(pin string) (ebpf.ProgramID, ProgramRun, error) {
	// Links take no read-only flag (BPF_F_RDONLY is EINVAL for them).
	l, err := link.LoadPinnedLink(pin, nil)
	if err != nil {
		return 0, ProgramRun{}, err
	}
	defer l.Close() // the pin keeps the link
	info, err := l.Info()
	if err != nil {
		return 0, ProgramRun{}, err
	}
	prog, err := ebpf.NewProgramFromID(info.Program)
	if err != nil {
		return 0, ProgramRun{}, err
	}
	defer prog.Close()
	st, err := prog.Stats()
	if err != nil {
		return 0, ProgramRun{}, err
	}
	return info.Program, ProgramRun{Runs: st.RunCount, RuntimeNs: uint64(st.Runtime.Nanoseconds())}, nil
}

// programRunsSince is after's runs less before's, by link.
func programRunsSince(before, after map[string]ProgramRun) map[string]ProgramRun {
	out := map[string]ProgramRun{}
	for name, a := range after {
		b := before[name]
		if a.Runs < b.Runs || a.RuntimeNs < b.RuntimeNs {
			continue // another program behind the link (a repair): no figure
		}
		out[name] = ProgramRun{Runs: a.Runs - b.Runs, RuntimeNs: a.RuntimeNs - b.RuntimeNs}
	}
	return out
}

// enableProgramStats switches the kernel's BPF run-time statistics on
// until the returned closer is closed. They are the whole machine's (the
// kernel times every BPF program while any holder keeps them on, at a
// cost of a few tens of nanoseconds a run), so the bench holds them only
// for the probe.
func enableProgramStats() (io.Closer, error) {
	return ebpf.EnableStats(uint32(unix.BPF_STATS_RUN_TIME))
}
