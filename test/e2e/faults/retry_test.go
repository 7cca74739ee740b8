//go:build e2e

package faults

import (
	"context"
	"errors"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// A create that etcd timed out is made again; one that landed although
// its answer was the timeout is found on the next call; a wrong request
// is not retried.
func TestCreateRetrying(t *testing.T) {
	svc := schema.GroupKind{Kind: "Service"}
	timedOut := apierrors.NewInvalid(svc, "late", field.ErrorList{field.Invalid(field.NewPath("spec", "clusterIPs"),
		[]string{"10.96.0.16"}, "failed to allocate IP 10.96.0.16: etcdserver: request timed out")})
	exists := apierrors.NewAlreadyExists(schema.GroupResource{Resource: "services"}, "late")
	wrong := apierrors.NewInvalid(svc, "late", field.ErrorList{field.Invalid(field.NewPath("spec", "ports"), 0, "port 0")})

	ctx := context.Background()
	calls := 0
	answers := func(errs ...error) func() error {
		calls = 0
		return func() error {
			calls++
			return errs[min(calls, len(errs))-1]
		}
	}
	if err := createRetrying(ctx, answers(timedOut, exists)); err != nil || calls != 2 {
		t.Errorf("timed out, then landed: %v after %d calls, want nil after 2", err, calls)
	}
	if err := createRetrying(ctx, answers(timedOut, apierrors.NewServiceUnavailable("busy"), nil)); err != nil || calls != 3 {
		t.Errorf("timed out, busy, created: %v after %d calls, want nil after 3", err, calls)
	}
	if err := createRetrying(ctx, answers(wrong)); !apierrors.IsInvalid(err) || calls != 1 {
		t.Errorf("invalid: %v after %d calls, want it after 1", err, calls)
	}
	if err := createRetrying(ctx, answers(exists)); !apierrors.IsAlreadyExists(err) || calls != 1 {
		t.Errorf("exists at the first call: %v after %d calls, want it after 1", err, calls)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := createRetrying(short, answers(timedOut)); !errors.Is(err, context.DeadlineExceeded) || calls < 2 {
		t.Errorf("etcd timing out throughout: %v after %d calls, want the deadline after 2 or more", err, calls)
	}
}
