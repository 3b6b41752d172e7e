package web

import (
	"context"
	"net/http"
	"time"
)

// Budget gives every request's context a deadline d after it arrives: one
// budget for all the database commands a request makes, however many, so
// that a database that accepts connections but does not answer (a frozen
// process, a stalled disk) costs a request d and then its 503, instead of
// holding it until the driver's monitor gives the server up. The driver
// takes the deadline for each command's socket and server-side time limit
// (maxTimeMS); an error it ends with is classified unreachable
// (pkg/mongoconn), and any other wait it ends (ProblemFor) is the same
// 503. A long-lived response that does not wait on the database (a live
// event stream) lives on the context WithoutBudget gives it. d <= 0 means
// no budget.
func Budget(next http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		parent := r.Context()
		ctx, cancel := context.WithTimeout(context.WithValue(parent, budgetKey{}, parent), d)
		defer cancel()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

type budgetKey struct{}

// WithoutBudget returns ctx with the deadline and cancellation the request
// had before Budget (the client going away, the server shutting down) and
// every value ctx holds: for the part of a response that outlives the
// budget. It returns ctx itself when Budget did not wrap the request.
func WithoutBudget(ctx context.Context) context.Context {
	parent, ok := ctx.Value(budgetKey{}).(context.Context)
	if !ok {
		return ctx
	}
	return unbudgeted{Context: ctx, parent: parent}
}

// unbudgeted holds the values of Context and ends with parent.
type unbudgeted struct {
	context.Context
	parent context.Context
}

func (u unbudgeted) Deadline() (time.Time, bool) { return u.parent.Deadline() }
func (u unbudgeted) Done() <-chan struct{}       { return u.parent.Done() }
func (u unbudgeted) Err() error                  { return u.parent.Err() }
