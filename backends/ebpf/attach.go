package ebpf

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// hook is one socket program and where it attaches.
type hook struct {
	name   string // the link's pin: link_<name>
	attach ebpf.AttachType
	prog   func(*sockPrograms) *ebpf.Program
}

// hooks are every program of bpf/sock.c.
var hooks = []hook{
	{"connect4", ebpf.AttachCGroupInet4Connect, func(p *sockPrograms) *ebpf.Program { return p.KpngConnect4 }},
	{"sendmsg4", ebpf.AttachCGroupUDP4Sendmsg, func(p *sockPrograms) *ebpf.Program { return p.KpngSendmsg4 }},
	{"recvmsg4", ebpf.AttachCGroupUDP4Recvmsg, func(p *sockPrograms) *ebpf.Program { return p.KpngRecvmsg4 }},
	{"getpeername4", ebpf.AttachCgroupInet4GetPeername, func(p *sockPrograms) *ebpf.Program { return p.KpngGetpeername4 }},
	{"connect6", ebpf.AttachCGroupInet6Connect, func(p *sockPrograms) *ebpf.Program { return p.KpngConnect6 }},
	{"sendmsg6", ebpf.AttachCGroupUDP6Sendmsg, func(p *sockPrograms) *ebpf.Program { return p.KpngSendmsg6 }},
	{"recvmsg6", ebpf.AttachCGroupUDP6Recvmsg, func(p *sockPrograms) *ebpf.Program { return p.KpngRecvmsg6 }},
	{"getpeername6", ebpf.AttachCgroupInet6GetPeername, func(p *sockPrograms) *ebpf.Program { return p.KpngGetpeername6 }},
	// A closed socket's entries deleted (both families).
	{"sock_release", ebpf.AttachCgroupInetSockRelease, func(p *sockPrograms) *ebpf.Program { return p.KpngSockRelease }},
}

// tcHook is one tc program and where it attaches on an interface.
type tcHook struct {
	dir    string // the link's pin: link_tcx_<dir>_<interface>
	attach ebpf.AttachType
	prog   func(*nodeportPrograms) *ebpf.Program
}

// tcHooks are every program of bpf/nodeport.c.
var tcHooks = []tcHook{
	{"in", ebpf.AttachTCXIngress, func(p *nodeportPrograms) *ebpf.Program { return p.KpngNodeportIn }},
	{"out", ebpf.AttachTCXEgress, func(p *nodeportPrograms) *ebpf.Program { return p.KpngNodeportOut }},
}

// Objects are the loaded programs and the pinned maps.
type Objects struct {
	objs sockObjects
	np   nodeportObjects
	// links are those Attach and AttachInterfaces made, which CheckLinks
	// verifies; netns is the network namespace the interfaces were named
	// in (nil: none were).
	links     []*linkTarget
	netns     *os.File
	closeOnce sync.Once
	closeErr  error
}

// Load loads the programs into the kernel (the verifier checks them here)
// with their maps pinned under pinDir, a folder on a BPF filesystem: maps
// already pinned there (by an earlier run) are reused, so their entries
// keep working across a restart of kpng. pinDir "" loads maps that are not
// pinned (tests of the verifier).
func Load(pinDir string) (*Objects, error) {
	spec, err := loadSock()
	if err != nil {
		return nil, err
	}
	opts := &ebpf.CollectionOptions{}
	if pinDir != "" {
		if err := checkBPFFS(pinDir); err != nil {
			return nil, err
		}
		if err := os.MkdirAll(pinDir, 0o700); err != nil {
			return nil, err
		}
		opts.Maps.PinPath = pinDir
	} else {
		for _, m := range spec.Maps {
			m.Pinning = ebpf.PinNone
		}
	}
	o := &Objects{}
	if err := spec.LoadAndAssign(&o.objs, opts); err != nil {
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("loading the socket programs: a map pinned under %s is of an older layout (run with --cleanup first): %w", pinDir, err)
		}
		return nil, fmt.Errorf("loading the socket programs: %w", err)
	}
	// The node-port programs read the socket programs' frontends, sets and
	// members: the same maps, not copies.
	npSpec, err := loadNodeport()
	if err != nil {
		o.objs.Close()
		return nil, err
	}
	if pinDir == "" {
		for _, m := range npSpec.Maps {
			m.Pinning = ebpf.PinNone
		}
	}
	lo, hi, err := ephemeralPorts()
	if err == nil {
		err = errors.Join(npSpec.Variables["eph_min"].Set(lo), npSpec.Variables["eph_max"].Set(hi))
	}
	if err != nil {
		o.objs.Close()
		return nil, fmt.Errorf("the node's ephemeral ports, which masquerade avoids: %w", err)
	}
	npOpts := *opts
	npOpts.MapReplacements = map[string]*ebpf.Map{"kpng_services": o.objs.KpngServices, "kpng_slots": o.objs.KpngSlots, "kpng_members": o.objs.KpngMembers}
	if err := npSpec.LoadAndAssign(&o.np, &npOpts); err != nil {
		o.objs.Close()
		if errors.Is(err, ebpf.ErrMapIncompatible) {
			return nil, fmt.Errorf("loading the node-port programs: a map pinned under %s is of an older layout (run with --cleanup first): %w", pinDir, err)
		}
		return nil, fmt.Errorf("loading the node-port programs: %w", err)
	}
	return o, nil
}

