package main

// The eBPF backend: kpng ... to-ebpf.
import _ "github.com/kpng/kpng/backends/ebpf"
