package kubeproxy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	_ "k8s.io/component-base/logs/json/register" // logging.format: json, as kube-proxy
	basemetrics "k8s.io/component-base/metrics"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/config"
	"github.com/kpng/kpng/local"
	"github.com/kpng/kpng/proxyutil/metrics"
	"github.com/kpng/kpng/source/kube"
)

// Proxy is a kube-proxy built around backends: run with kube-proxy's
// flags and KubeProxyConfiguration file, it watches the API server, computes
// this node's view with kpng's brain, and drives the backend of the
// configuration's mode with it, with kube-proxy's health and metrics
// servers, start-up host settings, node wait, --cleanup and removal of
// kube-proxy's own rules once the backend's are in place.
type Proxy struct {
	// Name is the program's name, for help, logs and messages.
	Name string
	// Backends maps each proxy mode the program runs (a configuration's
	// mode, or --proxy-mode) to its backend; an empty mode is
	// kube-proxy's default, iptables. --cleanup removes the rules of
	// every backend listed here, and kube-proxy's.
	Backends map[config.ProxyMode]backend.Registration

	// deps replaces the parts that touch the host and the API server;
	// nil means the real ones (tests set it).
	deps *proxyDeps
}

// proxyDeps are the parts of a Proxy that tests replace.
type proxyDeps struct {
	// source returns the source of cluster state for the configuration
	// (the API server's, by clientConnection and --master).
	source func(c *config.KubeProxyConfiguration, master, node string) (cluster.Stage, error)
	// setupHost applies the process-wide start-up settings: logging,
	// oom_score_adj, conntrack sysctls.
	setupHost func(ctx context.Context, c *config.KubeProxyConfiguration) error
	// cleanupOthers, if set, removes after --cleanup's own backend's rules
	// every other proxy's: the other backends' and kube-proxy's modes'.
	cleanupOthers func(ctx context.Context) error
	// kubeProxyRemoval, if set, returns the driver option that removes
	// kube-proxy's rules once the backend's are in place.
	kubeProxyRemoval func(ctx context.Context, plugin backend.Plugin) func(*backend.Options)
}

func (p *Proxy) dependencies() *proxyDeps {
	if p.deps != nil {
		return p.deps
	}
	return &proxyDeps{source: kubeSource, setupHost: setupHost,
		cleanupOthers:    func(ctx context.Context) error { return CleanupNode(ctx, p.registrations(), true) },
		kubeProxyRemoval: WithKubeProxyRemoval}
}