// Close releases the process's handles; pinned maps and links stay. It
// may be called more than once, from any goroutine.
func (o *Objects) Close() error {
	o.closeOnce.Do(func() {
		o.closeErr = errors.Join(o.np.Close(), o.objs.Close())
		if o.netns != nil {
			o.netns.Close()
		}
	})
	return o.closeErr
}

// Maps returns the Maps the dataplane writes.
func (o *Objects) Maps() Maps {
	km := newKernelMaps(&o.objs.sockMaps)
	km.ranges = o.np.KpngSourceRanges
	return km
}

// Attach attaches every program to the cgroup (v2) at cgroupPath as
// bpf_links pinned under pinDir. A link pinned by an earlier run on the
// same cgroup is updated in place to the newly loaded program, so that the
// hooks never go missing; one on another cgroup, or detached, is replaced.
// It returns what it found to repair (links pinned but detached).
func (o *Objects) Attach(cgroupPath, pinDir string) ([]string, error) {
	var targets []*linkTarget
	for _, h := range hooks {
		t := &linkTarget{name: h.name, pin: filepath.Join(pinDir, "link_"+h.name), prog: h.prog(&o.objs.sockPrograms), attach: h.attach, cgroup: cgroupPath}
		targets = append(targets, t)
	}
	repaired, err := o.start(targets)
	if err != nil {
		return nil, err
	}
	o.links = append(o.links, targets...)
	return repaired, nil
}

// start makes each of a run's links as wanted (ensure, without looking
// for links that lost their pin: the programs were just loaded, no link
// runs them yet), and returns those it found to repair.
func (o *Objects) start(targets []*linkTarget) ([]string, error) {
	var repaired []string
	for _, t := range targets {
		id, err := programID(t.prog)
		if err != nil {
			return nil, fmt.Errorf("the %s program: %w", t.name, err)
		}
		t.progID = id
		a, err := o.ensure(t, false)
		if err != nil {
			return nil, err
		}
		if a == linkReattached {
			repaired = append(repaired, t.name+": "+a.String())
		}
	}
	return repaired, nil
}

// AttachInterfaces attaches the node-port programs to the named interfaces
// (tcx ingress and egress; the names are resolved in the calling thread's
// network namespace, which the periodic check of the links enters again)
// as bpf_links pinned under pinDir. A link pinned by an earlier run on the
// same interface is updated in place; links pinned for interfaces no
// longer named are detached. It returns what it found to repair (links
// pinned but detached).
func (o *Objects) AttachInterfaces(names []string, pinDir string) ([]string, error) {
	if len(names) > 0 && o.netns == nil {
		ns, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return nil, fmt.Errorf("the interfaces' network namespace: %w", err)
		}
		o.netns = ns
	}
	want := map[string]bool{}
	var targets []*linkTarget
	for _, name := range names {
		ifc, err := tcInterface(name)
		if err != nil {
			return nil, err
		}
		for _, h := range tcHooks {
			t := &linkTarget{name: "tcx " + h.dir + " " + name, pin: filepath.Join(pinDir, "link_tcx_"+h.dir+"_"+name),
				prog: h.prog(&o.np.nodeportPrograms), attach: h.attach, iface: name, ifindex: ifc.Index}
			want[t.pin] = true
			targets = append(targets, t)
		}
	}
	repaired, err := o.start(targets)
	if err != nil {
		return nil, err
	}
	o.links = append(o.links, targets...)
	pinned, err := filepath.Glob(filepath.Join(pinDir, "link_tcx_*"))
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, pin := range pinned {
		if !want[pin] {
			errs = append(errs, unpinLink(pin))
		}
	}
	return repaired, errors.Join(errs...)
}

