// Command bench-fanout measures the globalv1 fan-out: one kpng brain process
// (a cluster store of --services Services, served by package server on a
// unix socket) and --agents node agents, each with its own gRPC connection,
// following the cluster as `kpng api` does.
//
// The brain runs in a child process so that its CPU time and memory are its
// own, and it counts the bytes it writes on its connections (a counting
// listener: what goes on the wire, HTTP/2 framing included). For each of
// --changes changes (one endpoint of one EndpointSlice), it reports the time
// from the change to every agent holding it, the brain's CPU time, and the
// bytes the brain sent for it.
//
// Two kinds of agents share the connection count:
//
//   - --full-agents complete node agents: remote.Source copies the cluster
//     into their own store and the brain computes their node's view
//     (local.Feed), exactly as `kpng api --node-name N to-local`;
//     such an agent holds a change once its node's view has it;
//   - the others are light agents: clusterwatch.Watch receives and decodes
//     every batch, as an agent does, but keeps nothing. A thousand copies of
//     a 10,000-Service cluster (with a brain view each) do not fit one test
//     machine, and the cost under test is the serving brain's.
//
// With --api localv1 the brain computes every agent's node view instead,
// and each agent holds its view (client.Feed, as `kpng local`).
//
// Run it once per cluster size (--services 1000,10000) to show that the
// bytes of a change do not depend on the cluster's size:
//
//	go run ./hack/bench-fanout --services 1000,10000 --agents 1000
//
// With --json FILE it also writes its figures as JSON, for hack/bench,
// which runs it as part of hack/bench.sh.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"k8s.io/klog/v2"

	"github.com/kpng/kpng/api/globalv1"
	"github.com/kpng/kpng/brain"
	"github.com/kpng/kpng/client"
	"github.com/kpng/kpng/client/clusterwatch"
	"github.com/kpng/kpng/cluster"
	"github.com/kpng/kpng/local"
	"github.com/kpng/kpng/server"
	"github.com/kpng/kpng/source/remote"
)

func main() {
	services := flag.String("services", "1000,10000", "cluster sizes to measure, in Services (one EndpointSlice each), comma-separated")
	endpoints := flag.Int("endpoints", 3, "endpoints per EndpointSlice")
	agents := flag.Int("agents", 1000, "node agents (one gRPC connection each)")
	full := flag.Int("full-agents", 10, "of the agents, how many are complete node agents (own store and brain view); globalv1 only")
	api := flag.String("api", "globalv1", "globalv1: agents follow the cluster (kpng api); localv1: the brain computes each agent's node view, which the agent holds (kpng local)")
	changes := flag.Int("changes", 50, "EndpointSlice changes to measure")
	parallel := flag.Int("initial-parallel", 50, "agents receiving their first full state at once (bounds this process's memory)")
	profile := flag.String("brain-cpuprofile", "", "write a CPU profile of the brain during the changes (the last cluster size's) to this file")
	jsonOut := flag.String("json", "", "also write the figures as JSON to this file (hack/bench reads it)")
	serve := flag.String("serve", "", "internal: run the brain on this socket")
	flag.Parse()
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	if *serve != "" {
		n, err := strconv.Atoi(*services)
		if err == nil {
			err = runServer(*serve, n, *endpoints, *agents)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "server:", err)
			os.Exit(1)
		}
		return
	}
	cfg := config{endpoints: *endpoints, agents: *agents, full: min(*full, *agents), changes: *changes, parallel: max(*parallel, 1), profile: *profile, api: *api}
	switch *api {
	case "globalv1":
	case "localv1":
		cfg.full = cfg.agents // every agent holds its node's view
	default:
		fmt.Fprintf(os.Stderr, "bench-fanout: --api %q: globalv1 or localv1\n", *api)
		os.Exit(2)
	}
	var results []result
	for _, s := range strings.Split(*services, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench-fanout: bad --services %q\n", s)
			os.Exit(2)
		}
		cfg.services = n
		r, err := runBench(cfg)
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench-fanout:", err)
			os.Exit(1)
		}
		results = append(results, r)
	}
	printTable(cfg, results)
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, cfg, results); err != nil {
			fmt.Fprintln(os.Stderr, "bench-fanout:", err)
			os.Exit(1)
		}
	}
}

