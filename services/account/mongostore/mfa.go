package mongostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/account"
)

// totpDoc is a user's active second factor, inside the user's document,
// so that each change of it (a code used, a recovery code spent) is one
// conditional update of one document.
type totpDoc struct {
	Sealed        []byte    `bson:"sealed"`
	LastStep      int64     `bson:"last_step"`
	RecoveryCodes []string  `bson:"recovery_codes"`
	EnrolledAt    time.Time `bson:"enrolled_at"`
}

func userFilter(accountID, userID string) bson.D {
	return bson.D{{Key: "_id", Value: userID}, {Key: "account_id", Value: accountID}}
}

// BeginTOTP stores the pending secret of an enrolment.
func (s *Store) BeginTOTP(ctx context.Context, accountID, userID string, sealed []byte) error {
	res, err := s.users.UpdateOne(ctx, userFilter(accountID, userID),
		bson.D{{Key: "$set", Value: bson.D{{Key: "totp_pending", Value: sealed}}}})
	if err != nil {
		return mongoconn.Wrap(err, "begin TOTP enrolment")
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("user %q: %w", userID, account.ErrNotFound)
	}
	return nil
}

// PendingTOTP reads the pending secret alone.
func (s *Store) PendingTOTP(ctx context.Context, accountID, userID string) ([]byte, error) {
	var doc struct {
		Pending []byte `bson:"totp_pending"`
	}
	err := s.users.FindOne(ctx, userFilter(accountID, userID),
		options.FindOne().SetProjection(bson.D{{Key: "totp_pending", Value: 1}})).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return nil, fmt.Errorf("user %q: %w", userID, account.ErrNotFound)
	}
	if err != nil {
		return nil, mongoconn.Wrap(err, "read TOTP enrolment")
	}
	return doc.Pending, nil
}

// ActivateTOTP is one update conditional on the pending secret and on no
// active one.
func (s *Store) ActivateTOTP(ctx context.Context, accountID, userID string, sealed []byte, step int64, recoveryHashes []string, at time.Time) (bool, error) {
	filter := append(userFilter(accountID, userID),
		bson.E{Key: "totp_pending", Value: sealed},
		bson.E{Key: "totp", Value: bson.D{{Key: "$exists", Value: false}}})
	res, err := s.users.UpdateOne(ctx, filter, bson.D{
		{Key: "$set", Value: bson.D{
			{Key: "totp", Value: totpDoc{Sealed: sealed, LastStep: step, RecoveryCodes: recoveryHashes, EnrolledAt: at.UTC().Truncate(time.Millisecond)}},
			{Key: "updated_at", Value: s.now()},
		}},
		{Key: "$unset", Value: bson.D{{Key: "totp_pending", Value: ""}}},
	})
	if err != nil {
		return false, mongoconn.Wrap(err, "activate TOTP")
	}
	return res.MatchedCount == 1, nil
}

// UseTOTPStep is one update conditional on the active secret and on an
// earlier last step: of two replicas checking one code, one matches.
func (s *Store) UseTOTPStep(ctx context.Context, accountID, userID string, sealed []byte, step int64) (bool, error) {
	filter := append(userFilter(accountID, userID),
		bson.E{Key: "totp.sealed", Value: sealed},
		bson.E{Key: "totp.last_step", Value: bson.D{{Key: "$lt", Value: step}}})
	res, err := s.users.UpdateOne(ctx, filter,
		bson.D{{Key: "$set", Value: bson.D{{Key: "totp.last_step", Value: step}}}})
	if err != nil {
		return false, mongoconn.Wrap(err, "use TOTP code")
	}
	return res.MatchedCount == 1, nil
}

// UseRecoveryCode is one update conditional on the code's hash being
// there, which it removes.
func (s *Store) UseRecoveryCode(ctx context.Context, accountID, userID, hash string) (bool, error) {
	filter := append(userFilter(accountID, userID), bson.E{Key: "totp.recovery_codes", Value: hash})
	res, err := s.users.UpdateOne(ctx, filter,
		bson.D{{Key: "$pull", Value: bson.D{{Key: "totp.recovery_codes", Value: hash}}}})
	if err != nil {
		return false, mongoconn.Wrap(err, "use recovery code")
	}
	return res.MatchedCount == 1, nil
}

// RemoveTOTP unsets the active and the pending second factor.
func (s *Store) RemoveTOTP(ctx context.Context, accountID, userID string) error {
	res, err := s.users.UpdateOne(ctx, userFilter(accountID, userID), bson.D{
		{Key: "$unset", Value: bson.D{{Key: "totp", Value: ""}, {Key: "totp_pending", Value: ""}}},
		{Key: "$set", Value: bson.D{{Key: "updated_at", Value: s.now()}}},
	})
	if err != nil {
		return mongoconn.Wrap(err, "remove TOTP")
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("user %q: %w", userID, account.ErrNotFound)
	}
	return nil
}

// ReplacePasswordHash is one update conditional on the hash read.
func (s *Store) ReplacePasswordHash(ctx context.Context, accountID, userID, prev, next string) error {
	filter := append(userFilter(accountID, userID), bson.E{Key: "password_hash", Value: prev})
	res, err := s.users.UpdateOne(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "password_hash", Value: next}}}})
	if err != nil {
		return mongoconn.Wrap(err, "replace password hash")
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("user %q with this hash: %w", userID, account.ErrNotFound)
	}
	return nil
}
