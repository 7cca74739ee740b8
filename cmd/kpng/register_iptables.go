package main

// The iptables backend registers itself as to-iptables.
import _ "github.com/kpng/kpng/backends/iptables"
