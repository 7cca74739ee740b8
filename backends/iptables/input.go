package iptables

import (
	"bufio"
	"fmt"
	"hash/maphash"
	"io"

	"github.com/kpng/kpng/api/localv1"
	"github.com/kpng/kpng/backend"
)

// input is restore input. WriteTo writes the same bytes each time it is
// called: a failure's lines are quoted from it written again.
type input interface {
	io.WriterTo
}

// text is restore input held in memory.
type text []byte

// WriteTo implements io.WriterTo.
func (t text) WriteTo(w io.Writer) (int64, error) {
	n, err := w.Write(t)
	return int64(n), err
}

// fullInput is a full sync's restore input, written as iptables-restore
// reads it rather than held: at 10,000 services of 10 endpoints it is
// 31 MB, nearly all of it the services' own chains, which come last (after
// the declarations of every chain and the shared chains, in head). Each
// service is rendered again as it is written, and must render as its
// record says.
type fullInput struct {
	head, tail []byte
	rend       *renderer
	keys       []backend.ServiceKey
	state      map[backend.ServiceKey]*localv1.ServiceEndpoints
	services   map[backend.ServiceKey]*record
}

// WriteTo implements io.WriterTo.
func (in *fullInput) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	bw := bufio.NewWriterSize(cw, 64<<10)
	bw.Write(in.head)
	for _, k := range in.keys {
		r, rec := in.rend.render(in.state[k]), in.services[k]
		if len(r.chains) != len(rec.chains) {
			return cw.n, fmt.Errorf("service %s/%s: rendered differently from its record", k.Namespace, k.Name)
		}
		for i, c := range r.chains {
			if c.name != rec.chains[i].name || maphash.Bytes(sumSeed, c.rules) != rec.chains[i].sum {
				return cw.n, fmt.Errorf("service %s/%s: chain %s rendered differently from its record", k.Namespace, k.Name, c.name)
			}
			if _, err := bw.Write(c.rules); err != nil {
				return cw.n, err
			}
		}
	}
	bw.Write(in.tail)
	err := bw.Flush()
	return cw.n, err
}

// countingWriter counts the bytes written to w.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}
