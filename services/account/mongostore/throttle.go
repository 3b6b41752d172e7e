package mongostore

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/account"
)

// throttleDoc is one login throttle counter. attempts counts the window's
// failures and pending attempts; every field is always present, so that
// filters need no $exists, except in a counter of the previous version
// (no window: adoptLegacyCounter). expires_at only grows ($max).
type throttleDoc struct {
	ID           string    `bson:"_id"`
	Window       string    `bson:"window"`
	Attempts     int       `bson:"attempts"`
	WindowEnd    time.Time `bson:"window_end"`
	Pending      int       `bson:"pending"`
	PendingUntil time.Time `bson:"pending_until"`
	LockedUntil  time.Time `bson:"locked_until"`
	Lockouts     int       `bson:"lockouts"`
	ExpiresAt    time.Time `bson:"expires_at"`
	// LegacyCount is the count of a counter of the previous version.
	LegacyCount int `bson:"count,omitempty"`
}

func (d throttleDoc) domain() account.ThrottleState {
	return account.ThrottleState{
		Window: d.Window, Failures: d.Attempts - d.Pending, WindowEnd: d.WindowEnd.UTC(),
		Pending: d.Pending, PendingUntil: d.PendingUntil.UTC(),
		LockedUntil: d.LockedUntil.UTC(), Lockouts: d.Lockouts,
	}
}

// dbTime is a time as the database keeps it (milliseconds, UTC), so that
// conditions on times read back compare equal.
func dbTime(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// AddLoginAttempt implements account.LoginThrottleStore: one update in an
// open window, two for the first attempt of a window, three when neither
// applies (then a read).
func (s *Store) AddLoginAttempt(ctx context.Context, key string, a account.ThrottleAttempt) (bool, account.ThrottleState, error) {
	now := dbTime(a.Now)
	pending, pendingUntil := 0, now
	if a.Pending {
		pending, pendingUntil = 1, dbTime(a.PendingUntil)
	}
	var doc throttleDoc
	err := s.throttle.FindOneAndUpdate(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window_end", Value: bson.D{{Key: "$gt", Value: now}}},
			{Key: "locked_until", Value: bson.D{{Key: "$lte", Value: now}}},
			{Key: "attempts", Value: bson.D{{Key: "$lt", Value: a.Max}}},
			{Key: "$or", Value: bson.A{
				bson.D{{Key: "pending", Value: 0}},
				bson.D{{Key: "pending_until", Value: bson.D{{Key: "$gt", Value: now}}}},
			}},
		},
		bson.D{
			{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}, {Key: "pending", Value: pending}}},
			{Key: "$max", Value: bson.D{{Key: "pending_until", Value: pendingUntil}}},
		},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
	if err == nil {
		return true, doc.domain(), nil
	}
	if !errors.Is(err, mongo.ErrNoDocuments) {
		return false, account.ThrottleState{}, mongoconn.Wrap(err, "count login attempt")
	}

	windowEnd := dbTime(a.WindowEnd)
	err = s.throttle.FindOneAndUpdate(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window_end", Value: bson.D{{Key: "$lte", Value: now}}},
			{Key: "locked_until", Value: bson.D{{Key: "$lte", Value: now}}},
		},
		bson.D{
			{Key: "$set", Value: bson.D{
				{Key: "window", Value: newID("win")}, {Key: "window_end", Value: windowEnd},
				{Key: "attempts", Value: 1}, {Key: "pending", Value: pending}, {Key: "pending_until", Value: pendingUntil},
			}},
			{Key: "$max", Value: bson.D{{Key: "expires_at", Value: windowEnd}}},
			{Key: "$setOnInsert", Value: bson.D{{Key: "locked_until", Value: time.Time{}}, {Key: "lockouts", Value: 0}}},
		},
		options.FindOneAndUpdate().SetReturnDocument(options.After).SetUpsert(true)).Decode(&doc)
	if err == nil {
		return true, doc.domain(), nil
	}
	if !mongo.IsDuplicateKeyError(err) {
		return false, account.ThrottleState{}, mongoconn.Wrap(err, "start login throttle window")
	}

	if err := s.throttle.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&doc); err != nil {
		if errors.Is(err, mongo.ErrNoDocuments) {
			return false, account.ThrottleState{}, nil // reset meanwhile
		}
		return false, account.ThrottleState{}, mongoconn.Wrap(err, "read login throttle")
	}
	if doc.Window == "" {
		return false, account.ThrottleState{}, s.adoptLegacyCounter(ctx, doc)
	}
	return false, doc.domain(), nil
}

// LockLoginThrottle implements account.LoginThrottleStore. It closes the
// window (window_end = now), so that the first attempt after the lock
// starts a new one, and that condition lets one concurrent locker through.
func (s *Store) LockLoginThrottle(ctx context.Context, key string, l account.ThrottleLock) (account.ThrottleState, error) {
	now := dbTime(l.Now)
	var doc throttleDoc
	err := s.throttle.FindOneAndUpdate(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: l.Window},
			{Key: "window_end", Value: bson.D{{Key: "$gt", Value: now}}},
			{Key: "attempts", Value: bson.D{{Key: "$gte", Value: l.Max}}},
			{Key: "pending", Value: 0},
		},
		bson.D{
			{Key: "$set", Value: bson.D{
				{Key: "locked_until", Value: dbTime(l.Until)}, {Key: "lockouts", Value: l.Lockouts},
				{Key: "window_end", Value: now}, {Key: "pending", Value: 0},
			}},
			{Key: "$max", Value: bson.D{{Key: "expires_at", Value: dbTime(l.ForgetAt)}}},
		},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return s.LoginThrottleState(ctx, key)
	}
	if err != nil {
		return account.ThrottleState{}, mongoconn.Wrap(err, "lock login throttle")
	}
	return doc.domain(), nil
}

