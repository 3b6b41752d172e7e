package mongo

import (
	"context"
	"errors"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongodb"
	"github.com/acme/platform/services/account"
)

// throttleDoc is one login throttle counter. Every field is always
// present (locked_until is year 1 when the key was never locked), so that
// filters need no $exists.
//
// The rules, each applied by one conditional single-document update:
//   - count: while the window is open, not locked and below the limit,
//     $inc count;
//   - new window: when the window has passed and the key is not locked,
//     $set count 1 and a new window_end (an upsert: this also creates the
//     counter);
//   - lock: when count reached the limit in an open window, $set
//     locked_until and close the window (window_end = now), so that the
//     first attempt after the lock starts a new window. The window_end
//     condition lets exactly one of concurrent lockers through.
//
// expires_at only grows ($max): it is when the document stops mattering,
// for PurgeLoginThrottle (the embedded development server has no TTL
// indexes).
type throttleDoc struct {
	ID          string    `bson:"_id"`
	Count       int       `bson:"count"`
	WindowEnd   time.Time `bson:"window_end"`
	LockedUntil time.Time `bson:"locked_until"`
	Lockouts    int       `bson:"lockouts"`
	ExpiresAt   time.Time `bson:"expires_at"`
}

func (d throttleDoc) domain() account.ThrottleState {
	return account.ThrottleState{
		Failures: d.Count, WindowEnd: d.WindowEnd.UTC(), LockedUntil: d.LockedUntil.UTC(), Lockouts: d.Lockouts,
	}
}

// throttleRounds bounds the retries of TakeLoginAttempt when concurrent
// attempts keep changing the document under it; each round makes progress
// for some attempt, so more than two are rare.
const throttleRounds = 5

// TakeLoginAttempt implements account.LoginThrottleStore. The common case
// (an open window) is one update; the first attempt of a window two; a
// refused attempt three (the updates that could not apply, then a read).
func (s *Store) TakeLoginAttempt(ctx context.Context, key string, now time.Time, limit account.ThrottleLimit) (bool, account.ThrottleState, error) {
	if !limit.Enabled() {
		return true, account.ThrottleState{}, nil
	}
	now = now.UTC().Truncate(time.Millisecond)
	after := options.FindOneAndUpdate().SetReturnDocument(options.After)
	for range throttleRounds {
		// Count in the open window.
		var doc throttleDoc
		err := s.throttle.FindOneAndUpdate(ctx,
			bson.D{
				{Key: "_id", Value: key},
				{Key: "window_end", Value: bson.D{{Key: "$gt", Value: now}}},
				{Key: "locked_until", Value: bson.D{{Key: "$lte", Value: now}}},
				{Key: "count", Value: bson.D{{Key: "$lt", Value: limit.MaxFailures}}},
			},
			bson.D{{Key: "$inc", Value: bson.D{{Key: "count", Value: 1}}}},
			after).Decode(&doc)
		if err == nil {
			return s.allowAttempt(ctx, doc, now, limit)
		}
		if !errors.Is(err, mongo.ErrNoDocuments) {
			return false, account.ThrottleState{}, mongodb.Wrap(err, "count login attempt")
		}

		// Start a new window (or the first).
		windowEnd := now.Add(limit.Window)
		err = s.throttle.FindOneAndUpdate(ctx,
			bson.D{
				{Key: "_id", Value: key},
				{Key: "window_end", Value: bson.D{{Key: "$lte", Value: now}}},
				{Key: "locked_until", Value: bson.D{{Key: "$lte", Value: now}}},
			},
			bson.D{
				{Key: "$set", Value: bson.D{{Key: "count", Value: 1}, {Key: "window_end", Value: windowEnd}}},
				{Key: "$max", Value: bson.D{{Key: "expires_at", Value: windowEnd}}},
				{Key: "$setOnInsert", Value: bson.D{{Key: "locked_until", Value: time.Time{}}, {Key: "lockouts", Value: 0}}},
			},
			options.FindOneAndUpdate().SetReturnDocument(options.After).SetUpsert(true)).Decode(&doc)
		if err == nil {
			return s.allowAttempt(ctx, doc, now, limit)
		}
		if !mongo.IsDuplicateKeyError(err) {
			return false, account.ThrottleState{}, mongodb.Wrap(err, "start login throttle window")
		}

		// The document exists and neither rule applied: it is locked, or
		// its window is full, or another attempt has just opened a new
		// window (then go round again).
		if err := s.throttle.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&doc); err != nil {
			if errors.Is(err, mongo.ErrNoDocuments) {
				continue // reset by a success meanwhile
			}
			return false, account.ThrottleState{}, mongodb.Wrap(err, "read login throttle")
		}
		if doc.LockedUntil.After(now) {
			return false, doc.domain(), nil
		}
		if doc.WindowEnd.After(now) && doc.Count >= limit.MaxFailures {
			// Full but not locked yet: the attempt that filled it has not
			// set the lock (or died before it could). Set it here.
			doc, err = s.lockThrottle(ctx, doc, now, limit)
			if err != nil {
				return false, account.ThrottleState{}, err
			}
			return false, doc.domain(), nil
		}
	}
	// Contention on one key for every round: refuse this attempt for a
	// moment (429, Retry-After 1 s) rather than fail the request.
	return false, account.ThrottleState{}, nil
}

