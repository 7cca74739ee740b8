package main

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestImage builds kpng's image twice with hack/image.sh and checks that
// the two tarballs are the same bytes (same digest), that the tools the
// backends run start inside its root filesystem, and that containerd
// imports it under its name.
func TestImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: it chroots into the image and starts a containerd (run hack/test.sh as root)")
	}
	dir := t.TempDir()
	first, second := filepath.Join(dir, "a.tar"), filepath.Join(dir, "b.tar")
	ref, digest := buildImage(t, first)
	ref2, digest2 := buildImage(t, second)
	if ref != ref2 || digest != digest2 {
		t.Fatalf("two builds of the same commit differ: %s %s, then %s %s", ref, digest, ref2, digest2)
	}
	if a, b := fileHash(t, first), fileHash(t, second); a != b {
		t.Fatalf("the two tarballs differ: sha256 %s and %s", a, b)
	}
	version := ref[strings.LastIndex(ref, ":")+1:]

	rootfs := unpack(t, first, filepath.Join(dir, "rootfs"))
	for _, tc := range []struct {
		argv []string
		want string
	}{
		{[]string{"/usr/local/bin/kpng", "--version"}, "kpng " + version},
		{[]string{"/usr/sbin/iptables", "--version"}, "(nf_tables)"},
		{[]string{"/usr/sbin/ip6tables-nft-restore", "--version"}, "(nf_tables)"},
		{[]string{"/usr/sbin/iptables-legacy-save", "--version"}, "(legacy)"},
		{[]string{"/usr/sbin/conntrack", "--version"}, "conntrack v"},
		{[]string{"/usr/sbin/nft", "--version"}, "nftables v"},
	} {
		out, err := exec.Command("chroot", append([]string{rootfs}, tc.argv...)...).CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("in the image, %s: %v: %q; want output containing %q", strings.Join(tc.argv, " "), err, out, tc.want)
		}
	}

	imported := containerdImport(t, first)
	if !strings.Contains(imported, ref) || !strings.Contains(imported, digest) {
		t.Errorf("containerd's images after import:\n%s\nwant %s with digest %s", imported, ref, digest)
	}
}

// buildImage runs hack/image.sh and returns the name and digest it prints.
func buildImage(t *testing.T, out string) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "../image.sh", "--output", out)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/image.sh: %v\n%s%s", err, stdout.String(), stderr.String())
	}
	for _, line := range strings.Split(stdout.String(), "\n") {
		if f := strings.Fields(line); len(f) == 2 && strings.HasPrefix(f[1], "sha256:") {
			return f[0], f[1]
		}
	}
	t.Fatalf("hack/image.sh printed no name and digest:\n%s", stdout.String())
	return "", ""
}

func fileHash(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// unpack extracts the image's one layer from the tarball into dir.
func unpack(t *testing.T, tarball, dir string) string {
	t.Helper()
	files := readTar(t, tarball)
	var manifest []struct{ Layers []string }
	if err := json.Unmarshal(files["manifest.json"], &manifest); err != nil || len(manifest) != 1 || len(manifest[0].Layers) != 1 {
		t.Fatalf("manifest.json: %v: %s", err, files["manifest.json"])
	}
	if _, ok := files["index.json"]; !ok {
		t.Fatal("no index.json at the tarball's root")
	}
	zr, err := gzip.NewReader(bytes.NewReader(files[manifest[0].Layers[0]]))
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, filepath.FromSlash(h.Name))
		switch h.Typeflag {
		case tar.TypeDir:
			err = os.MkdirAll(p, 0o755)
		case tar.TypeSymlink:
			err = os.Symlink(h.Linkname, p)
		case tar.TypeReg:
			var b []byte
			if b, err = io.ReadAll(tr); err == nil {
				err = os.WriteFile(p, b, os.FileMode(h.Mode)&0o7777)
			}
		default:
			err = fmt.Errorf("unexpected type %q", h.Typeflag)
		}
		if err != nil {
			t.Fatalf("layer entry %s: %v", h.Name, err)
		}
	}
	return dir
}

func readTar(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := map[string][]byte{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return files
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			files[h.Name] = b
		}
	}
}

// containerdImport starts a containerd of its own (its own root, state and
// socket under a temporary directory, no CRI), imports the tarball with
// ctr into the k8s.io namespace as a node's kubelet would find it, and
// returns `ctr images ls`.
func containerdImport(t *testing.T, tarball string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "kpng-containerd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "containerd.sock")
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.grpc.v1.cri"]
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), sock, sock+".ttrpc")
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	d := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	d.Stdout, d.Stderr = &log, &log
	if err := d.Start(); err != nil {
		t.Fatalf("containerd (hack/install-test-deps.sh installs it): %v", err)
	}
	t.Cleanup(func() { d.Process.Kill(); d.Wait() })

	ctr := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
		return string(out), err
	}
	// ctr version answers once containerd serves its socket.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := ctr("version"); err == nil {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("containerd did not answer within 30s: %v\n%s", err, log.String())
		}
		time.Sleep(100 * time.Millisecond) // polling a socket that has no readiness event
	}
	if out, err := ctr("images", "import", tarball); err != nil {
		t.Fatalf("ctr images import: %v\n%s", err, out)
	}
	out, err := ctr("images", "ls")
	if err != nil {
		t.Fatalf("ctr images ls: %v\n%s", err, out)
	}
	return out
}
