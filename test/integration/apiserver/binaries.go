package apiserver

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
)

// Environment variables that override where the binaries are looked for.
const (
	EnvKubeAPIServer = "KPNG_KUBE_APISERVER"
	EnvEtcd          = "KPNG_ETCD"
)

const (
	modulePath  = "github.com/kpng/kpng"
	installHint = "run hack/install-test-deps.sh at the repository root"
)

// binaries holds the paths of the programs a Server runs.
type binaries struct {
	kubeAPIServer string
	etcd          string
}

// findBinaries locates kube-apiserver and etcd: the environment overrides
// first, then .cache/bin at the repository root, then (etcd only) PATH, where
// Debian's etcd-server package puts it.
func findBinaries() (binaries, error) {
	var b binaries
	root, rootErr := repoRoot()

	var err error
	b.kubeAPIServer, err = findBinary("kube-apiserver", EnvKubeAPIServer, root, rootErr, false)
	if err != nil {
		return b, err
	}
	b.etcd, err = findBinary("etcd", EnvEtcd, root, rootErr, true)
	return b, err
}

func findBinary(name, env, root string, rootErr error, inPath bool) (string, error) {
	if p := os.Getenv(env); p != "" {
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", env, p, err)
		}
		return p, nil
	}
	var tried []string
	if rootErr == nil {
		p := filepath.Join(root, ".cache", "bin", name)
		if checkExecutable(p) == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	if inPath {
		if p, err := exec.LookPath(name); err == nil {
			return p, nil
		}
		tried = append(tried, "$PATH")
	}
	if rootErr != nil {
		return "", fmt.Errorf("%s not found in %v and %v; %s, or set %s", name, tried, rootErr, installHint, env)
	}
	return "", fmt.Errorf("%s not found in %v: %s, or set %s", name, tried, installHint, env)
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// repoRoot walks up from the working directory (a test's package directory)
// to the directory whose go.mod declares the kpng module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("finding the repository root: %w", err)
	}
	for {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		switch {
		case err == nil && isKpngModule(data):
			return dir, nil
		case err != nil && !errors.Is(err, fs.ErrNotExist):
			return "", fmt.Errorf("finding the repository root: %w", err)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of module %s above the working directory", modulePath)
		}
		dir = parent
	}
}

func isKpngModule(goMod []byte) bool {
	for line := range bytes.Lines(goMod) {
		if f := bytes.Fields(line); len(f) == 2 && string(f[0]) == "module" && string(f[1]) == modulePath {
			return true
		}
	}
	return false
}
