package mongostore_test

import (
	"context"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"

	"github.com/acme/platform/pkg/testkit/indexcheck"
	"github.com/acme/platform/services/account"
	"github.com/acme/platform/services/account/mongostore"
)

// TestThrottleCountersOfThePreviousVersion: counters written before
// attempts had leases (one "count" of attempts, no window id) keep their
// meaning: a lock holds, and the attempts of an open window count as
// failures.
func TestThrottleCountersOfThePreviousVersion(t *testing.T) {
	ctx := context.Background()
	db := indexcheck.New(t)
	s := mongostore.New(db)
	if err := s.EnsureIndexes(ctx); err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	limit := account.ThrottleLimit{MaxFailures: 3, Window: time.Minute, Lockout: 10 * time.Minute}
	_, err := db.Collection("login_throttle").InsertMany(ctx, []any{
		bson.D{{Key: "_id", Value: "user:open"}, {Key: "count", Value: 2}, {Key: "window_end", Value: t0.Add(time.Minute)},
			{Key: "locked_until", Value: time.Time{}}, {Key: "lockouts", Value: 0}, {Key: "expires_at", Value: t0.Add(time.Minute)}},
		bson.D{{Key: "_id", Value: "user:locked"}, {Key: "count", Value: 3}, {Key: "window_end", Value: t0},
			{Key: "locked_until", Value: t0.Add(5 * time.Minute)}, {Key: "lockouts", Value: 1}, {Key: "expires_at", Value: t0.Add(24 * time.Hour)}},
	})
	if err != nil {
		t.Fatal(err)
	}

	ok, st, err := (account.ThrottleCounters{Store: s}).Take(ctx, "user:open", t0, limit, time.Second)
	if err != nil || !ok || st.Failures != 2 || st.Pending != 1 || st.Window == "" {
		t.Fatalf("attempt in an open window of the previous version: %v, %+v, %v; want allowed, 2 failures and 1 in flight", ok, st, err)
	}
	if err := (account.ThrottleCounters{Store: s}).Fail(ctx, "user:open", st.Window, t0, limit); err != nil {
		t.Fatal(err)
	}
	if st, err := s.LoginThrottleState(ctx, "user:open"); err != nil || !st.LockedUntil.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("after its third failure: %+v, %v; want locked", st, err)
	}

	ok, st, err = (account.ThrottleCounters{Store: s}).Take(ctx, "user:locked", t0, limit, time.Second)
	if err != nil || ok || !st.LockedUntil.Equal(t0.Add(5*time.Minute)) {
		t.Fatalf("attempt at a key locked by the previous version: %v, %+v, %v; want refused until t0+5m", ok, st, err)
	}
	ok, st, err = (account.ThrottleCounters{Store: s}).Take(ctx, "user:locked", t0.Add(5*time.Minute), limit, time.Second)
	if err != nil || !ok || st.Failures != 0 || st.Pending != 1 {
		t.Fatalf("after that lock: %v, %+v, %v; want a new window", ok, st, err)
	}
}
