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

// throttleDoc is one login throttle counter. Every field is always
// present (locked_until is year 1 when the key was never locked), so that
// filters need no $exists (but the one that finds a counter written by the
// previous version: adoptLegacyCounter).
//
// attempts counts the window's attempts that have a place: its failures
// and its pending attempts (those still in flight). pending_until is the
// end of the latest lease of the pending attempts (renewed while they run):
// once it has passed, every attempt still pending is released (it counts
// as nothing: see account.AttemptLease). window identifies the window, so
// that an outcome reported after the window was reset or replaced changes
// nothing.
//
// The rules, each applied by one conditional single-document update:
//   - count: while the window is open, not locked, below the limit and its
//     pending attempts (if any) within their lease, $inc attempts (and
//     pending, for an attempt in flight);
//   - new window: when the window has passed and the key is not locked,
//     $set attempts 1 and a new window (an upsert: this also creates the
//     counter);
//   - fail: while the window has pending attempts, $inc pending -1 (the
//     attempt stays counted, as a failure); refund: the same and $inc
//     attempts -1; a failure reported after the window's pending attempts
//     were released: $inc attempts (while the window is open and
//     unlocked);
//   - renew: while the window has pending attempts, $max pending_until;
//   - release: when the leases of pending attempts have ended, $inc
//     attempts -pending and $set pending 0 (conditional on the values
//     read, so that it applies once);
//   - lock: when the window holds the limit of attempts and none pending,
//     $set locked_until and close the window (window_end = now), so that
//     the first attempt after the lock starts a new window. The
//     window_end condition lets exactly one of concurrent lockers through.
//
// expires_at only grows ($max): it is when the document stops mattering,
// for PurgeLoginThrottle (the embedded development server has no TTL
// indexes).
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
	// LegacyCount is the count of attempts of a counter written before
	// windows had ids and pending attempts (it has no window field).
	LegacyCount int `bson:"count,omitempty"`
}

func (d throttleDoc) domain() account.ThrottleState {
	return account.ThrottleState{
		Window: d.Window, Failures: d.Attempts - d.Pending, WindowEnd: d.WindowEnd.UTC(),
		Pending: d.Pending, PendingUntil: d.PendingUntil.UTC(),
		LockedUntil: d.LockedUntil.UTC(), Lockouts: d.Lockouts,
	}
}

// full reports whether the window open at now holds limit attempts.
func (d throttleDoc) full(now time.Time, limit account.ThrottleLimit) bool {
	return d.WindowEnd.After(now) && d.Attempts >= limit.MaxFailures
}

// allFailed reports whether every attempt counted in the window is a
// failure: none is pending.
func (d throttleDoc) allFailed() bool { return d.Pending == 0 }

// leasesEnded reports whether the window open at now has pending attempts
// whose leases have all ended (they are to be released).
func (d throttleDoc) leasesEnded(now time.Time) bool {
	return d.WindowEnd.After(now) && d.Pending > 0 && !d.PendingUntil.After(now)
}

// throttleRounds bounds the retries of TakeLoginAttempt when concurrent
// attempts keep changing the document under it; each round makes progress
// for some attempt, so more than two are rare.
const throttleRounds = 5

// dbTime is a time as the database keeps it (milliseconds, UTC), so that
// conditions on times read back compare equal.
func dbTime(t time.Time) time.Time { return t.UTC().Truncate(time.Millisecond) }

// TakeLoginAttempt implements account.LoginThrottleStore. The common case
// (an open window) is one update; the first attempt of a window two; a
// refused attempt three (the updates that could not apply, then a read).
func (s *Store) TakeLoginAttempt(ctx context.Context, key string, now time.Time, limit account.ThrottleLimit, lease time.Duration) (bool, account.ThrottleState, error) {
	if !limit.Enabled() {
		return true, account.ThrottleState{}, nil
	}
	now = dbTime(now)
	pending, pendingUntil := 0, now
	if lease > 0 {
		pending, pendingUntil = 1, dbTime(now.Add(lease))
	}
	for range throttleRounds {
		// Count in the open window.
		var doc throttleDoc
		err := s.throttle.FindOneAndUpdate(ctx,
			bson.D{
				{Key: "_id", Value: key},
				{Key: "window_end", Value: bson.D{{Key: "$gt", Value: now}}},
				{Key: "locked_until", Value: bson.D{{Key: "$lte", Value: now}}},
				{Key: "attempts", Value: bson.D{{Key: "$lt", Value: limit.MaxFailures}}},
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
			return s.allowAttempt(ctx, doc, now, limit)
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return false, account.ThrottleState{}, mongoconn.Wrap(err, "count login attempt")
		}

		// Start a new window (or the first).
		windowEnd := dbTime(now.Add(limit.Window))
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
			return s.allowAttempt(ctx, doc, now, limit)
		}
		if !mongo.IsDuplicateKeyError(err) {
			return false, account.ThrottleState{}, mongoconn.Wrap(err, "start login throttle window")
		}

		// The document exists and neither rule applied: it is locked, or
		// the leases of its pending attempts have ended, or its window is
		// full, or another attempt has just opened a new window (then go
		// round again).
		if err := s.throttle.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&doc); err != nil {
			if errors.Is(err, mongo.ErrNoDocuments) {
				continue // reset by a success meanwhile
			}
			return false, account.ThrottleState{}, mongoconn.Wrap(err, "read login throttle")
		}
		switch {
		case doc.LockedUntil.After(now):
			return false, doc.domain(), nil
		case doc.Window == "":
			if err := s.adoptLegacyCounter(ctx, doc); err != nil {
				return false, account.ThrottleState{}, err
			}
		case doc.leasesEnded(now):
			// Attempts stopped renewing their leases (their replica
			// died): their places are released, not counted as
			// failures; then go round again.
			if err := s.releasePending(ctx, doc); err != nil {
				return false, account.ThrottleState{}, err
			}
		case doc.full(now, limit) && doc.allFailed():
			// Full of failures but not locked yet: the attempt that
			// failed last has not set the lock (or died before it
			// could). Set it here.
			doc, err = s.lockThrottle(ctx, doc, now, limit)
			if err != nil {
				return false, account.ThrottleState{}, err
			}
			return false, doc.domain(), nil
		case doc.full(now, limit):
			// Full of attempts in flight: wait for their outcome.
			return false, doc.domain(), nil
		}
	}
	// Contention on one key for every round: refuse this attempt for a
	// moment rather than fail the request (the caller waits and retries).
	return false, account.ThrottleState{}, nil
}

