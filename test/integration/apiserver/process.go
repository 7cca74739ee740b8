package apiserver

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// process is one running program, in its own process group, with its output
// appended to a log file.
type process struct {
	name    string
	logPath string
	// logStart is where this run's output begins in the log, which earlier
	// runs (retries, restarts) wrote to before it.
	logStart int64
	cmd      *exec.Cmd
	done     chan struct{} // closed when the program has exited
	err      error         // why it exited; read only after done is closed
}

// startProcess starts path with args, appending its stdout and stderr to
// logPath.
func startProcess(name, logPath, path string, args ...string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("%s: opening log: %w", name, err)
	}
	// The file is shared with the child; the parent's copy is closed below.
	defer logFile.Close()
	st, err := logFile.Stat()
	if err != nil {
		return nil, fmt.Errorf("%s: log: %w", name, err)
	}
	fmt.Fprintf(logFile, "==== %s %s: %s %s\n", time.Now().Format(time.RFC3339Nano), name, path, strings.Join(args, " "))

	cmd := exec.Command(path, args...)
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Its own group, so that stopping it stops anything it started.
		Setpgid: true,
		// Killed if the test binary dies without running its cleanups
		// (a panic, or go test's -timeout).
		Pdeathsig: syscall.SIGKILL,
	}
	p := &process{name: name, logPath: logPath, logStart: st.Size(), cmd: cmd, done: make(chan struct{})}
	// The parent-death signal fires when the thread that forked the child
	// exits, not the process, and Go threads do exit: a goroutine that
	// ends while locked to its thread (as netlab's Netns.Do does, to leave
	// a network namespace behind) takes the thread with it. Forked from
	// an arbitrary thread, the API server was killed mid-test whenever
	// that thread had later served such a goroutine. So the child is
	// forked from a thread kept locked, hence alive, until it exits.
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("%s: starting %s: %w", name, path, err)
	}
	return p, nil
}

// exitError returns why the process exited, or nil while it runs.
func (p *process) exitError() error {
	select {
	case <-p.done:
		if p.err == nil {
			return fmt.Errorf("%s exited", p.name)
		}
		return fmt.Errorf("%s exited: %w", p.name, p.err)
	default:
		return nil
	}
}

// stop sends SIGTERM to the process group, and SIGKILL if the process is
// still running after grace. It returns once the process has exited.
func (p *process) stop(grace time.Duration) {
	select {
	case <-p.done:
		return // reaped: its pid may already belong to someone else
	default:
	}
	pgid := p.cmd.Process.Pid
	if grace > 0 {
		_ = syscall.Kill(-pgid, syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(grace):
		}
	}
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-p.done
}

// tailLog returns the last n lines of the process's log.
func (p *process) tailLog(n int) string {
	data, err := os.ReadFile(p.logPath)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.logPath, err)
	}
	lines := bytes.Split(bytes.TrimRight(data, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

// addrInUse reports whether this run's output shows that it lost a race for
// one of the free ports it was given. Earlier runs' output is not read: one
// lost race must not make every later failure look like another.
func (p *process) addrInUse() bool {
	f, err := os.Open(p.logPath)
	if err != nil {
		return false
	}
	defer f.Close()
	data, err := io.ReadAll(io.NewSectionReader(f, p.logStart, 1<<62))
	return err == nil && bytes.Contains(data, []byte("address already in use"))
}