// registrations are p's backends, each once, sorted by name.
func (p *Proxy) registrations() []backend.Registration {
	var out []backend.Registration
	for _, reg := range p.Backends {
		if !slices.ContainsFunc(out, func(r backend.Registration) bool { return r.Name == reg.Name }) {
			out = append(out, reg)
		}
	}
	slices.SortFunc(out, func(a, b backend.Registration) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// resolveConfig reads the file (if any), applies the flags given, then
// validates the result and honours configHardFail. When neither the file
// nor a flag sets minSyncPeriod, the backend of the mode (found by
// backendFor) gives it (see backendMinSyncPeriod). Warnings are for the log.
func resolveConfig(fs *pflag.FlagSet, flags *Flags, backendFor func(config.ProxyMode) (backend.Registration, error), ownModes []config.ProxyMode) (*config.KubeProxyConfiguration, []string, error) {
	// Without a file, kube-proxy's own (v1alpha1) defaults, as kube-proxy.
	c, err := config.DefaultV1Alpha1()
	if err != nil {
		return nil, nil, err
	}
	var warnings []string
	var fileSet config.FieldSet
	if flags.configFile != "" {
		data, err := os.ReadFile(flags.configFile)
		if err != nil {
			return nil, nil, fmt.Errorf("reading the configuration: %w", err)
		}
		// --proxy-mode must be known before a v1alpha1 file is converted:
		// the effective mode picks its per-mode sync periods and
		// masqueradeAll.
		var opts config.LoadOptions
		if fs.Changed("proxy-mode") {
			opts.Mode = &flags.fromFlags.Mode
		}
		loaded, err := config.LoadWith(data, opts)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", flags.configFile, err)
		}
		c, warnings, fileSet = loaded.Config, loaded.Warnings, loaded.Set
	}
	applied, err := flags.apply(fs, c)
	if err != nil {
		return nil, nil, err
	}
	if ignored := ignoredByKubeProxy(applied); flags.configFile != "" && len(ignored) > 0 {
		warnings = append(warnings, fmt.Sprintf("%s override %s in kpng; kube-proxy would ignore them, as it ignores every flag but --hostname-override and the logging flags when --config is given",
			strings.Join(ignored, ", "), flags.configFile))
	}
	// Before validation, which checks it against syncPeriod.
	if !minSyncPeriodGiven(fs, fileSet, c.Mode) {
		if d, ok := backendMinSyncPeriod(c.Mode, backendFor); ok {
			c.MinSyncPeriod = min(d, c.SyncPeriod)
		}
	}
	warnings = append(warnings, flags.deprecatedPorts(fs, c)...)
	warnings = append(warnings, unusedFlags(fs, applied, c.Mode)...)
	checked, invalid, err := config.CheckModes(c, ownModes...)
	if err != nil {
		if flags.configFile != "" {
			err = fmt.Errorf("%s: %w", flags.configFile, err)
		}
		return nil, nil, err
	}
	for _, e := range invalid {
		warnings = append(warnings, "reset to its default (configHardFail is false): "+e.Error())
	}
	checked, unsupported, err := unsupportedFields(checked)
	if err != nil {
		if flags.configFile != "" {
			err = fmt.Errorf("%s: %w", flags.configFile, err)
		}
		return nil, nil, err
	}
	warnings = append(warnings, unsupported...)
	// The file's name is normalised as the flag's is (Check has refused a
	// blank one), so that the node, /configz and --write-config-to agree.
	checked.HostnameOverride = normalizeHostname(checked.HostnameOverride)
	return checked, warnings, nil
}

// minSyncPeriodGiven reports whether the configuration file (fileSet: the
// fields it set, as Load reads them: a v1alpha1 file's per-mode section
// counts for the mode that uses it) or a flag of mode (kube-proxy's
// --iptables-min-sync-period outside ipvs mode, --ipvs-min-sync-period in
// it) sets minSyncPeriod. Presence is what counts, not the value: a v1alpha1
// file's explicit nftables.minSyncPeriod: 0s is given (and v1alpha1's
// defaulting made it 1s, as kube-proxy's does).
func minSyncPeriodGiven(fs *pflag.FlagSet, fileSet config.FieldSet, mode config.ProxyMode) bool {
	if fileSet.Has("minSyncPeriod") {
		return true
	}
	if mode == config.ProxyModeIPVS {
		return fs.Changed("ipvs-min-sync-period")
	}
	return fs.Changed("iptables-min-sync-period")
}

// backendMinSyncPeriod is the default --min-sync-period of the backend that
// runs mode, when it has the flag. kube-proxy's 1 s amortises syncs that
// rewrite every service; a backend whose sync writes only what changed (the
// nft backend) defaults to much less, and a configuration that leaves
// minSyncPeriod unset gets that, not kube-proxy's.
func backendMinSyncPeriod(mode config.ProxyMode, backendFor func(config.ProxyMode) (backend.Registration, error)) (time.Duration, bool) {
	reg, err := backendFor(mode)
	if err != nil {
		return 0, false // reported when the backend is looked up to run
	}
	f := PluginFlags(reg.Name, reg.New()).Lookup("min-sync-period")
	if f == nil {
		return 0, false
	}
	d, err := time.ParseDuration(f.DefValue)
	if err != nil {
		return 0, false
	}
	return d, true
}

// normalizeHostname trims and lower-cases a node name, as kube-proxy does
// with hostnameOverride (file or flag) and with the host's name.
func normalizeHostname(name string) string {
	return strings.ToLower(strings.TrimSpace(name))
}

// HostName is this host's name as kube-proxy takes it for the node's name
// when no hostnameOverride is given (lower-cased), or "" when it cannot be
// read.
func HostName() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return normalizeHostname(h)
}