// unpinLink removes a link's pin, which detaches it (the pin is its last
// reference once kpng's handles are closed).
func unpinLink(pin string) error {
	l, err := link.LoadPinnedLink(pin, nil)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("opening the pinned link %s: %w", pin, err)
	}
	defer l.Close()
	if err := l.Unpin(); err != nil {
		return fmt.Errorf("unpinning %s: %w", pin, err)
	}
	return nil
}

// Remove detaches the programs pinned under pinDir (the cgroup and the tc
// ones) and deletes every pin there (links and maps), then the folder.
// Nothing there is not an error. A folder that is not on a BPF filesystem
// is refused, never deleted: --cleanup runs as root with a configured path.
func Remove(pinDir string) error {
	var fs unix.Statfs_t
	if err := unix.Statfs(pinDir, &fs); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("pin path %s: %w", pinDir, err)
	}
	if fs.Type != unix.BPF_FS_MAGIC {
		return fmt.Errorf("pin path %s is not on a BPF filesystem: refusing to delete it", pinDir)
	}
	var errs []error
	pins, err := filepath.Glob(filepath.Join(pinDir, "link_*"))
	if err != nil {
		return err
	}
	for _, pin := range pins {
		errs = append(errs, unpinLink(pin))
	}
	if err := os.RemoveAll(pinDir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// tcInterface looks up an interface for the node-port programs, in the
// calling thread's network namespace: it must be an Ethernet one.
func tcInterface(name string) (*net.Interface, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("interface %s: %w", name, err)
	}
	if !isEthernet(ifc) {
		return nil, fmt.Errorf("interface %s is not an Ethernet interface: the node-port programs parse Ethernet frames", name)
	}
	return ifc, nil
}

// isEthernet: the interface's frames start with an Ethernet header (it
// has a 6-byte hardware address; a tunnel or WireGuard device has none).
func isEthernet(ifc *net.Interface) bool { return len(ifc.HardwareAddr) == 6 }

// ephemeralPorts reads the range of local ports the kernel gives the
// node's own connections (of the calling thread's network namespace).
func ephemeralPorts() (uint32, uint32, error) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, err
	}
	var lo, hi uint32
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil {
		return 0, 0, fmt.Errorf("ip_local_port_range %q: %w", b, err)
	}
	return lo, hi, nil
}

// NodeInterfaces returns the interfaces that hold the node's addresses:
// the Ethernet ones that are up and have a global unicast address.
func NodeInterfaces() ([]string, error) {
	ifcs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, ifc := range ifcs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 || !isEthernet(&ifc) {
			continue
		}
		addrs, err := ifc.Addrs()
		if err != nil {
			return nil, fmt.Errorf("interface %s: %w", ifc.Name, err)
		}
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.IsGlobalUnicast() {
				names = append(names, ifc.Name)
				break
			}
		}
	}
	return names, nil
}

func checkBPFFS(pinDir string) error {
	dir := pinDir
	for {
		var fs unix.Statfs_t
		err := unix.Statfs(dir, &fs)
		if err == nil {
			if fs.Type != unix.BPF_FS_MAGIC {
				return fmt.Errorf("%s is not on a BPF filesystem (mount one: mount -t bpf bpf %s)", pinDir, filepath.Dir(pinDir))
			}
			return nil
		}
		if !errors.Is(err, os.ErrNotExist) || dir == "/" {
			return fmt.Errorf("%s: %w", dir, err)
		}
		dir = filepath.Dir(dir)
	}
}

// CgroupV2Root returns where the cgroup v2 hierarchy is mounted (the first
// cgroup2 mount in /proc/self/mountinfo): the node's root, where the
// programs attach in production, so that every pod's sockets are seen.
func CgroupV2Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// id parent major:minor root mountpoint opts [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && len(fields) > 4 {
				return fields[4], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errors.New("no cgroup v2 hierarchy is mounted (mount one: mount -t cgroup2 none /sys/fs/cgroup, or give --ebpf-cgroup-path)")
}
