package main

// The nftables backend: kpng ... to-nft.
import _ "github.com/kpng/kpng/backends/nft"
