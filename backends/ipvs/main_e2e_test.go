//go:build e2e

package ipvs

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/cloudflare/ipvs"
)

// inVMEnv marks a test binary that hack/vm.sh runs: it must not start
// another VM.
const inVMEnv = "KPNG_IPVS_TEST_IN_VM"

// TestMain runs the tests where the kernel has IPVS: here when it does,
// otherwise (the development machines' kernel) the same test binary, with
// the same arguments, in hack/vm.sh's VM booting Debian's stable kernel,
// and exits with its status. So `go test -tags e2e ./backends/ipvs` (and
// hack/test.sh) runs the kernel tests everywhere, never skips them.
func TestMain(m *testing.M) {
	if err := ipvsAvailable(); err != nil && os.Getenv(inVMEnv) == "" {
		os.Exit(runInVM(err))
	}
	os.Exit(m.Run())
}

// ipvsAvailable opens IPVS's generic netlink family (loading ip_vs when
// it is a module).
func ipvsAvailable() error {
	c, err := ipvs.New()
	if err != nil {
		return err
	}
	return c.(io.Closer).Close()
}

func runInVM(why error) int {
	vm, err := filepath.Abs(filepath.Join("..", "..", "hack", "vm.sh"))
	if err == nil {
		_, err = os.Stat(vm)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "no IPVS in this kernel (%v), and no hack/vm.sh to run the tests in a VM: %v\n", why, err)
		return 1
	}
	fmt.Printf("no IPVS in this kernel (%v): running the tests in hack/vm.sh's VM\n", why)
	cmd := exec.Command(vm, append([]string{os.Args[0]}, os.Args[1:]...)...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.Env = append(os.Environ(), inVMEnv+"=1", "VM_MODULES=ip_vs nf_conntrack")
	// Killed (go test's timeout), this process takes the VM along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return exit.ExitCode()
		}
		fmt.Fprintf(os.Stderr, "hack/vm.sh: %v\n", err)
		return 1
	}
	return 0
}