// slice is Service i's EndpointSlice; its first endpoint's zone is the
// marker of the change that wrote it (0: the initial state).
func slice(i, eps, nodes, marker int) *globalv1.EndpointSlice {
	sl := &globalv1.EndpointSlice{
		Namespace: "ns", Name: fmt.Sprintf("svc-%d-abcde", i), ServiceName: fmt.Sprintf("svc-%d", i),
		AddressType: globalv1.AddressType_IPV4,
		Ports:       []*globalv1.EndpointPort{{Name: proto.String("http"), Protocol: globalv1.Protocol_TCP, Port: 8080}},
	}
	for j := range eps {
		sl.Endpoints = append(sl.Endpoints, &globalv1.Endpoint{
			Addresses: []string{fmt.Sprintf("10.%d.%d.%d", 1+j, i/256%256, i%256)},
			NodeName:  fmt.Sprintf("node-%d", (i+j)%nodes),
			Zone:      fmt.Sprintf("zone-%d", j%3),
		})
	}
	sl.Endpoints[0].Zone = fmt.Sprintf("change-%d", marker)
	return sl
}

// target is the Service that change n touches.
func target(n, services int) int { return (n * 7919) % services }

// marker returns the change number in an endpoint's zone, or -1.
func marker(zone string) int {
	s, ok := strings.CutPrefix(zone, "change-")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return -1
	}
	return n
}

// countingListener counts the bytes written to and read from its
// connections: the brain's traffic on the wire.
type countingListener struct {
	net.Listener
	written, read *atomic.Int64
}

func (l countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return countingConn{Conn: c, written: l.written, read: l.read}, nil
}

type countingConn struct {
	net.Conn
	written, read *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.written.Add(int64(n))
	return n, err
}

func (c countingConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.read.Add(int64(n))
	return n, err
}

// runServer is the child, the brain: a store served on sock. It reads
// commands on stdin, one per line:
//
//	change N      applies change N, answers "N <unix nanoseconds before the change>"
//	bytes         answers "<bytes written> <bytes read>" on the wire so far
//	profile FILE  writes a CPU profile to FILE until stdin closes
func runServer(sock string, services, eps, nodes int) error {
	store := cluster.NewStore()
	store.Update(func(tx *cluster.Tx) {
		for i := range services {
			tx.SetService(&globalv1.Service{
				Namespace: "ns", Name: fmt.Sprintf("svc-%d", i), Type: globalv1.ServiceType_CLUSTER_IP,
				ClusterIps: []string{fmt.Sprintf("10.96.%d.%d", i/256%256, i%256)},
				Ports:      []*globalv1.ServicePort{{Name: "http", Protocol: globalv1.Protocol_TCP, Port: 80, TargetPort: 8080}},
			})
			tx.SetEndpointSlice(slice(i, eps, nodes, 0))
		}
		for n := range nodes {
			tx.SetNode(&globalv1.Node{Name: fmt.Sprintf("node-%d", n), Zone: fmt.Sprintf("zone-%d", n%3),
				Addresses: []string{fmt.Sprintf("192.168.%d.%d", n/256, n%256)}})
		}
		tx.SetServiceCIDR(&globalv1.ServiceCIDR{Name: "kubernetes", Cidrs: []string{"10.96.0.0/16"}})
	})
	store.MarkSynced()
	lis, gopts, err := server.Listen("unix://"+sock, server.ListenOptions{})
	if err != nil {
		return err
	}
	var written, read atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		defer cancel() // stdin closed: the bench is over
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			f := strings.Fields(in.Text())
			switch {
			case len(f) == 2 && f[0] == "change":
				n, _ := strconv.Atoi(f[1])
				at := time.Now()
				store.Update(func(tx *cluster.Tx) { tx.SetEndpointSlice(slice(target(n, services), eps, nodes, n)) })
				fmt.Printf("%d %d\n", n, at.UnixNano())
			case len(f) == 1 && f[0] == "bytes":
				fmt.Printf("%d %d\n", written.Load(), read.Load())
			case len(f) == 2 && f[0] == "profile":
				out, err := os.Create(f[1])
				if err == nil {
					err = pprof.StartCPUProfile(out)
				}
				fmt.Println("profiling", err)
				defer pprof.StopCPUProfile()
			default:
				fmt.Printf("unknown command %q\n", in.Text())
			}
		}
	}()
	fmt.Println("ready")
	// Room for every agent's node view (localv1), however many there are.
	return server.New(store, server.Options{MaxNodeViews: max(nodes, server.DefaultMaxNodeViews)}).Serve(ctx, countingListener{Listener: lis, written: &written, read: &read}, gopts...)
}

