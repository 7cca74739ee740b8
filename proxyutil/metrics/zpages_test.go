package metrics

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func TestZpages(t *testing.T) {
	srv := httptest.NewServer((&Server{
		ProxyMode: ModeNFTables,
		Configz:   func() ([]byte, error) { return []byte(`{}`), nil },
		Flagz:     func() map[string]string { return map[string]string{"v": "2", "config": "/etc/kp.yaml"} },
		Statusz:   true, EmulationVersion: "1.36", Started: time.Now().Add(-90 * time.Minute),
	}).Handler())
	defer srv.Close()
	get := func(path, accept string) (int, http.Header, string) {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		if accept != "" {
			req.Header.Set("Accept", accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, string(body)
	}

	code, h, body := get("/flagz", "")
	if code != 200 || h.Get("Content-Type") != "text/plain; charset=utf-8" || !strings.HasPrefix(body, "\nkube-proxy flagz\nWarning: ") {
		t.Errorf("/flagz text: %d %q\n%s", code, h.Get("Content-Type"), body)
	}
	lines := strings.Split(strings.TrimSpace(body), "\n")
	if n := len(lines); n != 4 || !strings.HasPrefix(lines[2], "config") || !strings.HasPrefix(lines[3], "v") {
		t.Errorf("/flagz text does not list the flags sorted:\n%s", body)
	}
	if _, _, again := get("/flagz", ""); again != body {
		t.Errorf("/flagz changed its delimiter between requests:\n%s\n%s", body, again)
	}

	code, h, body = get("/flagz", "application/json;as=Flagz;v=v1beta1;g=config.k8s.io")
	var f struct {
		Kind, APIVersion string
		Metadata         map[string]string
		Flags            map[string]string
	}
	if err := json.Unmarshal([]byte(body), &f); err != nil || code != 200 || f.Kind != "Flagz" || f.APIVersion != "config.k8s.io/v1beta1" ||
		f.Metadata["name"] != "kube-proxy" || f.Flags["v"] != "2" || h.Get("Warning") != "" {
		t.Errorf("/flagz JSON: %d %v\n%s", code, err, body)
	}
	if _, h, _ := get("/flagz", "application/json;as=Flagz;v=v1alpha1;g=config.k8s.io"); !strings.Contains(h.Get("Warning"), "deprecated") {
		t.Errorf("/flagz v1alpha1: no deprecation warning (%q)", h.Get("Warning"))
	}
	if code, _, _ := get("/flagz", "application/json"); code != http.StatusNotAcceptable {
		t.Errorf("/flagz as plain JSON: %d, want 406", code)
	}

	code, _, body = get("/statusz", "")
	for _, want := range []string{"\nkube-proxy statusz\n", "Up", "1 hr 30 min", "Go version", "Emulation version", "1.36", "Paths", "/configz /flagz /healthz /metrics /proxyMode"} {
		if code != 200 || !strings.Contains(body, want) {
			t.Errorf("/statusz text lacks %q (%d):\n%s", want, code, body)
		}
	}
	code, _, body = get("/statusz", "application/json;as=Statusz;v=v1beta1;g=config.k8s.io")
	var s struct {
		Kind             string
		UptimeSeconds    int64
		EmulationVersion string
		Paths            []string
	}
	if err := json.Unmarshal([]byte(body), &s); err != nil || code != 200 || s.Kind != "Statusz" || s.UptimeSeconds < 5400 || s.EmulationVersion != "1.36" ||
		strings.Join(s.Paths, " ") != "/configz /flagz /healthz /metrics /proxyMode" {
		t.Errorf("/statusz JSON: %d %v\n%s", code, err, body)
	}
}

func TestZpagesOff(t *testing.T) {
	srv := httptest.NewServer((&Server{ProxyMode: ModeNFTables}).Handler())
	defer srv.Close()
	for _, path := range []string{"/flagz", "/statusz"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s without Flagz/Statusz: %d, want 404", path, resp.StatusCode)
		}
	}
}
