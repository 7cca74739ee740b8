// Command pause is the pod sandbox's process: it sleeps until told to stop.
// It stands in for Kubernetes' build/pause (a C program) in the images
// hack/e2e-node.sh builds, since no registry can be pulled from. As the
// sandbox's PID 1 it also reaps orphaned children, as the C one does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			var ws syscall.WaitStatus
			pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
