package ipvs

import (
	"cmp"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"

	"github.com/cloudflare/ipvs"
	"golang.org/x/sys/unix"
)

// Fake is an in-memory IPVS (an ipvs.Client) for tests: it keeps virtual
// and real servers as the kernel does, returns the kernel's errors for
// missing or duplicate ones, and logs every write.
type Fake struct {
	mu       sync.Mutex
	services map[vsKey]*fakeService
	config   ipvs.Config
	// Ops logs every write, e.g. "create-dest tcp/10.0.0.1:80 10.244.1.10:8080 w=1".
	Ops []string
}

type fakeService struct {
	svc   ipvs.Service
	dests map[netip.AddrPort]*ipvs.DestinationExtended
}

// NewFake returns an empty Fake.
func NewFake() *Fake { return &Fake{services: map[vsKey]*fakeService{}} }

var _ ipvs.Client = (*Fake)(nil)

func keyOf(s ipvs.Service) vsKey { return vsKey{Addr: s.Address, Port: s.Port, Proto: s.Protocol} }

func (f *Fake) log(format string, args ...any) { f.Ops = append(f.Ops, fmt.Sprintf(format, args...)) }

// Info implements ipvs.Client.
func (f *Fake) Info() (ipvs.Info, error) { return ipvs.Info{Version: [3]int{1, 2, 1}}, nil }

// Config implements ipvs.Client.
func (f *Fake) Config() (ipvs.Config, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.config, nil
}

// SetConfig implements ipvs.Client: zero values leave the setting alone,
// as in the kernel.
func (f *Fake) SetConfig(c ipvs.Config) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.TCPTimeout != 0 {
		f.config.TCPTimeout = c.TCPTimeout
	}
	if c.TCPFinTimeout != 0 {
		f.config.TCPFinTimeout = c.TCPFinTimeout
	}
	if c.UDPTimeout != 0 {
		f.config.UDPTimeout = c.UDPTimeout
	}
	return nil
}

// Services implements ipvs.Client.
func (f *Fake) Services() ([]ipvs.ServiceExtended, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []ipvs.ServiceExtended
	for _, k := range slices.SortedFunc(mapKeys(f.services), vsKey.compare) {
		out = append(out, ipvs.ServiceExtended{Service: f.services[k].svc})
	}
	if len(out) == 0 {
		return nil, os.ErrNotExist // as the library reports an empty dump
	}
	return out, nil
}

// Service implements ipvs.Client.
func (f *Fake) Service(s ipvs.Service) (ipvs.ServiceExtended, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.services[keyOf(s)]
	if !ok {
		return ipvs.ServiceExtended{}, unix.ESRCH
	}
	return ipvs.ServiceExtended{Service: fs.svc}, nil
}

// CreateService implements ipvs.Client.
func (f *Fake) CreateService(s ipvs.Service) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := keyOf(s)
	if _, ok := f.services[k]; ok {
		return unix.EEXIST
	}
	s.Flags |= ipvs.ServiceHashed
	f.services[k] = &fakeService{svc: s, dests: map[netip.AddrPort]*ipvs.DestinationExtended{}}
	f.log("create-service %s %s timeout=%d", k, s.Scheduler, s.Timeout)
	return nil
}

// UpdateService implements ipvs.Client.
func (f *Fake) UpdateService(s ipvs.Service) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := keyOf(s)
	fs, ok := f.services[k]
	if !ok {
		return unix.ESRCH
	}
	s.Flags |= ipvs.ServiceHashed
	fs.svc = s
	f.log("update-service %s %s timeout=%d", k, s.Scheduler, s.Timeout)
	return nil
}

// RemoveService implements ipvs.Client.
func (f *Fake) RemoveService(s ipvs.Service) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := keyOf(s)
	if _, ok := f.services[k]; !ok {
		return unix.ESRCH
	}
	delete(f.services, k)
	f.log("remove-service %s", k)
	return nil
}

// Destinations implements ipvs.Client.
func (f *Fake) Destinations(s ipvs.Service) ([]ipvs.DestinationExtended, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fs, ok := f.services[keyOf(s)]
	if !ok {
		return nil, unix.ESRCH
	}
	var out []ipvs.DestinationExtended
	for _, d := range fs.dests {
		out = append(out, *d)
	}
	slices.SortFunc(out, func(a, b ipvs.DestinationExtended) int {
		return cmp.Or(a.Address.Compare(b.Address), cmp.Compare(a.Port, b.Port))
	})
	if len(out) == 0 {
		return nil, os.ErrNotExist // as the library reports an empty dump
	}
	return out, nil
}

func (f *Fake) destOp(op string, s ipvs.Service, d ipvs.Destination) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := keyOf(s)
	fs, ok := f.services[k]
	if !ok {
		return unix.ESRCH
	}
	dk := netip.AddrPortFrom(d.Address, d.Port)
	cur, exists := fs.dests[dk]
	switch op {
	case "create-dest":
		if exists {
			return unix.EEXIST
		}
		fs.dests[dk] = &ipvs.DestinationExtended{Destination: d}
	case "update-dest":
		if !exists {
			return unix.ENOENT
		}
		cur.Destination = d
	case "remove-dest":
		if !exists {
			return unix.ENOENT
		}
		delete(fs.dests, dk)
		f.log("%s %s %s", op, k, dk)
		return nil
	}
	f.log("%s %s %s w=%d", op, k, dk, d.Weight)
	return nil
}

// CreateDestination implements ipvs.Client.
func (f *Fake) CreateDestination(s ipvs.Service, d ipvs.Destination) error {
	return f.destOp("create-dest", s, d)
}

// UpdateDestination implements ipvs.Client.
func (f *Fake) UpdateDestination(s ipvs.Service, d ipvs.Destination) error {
	return f.destOp("update-dest", s, d)
}

// RemoveDestination implements ipvs.Client.
func (f *Fake) RemoveDestination(s ipvs.Service, d ipvs.Destination) error {
	return f.destOp("remove-dest", s, d)
}

// SetConnections sets the connection counts IPVS reports for a real
// server, as clients would make them.
func (f *Fake) SetConnections(vs string, dest string, active, inactive uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, fs := range f.services {
		if k.String() != vs {
			continue
		}
		if d, ok := fs.dests[netip.MustParseAddrPort(dest)]; ok {
			d.ActiveConnections, d.InactiveConnections = active, inactive
		}
	}
}

// Dump lists the virtual servers and their real servers, one line each:
// "tcp/10.96.0.1:80 rr" then "  -> 10.244.1.10:8080 w=1".
func (f *Fake) Dump() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, k := range slices.SortedFunc(mapKeys(f.services), vsKey.compare) {
		fs := f.services[k]
		line := k.String() + " " + fs.svc.Scheduler
		if fs.svc.Flags&ipvs.ServicePersistent != 0 {
			line += fmt.Sprintf(" persistent %d", fs.svc.Timeout)
		}
		out = append(out, line)
		for _, dk := range slices.SortedFunc(mapKeys(fs.dests), netip.AddrPort.Compare) {
			out = append(out, fmt.Sprintf("  -> %s w=%d", dk, fs.dests[dk].Weight))
		}
	}
	return out
}
