package kubeproxy

// kpng's backends, for the tests that run the real ones (kpngBackends).
import (
	_ "github.com/kpng/kpng/backends/iptables"
	_ "github.com/kpng/kpng/backends/nft"
)