// procStats reads a process's CPU time and memory from /proc.
func procStats(pid int) (cpu time.Duration, rss, peak int64) {
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		cpu = time.Duration(ut+st) * time.Second / 100 // USER_HZ
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) >= 2 && f[0] == "VmRSS:" {
				rss, _ = strconv.ParseInt(f[1], 10, 64)
			}
			if len(f) >= 2 && f[0] == "VmHWM:" {
				peak, _ = strconv.ParseInt(f[1], 10, 64)
			}
		}
	}
	return cpu, rss * 1024, peak * 1024
}

type config struct {
	services, endpoints, agents, full, changes, parallel int
	profile, api                                         string
}

// result is one cluster size's measurements.
type result struct {
	services int

	initialTime            time.Duration
	initialCPU             time.Duration
	initialBytesPerAgent   int64
	rssIdle, rssSynced     int64 // brain, before the agents and once they all synced
	peakSynced, rssChanged int64
	agentsRSS              int64 // this process, once the agents synced

	// allAgents[i]: change i to the last agent holding it; perAgent: every
	// agent's time; full: the complete agents' times (to their node view).
	allAgents, perAgent, full []time.Duration
	cpuPerChange              time.Duration
	bytesPerChange            int64 // written by the brain, all agents
	readPerChange             int64 // received by the brain (the agents' requests)
}

// brainProc is the child process.
type brainProc struct {
	cmd   *exec.Cmd
	in    io.WriteCloser
	lines *bufio.Scanner
}

func (b *brainProc) ask(cmd string) ([]string, error) {
	if _, err := fmt.Fprintln(b.in, cmd); err != nil {
		return nil, err
	}
	if !b.lines.Scan() {
		return nil, errors.New("the brain process ended")
	}
	return strings.Fields(b.lines.Text()), nil
}

func (b *brainProc) bytes() (written, read int64, err error) {
	f, err := b.ask("bytes")
	if err != nil {
		return 0, 0, err
	}
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("bytes: %q", f)
	}
	written, _ = strconv.ParseInt(f[0], 10, 64)
	read, _ = strconv.ParseInt(f[1], 10, 64)
	return written, read, nil
}

func startBrain(sock string, c config) (*brainProc, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(self, "--serve", sock, "--services", strconv.Itoa(c.services),
		"--endpoints", strconv.Itoa(c.endpoints), "--agents", strconv.Itoa(c.agents))
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	b := &brainProc{cmd: cmd, in: in, lines: bufio.NewScanner(out)}
	if !b.lines.Scan() || b.lines.Text() != "ready" {
		b.stop()
		return nil, fmt.Errorf("the brain did not start: %q", b.lines.Text())
	}
	return b, nil
}

func (b *brainProc) stop() {
	b.in.Close() // the child ends when its stdin does
	_ = b.cmd.Wait()
}

// seen is an agent's report: it holds change n since at.
type seen struct {
	change int
	at     time.Time
	full   bool
}

