package kubeproxy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/kpng/kpng/backend"
	"github.com/kpng/kpng/config"
)

// TestCleanupRemovesEveryBackendsRules: --cleanup's removal of the other
// backends' rules runs each backend of a Proxy once (a backend serving two
// modes included), goes on past a failure, and returns every failure.
func TestCleanupRemovesEveryBackendsRules(t *testing.T) {
	shared, other := newFakePlugin(), newFakePlugin()
	other.cleanupErr = errors.New("injected")
	p := &Proxy{Name: "test", Backends: map[config.ProxyMode]backend.Registration{
		config.ProxyModeNFTables: {Name: "b-shared", New: func() backend.Plugin { return shared }},
		config.ProxyModeIPTables: {Name: "b-shared", New: func() backend.Plugin { return shared }},
		config.ProxyModeIPVS:     {Name: "a-other", New: func() backend.Plugin { return other }},
	}}
	regs := p.registrations()
	var names []string
	for _, r := range regs {
		names = append(names, r.Name)
	}
	if !slices.Equal(names, []string{"a-other", "b-shared"}) {
		t.Fatalf("registrations %q, want each backend once, by name", names)
	}
	err := CleanupNode(context.Background(), regs, false)
	if err == nil || !strings.Contains(err.Error(), "a-other: injected") {
		t.Errorf("err = %v, want the failing backend's", err)
	}
	if shared.cleaned != 1 || other.cleaned != 1 {
		t.Errorf("Cleanup ran %d and %d times, want once each", shared.cleaned, other.cleaned)
	}
}
