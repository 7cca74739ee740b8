// Command image assembles kpng's OCI image from a kpng binary and Debian
// packages (.deb files), and writes it as an OCI image-layout tarball that
// also carries Docker's manifest.json, so that `ctr images import`,
// `docker load` and `podman load` all accept it. hack/image.sh runs it.
//
// The same inputs give the same image digest: the layer's entries are
// sorted, owned by root and stamped with one time (--epoch), and the image
// config's times are that epoch too.
package main

import (
	"archive/tar"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	var o options
	flag.StringVar(&o.kpng, "kpng", "", "the kpng binary (static) to put at /usr/local/bin/kpng")
	flag.StringVar(&o.debs, "debs", "", "a directory of .deb files whose contents form the rest of the root filesystem")
	flag.StringVar(&o.name, "name", "kpng.local/kpng", "the image name, without the tag")
	flag.StringVar(&o.version, "version", "", "the image tag: kpng's version")
	flag.Int64Var(&o.epoch, "epoch", 0, "every time in the image, in Unix seconds (the commit time)")
	flag.StringVar(&o.output, "output", "", "the tarball to write")
	flag.Func("link", "PATH=TARGET: one more symbolic link, as a package's update-alternatives would make (repeatable), e.g. /bin/nc=nc.openbsd", func(v string) error {
		link, target, ok := strings.Cut(v, "=")
		link = strings.TrimPrefix(filepath.Clean("/"+link), "/")
		if !ok || link == "" || target == "" {
			return fmt.Errorf("want PATH=TARGET, got %q", v)
		}
		o.links = append(o.links, [2]string{link, target})
		return nil
	})
	flag.Parse()
	if flag.NArg() > 0 {
		fail(fmt.Errorf("unexpected arguments %q", flag.Args()))
	}
	digest, err := build(o)
	if err != nil {
		fail(err)
	}
	fmt.Printf("%s:%s %s\n", o.name, o.version, digest)
}

func fail(err error) {
	fmt.Fprintf(os.Stderr, "image: %v\n", err)
	os.Exit(1)
}

type options struct {
	kpng, debs, name, version, output string
	epoch                             int64
	links                             [][2]string // --link: path in the image, target
}

func (o options) check() error {
	var missing []string
	for _, f := range []struct{ flag, v string }{{"--kpng", o.kpng}, {"--debs", o.debs}, {"--version", o.version}, {"--output", o.output}} {
		if f.v == "" {
			missing = append(missing, f.flag)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	if strings.ContainsAny(o.version, ":/@ ") {
		return fmt.Errorf("--version %q is not a valid tag", o.version)
	}
	return nil
}

// alternatives are the links Debian's maintainer scripts make with
// update-alternatives, which unpacking a package does not run: the
// iptables commands as the nft variant, Debian's default and what kpng's
// iptables backend detects by itself anyway (--iptables-mode=auto).
var alternatives = map[string]string{
	"usr/sbin/iptables":          "iptables-nft",
	"usr/sbin/iptables-save":     "iptables-nft-save",
	"usr/sbin/iptables-restore":  "iptables-nft-restore",
	"usr/sbin/ip6tables":         "ip6tables-nft",
	"usr/sbin/ip6tables-save":    "ip6tables-nft-save",
	"usr/sbin/ip6tables-restore": "ip6tables-nft-restore",
}

// root assembles the root filesystem.
func (o options) root() (rootfs, error) {
	fs := rootfs{}
	debs, err := filepath.Glob(filepath.Join(o.debs, "*.deb"))
	if err != nil {
		return nil, err
	}
	if len(debs) == 0 {
		return nil, fmt.Errorf("--debs %s holds no .deb file", o.debs)
	}
	slices.Sort(debs)
	for _, deb := range debs {
		if err := fs.addDeb(deb, filepath.Base(deb)); err != nil {
			return nil, err
		}
	}
	for link, target := range alternatives {
		if _, ok := fs["usr/sbin/"+target]; !ok {
			return nil, fmt.Errorf("no usr/sbin/%s in the packages (is iptables among them?)", target)
		}
		if _, ok := fs[link]; !ok {
			if err := fs.add(link, tar.TypeSymlink, 0o777, target, nil, "alternatives"); err != nil {
				return nil, err
			}
		}
	}
	if err := fs.addLinks(o.links); err != nil {
		return nil, err
	}
	bin, err := os.ReadFile(o.kpng)
	if err != nil {
		return nil, fmt.Errorf("--kpng: %w", err)
	}
	if err := fs.add("usr/local/bin/kpng", tar.TypeReg, 0o755, "", bin, "kpng"); err != nil {
		return nil, err
	}
	// Where kube-proxy's DaemonSet mounts things, and a writable /tmp.
	for _, d := range []struct {
		path string
		mode int64
	}{{"tmp", 0o1777}, {"run", 0o755}, {"var/lib/kube-proxy", 0o755}, {"lib/modules", 0o755}} {
		if _, ok := fs[d.path]; !ok {
			if err := fs.add(d.path, tar.TypeDir, d.mode, "", nil, "kpng"); err != nil {
				return nil, err
			}
		}
	}
	return fs, nil
}

func (o options) mtime() time.Time { return time.Unix(o.epoch, 0).UTC() }

// addLinks adds --link's symbolic links: each must point at a file the
// packages have, and must not replace one of theirs.
func (fs rootfs) addLinks(links [][2]string) error {
	for _, l := range links {
		link, target := l[0], l[1]
		resolved := target
		if !filepath.IsAbs(target) {
			resolved = filepath.Join("/", filepath.Dir(link), target)
		}
		if _, ok := fs[strings.TrimPrefix(resolved, "/")]; !ok {
			return fmt.Errorf("--link /%s=%s: the packages have no %s", link, target, resolved)
		}
		if _, ok := fs[link]; ok {
			return fmt.Errorf("--link /%s=%s: the packages already have /%s", link, target, link)
		}
		if err := fs.add(link, tar.TypeSymlink, 0o777, target, nil, "--link"); err != nil {
			return err
		}
	}
	return nil
}