// allowAttempt returns the state after a counted attempt, locking the key
// when the attempt reached the limit.
func (s *Store) allowAttempt(ctx context.Context, doc throttleDoc, now time.Time, limit account.ThrottleLimit) (bool, account.ThrottleState, error) {
	if doc.Count >= limit.MaxFailures {
		var err error
		if doc, err = s.lockThrottle(ctx, doc, now, limit); err != nil {
			return false, account.ThrottleState{}, err
		}
	}
	return true, doc.domain(), nil
}

// lockThrottle locks a key whose window is full. Of concurrent callers
// only the first update matches (it closes the window); the others read
// the document it left.
func (s *Store) lockThrottle(ctx context.Context, doc throttleDoc, now time.Time, limit account.ThrottleLimit) (throttleDoc, error) {
	until, lockouts := limit.NextLock(doc.domain(), now)
	until = until.UTC().Truncate(time.Millisecond)
	err := s.throttle.FindOneAndUpdate(ctx,
		bson.D{
			{Key: "_id", Value: doc.ID},
			{Key: "window_end", Value: bson.D{{Key: "$gt", Value: now}}},
			{Key: "count", Value: bson.D{{Key: "$gte", Value: limit.MaxFailures}}},
		},
		bson.D{
			{Key: "$set", Value: bson.D{{Key: "locked_until", Value: until}, {Key: "lockouts", Value: lockouts}, {Key: "window_end", Value: now}}},
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
		return throttleDoc{}, mongodb.Wrap(err, "lock login throttle")
	}
	return doc, nil
}

// RefundLoginAttempt implements account.LoginThrottleStore.
func (s *Store) RefundLoginAttempt(ctx context.Context, key string, now time.Time) error {
	_, err := s.throttle.UpdateOne(ctx,
		bson.D{
			{Key: "_id", Value: key},
			{Key: "window_end", Value: bson.D{{Key: "$gt", Value: now.UTC().Truncate(time.Millisecond)}}},
			{Key: "count", Value: bson.D{{Key: "$gt", Value: 0}}},
		},
		bson.D{{Key: "$inc", Value: bson.D{{Key: "count", Value: -1}}}})
	return mongodb.Wrap(err, "refund login attempt")
}

// ResetLoginThrottle implements account.LoginThrottleStore.
func (s *Store) ResetLoginThrottle(ctx context.Context, key string) error {
	_, err := s.throttle.DeleteOne(ctx, bson.D{{Key: "_id", Value: key}})
	return mongodb.Wrap(err, "reset login throttle")
}

// LoginThrottleState implements account.LoginThrottleStore.
func (s *Store) LoginThrottleState(ctx context.Context, key string) (account.ThrottleState, error) {
	var doc throttleDoc
	err := s.throttle.FindOne(ctx, bson.D{{Key: "_id", Value: key}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.ThrottleState{}, nil
	}
	if err != nil {
		return account.ThrottleState{}, mongodb.Wrap(err, "read login throttle")
	}
	return doc.domain(), nil
}

// PurgeLoginThrottle implements account.LoginThrottleStore; the
// expires_at index keeps it cheap.
func (s *Store) PurgeLoginThrottle(ctx context.Context, t time.Time) (int64, error) {
	res, err := s.throttle.DeleteMany(ctx, bson.D{{Key: "expires_at", Value: bson.D{{Key: "$lt", Value: t.UTC()}}}})
	if err != nil {
		return 0, mongodb.Wrap(err, "purge login throttle")
	}
	return res.DeletedCount, nil
}
