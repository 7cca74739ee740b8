//go:build e2e

package services

import (
	"testing"

	"github.com/kpng/kpng/test/e2e/netlab"
)

// referenceBackend returns the reference backend called name, or nil.
func referenceBackend(t *testing.T, name string) netlab.Backend { return nil }
