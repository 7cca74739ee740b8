package main

import (
	"archive/tar"
	"strings"
	"testing"
)

func TestAddLinks(t *testing.T) {
	base := func(t *testing.T) rootfs {
		fs := rootfs{}
		if err := fs.add("bin/nc.openbsd", tar.TypeReg, 0o755, "", []byte("x"), "test"); err != nil {
			t.Fatal(err)
		}
		if err := fs.add("usr/bin/gawk", tar.TypeReg, 0o755, "", []byte("x"), "test"); err != nil {
			t.Fatal(err)
		}
		return fs
	}
	fs := base(t)
	if err := fs.addLinks([][2]string{{"bin/nc", "nc.openbsd"}, {"usr/bin/awk", "/usr/bin/gawk"}}); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{"bin/nc": "nc.openbsd", "usr/bin/awk": "/usr/bin/gawk"} {
		e, ok := fs[link]
		if !ok || e.hdr.Typeflag != tar.TypeSymlink || e.hdr.Linkname != target {
			t.Errorf("%s: got %+v, want a link to %s", link, e, target)
		}
	}
	for _, c := range []struct {
		link [2]string
		want string
	}{
		{[2]string{"bin/nc", "netcat"}, "the packages have no /bin/netcat"},
		{[2]string{"bin/nc.openbsd", "/usr/bin/gawk"}, "already have /bin/nc.openbsd"},
	} {
		err := base(t).addLinks([][2]string{c.link})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("--link %v: got %v, want an error with %q", c.link, err, c.want)
		}
	}
}