// Run runs the proxy as the command line fs (with flags, from AddFlags)
// says, until ctx ends; with --write-config-to, --cleanup or --init-only,
// it does that and returns.
func (p *Proxy) Run(ctx context.Context, fs *pflag.FlagSet, flags *Flags) error {
	deps := p.dependencies()
	logger := klog.FromContext(ctx)
	c, warnings, err := resolveConfig(fs, flags, p.backendFor, p.modes())
	if err != nil {
		return err
	}

	if flags.writeConfigTo != "" {
		for _, w := range warnings {
			logger.Info("Configuration warning", "warning", w)
		}
		out, err := config.Marshal(c)
		if err != nil {
			return err
		}
		if err := os.WriteFile(flags.writeConfigTo, out, 0o644); err != nil {
			return fmt.Errorf("writing the configuration: %w", err)
		}
		logger.Info("Wrote configuration", "file", flags.writeConfigTo, "apiVersion", "kubeproxy.config.k8s.io/v1alpha2")
		return nil
	}

	// Everything the configuration says about the backend is checked
	// before anything is changed on the host.
	reg, err := p.backendFor(c.Mode)
	if err != nil {
		return err
	}
	plugin := reg.New()
	backendFlags := pflag.NewFlagSet("to-"+reg.Name, pflag.ContinueOnError)
	backendFlags.AddGoFlagSet(PluginFlags(reg.Name, plugin))
	set, problems, err := configureBackend(reg.Name, backendFlags, c)
	if err != nil {
		return err
	}
	warnings = append(warnings, problems...)

	if flags.cleanup {
		if err := plugin.Cleanup(ctx); err != nil {
			return fmt.Errorf("--cleanup: backend %q: %w", reg.Name, err)
		}
		// As kube-proxy --cleanup: every mode's rules go, the Proxy's other
		// backends' and kube-proxy's too.
		if deps.cleanupOthers != nil {
			return deps.cleanupOthers(ctx)
		}
		return nil
	}

	// Logging first, so that what follows is logged as configured.
	if err := deps.setupHost(ctx, c); err != nil {
		return err
	}
	logger = klog.FromContext(ctx) // the configured logger
	for _, w := range warnings {
		logger.Info("Configuration warning", "warning", w)
	}
	if flags.initOnly {
		return nil
	}

	node := c.HostnameOverride
	if node == "" {
		if node = HostName(); node == "" {
			return errors.New("the host name could not be read: set hostnameOverride or --hostname-override")
		}
	}
	brainOpts := brain.Options{NodeName: node}
	if err := GateBrainOptions(c.FeatureGates, &brainOpts); err != nil {
		return err
	}
	src, err := deps.source(c, flags.master, node)
	if err != nil {
		return err
	}
	if c.ShowHiddenMetricsForVersion != "" {
		basemetrics.SetShowHidden()
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	metricsDone := make(chan error, 1)
	go func() { metricsDone <- serveMetrics(ctx, c, flagValues(fs)) }()

	logger.Info("Starting "+p.name()+" proxy", "mode", c.Mode, "backend", reg.Name, "node", node, "backendFlags", set)
	removeKubeProxy := func(*backend.Options) {}
	if deps.kubeProxyRemoval != nil {
		removeKubeProxy = deps.kubeProxyRemoval(ctx, plugin)
	}
	// As kube-proxy's NodeManager: wait for the Node, and with
	// detectLocalMode NodeCIDR for its pod CIDRs.
	wait := NodeWait{Timeout: nodeWaitTimeout, PodCIDRs: c.DetectLocalMode == config.LocalModeNodeCIDR}
	runErr := RunBackend(ctx, reg.Name, plugin, node, wait,
		func(o *backend.Options) {
			// The configuration drives the runner, whatever the backend's
			// own flags say.
			o.MinSyncPeriod, o.ResyncPeriod = c.MinSyncPeriod, c.SyncPeriod
			// As kube-proxy when its mode changes: the other proxy's
			// rules go once this one's are in place.
			removeKubeProxy(o)
		},
		func(ctx context.Context, drive func(context.Context, backend.Feed) error) error {
			return cluster.Run(ctx, src, cluster.StageFunc(func(ctx context.Context, store *cluster.Store) error {
				return drive(ctx, withNodeIPOverride(local.NewFeed(store, brainOpts), c.NodeIPOverride))
			}))
		})
	cancel()
	if err := <-metricsDone; runErr == nil && err != nil {
		return err
	}
	return runErr
}

// kubeSource is the API server source of the configuration's client.
func kubeSource(c *config.KubeProxyConfiguration, master, node string) (cluster.Stage, error) {
	cc := c.ClientConnection
	rc, err := kube.ClientConfig{
		Kubeconfig:  cc.Kubeconfig,
		Master:      master,
		QPS:         cc.QPS,
		Burst:       int(cc.Burst),
		ContentType: cc.ContentType,
	}.RESTConfig()
	if err != nil {
		return nil, err
	}
	if cc.AcceptContentTypes != "" {
		rc.AcceptContentTypes = cc.AcceptContentTypes
	}
	return &kube.Source{Config: rc, NodeName: node}, nil
}

// setupHost applies the logging configuration (format, verbosity, ...),
// the process's oom_score_adj and the conntrack sysctls.
func setupHost(ctx context.Context, c *config.KubeProxyConfiguration) error {
	gate, err := config.LoggingFeatureGate(c)
	if err != nil {
		return err
	}
	if err := logsapi.ValidateAndApply(&c.Logging, gate); err != nil {
		return fmt.Errorf("logging: %w", err)
	}
	// kubernetes_feature_enabled, as kube-proxy exports it for its gates
	// (kpng's are component-base's logging gates).
	gate.AddMetrics()
	h := realHost()
	h.applyOOMScoreAdj(ctx, c.Linux.OOMScoreAdj)
	if err := h.applyConntrack(ctx, c.Linux.Conntrack); err != nil {
		return fmt.Errorf("conntrack sysctls: %w", err)
	}
	return nil
}

// processStart is when the process started, for /statusz.
var processStart = time.Now()

// gateEnabled reads one of kube-proxy 1.36's beta gates that default to
// true (ComponentFlagz, ComponentStatusz) from the configuration.
func gateEnabled(c *config.KubeProxyConfiguration, name string) bool {
	on, set := c.FeatureGates[name]
	return on || !set
}

// flagValues returns /flagz's reader: every flag of fs by name, as
// kube-proxy's (its command's whole flag set) shows them.
func flagValues(fs *pflag.FlagSet) func() map[string]string {
	return func() map[string]string {
		out := map[string]string{}
		fs.VisitAll(func(f *pflag.Flag) { out[f.Name] = f.Value.String() })
		return out
	}
}

// serveMetrics runs the metrics server (/metrics, /healthz, /proxyMode,
// /configz, /flagz, /statusz, /debug/pprof) on metricsBindAddress until ctx ends. A port that
// cannot be bound is fatal with bindAddressHardFail, and retried every 5
// seconds otherwise, as kube-proxy does.
func serveMetrics(ctx context.Context, c *config.KubeProxyConfiguration, flagz func() map[string]string) error {
	if c.MetricsBindAddress == "" {
		return nil
	}
	body, err := configzBody(c)
	if err != nil {
		return err
	}
	mode := string(c.Mode)
	if mode == "" {
		mode = string(config.ProxyModeIPTables)
	}
	srv := &metrics.Server{
		Addr:      c.MetricsBindAddress,
		ProxyMode: mode,
		Configz:   func() ([]byte, error) { return body, nil },
		Profiling: c.EnableProfiling,
		// /flagz and /statusz, behind kube-proxy 1.36's gates (beta, on
		// by default).
		Statusz:          gateEnabled(c, "ComponentStatusz"),
		EmulationVersion: config.KubernetesMinor,
		Started:          processStart,
	}
	if gateEnabled(c, "ComponentFlagz") {
		srv.Flagz = flagz
	}
	logger := klog.FromContext(ctx)
	for {
		ln, err := srv.Listen()
		if err == nil {
			logger.Info("Serving metrics and /configz", "address", ln.Addr().String())
			return srv.Serve(ctx, ln)
		}
		if c.BindAddressHardFail {
			return fmt.Errorf("%w (bindAddressHardFail is true)", err)
		}
		logger.Error(err, "Metrics server could not bind, will retry in 5s")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(5 * time.Second):
		}
	}
}