func runBench(c config) (result, error) {
	r := result{services: c.services}
	dir, err := os.MkdirTemp("", "bench-fanout-")
	if err != nil {
		return r, err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "kpng.sock")
	brainP, err := startBrain(sock, c)
	if err != nil {
		return r, err
	}
	defer brainP.stop()
	pid := brainP.cmd.Process.Pid
	cpu0, rssIdle, _ := procStats(pid)
	r.rssIdle = rssIdle

	// The agents stop (and close their connections) before the brain does.
	ctx, cancel := context.WithCancel(context.Background())
	var running sync.WaitGroup
	defer func() {
		cancel()
		running.Wait()
	}()

	reports := make(chan seen, c.agents*4)
	initial := make(chan struct{}, c.parallel) // a slot per agent receiving its full state
	var synced sync.WaitGroup
	start := time.Now()
	for a := range c.agents {
		synced.Add(1)
		initial <- struct{}{}
		first := sync.OnceFunc(func() { <-initial; synced.Done() })
		running.Add(1)
		if c.api == "localv1" {
			go func() {
				defer running.Done()
				nodeAgent(ctx, "unix://"+sock, fmt.Sprintf("node-%d", a), first, reports)
			}()
			continue
		}
		if a < c.full {
			go func() {
				defer running.Done()
				fullAgent(ctx, "unix://"+sock, fmt.Sprintf("node-%d", a), first, reports)
			}()
			continue
		}
		conn, err := client.Dial("unix://" + sock)
		if err != nil {
			running.Done()
			return r, err
		}
		go func() {
			defer running.Done()
			defer conn.Close()
			lightAgent(ctx, conn, first, reports)
		}()
	}
	synced.Wait()
	r.initialTime = time.Since(start)
	cpu1, rssSynced, peak := procStats(pid)
	r.initialCPU, r.rssSynced, r.peakSynced = cpu1-cpu0, rssSynced, peak
	w0, rd0, err := brainP.bytes()
	if err != nil {
		return r, err
	}
	r.initialBytesPerAgent = w0 / int64(c.agents)
	runtime.GC()
	_, r.agentsRSS, _ = procStats(os.Getpid())

	if c.profile != "" {
		if f, err := brainP.ask("profile " + c.profile); err != nil || len(f) != 2 || f[1] != "<nil>" {
			return r, fmt.Errorf("profiling the brain: %q %v", f, err)
		}
	}
	cpuStart, _, _ := procStats(pid)
	for n := 1; n <= c.changes; n++ {
		f, err := brainP.ask(fmt.Sprintf("change %d", n))
		if err != nil {
			return r, err
		}
		if len(f) != 2 || f[0] != strconv.Itoa(n) {
			return r, fmt.Errorf("change %d: the brain answered %q", n, f)
		}
		ns, _ := strconv.ParseInt(f[1], 10, 64)
		at := time.Unix(0, ns)
		got, last := 0, time.Duration(0)
		timeout := time.NewTimer(time.Minute)
		for got < c.agents {
			select {
			case s := <-reports:
				if s.change != n {
					continue // a late duplicate of an earlier change
				}
				d := s.at.Sub(at)
				got++
				last = max(last, d)
				r.perAgent = append(r.perAgent, d)
				if s.full {
					r.full = append(r.full, d)
				}
			case <-timeout.C:
				return r, fmt.Errorf("change %d: only %d of %d agents held it after a minute", n, got, c.agents)
			}
		}
		timeout.Stop()
		r.allAgents = append(r.allAgents, last)
		// Changes are measured one at a time: let every agent ask for its
		// next batch (a light agent asks as soon as it has decoded one).
		time.Sleep(50 * time.Millisecond)
	}
	cpuEnd, rssEnd, _ := procStats(pid)
	w1, rd1, err := brainP.bytes()
	if err != nil {
		return r, err
	}
	r.cpuPerChange = (cpuEnd - cpuStart) / time.Duration(c.changes)
	r.rssChanged = rssEnd
	r.bytesPerChange = (w1 - w0) / int64(c.changes)
	r.readPerChange = (rd1 - rd0) / int64(c.changes)
	return r, nil
}

// lightAgent follows the cluster and reports the changes it receives.
func lightAgent(ctx context.Context, conn *grpc.ClientConn, first func(), reports chan<- seen) {
	started := false
	_ = clusterwatch.Watch(ctx, conn, func(b clusterwatch.Batch) error {
		if !started {
			started = true
			first()
			return nil
		}
		now := time.Now()
		for _, op := range b.Ops {
			if sl := op.GetSetEndpointSlice(); sl != nil {
				if n := marker(sl.Endpoints[0].Zone); n > 0 {
					reports <- seen{change: n, at: now}
				}
			}
		}
		return nil
	})
}

