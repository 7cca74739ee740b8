package metrics

import (
	"cmp"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"slices"
	"time"

	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/proxyutil/internal/httpserve"
)

// Server is kube-proxy's metrics server: /metrics, /healthz (a plain "ok":
// the proxy's real health is on the health server), /proxyMode, /configz,
// and with Profiling the /debug/pprof pages.
type Server struct {
	// Addr is the host:port to listen on (kube-proxy's metricsBindAddress).
	Addr string
	// ProxyMode is what /proxyMode answers, e.g. ModeNFTables.
	ProxyMode string
	// Configz, if set, returns the body of /configz (JSON); otherwise
	// /configz is not served.
	Configz func() ([]byte, error)
	// Profiling serves /debug/pprof/ (kube-proxy's enableProfiling).
	Profiling bool
	// Flagz, if set, returns the command line's flags, by name, for
	// /flagz (kube-proxy's ComponentFlagz feature, on by default in 1.36);
	// otherwise /flagz is not served.
	Flagz func() map[string]string
	// Statusz serves /statusz (kube-proxy's ComponentStatusz feature, on
	// by default in 1.36): start time, uptime, versions, the other paths.
	Statusz bool
	// Component names the process in /flagz and /statusz; empty means
	// "kube-proxy", whose endpoints these are.
	Component string
	// EmulationVersion, if set, is the Kubernetes version /statusz says
	// the process emulates (kube-proxy shows its own, e.g. 1.36).
	EmulationVersion string
	// Started is when the process started, for /statusz; zero means when
	// Handler was called.
	Started time.Time
}

// Handler returns the server's routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		fmt.Fprint(w, "ok")
	})
	mux.HandleFunc("/proxyMode", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		fmt.Fprint(w, s.ProxyMode)
	})
	if s.Configz != nil {
		mux.HandleFunc("/configz", func(w http.ResponseWriter, _ *http.Request) {
			body, err := s.Configz()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("X-Content-Type-Options", "nosniff")
			_, _ = w.Write(body)
		})
	}
	paths := []string{"/healthz", "/metrics", "/proxyMode"}
	if s.Configz != nil {
		paths = append(paths, "/configz")
	}
	if s.Profiling {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		paths = append(paths, "/debug")
	}
	component := cmp.Or(s.Component, "kube-proxy")
	if s.Flagz != nil {
		mux.Handle("/flagz", flagzPage(component, s.Flagz))
		paths = append(paths, "/flagz")
	}
	if s.Statusz {
		// As upstream's, the paths listed are those installed before
		// /statusz, by their first segment.
		slices.Sort(paths)
		mux.Handle("/statusz", statuszPage(component, cmp.Or(s.Started, time.Now()), s.EmulationVersion, paths))
	}
	return mux
}

// Listen opens the server's socket.
func (s *Server) Listen() (net.Listener, error) { return httpserve.Listen("metrics server", s.Addr) }

// Serve serves on ln until ctx ends, then closes it and returns nil.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	return httpserve.Serve(ctx, s.Handler(), ln)
}

// Run listens on Addr and serves until ctx ends. It returns at once if the
// address cannot be bound; kube-proxy retries every 5 seconds unless
// bindAddressHardFail is set, and that choice is the caller's.
func (s *Server) Run(ctx context.Context) error {
	ln, err := s.Listen()
	if err != nil {
		return err
	}
	klog.FromContext(ctx).V(2).Info("Serving metrics", "address", ln.Addr().String())
	return s.Serve(ctx, ln)
}
