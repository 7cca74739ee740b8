// Package sysctl reads and writes kernel parameters under /proc/sys, and
// applies kube-proxy's conntrack settings.
//
// Writes say clearly when the namespace forbids them: a container with a
// read-only /proc/sys, or a parameter the kernel keeps read-only outside
// the initial network namespace (nf_conntrack_max), fails with an error
// that wraps [ErrReadOnly]. Like kube-proxy, [Sysctl.Ensure] writes only
// when the value differs, so a correctly preset read-only value is no
// error.
//
// Usage, from a backend that serves node ports on localhost and from the
// daemon's start:
//
//	if _, err := sysctl.Ensure("net/ipv4/conf/all/route_localnet", 1); err != nil {
//		return fmt.Errorf("localhost node ports: %w", err)
//	}
//	err := sysctl.ApplyConntrack(ctx, sysctl.Conntrack{MaxPerCore: 32768, Min: 131072,
//		TCPEstablishedTimeout: 24 * time.Hour, TCPCloseWaitTimeout: time.Hour})
package sysctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// ErrReadOnly is wrapped by write errors that mean this namespace may not
// change the parameter.
var ErrReadOnly = errors.New("not writable in this namespace")

// Sysctl is a /proc/sys tree (another root is for tests).
type Sysctl struct {
	// Root is the tree's directory: "/proc/sys".
	Root string
	// Hashsize is nf_conntrack's hash table size parameter:
	// "/sys/module/nf_conntrack/parameters/hashsize".
	Hashsize string
	// NumCPU returns the number of CPUs for conntrack's max-per-core; nil
	// counts the online CPUs of the machine (not the process's affinity,
	// which a container's cpuset narrows: kubernetes#99225).
	NumCPU func() int
}

// Default is the real tree.
var Default = &Sysctl{Root: "/proc/sys", Hashsize: "/sys/module/nf_conntrack/parameters/hashsize"}

// Get reads a parameter of the real tree; see [Sysctl.Get].
func Get(name string) (string, error) { return Default.Get(name) }

// GetInt reads an integer parameter of the real tree.
func GetInt(name string) (int, error) { return Default.GetInt(name) }

// Set writes a parameter of the real tree; see [Sysctl.Set].
func Set(name, value string) error { return Default.Set(name, value) }

// Ensure sets an integer parameter of the real tree if it differs; see
// [Sysctl.Ensure].
func Ensure(name string, value int) (bool, error) { return Default.Ensure(name, value) }

// path returns name's file. Names are slash paths under the root
// ("net/ipv4/conf/all/route_localnet"); a name without a slash may be
// dotted as sysctl(8) writes it ("net.ipv4.ip_forward").
func (s *Sysctl) path(name string) string {
	if !strings.Contains(name, "/") {
		name = strings.ReplaceAll(name, ".", "/")
	}
	return filepath.Join(s.Root, filepath.Clean("/"+name))
}

// Get returns a parameter's value, without the trailing newline.
func (s *Sysctl) Get(name string) (string, error) {
	b, err := os.ReadFile(s.path(name))
	if err != nil {
		return "", explain(name, "read", err)
	}
	return strings.TrimRight(string(b), "\n"), nil
}

// GetInt returns an integer parameter's value.
func (s *Sysctl) GetInt(name string) (int, error) {
	v, err := s.Get(name)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		return 0, fmt.Errorf("sysctl %s: %q is not an integer", name, v)
	}
	return n, nil
}

// Set writes a parameter. The error wraps ErrReadOnly when the namespace
// forbids the write.
func (s *Sysctl) Set(name, value string) error {
	// No O_CREATE: a parameter that does not exist is an error, not a file.
	f, err := os.OpenFile(s.path(name), os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return explain(name, "write "+value, err)
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return explain(name, "write "+value, err)
	}
	return nil
}

// Ensure sets an integer parameter to value unless it already has it, and
// reports whether it wrote.
func (s *Sysctl) Ensure(name string, value int) (bool, error) {
	if cur, err := s.GetInt(name); err == nil && cur == value {
		return false, nil
	}
	if err := s.Set(name, strconv.Itoa(value)); err != nil {
		return false, err
	}
	return true, nil
}

// explain turns a file error into one that says what it means for a sysctl.
func explain(name, op string, err error) error {
	var errno syscall.Errno
	errors.As(err, &errno)
	switch {
	case errno == syscall.EROFS:
		return fmt.Errorf("sysctl %s: %s: %w: /proc/sys is mounted read-only (an unprivileged container?): %w", name, op, ErrReadOnly, err)
	case errno == syscall.EACCES || errno == syscall.EPERM:
		return fmt.Errorf("sysctl %s: %s: %w: the kernel refuses it here (a parameter only the initial network namespace may change, or missing CAP_NET_ADMIN/CAP_SYS_ADMIN?): %w", name, op, ErrReadOnly, err)
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("sysctl %s: %s: no such parameter (kernel module not loaded?): %w", name, op, err)
	}
	return fmt.Errorf("sysctl %s: %s: %w", name, op, err)
}
