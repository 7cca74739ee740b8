package main

// The IPVS backend: kpng ... to-ipvs.
import _ "github.com/kpng/kpng/backends/ipvs"
