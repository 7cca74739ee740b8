package netlab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// StopGrace is how long Stop waits after SIGTERM before sending SIGKILL.
const StopGrace = 5 * time.Second

// Process is a long-running command in a namespace, e.g. the proxy under
// test in a node. It is started with `ip netns exec`, which execs the command
// (so the pid is the command's own), and it dies with the test process
// (PR_SET_PDEATHSIG), so an aborted run leaves no proxy behind.
type Process struct {
	// Argv is the command line, without the `ip netns exec` prefix.
	Argv []string
	ns   *Netns
	opts procOptions

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current run exited
	err  error         // the current run's exit error, once done
	out  syncBuffer    // output of every run, with a header per run
	runs int
	from int // offset in out where the current run's own output starts
}

// Start starts argv in the namespace. Its output (stdout and stderr) is kept
// for [Process.Output]. Prefer [Node.Start] in tests: it stops the process
// and logs its output on failure at teardown.
func (n *Netns) Start(argv ...string) (*Process, error) {
	return n.start(procOptions{}, argv...)
}

// procOptions are how a process is started beyond its namespace.
type procOptions struct {
	// cgroup, if set, is the cgroup v2 the process is born in
	// (clone3 CLONE_INTO_CGROUP): every socket it opens is that cgroup's.
	cgroup string
	// env is added to the test process's environment.
	env []string
	// files are passed as file descriptors 3, 4, ... (first run only).
	files []*os.File
}

func (n *Netns) start(opts procOptions, argv ...string) (*Process, error) {
	p := &Process{Argv: argv, ns: n, opts: opts}
	if err := p.start(); err != nil {
		return nil, err
	}
	p.opts.files = nil
	return p, nil
}

func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.runs++
	fmt.Fprintf(&p.out, "=== run %d: %s\n", p.runs, strings.Join(p.Argv, " "))
	p.from = p.out.len()
	cmd := p.ns.Command(context.Background(), p.Argv...)
	cmd.Stdout = &p.out
	cmd.Stderr = &p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if p.opts.env != nil {
		cmd.Env = append(os.Environ(), p.opts.env...)
	}
	cmd.ExtraFiles = p.opts.files
	if p.opts.cgroup != "" {
		cg, err := os.Open(p.opts.cgroup)
		if err != nil {
			return fmt.Errorf("netns %s: start %s: %w", p.ns.Name, strings.Join(p.Argv, " "), err)
		}
		defer cg.Close() // the child has its own reference once started
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, int(cg.Fd())
	}
	done := make(chan struct{})
	started := make(chan error, 1)
	// The parent-death signal fires when the thread that forked the child
	// exits, not the process. Go threads do exit: Netns.Do locks a
	// goroutine to whatever thread it runs on and lets the runtime discard
	// that thread, which may be the very one that forked a proxy, killing
	// it mid-test. So the child is forked from a thread kept locked, hence
	// alive and never lent to Do, until the child exits.
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		err := cmd.Wait()
		p.mu.Lock()
		if p.cmd == cmd {
			p.err = err
		}
		p.mu.Unlock()
		fmt.Fprintf(&p.out, "=== run exited: %v\n", exitString(err))
		close(done)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("netns %s: start %s: %w", p.ns.Name, strings.Join(p.Argv, " "), err)
	}
	p.cmd, p.done, p.err = cmd, done, nil
	return nil
}

func exitString(err error) string {
	if err == nil {
		return "status 0"
	}
	return err.Error()
}

// Pid is the process id of the current run.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd.Process.Pid
}

// Exited is closed when the current run exits.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Running reports whether the current run has not exited.
func (p *Process) Running() bool {
	select {
	case <-p.Exited():
		return false
	default:
		return true
	}
}

// Err is the current run's exit error (nil for status 0), once it exited.
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Output is everything every run printed, each run under a header line.
func (p *Process) Output() string { return p.out.String() }

