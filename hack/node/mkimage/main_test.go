package main

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLayerTar(t *testing.T) {
	src := filepath.Join(t.TempDir(), "busybox")
	if err := os.WriteFile(src, []byte("binary"), 0o755); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := layerTar(&buf, []string{src + "=/bin/busybox"}, []string{"/bin/sh=busybox", "/usr/bin/nc=/bin/busybox"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		e := h.Name
		switch h.Typeflag {
		case tar.TypeSymlink:
			e += " -> " + h.Linkname
		case tar.TypeReg:
			data, _ := io.ReadAll(tr)
			e += " " + string(data) + " " + os.FileMode(h.Mode).String()
		}
		got = append(got, e)
	}
	want := "bin/\nbin/busybox binary -rwxr-xr-x\nbin/sh -> busybox\nusr/\nusr/bin/\nusr/bin/nc -> /bin/busybox"
	if strings.Join(got, "\n") != want {
		t.Errorf("layer:\n%s\nwant:\n%s", strings.Join(got, "\n"), want)
	}
}

func TestLayerTarRejects(t *testing.T) {
	for _, c := range []struct{ files, links []string }{
		{files: []string{"no-equals"}},
		{files: []string{"a=relative/path"}},
		{links: []string{"/bin/sh"}},
		{links: []string{"bin/sh=busybox"}},
		{links: []string{"/bin/sh="}},
	} {
		if err := layerTar(io.Discard, c.files, c.links); err == nil {
			t.Errorf("layerTar(%q, %q) accepted it", c.files, c.links)
		}
	}
}
