package localv1

import (
	"cmp"
	"strings"
)

// CompareEndpoints is the order of a view entry's endpoints: by port name,
// protocol, address, then port, the fields that identify an endpoint within
// its entry. The brain publishes entries in this order, and the server and
// the client keep it, so that equal views are equal messages.
func CompareEndpoints(a, b *Endpoint) int {
	return cmp.Or(strings.Compare(a.PortName, b.PortName), cmp.Compare(a.Protocol, b.Protocol),
		strings.Compare(a.Ip, b.Ip), cmp.Compare(a.Port, b.Port))
}