// Stop sends SIGTERM, waits up to StopGrace, then SIGKILL, and returns once
// the process exited. Stopping a stopped process is a no-op. The error says
// only whether it could be stopped; see Err for how it exited.
func (p *Process) Stop() error {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	select {
	case <-done:
		return nil
	default:
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s: %w", strings.Join(p.Argv, " "), err)
	}
	select {
	case <-done:
		return nil
	case <-time.After(StopGrace):
	}
	fmt.Fprintf(&p.out, "=== no exit %v after SIGTERM: SIGKILL\n", StopGrace)
	_ = cmd.Process.Kill()
	select {
	case <-done:
		return nil
	case <-time.After(StopGrace):
		return fmt.Errorf("stop %s: pid %d survived SIGKILL", strings.Join(p.Argv, " "), cmd.Process.Pid)
	}
}

// Restart stops the process (if running) and starts it again with the same
// command line, e.g. to check that a proxy restart does not drop traffic.
func (p *Process) Restart() error {
	if err := p.Stop(); err != nil {
		return err
	}
	return p.start()
}

// Start starts argv in the node's namespace as a long-running process owned
// by the lab: at teardown it is stopped, and its output is logged if the test
// failed. It fails the test if the command cannot be started.
func (n *Node) Start(t testing.TB, argv ...string) *Process {
	t.Helper()
	p, err := n.NS.Start(argv...)
	if err != nil {
		t.Fatalf("node %s: %v", n.Name, err)
	}
	n.lab.mu.Lock()
	n.lab.procs = append(n.lab.procs, p)
	n.lab.mu.Unlock()
	return p
}

// WaitOutput waits until the current run's output contains substr, e.g. a
// proxy's "synced" log line, and fails the test if that takes longer than
// within or if the run exits first. It wakes on every write, not on a timer.
func (p *Process) WaitOutput(t testing.TB, substr string, within time.Duration) {
	t.Helper()
	p.WaitOutputSince(t, 0, substr, within)
}

// Mark returns the current end of the process's output, for
// WaitOutputSince: take it before causing what should be logged.
func (p *Process) Mark() int { return p.out.len() }

// WaitOutputSince is WaitOutput for output printed after mark (see Mark),
// e.g. the sync that follows a change of the cluster state.
func (p *Process) WaitOutputSince(t testing.TB, mark int, substr string, within time.Duration) {
	t.Helper()
	if p.AwaitOutput(mark, func(out string) bool { return strings.Contains(out, substr) }, within) {
		return
	}
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	select {
	case <-done:
		t.Fatalf("process %s exited before printing %q; output:\n%s", strings.Join(p.Argv, " "), substr, p.Output())
	default:
		t.Fatalf("process %s: no %q in its output within %v; output:\n%s", strings.Join(p.Argv, " "), substr, within, p.Output())
	}
}

// AwaitOutput waits until match accepts the output printed after mark (see
// Mark), waking on every write, and reports whether it did within within
// (or before the run exited). Unlike WaitOutputSince, a miss is the
// caller's to judge: a log line the test may use but need not get.
func (p *Process) AwaitOutput(mark int, match func(out string) bool, within time.Duration) bool {
	return p.AwaitRunOutput(mark, func(run string, since int) bool { return match(run[since:]) }, within)
}

// AwaitRunOutput is AwaitOutput for a match that reads the current run's
// whole output: it gets that output and the offset in it where the output
// printed after mark begins.
func (p *Process) AwaitRunOutput(mark int, match func(run string, since int) bool, within time.Duration) bool {
	p.mu.Lock()
	from, done := p.from, p.done
	p.mu.Unlock()
	mark = max(from, mark)
	try := func(out string) bool {
		run := out[min(from, len(out)):]
		return match(run, min(mark-from, len(run)))
	}
	timeout := time.After(within)
	for {
		out, changed := p.out.snapshot()
		if try(out) {
			return true
		}
		select {
		case <-changed:
		case <-done:
			out, _ := p.out.snapshot()
			return try(out)
		case <-timeout:
			return false
		}
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of a process's
// stdout and stderr copiers, that tells waiters about writes.
type syncBuffer struct {
	mu      sync.Mutex
	b       bytes.Buffer
	changed chan struct{} // closed (and replaced) by each write
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
	return s.b.Write(p)
}

func (s *syncBuffer) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Len()
}

// snapshot returns the content and a channel closed at the next write.
func (s *syncBuffer) snapshot() (string, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.b.String(), s.changed
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
