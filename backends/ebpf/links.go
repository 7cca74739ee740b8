package ebpf

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/kpng/kpng/internal/cgroupv2"
)

// linkTarget is one bpf_link of the programs as kpng wants it: pinned at
// pin, running prog, attached to a cgroup or to an interface (tcx). kpng
// holds no handle to a link once pinned, so that the link outlives kpng:
// the pin is its last reference, and removing the pin detaches it.
type linkTarget struct {
	name   string // for errors and logs: "connect4", "tcx in eth0"
	pin    string
	prog   *ebpf.Program
	progID ebpf.ProgramID
	attach ebpf.AttachType
	// A cgroup link: the cgroup's path. Its id is read again at each
	// check: a cgroup removed and created again has another.
	cgroup string
	// A tcx link: the interface's name and the index it had when last
	// resolved (in Objects.netns).
	iface   string
	ifindex int
}

// holds reports whether a link (its info) is attached where t wants it;
// cgID is the id of t's cgroup now. A link detached by hand, or whose
// cgroup or interface went, is attached nowhere (id or index 0).
func (t *linkTarget) holds(info *link.Info, cgID uint64) bool {
	if t.iface != "" {
		x := info.TCX()
		return x != nil && x.Ifindex != 0 && int(x.Ifindex) == t.ifindex && uint32(x.AttachType) == uint32(t.attach)
	}
	c := info.Cgroup()
	return c != nil && c.CgroupId != 0 && c.CgroupId == cgID && uint32(c.AttachType) == uint32(t.attach)
}

// linkAction is what ensure found and did about a link.
type linkAction int

const (
	linkKept       linkAction = iota // as wanted: nothing done
	linkUpdated                      // attached where wanted, another program (an earlier run's): updated to this one
	linkRepinned                     // its pin removed, the link still held by someone: pinned again
	linkAttached                     // no link: attached and pinned
	linkReattached                   // its pin names a link detached or attached elsewhere: replaced
)

func (a linkAction) String() string {
	switch a {
	case linkKept:
		return "kept"
	case linkUpdated:
		return "another program in its place: updated to kpng's"
	case linkRepinned:
		return "its pin was removed, the link is still attached: pinned again"
	case linkAttached:
		return "its pin was removed (which detaches it): attached and pinned again"
	case linkReattached:
		return "its pin named a link detached or attached elsewhere: attached again"
	}
	return fmt.Sprint(int(a))
}

// ensure makes t's link as wanted: pinned, attached where t says,
// running t's program, and says what it did. With search, a missing pin
// is first looked for among the kernel's links (someone may hold the
// link, which then stays attached: pinning it again is the repair, not a
// second link).
func (o *Objects) ensure(t *linkTarget, search bool) (linkAction, error) {
	var cgID uint64
	if t.iface == "" {
		id, err := cgroupv2.ID(t.cgroup)
		if err != nil {
			return 0, err
		}
		cgID = id
	}
	action := linkAttached
	l, err := link.LoadPinnedLink(t.pin, nil)
	switch {
	case err == nil:
		info, err := l.Info()
		if err != nil {
			l.Close()
			return 0, fmt.Errorf("the pinned %s link: %w", t.name, err)
		}
		if t.holds(info, cgID) {
			defer l.Close()
			if info.Program == t.progID {
				return linkKept, nil
			}
			if err := l.Update(t.prog); err != nil {
				return 0, fmt.Errorf("updating the %s link: %w", t.name, err)
			}
			return linkUpdated, nil
		}
		// The pin is the link's last reference: unpinning releases it
		// (and detaches it, if it is attached elsewhere: another
		// --ebpf-cgroup-path, an interface created again since).
		err = l.Unpin()
		l.Close()
		if err != nil {
			return 0, fmt.Errorf("unpinning the %s link, which is detached or attached elsewhere: %w", t.name, err)
		}
		action = linkReattached
	case errors.Is(err, os.ErrNotExist):
		if search {
			held, err := findLink(t, cgID)
			if err != nil {
				return 0, fmt.Errorf("looking for the %s link: %w", t.name, err)
			}
			if held != nil {
				err := held.Pin(t.pin)
				held.Close()
				if err != nil {
					return 0, fmt.Errorf("pinning the %s link again: %w", t.name, err)
				}
				return linkRepinned, nil
			}
		}
	default:
		return 0, fmt.Errorf("opening the pinned %s link: %w", t.name, err)
	}
	nl, err := o.attachNew(t)
	if err != nil {
		return 0, err
	}
	err = nl.Pin(t.pin)
	nl.Close() // the pin keeps it (or, failing, the next check attaches it)
	if err != nil {
		return 0, fmt.Errorf("pinning the %s link: %w", t.name, err)
	}
	return action, nil
}

