// Package httpserve runs the proxy's small HTTP servers (healthz, metrics)
// the one way they all run: a listener opened first, so that a busy port
// is an error at start, and serving until the context ends.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// Listen opens a TCP listener on addr; its error names the server, what.
func Listen(what, addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s on %s: %w", what, addr, err)
	}
	return ln, nil
}

// Serve serves h on ln until ctx ends, then closes the server (and ln) and
// returns nil. Serving that ends otherwise is an error.
func Serve(ctx context.Context, h http.Handler, ln net.Listener) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	stop := context.AfterFunc(ctx, func() { _ = srv.Close() })
	defer stop()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
