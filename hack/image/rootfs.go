package main

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os/exec"
	"path"
	"slices"
	"strings"
	"time"
)

// entry is one file, directory or link of the image's root filesystem.
type entry struct {
	hdr  tar.Header
	data []byte
	from string // the package (or "kpng") it came from, for error messages
}

// rootfs is the image's filesystem: entries by clean relative path.
type rootfs map[string]*entry

// skipped are the parts of Debian packages a container never reads.
var skipped = []string{"usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/lintian/", "usr/share/locale/", "usr/share/bug/"}

// addDeb adds the files of a Debian package (dpkg-deb --fsys-tarfile).
func (fs rootfs) addDeb(deb, name string) error {
	cmd := exec.Command("dpkg-deb", "--fsys-tarfile", deb)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("dpkg-deb --fsys-tarfile %s: %w: %s", deb, err, strings.TrimSpace(stderr.String()))
	}
	return fs.addTar(bytes.NewReader(out), name)
}

func (fs rootfs) addTar(r io.Reader, from string) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: reading its files: %w", from, err)
		}
		p := clean(h.Name)
		if p == "" || slices.ContainsFunc(skipped, func(s string) bool { return strings.HasPrefix(p+"/", s) }) {
			continue
		}
		var data []byte
		switch h.Typeflag {
		case tar.TypeReg:
			if data, err = io.ReadAll(tr); err != nil {
				return fmt.Errorf("%s: %s: %w", from, p, err)
			}
		case tar.TypeDir, tar.TypeSymlink:
		case tar.TypeLink:
			// Hard links become copies: the layer stays valid whatever the
			// order, and Debian's few hard links are small.
			target := clean(h.Linkname)
			t, ok := fs[target]
			if !ok || t.hdr.Typeflag != tar.TypeReg {
				return fmt.Errorf("%s: %s: hard link to %s, which is not a file before it", from, p, target)
			}
			h = &tar.Header{Typeflag: tar.TypeReg, Mode: t.hdr.Mode}
			data = t.data
		default:
			return fmt.Errorf("%s: %s: unsupported file type %q", from, p, h.Typeflag)
		}
		if err := fs.add(p, h.Typeflag, h.Mode, h.Linkname, data, from); err != nil {
			return err
		}
	}
}

// add puts one entry at p, creating its parent directories. Two packages
// may both ship a directory; anything else twice is an error.
func (fs rootfs) add(p string, typ byte, mode int64, link string, data []byte, from string) error {
	if old, ok := fs[p]; ok {
		if old.hdr.Typeflag == tar.TypeDir && typ == tar.TypeDir {
			return nil
		}
		return fmt.Errorf("%s: %s is also shipped by %s", from, p, old.from)
	}
	if dir := path.Dir(p); dir != "." {
		if parent, ok := fs[dir]; !ok {
			if err := fs.add(dir, tar.TypeDir, 0o755, "", nil, from); err != nil {
				return err
			}
		} else if parent.hdr.Typeflag != tar.TypeDir {
			return fmt.Errorf("%s: %s: its parent %s is not a directory (from %s)", from, p, dir, parent.from)
		}
	}
	h := tar.Header{Typeflag: typ, Name: p, Mode: mode & 0o7777, Linkname: link, Size: int64(len(data))}
	if typ == tar.TypeDir {
		h.Name += "/"
	}
	if typ != tar.TypeSymlink {
		h.Linkname = ""
	}
	fs[p] = &entry{hdr: h, data: data, from: from}
	return nil
}

// tar writes the filesystem as a layer: entries sorted by path, owned by
// root, every time set to mtime, so that the same files give the same bytes.
func (fs rootfs) tar(w io.Writer, mtime time.Time) error {
	paths := make([]string, 0, len(fs))
	for p := range fs {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	tw := tar.NewWriter(w)
	for _, p := range paths {
		e := fs[p]
		h := e.hdr
		h.ModTime = mtime
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "root", "root"
		h.Format = tar.FormatPAX
		if err := tw.WriteHeader(&h); err != nil {
			return fmt.Errorf("layer: %s: %w", p, err)
		}
		if _, err := tw.Write(e.data); err != nil {
			return fmt.Errorf("layer: %s: %w", p, err)
		}
	}
	return tw.Close()
}

func clean(name string) string {
	p := path.Clean("/" + name)
	return strings.TrimPrefix(p, "/")
}
