package mongostore

import (
	"context"
	"errors"
	"fmt"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/account"
)

// InsertUser stores a new user; the unique index on account_id + username
// makes a taken name account.ErrDuplicate, also for the loser of two
// concurrent inserts.
func (s *Store) InsertUser(ctx context.Context, u account.User) (account.User, error) {
	now := s.now()
	doc := userDoc{
		ID: newID("usr"), AccountID: u.AccountID, Username: account.NormalizeName(u.Username),
		PasswordHash: u.PasswordHash, Name: u.Name, Email: u.Email, Disabled: u.Disabled,
		CreatedAt: now, UpdatedAt: now,
	}
	if _, err := s.users.InsertOne(ctx, doc); err != nil {
		if mongo.IsDuplicateKeyError(err) {
			return account.User{}, fmt.Errorf("create user %q: %w", doc.Username, account.ErrDuplicate)
		}
		return account.User{}, mongoconn.Wrap(err, "create user")
	}
	return doc.domain(), nil
}

// ListUsers reads a page in (created_at, _id) order: by the
// account_created index, or by the unique account_username index when a
// username is given (which matches one user at most).
func (s *Store) ListUsers(ctx context.Context, accountID string, q account.UserQuery) ([]account.User, error) {
	filter := bson.D{{Key: "account_id", Value: accountID}}
	if q.Username != "" {
		filter = append(filter, bson.E{Key: "username", Value: q.Username})
	}
	if q.After != nil {
		at := q.After.CreatedAt.UTC()
		filter = append(filter, bson.E{Key: "$or", Value: bson.A{
			bson.D{{Key: "created_at", Value: bson.D{{Key: "$gt", Value: at}}}},
			bson.D{{Key: "created_at", Value: at}, {Key: "_id", Value: bson.D{{Key: "$gt", Value: q.After.ID}}}},
		}})
	}
	opts := options.Find().SetSort(bson.D{{Key: "created_at", Value: 1}, {Key: "_id", Value: 1}}).SetLimit(int64(q.Limit))
	cur, err := s.users.Find(ctx, filter, opts)
	if err != nil {
		return nil, mongoconn.Wrap(err, "list users")
	}
	var docs []userDoc
	if err := cur.All(ctx, &docs); err != nil {
		return nil, mongoconn.Wrap(err, "list users")
	}
	out := make([]account.User, 0, len(docs))
	for _, d := range docs {
		out = append(out, d.domain())
	}
	return out, nil
}

// UpdateUserByID applies ch in one update and returns the user after it.
func (s *Store) UpdateUserByID(ctx context.Context, accountID, userID string, ch account.UserChange) (account.User, error) {
	set := bson.D{{Key: "updated_at", Value: s.now()}}
	var unset bson.D
	optional := func(key string, v *string) {
		switch {
		case v == nil:
		case *v == "":
			unset = append(unset, bson.E{Key: key, Value: ""})
		default:
			set = append(set, bson.E{Key: key, Value: *v})
		}
	}
	optional("name", ch.Name)
	optional("email", ch.Email)
	if ch.Disabled != nil {
		set = append(set, bson.E{Key: "disabled", Value: *ch.Disabled})
	}
	if ch.PasswordHash != nil {
		set = append(set, bson.E{Key: "password_hash", Value: *ch.PasswordHash})
	}
	update := bson.D{{Key: "$set", Value: set}}
	if len(unset) > 0 {
		update = append(update, bson.E{Key: "$unset", Value: unset})
	}
	var doc userDoc
	err := s.users.FindOneAndUpdate(ctx,
		bson.D{{Key: "_id", Value: userID}, {Key: "account_id", Value: accountID}}, update,
		options.FindOneAndUpdate().SetReturnDocument(options.After)).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.User{}, fmt.Errorf("user %q: %w", userID, account.ErrNotFound)
	}
	if err != nil {
		return account.User{}, mongoconn.Wrap(err, "update user")
	}
	return doc.domain(), nil
}

// DeleteUser removes a user's document.
func (s *Store) DeleteUser(ctx context.Context, accountID, userID string) error {
	res, err := s.users.DeleteOne(ctx, bson.D{{Key: "_id", Value: userID}, {Key: "account_id", Value: accountID}})
	if err != nil {
		return mongoconn.Wrap(err, "delete user")
	}
	if res.DeletedCount == 0 {
		return fmt.Errorf("user %q: %w", userID, account.ErrNotFound)
	}
	return nil
}

// RevokeUserSessions revokes every session of a user (by the account_user
// index). Each session is one document revoked by one update, and a
// session's refresh is conditional on its not being revoked, so no
// exchange that starts after this returns succeeds.
func (s *Store) RevokeUserSessions(ctx context.Context, accountID, userID string) error {
	_, err := s.sessions.UpdateMany(ctx,
		bson.D{{Key: "account_id", Value: accountID}, {Key: "user_id", Value: userID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "revoked", Value: true}}}})
	if err != nil {
		return mongoconn.Wrap(err, "revoke user sessions")
	}
	if _, err := s.browser.DeleteMany(ctx, bson.D{{Key: "account_id", Value: accountID}, {Key: "user_id", Value: userID}}); err != nil {
		return mongoconn.Wrap(err, "end user browser sessions")
	}
	return nil
}

// DeleteUserSessions erases every session of a user.
func (s *Store) DeleteUserSessions(ctx context.Context, accountID, userID string) error {
	if _, err := s.sessions.DeleteMany(ctx, bson.D{{Key: "account_id", Value: accountID}, {Key: "user_id", Value: userID}}); err != nil {
		return mongoconn.Wrap(err, "delete user sessions")
	}
	if _, err := s.browser.DeleteMany(ctx, bson.D{{Key: "account_id", Value: accountID}, {Key: "user_id", Value: userID}}); err != nil {
		return mongoconn.Wrap(err, "delete user browser sessions")
	}
	return nil
}