// ReleaseLoginAttempts implements account.LoginThrottleStore.
func (s *Store) ReleaseLoginAttempts(ctx context.Context, key string, st account.ThrottleState) error {
	_, err := s.throttle.UpdateOne(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: st.Window},
			{Key: "attempts", Value: st.Failures + st.Pending},
			{Key: "pending", Value: st.Pending},
			{Key: "pending_until", Value: st.PendingUntil},
		},
		bson.D{
			{Key: "$inc", Value: bson.D{{Key: "attempts", Value: -st.Pending}}},
			{Key: "$set", Value: bson.D{{Key: "pending", Value: 0}}},
		})
	return mongoconn.Wrap(err, "release pending login attempts")
}

// adoptLegacyCounter gives a counter of the previous version (no window id,
// its attempts in "count") a window id, its attempts counted as failures.
func (s *Store) adoptLegacyCounter(ctx context.Context, doc throttleDoc) error {
	_, err := s.throttle.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: doc.ID}, {Key: "window", Value: bson.D{{Key: "$exists", Value: false}}}},
		bson.D{
			{Key: "$set", Value: bson.D{
				{Key: "window", Value: newID("win")}, {Key: "attempts", Value: doc.LegacyCount},
				{Key: "pending", Value: 0}, {Key: "pending_until", Value: time.Time{}},
			}},
			{Key: "$unset", Value: bson.D{{Key: "count", Value: ""}}},
		})
	return mongoconn.Wrap(err, "adopt login throttle counter")
}

// SettleLoginFailure implements account.LoginThrottleStore.
func (s *Store) SettleLoginFailure(ctx context.Context, key, window string) (account.ThrottleState, bool, error) {
	return s.updateThrottle(ctx, "count failed login attempt",
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: window},
			{Key: "pending", Value: bson.D{{Key: "$gt", Value: 0}}},
		},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "pending", Value: -1}}}})
}

// AddLoginFailure implements account.LoginThrottleStore.
func (s *Store) AddLoginFailure(ctx context.Context, key, window string, now time.Time) (account.ThrottleState, bool, error) {
	now = dbTime(now)
	return s.updateThrottle(ctx, "count failed login attempt",
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: window},
			{Key: "window_end", Value: bson.D{{Key: "$gt", Value: now}}},
			{Key: "locked_until", Value: bson.D{{Key: "$lte", Value: now}}},
		},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}}})
}

// updateThrottle applies update to the counter filter matches and returns
// its state after; ok is false when none matches.
func (s *Store) updateThrottle(ctx context.Context, what string, filter, update bson.D) (account.ThrottleState, bool, error) {
	var doc throttleDoc
	err := s.throttle.FindOneAndUpdate(ctx, filter, update,
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.ThrottleState{}, false, nil
	}
	if err != nil {
		return account.ThrottleState{}, false, mongoconn.Wrap(err, what)
	}
	return doc.domain(), true, nil
}

// RenewLoginAttempt implements account.LoginThrottleStore.
func (s *Store) RenewLoginAttempt(ctx context.Context, key, window string, until time.Time) error {
	_, err := s.throttle.UpdateOne(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: window},
			{Key: "pending", Value: bson.D{{Key: "$gt", Value: 0}}},
		},
		bson.D{{Key: "$max", Value: bson.D{{Key: "pending_until", Value: dbTime(until)}}}})
	return mongoconn.Wrap(err, "renew login attempt")
}

// RefundLoginAttempt implements account.LoginThrottleStore.
func (s *Store) RefundLoginAttempt(ctx context.Context, key, window string) error {
	_, err := s.throttle.UpdateOne(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: window},
			{Key: "pending", Value: bson.D{{Key: "$gt", Value: 0}}},
		},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "attempts", Value: -1}, {Key: "pending", Value: -1}}}})
	return mongoconn.Wrap(err, "refund login attempt")
}

// ResetLoginThrottle implements account.LoginThrottleStore.
func (s *Store) ResetLoginThrottle(ctx context.Context, key string) error {
	_, err := s.throttle.DeleteOne(ctx, bson.D{{Key: "_id", Value: key}})
	return mongoconn.Wrap(err, "reset login throttle")
}

// LoginThrottleState implements account.LoginThrottleStore.
func (s *Store) LoginThrottleState(ctx context.Context, key string) (account.ThrottleState, error) {
	var doc throttleDoc
	err := s.throttle.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.ThrottleState{}, nil
	}
	if err != nil {
		return account.ThrottleState{}, mongoconn.Wrap(err, "read login throttle")
	}
	return doc.domain(), nil
}

// PurgeLoginThrottle implements account.LoginThrottleStore; the
// expires_at index keeps it cheap.
func (s *Store) PurgeLoginThrottle(ctx context.Context, t time.Time) (int64, error) {
	res, err := s.throttle.DeleteMany(ctx, bson.D{{Key: "expires_at", Value: bson.D{{Key: "$lt", Value: t.UTC()}}}})
	if err != nil {
		return 0, mongoconn.Wrap(err, "purge login throttle")
	}
	return res.DeletedCount, nil
}