// allowAttempt returns the state after a counted attempt, locking the key
// when the attempt (a failure already: the address counter) filled the
// window with failures.
func (s *Store) allowAttempt(ctx context.Context, doc throttleDoc, now time.Time, limit account.ThrottleLimit) (bool, account.ThrottleState, error) {
	if doc.full(now, limit) && doc.allFailed() {
		var err error
		if doc, err = s.lockThrottle(ctx, doc, now, limit); err != nil {
			return false, account.ThrottleState{}, err
		}
	}
	return true, doc.domain(), nil
}

// lockThrottle locks a key whose window is full of failures. Of concurrent
// callers only the first update matches (it closes the window); the others
// read the document it left.
func (s *Store) lockThrottle(ctx context.Context, doc throttleDoc, now time.Time, limit account.ThrottleLimit) (throttleDoc, error) {
	until, lockouts := limit.NextLock(doc.domain(), now)
	until = dbTime(until)
	err := s.throttle.FindOneAndUpdate(ctx,
		bson.D{
			{Key: "_id", Value: doc.ID},
			{Key: "window", Value: doc.Window},
			{Key: "window_end", Value: bson.D{{Key: "$gt", Value: now}}},
			{Key: "attempts", Value: bson.D{{Key: "$gte", Value: limit.MaxFailures}}},
			{Key: "pending", Value: 0},
		},
		bson.D{
			{Key: "$set", Value: bson.D{
				{Key: "locked_until", Value: until}, {Key: "lockouts", Value: lockouts},
				{Key: "window_end", Value: now}, {Key: "pending", Value: 0},
			}},
			{Key: "$max", Value: bson.D{{Key: "expires_at", Value: until.Add(account.StrikeMemory)}}},
		},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		err = s.throttle.FindOne(ctx, bson.D{{Key: "_id", Value: doc.ID}}).Decode(&doc)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return throttleDoc{ID: doc.ID}, nil // reset by a success meanwhile
		}
	}
	if err != nil {
		return throttleDoc{}, mongoconn.Wrap(err, "lock login throttle")
	}
	return doc, nil
}

// releasePending gives back the places of the pending attempts of doc,
// whose leases have ended: they count as nothing. The update is
// conditional on the document as read, so that it applies once however
// many callers race, and not at all after anything else changed the
// window.
func (s *Store) releasePending(ctx context.Context, doc throttleDoc) error {
	_, err := s.throttle.UpdateOne(ctx,
		bson.D{
			{Key: "_id", Value: doc.ID},
			{Key: "window", Value: doc.Window},
			{Key: "attempts", Value: doc.Attempts},
			{Key: "pending", Value: doc.Pending},
			{Key: "pending_until", Value: doc.PendingUntil},
		},
		bson.D{
			{Key: "$inc", Value: bson.D{{Key: "attempts", Value: -doc.Pending}}},
			{Key: "$set", Value: bson.D{{Key: "pending", Value: 0}}},
		})
	return mongoconn.Wrap(err, "release pending login attempts")
}

// adoptLegacyCounter gives a counter written by the previous version (no
// window id, attempts counted in "count", none known to be pending) a
// window id, its attempts counted as failures: the rules above then apply
// to it. It is needed only for a counter whose window was open and not
// locked when the new version started, and once per counter.
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

// FailLoginAttempt implements account.LoginThrottleStore.
func (s *Store) FailLoginAttempt(ctx context.Context, key, window string, now time.Time, limit account.ThrottleLimit) error {
	now = dbTime(now)
	var doc throttleDoc
	err := s.throttle.FindOneAndUpdate(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window", Value: window},
			{Key: "pending", Value: bson.D{{Key: "$gt", Value: 0}}},
		},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "pending", Value: -1}}}},
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		// Its place was released (its lease ended) or the window is gone:
		// a failure still counts in its window while that is open.
		err = s.throttle.FindOneAndUpdate(ctx,
			bson.D{
				{Key: "_id", Value: key},
				{Key: "window", Value: window},
				{Key: "window_end", Value: bson.D{{Key: "$gt", Value: now}}},
				{Key: "locked_until", Value: bson.D{{Key: "$lte", Value: now}}},
			},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "attempts", Value: 1}}}},
			options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
		if errors.Is(err, mongo.ErrNoDocuments) {
			return nil // reset (a success), replaced or locked: nothing to count
		}
	}
	if err != nil {
		return mongoconn.Wrap(err, "count failed login attempt")
	}
	if limit.Enabled() && doc.full(now, limit) && doc.allFailed() {
		_, err = s.lockThrottle(ctx, doc, now, limit)
	}
	return err
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
