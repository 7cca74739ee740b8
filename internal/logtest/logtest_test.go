package logtest

import (
	"context"
	"strings"
	"testing"

	"k8s.io/klog/v2"
)

func TestLines(t *testing.T) {
	ctx, lines := Lines(context.Background(), 1)
	klog.FromContext(ctx).Info("first", "k", "v")
	klog.FromContext(ctx).Info("dropped: the channel is full")
	if got := <-lines; !strings.Contains(got, `"msg"="first" "k"="v"`) {
		t.Errorf("line %q", got)
	}
	select {
	case got := <-lines:
		t.Errorf("a line beyond the size was kept: %q", got)
	default:
	}
}
