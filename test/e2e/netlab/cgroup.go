package netlab

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/kpng/kpng/internal/cgrouptest"
)

// labCgroups is what a lab with cgroups mounted and created
// (internal/cgrouptest: every name after the run, so that what a killed
// run left is swept by the next).
type labCgroups struct {
	root  string   // the cgroup v2 hierarchy, mounted for the lab
	lab   string   // the lab's cgroup, a child of root; the nodes' are below
	bpffs []string // the nodes' BPF filesystems
	swept []string // what dead runs had left, removed when it was mounted
}

// buildCgroups mounts the cgroup v2 hierarchy for the lab, sweeps what dead
// runs left in it, and gives each node a cgroup (with a child for the node's
// own clients and one per pod, each with its socket maker) and a BPF
// filesystem. Every cgroup is checked to be a strict descendant of the
// root: a program attached to the root would see every process of the
// machine.
func (l *Lab) buildCgroups() error {
	what := "lab-" + l.ID[strings.LastIndex(l.ID, "-")+1:]
	root, err := cgrouptest.MountHierarchy(what)
	if err != nil {
		return err
	}
	l.cg.root = root
	// The cgroups dead runs left under the root, then their mounts (BPF
	// filesystems: pins deleted).
	swept, err := cgrouptest.Sweep(root)
	if err != nil {
		return fmt.Errorf("sweeping what dead runs left: %w", err)
	}
	l.cg.swept = swept
	pattern, err := cgrouptest.Name(what)
	if err != nil {
		return err
	}
	if l.cg.lab, err = cgrouptest.Create(root, root, "", pattern); err != nil {
		return err
	}
	for _, n := range l.Nodes {
		if n.Cgroup, err = cgrouptest.Create(root, l.cg.lab, n.Name, ""); err != nil {
			return err
		}
		fs, err := cgrouptest.MountBPFFS(what + "-" + n.Name)
		if err != nil {
			return err
		}
		l.cg.bpffs = append(l.cg.bpffs, fs)
		n.BPFFS = fs
		hosts := []*Host{&n.Host}
		names := []string{"node"}
		for _, p := range n.Pods {
			hosts = append(hosts, &p.Host)
			names = append(names, p.Name)
		}
		for i, h := range hosts {
			cg, err := cgrouptest.Create(root, n.Cgroup, names[i], "")
			if err != nil {
				return err
			}
			if err := l.startSocketMaker(h, cg); err != nil {
				return err
			}
		}
	}
	return nil
}

// remove unmounts the BPF filesystems (their pins deleted: what they
// pinned is released), removes the cgroups (killing what is left in them)
// and unmounts the hierarchy. The lab's processes are stopped first.
func (c *labCgroups) remove() error {
	var errs []error
	for _, fs := range c.bpffs {
		errs = append(errs, cgrouptest.Unmount(fs))
	}
	if c.lab != "" {
		errs = append(errs, cgrouptest.Remove(c.lab))
	}
	if c.root != "" {
		errs = append(errs, cgrouptest.Unmount(c.root))
	}
	return errors.Join(errs...)
}

// PinPath is a folder for a dataplane's pins in the node's BPF filesystem
// (see Node.BPFFS), or "" in a lab without cgroups.
func (n *Node) PinPath() string {
	if n.BPFFS == "" {
		return ""
	}
	return filepath.Join(n.BPFFS, "kpng")
}