// fullAgent is `kpng api --node-name node to-local`: the cluster copied into
// its own store, and the brain's view of its node computed from it. It
// reports a change once the node's view holds it.
func fullAgent(ctx context.Context, target, node string, first func(), reports chan<- seen) {
	store := cluster.NewStore()
	src := &remote.Source{Target: target}
	go func() { _ = src.Run(ctx, store) }()
	feed := local.NewFeed(store, brain.Options{NodeName: node})
	started := false
	for {
		st, ch, err := feed.Next(ctx)
		if err != nil {
			return // ctx ended
		}
		if !started {
			started = true
			first()
			continue
		}
		now := time.Now()
		for _, k := range ch.Set {
			for _, ep := range st.Services[k].GetEndpoints() {
				if n := marker(ep.Zone); n > 0 {
					reports <- seen{change: n, at: now, full: true}
				}
			}
		}
	}
}

// nodeAgent is `kpng local --api ... --node-name node`: its node's view,
// computed by the brain and received over localv1 (client.Feed), held in
// the feed's state. It reports a change once the view holds it.
func nodeAgent(ctx context.Context, target, node string, first func(), reports chan<- seen) {
	feed, err := client.NewFeed(target, node)
	if err != nil {
		return
	}
	defer feed.Close()
	started := false
	for {
		st, ch, err := feed.Next(ctx)
		if err != nil {
			return // ctx ended
		}
		if !started {
			started = true
			first()
			continue
		}
		now := time.Now()
		for _, k := range ch.Set {
			for _, ep := range st.Services[k].GetEndpoints() {
				if n := marker(ep.Zone); n > 0 {
					reports <- seen{change: n, at: now, full: true}
				}
			}
		}
	}
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s)-1)*q)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }

func mib(b int64) string { return fmt.Sprintf("%d MiB", b>>20) }

func printTable(c config, rs []result) {
	if c.api == "localv1" {
		fmt.Printf("fan-out over localv1: %d node agents, each holding its node's view computed by the brain, over a unix socket, %d endpoints per Service, %d single-endpoint changes\n\n",
			c.agents, c.endpoints, c.changes)
	} else {
		fmt.Printf("fan-out over globalv1: %d agents (%d complete with their own brain view, %d light) over a unix socket, %d endpoints per Service, %d single-endpoint changes\n\n",
			c.agents, c.full, c.agents-c.full, c.endpoints, c.changes)
	}
	fmt.Println("| Services | change to all agents p50 / p99 / max | one agent p50 / p99 | complete agents' node view p50 / p99 | brain CPU per change | brain bytes sent per change (per agent) | initial full state: time, brain CPU, bytes per agent | brain RSS idle / synced (peak) / after changes |")
	fmt.Println("|---|---|---|---|---|---|---|---|")
	for _, r := range rs {
		fmt.Printf("| %d | %s / %s / %s | %s / %s | %s / %s | %s | %d B (%d B) | %s, %s, %d KiB | %s / %s (%s) / %s |\n",
			r.services,
			ms(quantile(r.allAgents, 0.5)), ms(quantile(r.allAgents, 0.99)), ms(quantile(r.allAgents, 1)),
			ms(quantile(r.perAgent, 0.5)), ms(quantile(r.perAgent, 0.99)),
			ms(quantile(r.full, 0.5)), ms(quantile(r.full, 0.99)),
			ms(r.cpuPerChange),
			r.bytesPerChange, r.bytesPerChange/int64(c.agents),
			r.initialTime.Round(time.Millisecond), r.initialCPU.Round(time.Millisecond), r.initialBytesPerAgent>>10,
			mib(r.rssIdle), mib(r.rssSynced), mib(r.peakSynced), mib(r.rssChanged))
	}
	if len(rs) >= 2 {
		a, b := rs[0], rs[len(rs)-1]
		fmt.Printf("\n%dx the Services: the initial state is %.1fx the bytes, a one-endpoint change %.2fx\n",
			b.services/max(a.services, 1), float64(b.initialBytesPerAgent)/float64(max(a.initialBytesPerAgent, 1)),
			float64(b.bytesPerChange)/float64(max(a.bytesPerChange, 1)))
	}
	for _, r := range rs {
		fmt.Printf("agents' process RSS once synced at %d Services: %s\n", r.services, mib(r.agentsRSS))
	}
	fmt.Printf("(bytes read by the brain per change, the agents' requests and acknowledgements: %d B)\n", rs[len(rs)-1].readPerChange)
}

