package web_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/acme/platform/pkg/problem"
	"github.com/acme/platform/pkg/web"
)

type valueKey struct{}

// TestBudgetIsOneDeadlinePerRequest: the handler's context ends with the
// budget, which WithoutBudget lifts while keeping the request's values;
// without a budget the context is the request's own.
func TestBudgetIsOneDeadlinePerRequest(t *testing.T) {
	t.Parallel()
	const budget = time.Hour
	var deadline time.Time
	var hasDeadline, liftedHasDeadline bool
	var liftedValue any
	h := web.Budget(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		deadline, hasDeadline = r.Context().Deadline()
		lifted := web.WithoutBudget(context.WithValue(r.Context(), valueKey{}, "kept"))
		_, liftedHasDeadline = lifted.Deadline()
		liftedValue = lifted.Value(valueKey{})
		if lifted.Err() != nil {
			t.Errorf("lifted context already ended: %v", lifted.Err())
		}
	}), budget)
	began := time.Now()
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
	if !hasDeadline || deadline.Before(began.Add(budget)) || deadline.After(time.Now().Add(budget)) {
		t.Errorf("deadline %v (set: %v), want %v after the request arrived", deadline, hasDeadline, budget)
	}
	if liftedHasDeadline || liftedValue != "kept" {
		t.Errorf("WithoutBudget: deadline set %v, value %v; want none and the value kept", liftedHasDeadline, liftedValue)
	}

	web.Budget(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if _, ok := r.Context().Deadline(); ok {
			t.Error("a zero budget set a deadline")
		}
		if ctx := web.WithoutBudget(r.Context()); ctx != r.Context() {
			t.Error("WithoutBudget changed a request without a budget")
		}
	}), 0).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil))
}

// TestSpentBudgetIsTheUnavailable503: a wait that the budget ended, which
// no store classified, is the database-unreachable 503 with Retry-After,
// not a 500.
func TestSpentBudgetIsTheUnavailable503(t *testing.T) {
	t.Parallel()
	p := web.ProblemFor(fmt.Errorf("wait for hashing slot: %w", context.DeadlineExceeded))
	want := problem.DatabaseUnavailable()
	if p.Status != http.StatusServiceUnavailable || p.Code != want.Code || p.RetryAfter != want.RetryAfter {
		t.Errorf("ProblemFor(deadline exceeded) = %d %s (Retry-After %v), want %d %s (%v)",
			p.Status, p.Code, p.RetryAfter, want.Status, want.Code, want.RetryAfter)
	}
	if p := web.ProblemFor(context.Canceled); p.Status != http.StatusInternalServerError {
		t.Errorf("ProblemFor(canceled) = %d, want 500", p.Status)
	}
}