// attachNew attaches t's program where t says, as a new link. A tcx link
// is attached from a thread in the network namespace the interfaces were
// named in (Objects.netns), the name resolved again there (an interface
// created again has another index).
func (o *Objects) attachNew(t *linkTarget) (link.Link, error) {
	if t.iface == "" {
		l, err := link.AttachCgroup(link.CgroupOptions{Path: t.cgroup, Attach: t.attach, Program: t.prog})
		if err != nil {
			return nil, fmt.Errorf("attaching %s to %s: %w", t.name, t.cgroup, err)
		}
		return l, nil
	}
	var l link.Link
	err := o.inNetns(func() error {
		ifc, err := tcInterface(t.iface)
		if err != nil {
			return err
		}
		if l, err = link.AttachTCX(link.TCXOptions{Interface: ifc.Index, Program: t.prog, Attach: t.attach}); err != nil {
			return fmt.Errorf("attaching the %s program: %w", t.name, err)
		}
		t.ifindex = ifc.Index
		return nil
	})
	return l, err
}

// inNetns runs fn on a thread of the network namespace the interfaces
// were named in (Objects.netns; the calling thread's if none): kpng's
// own in production, a test's namespace in the tests, whose Sync runs on
// any thread. The thread that entered the namespace is never given back:
// it ends with its goroutine (LockOSThread without Unlock), so no other
// goroutine ever runs there.
func (o *Objects) inNetns(fn func() error) error {
	if o.netns == nil {
		return fn()
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(o.netns.Fd()), unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("entering the interfaces' network namespace: %w", err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// findLink returns a link of the kernel's that runs t's program where t
// wants it (a link whose pin was removed while someone else held it), or
// nil. It walks every link of the node: only done for a missing pin.
func findLink(t *linkTarget, cgID uint64) (link.Link, error) {
	var it link.Iterator
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			continue // released meanwhile
		}
		if info.Program == t.progID && t.holds(info, cgID) {
			return it.Take(), nil
		}
	}
	return nil, it.Err()
}

// programID is the kernel's id of a loaded program, which a link's info
// names.
func programID(p *ebpf.Program) (ebpf.ProgramID, error) {
	info, err := p.Info()
	if err != nil {
		return 0, err
	}
	id, ok := info.ID()
	if !ok {
		return 0, errors.New("the kernel gives no program id")
	}
	return id, nil
}

// CheckLinks verifies every link that Attach and AttachInterfaces made:
// pinned, attached to its cgroup or interface, running the loaded
// program. It repairs what is not so (a pin removed by hand, which
// detaches the link; a link detached by hand; another program put in its
// place) and returns what it repaired, one line per link. An error about
// one link does not keep the others from being checked and repaired.
func (o *Objects) CheckLinks() ([]string, error) {
	var repaired []string
	var errs []error
	for _, t := range o.links {
		a, err := o.ensure(t, true)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if a != linkKept {
			repaired = append(repaired, t.name+": "+a.String())
		}
	}
	return repaired, errors.Join(errs...)
}
