// Package logtest gives tests the log lines of the code they run.
package logtest

import (
	"context"

	"github.com/go-logr/logr/funcr"
	"k8s.io/klog/v2"
)

// Lines returns parent with a logger whose lines (their key-value text,
// funcr's form: "msg"="..." "key"="value") go to the channel returned,
// which holds up to size of them; lines beyond that are dropped, so that
// logging never blocks the code under test.
func Lines(parent context.Context, size int) (context.Context, <-chan string) {
	lines := make(chan string, size)
	logger := funcr.New(func(_, args string) {
		select {
		case lines <- args:
		default:
		}
	}, funcr.Options{})
	return klog.NewContext(parent, logger), lines
}