// jsonRun is what --json writes: the settings, and each cluster size's
// figures. hack/bench (fanout.go) reads it; the two spell the fields
// alike.
type jsonRun struct {
	API                 string     `json:"api"`
	Agents              int        `json:"agents"`
	FullAgents          int        `json:"full_agents"`
	EndpointsPerService int        `json:"endpoints_per_service"`
	Changes             int        `json:"changes"`
	Sizes               []jsonSize `json:"sizes"`
}

// jsonSize is one cluster size's figures. Times are in milliseconds (the
// initial state's in seconds), memory and traffic in bytes.
type jsonSize struct {
	Services int `json:"services"`
	// ChangeToAllAgentsMs has, for each change in order, the time from
	// the store write to the last agent holding it.
	ChangeToAllAgentsMs []float64 `json:"change_to_all_agents_ms"`
	OneAgentP50Ms       float64   `json:"one_agent_p50_ms"`
	OneAgentP99Ms       float64   `json:"one_agent_p99_ms"`
	FullAgentsP50Ms     float64   `json:"full_agents_p50_ms"`
	FullAgentsP99Ms     float64   `json:"full_agents_p99_ms"`
	BrainCPUPerChangeMs float64   `json:"brain_cpu_per_change_ms"`
	// BrainBytesSentPerChange is written by the brain to all agents;
	// BrainBytesReadPerChange is what it received (their requests).
	BrainBytesSentPerChange int64   `json:"brain_bytes_sent_per_change"`
	BrainBytesReadPerChange int64   `json:"brain_bytes_read_per_change"`
	InitialSeconds          float64 `json:"initial_seconds"`
	InitialBrainCPUSeconds  float64 `json:"initial_brain_cpu_seconds"`
	InitialBytesPerAgent    int64   `json:"initial_bytes_per_agent"`
	// The brain's VmRSS with its store loaded and no agent yet, once
	// every agent had its initial state (with VmHWM then), and after
	// the changes; AgentsRSSBytes is this process's, the agents'.
	BrainRSSIdleBytes         int64 `json:"brain_rss_idle_bytes"`
	BrainRSSSyncedBytes       int64 `json:"brain_rss_synced_bytes"`
	BrainPeakRSSSyncedBytes   int64 `json:"brain_peak_rss_synced_bytes"`
	BrainRSSAfterChangesBytes int64 `json:"brain_rss_after_changes_bytes"`
	AgentsRSSBytes            int64 `json:"agents_rss_bytes"`
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func writeJSON(file string, c config, rs []result) error {
	run := jsonRun{API: c.api, Agents: c.agents, FullAgents: c.full, EndpointsPerService: c.endpoints, Changes: c.changes}
	for _, r := range rs {
		s := jsonSize{Services: r.services,
			OneAgentP50Ms: msOf(quantile(r.perAgent, 0.5)), OneAgentP99Ms: msOf(quantile(r.perAgent, 0.99)),
			FullAgentsP50Ms: msOf(quantile(r.full, 0.5)), FullAgentsP99Ms: msOf(quantile(r.full, 0.99)),
			BrainCPUPerChangeMs:     msOf(r.cpuPerChange),
			BrainBytesSentPerChange: r.bytesPerChange, BrainBytesReadPerChange: r.readPerChange,
			InitialSeconds: r.initialTime.Seconds(), InitialBrainCPUSeconds: r.initialCPU.Seconds(),
			InitialBytesPerAgent: r.initialBytesPerAgent,
			BrainRSSIdleBytes:    r.rssIdle, BrainRSSSyncedBytes: r.rssSynced, BrainPeakRSSSyncedBytes: r.peakSynced,
			BrainRSSAfterChangesBytes: r.rssChanged, AgentsRSSBytes: r.agentsRSS}
		for _, d := range r.allAgents {
			s.ChangeToAllAgentsMs = append(s.ChangeToAllAgentsMs, msOf(d))
		}
		run.Sizes = append(run.Sizes, s)
	}
	b, err := json.MarshalIndent(run, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(file, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--json: %w", err)
	}
	return nil
}
