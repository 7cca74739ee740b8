// Command mkimage writes a container image tarball (Docker's archive
// format, which `ctr images import` reads) from local files, so that the
// nodes of hack/e2e-node.sh need no registry:
//
//	mkimage --output F --name N [--name N2...] [--base OCI-TARBALL]
//	        [--entrypoint /path] [--arg ARG...] [--link /path=TARGET...]
//	        HOSTFILE=/path/in/image ...
//
// Each HOSTFILE goes into one layer at its path, mode kept, and each
// --link is a symbolic link in that layer (busybox's applets). --base starts
// from the first image of an OCI image-layout tarball (hack/image.sh's
// output), so kube-proxy's image reuses the iptables and nft of kpng's.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var names, args, links list
	output := flag.String("output", "", "tarball to write")
	base := flag.String("base", "", "OCI image-layout tarball to start from")
	entrypoint := flag.String("entrypoint", "", "the image's entrypoint")
	flag.Var(&names, "name", "a name for the image (repeatable)")
	flag.Var(&args, "arg", "an argument after the entrypoint, or without one the command (repeatable)")
	flag.Var(&links, "link", "a symbolic link /path=TARGET in the layer (repeatable)")
	flag.Parse()
	if err := run(*output, *base, *entrypoint, names, args, links, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "mkimage:", err)
		os.Exit(1)
	}
}

func run(output, base, entrypoint string, names, args, links, files []string) error {
	if output == "" || len(names) == 0 {
		return errors.New("--output and --name are required")
	}
	img := empty.Image
	if base != "" {
		var err error
		if img, err = fromOCITarball(base); err != nil {
			return fmt.Errorf("base %s: %w", base, err)
		}
	}
	var buf bytes.Buffer
	if err := layerTar(&buf, files, links); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	})
	if err != nil {
		return err
	}
	if img, err = mutate.AppendLayers(img, layer); err != nil {
		return err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", "amd64"
	if entrypoint != "" {
		cfg.Config.Entrypoint = []string{entrypoint}
	}
	if entrypoint != "" || len(args) > 0 {
		// Without an entrypoint, the args are the command (busybox's "sh").
		cfg.Config.Cmd = args
	}
	if len(cfg.Config.Env) == 0 {
		cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return err
	}
	refs := map[name.Reference]v1.Image{}
	for _, n := range names {
		tag, err := name.NewTag(n)
		if err != nil {
			return fmt.Errorf("name %q: %w", n, err)
		}
		refs[tag] = img
	}
	return tarball.MultiRefWriteToFile(output, refs)
}

// fromOCITarball reads the first image of an OCI image-layout tarball.
func fromOCITarball(file string) (v1.Image, error) {
	dir, err := os.MkdirTemp("", "mkimage-")
	if err != nil {
		return nil, err
	}
	// The layout's blobs are read lazily, after this function returns; the
	// folder is left for the process's exit (it is under TMPDIR).
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		p := filepath.Join(dir, filepath.Clean("/"+h.Name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		out, err := os.Create(p)
		if err != nil {
			return nil, err
		}
		if _, err := io.Copy(out, tr); err != nil {
			out.Close()
			return nil, err
		}
		if err := out.Close(); err != nil {
			return nil, err
		}
	}
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		return nil, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	if len(m.Manifests) == 0 {
		return nil, errors.New("no image in the layout")
	}
	return idx.Image(m.Manifests[0].Digest)
}

// layerTar writes one layer holding each HOSTFILE=/path and each
// /path=TARGET symbolic link, with their parents.
func layerTar(w io.Writer, files, links []string) error {
	tw := tar.NewWriter(w)
	dirs := map[string]bool{}
	// header writes h after the folders above it that are not written yet.
	header := func(dst string, h *tar.Header) error {
		var parents []string
		for d := path.Dir(dst); d != "/" && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
			dirs[d] = true
		}
		for _, d := range parents {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(d, "/") + "/", Mode: 0o755}); err != nil {
				return err
			}
		}
		h.Name = strings.TrimPrefix(dst, "/")
		return tw.WriteHeader(h)
	}
	for _, spec := range files {
		src, dst, ok := strings.Cut(spec, "=")
		if !ok || !path.IsAbs(dst) {
			return fmt.Errorf("file %q: want HOSTFILE=/path/in/image", spec)
		}
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		st, err := os.Stat(src)
		if err != nil {
			return err
		}
		if err := header(dst, &tar.Header{Typeflag: tar.TypeReg, Mode: int64(st.Mode().Perm()), Size: int64(len(data))}); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	for _, spec := range links {
		dst, target, ok := strings.Cut(spec, "=")
		if !ok || !path.IsAbs(dst) || target == "" {
			return fmt.Errorf("link %q: want /path/in/image=TARGET", spec)
		}
		if err := header(dst, &tar.Header{Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777}); err != nil {
			return err
		}
	}
	return tw.Close()
}
