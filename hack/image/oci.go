package main

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// build makes the image and writes it to o.output; it returns the digest
// of the image's manifest.
func build(o options) (v1.Hash, error) {
	if err := o.check(); err != nil {
		return v1.Hash{}, err
	}
	img, err := o.image()
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := img.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if err := o.write(img); err != nil {
		return v1.Hash{}, fmt.Errorf("writing %s: %w", o.output, err)
	}
	return digest, nil
}

// image assembles the root filesystem as one layer under kpng's config.
func (o options) image() (v1.Image, error) {
	fs, err := o.root()
	if err != nil {
		return nil, err
	}
	var layerTar bytes.Buffer
	if err := fs.tar(&layerTar, o.mtime()); err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar.Bytes())), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: o.mtime()}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{
		Layer:     layer,
		MediaType: types.OCILayer,
		History:   v1.History{Created: created, CreatedBy: "hack/image.sh: kpng " + o.version + " and Debian packages", Comment: "kpng"},
	})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.Architecture, cfg.OS = "amd64", "linux"
	cfg.Created = created
	cfg.Config.Entrypoint = []string{"/usr/local/bin/kpng"}
	cfg.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cfg.Config.Labels = map[string]string{
		"org.opencontainers.image.title":   "kpng",
		"org.opencontainers.image.version": o.version,
	}
	return mutate.ConfigFile(img, cfg)
}

// write stores img as an OCI image layout (index.json naming it, for ctr
// and podman) plus Docker's manifest.json (for docker load), tarred with
// sorted entries and fixed times.
func (o options) write(img v1.Image) error {
	dir, err := os.MkdirTemp("", "kpng-image-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	ref := o.name + ":" + o.version
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{
		"io.containerd.image.name":          ref,
		"org.opencontainers.image.ref.name": o.version,
	})); err != nil {
		return err
	}
	cfgName, err := img.ConfigName()
	if err != nil {
		return err
	}
	layers, err := img.Layers()
	if err != nil {
		return err
	}
	var layerPaths []string
	for _, l := range layers {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		layerPaths = append(layerPaths, "blobs/sha256/"+d.Hex)
	}
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   "blobs/sha256/" + cfgName.Hex,
		"RepoTags": []string{ref},
		"Layers":   layerPaths,
	}})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "manifest.json"), manifest, 0o644); err != nil {
		return err
	}
	return tarDir(dir, o.output, o.mtime())
}

// tarDir writes the files under dir to out, sorted, with fixed metadata.
func tarDir(dir, out string, mtime time.Time) error {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(files)
	tmp := out + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	defer os.Remove(tmp)
	tw := tar.NewWriter(f)
	seenDirs := map[string]bool{}
	for _, name := range files {
		// Parent directories first, as tar readers expect.
		var parents []string
		for d := filepath.ToSlash(filepath.Dir(name)); d != "."; d = filepath.ToSlash(filepath.Dir(d)) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			if !seenDirs[d] {
				seenDirs[d] = true
				if err := tw.WriteHeader(fixedHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}, mtime)); err != nil {
					f.Close()
					return err
				}
			}
		}
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(name)))
		if err != nil {
			f.Close()
			return err
		}
		if err := tw.WriteHeader(fixedHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b))}, mtime)); err != nil {
			f.Close()
			return err
		}
		if _, err := tw.Write(b); err != nil {
			f.Close()
			return err
		}
	}
	if err := tw.Close(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, out)
}

func fixedHeader(h *tar.Header, mtime time.Time) *tar.Header {
	h.ModTime = mtime
	h.Uname, h.Gname = "root", "root"
	h.Format = tar.FormatPAX
	return h
}
