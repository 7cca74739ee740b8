package metrics

import (
	"encoding/json"
	"fmt"
	"html"
	"maps"
	"math/rand/v2"
	"mime"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"k8s.io/component-base/version"
)

// The z-pages that kube-proxy 1.36 serves on its metrics server
// (k8s.io/apiserver's flagz and statusz, beta and on by default in 1.36):
// a text page for people by default, and the config.k8s.io object as JSON
// when asked for with
//
//	Accept: application/json;as=Flagz;v=v1beta1;g=config.k8s.io
//
// (or as=Statusz; v1alpha1 is still served, with a deprecation warning).
// As upstream's, the text pages pick a random delimiter, once, so that no
// one parses them.

const (
	zpagesGroup   = "config.k8s.io"
	zpagesWarning = "Warning: This endpoint is not meant to be machine parseable, has no formatting compatibility guarantees and is for debugging purposes only."
)

var zpagesDelimiters = []string{":", ": ", "=", " "}

// zpageObject is the config.k8s.io object of a z-page.
type zpageObject struct {
	Kind       string            `json:"kind"`
	APIVersion string            `json:"apiVersion"`
	Metadata   map[string]string `json:"metadata"`
}

// flagz is a Flagz object (config.k8s.io/v1beta1).
type flagz struct {
	zpageObject
	Flags map[string]string `json:"flags,omitempty"`
}

// statusz is a Statusz object (config.k8s.io/v1beta1).
type statusz struct {
	zpageObject
	StartTime        time.Time `json:"startTime"`
	UptimeSeconds    int64     `json:"uptimeSeconds"`
	GoVersion        string    `json:"goVersion"`
	BinaryVersion    string    `json:"binaryVersion"`
	EmulationVersion string    `json:"emulationVersion,omitempty"`
	Paths            []string  `json:"paths"`
}

// structuredVersion returns the config.k8s.io version a request asks kind
// in (from its Accept header), "" for the text page, or an error when it
// asks for nothing this serves (406, as upstream).
func structuredVersion(r *http.Request, kind string) (string, error) {
	accept := strings.TrimSpace(r.Header.Get("Accept"))
	if accept == "" {
		return "", nil
	}
	for _, part := range strings.Split(accept, ",") {
		mediaType, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		switch mediaType {
		case "text/plain", "text/*", "*/*":
			return "", nil
		case "application/json":
			if params["as"] == kind && params["g"] == zpagesGroup && (params["v"] == "v1beta1" || params["v"] == "v1alpha1") {
				return params["v"], nil
			}
		}
	}
	return "", fmt.Errorf("only text/plain or application/json;as=%s;v=v1beta1;g=%s is served", kind, zpagesGroup)
}

// zpage serves one z-page: text from text(delim), or the object from
// object(version) as JSON.
type zpage struct {
	component, kind string
	once            sync.Once
	delim           string
	text            func(delim string) string
	object          func() any
}

func (z *zpage) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	v, err := structuredVersion(r, z.kind)
	if err != nil {
		http.Error(w, err.Error(), http.StatusNotAcceptable)
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	if v == "" {
		z.once.Do(func() { z.delim = zpagesDelimiters[rand.IntN(len(zpagesDelimiters))] })
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "\n%s %s\n%s\n", z.component, strings.ToLower(z.kind), zpagesWarning)
		fmt.Fprint(w, z.text(z.delim))
		return
	}
	if v == "v1alpha1" {
		w.Header().Set("Warning", fmt.Sprintf(`299 - "This version of the %s endpoint is deprecated. Please use a newer version."`, strings.ToLower(z.kind)))
	}
	obj := z.object()
	switch o := obj.(type) {
	case *flagz:
		o.zpageObject = zpageObject{Kind: z.kind, APIVersion: zpagesGroup + "/" + v, Metadata: map[string]string{"name": z.component}}
	case *statusz:
		o.zpageObject = zpageObject{Kind: z.kind, APIVersion: zpagesGroup + "/" + v, Metadata: map[string]string{"name": z.component}}
	}
	body, err := json.Marshal(obj)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(body)
}

// flagzPage is /flagz: every flag of the command line, by name.
func flagzPage(component string, flags func() map[string]string) *zpage {
	return &zpage{component: component, kind: "Flagz",
		text: func(delim string) string {
			f := flags()
			var b strings.Builder
			for _, name := range slices.Sorted(maps.Keys(f)) {
				fmt.Fprintf(&b, "%s%s%s\n", name, delim, f[name])
			}
			return b.String()
		},
		object: func() any { return &flagz{Flags: flags()} },
	}
}

// statuszPage is /statusz: start time, uptime, versions and the server's
// other paths (their first segment).
func statuszPage(component string, started time.Time, emulation string, paths []string) *zpage {
	object := func() *statusz {
		return &statusz{StartTime: started.Truncate(time.Second), UptimeSeconds: max(0, int64(time.Since(started).Seconds())),
			GoVersion: runtime.Version(), BinaryVersion: binaryVersion(), EmulationVersion: emulation, Paths: paths}
	}
	return &zpage{component: component, kind: "Statusz",
		text: func(delim string) string {
			s := object()
			up := s.UptimeSeconds
			d := html.EscapeString(delim)
			var emu, ps string
			if emulation != "" {
				emu = fmt.Sprintf("Emulation version%s %s", d, html.EscapeString(emulation))
			}
			if len(paths) > 0 {
				ps = fmt.Sprintf("Paths%s %s", d, html.EscapeString(strings.Join(paths, " ")))
			}
			return fmt.Sprintf("\nStarted%[1]s %[2]s\nUp%[1]s %[3]s\nGo version%[1]s %[4]s\nBinary version%[1]s %[5]s\n%[6]s\n%[7]s\n",
				d, html.EscapeString(started.Format(time.UnixDate)), fmt.Sprintf("%d hr %02d min %02d sec", up/3600, (up/60)%60, up%60),
				html.EscapeString(s.GoVersion), html.EscapeString(s.BinaryVersion), emu, ps)
		},
		object: func() any { return object() },
	}
}

// binaryVersion is the binary's version as upstream's statusz shows it
// (major.minor.patch of gitVersion, without the "v").
func binaryVersion() string {
	v := strings.TrimPrefix(version.Get().GitVersion, "v")
	if i := strings.IndexAny(v, "-+"); i >= 0 {
		v = v[:i]
	}
	return v
}
