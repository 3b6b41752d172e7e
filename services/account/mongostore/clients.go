package mongostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/account"
)

// clientDoc is a service client. _id is the client_id: the lookup of every
// client authentication is by _id, unique by construction.
type clientDoc struct {
	ID          string    `bson:"_id"`
	AccountID   string    `bson:"account_id"`
	AccountName string    `bson:"account_name"`
	Name        string    `bson:"name"`
	Scopes      []string  `bson:"scopes"`
	Public      bool      `bson:"public,omitempty"`
	Disabled    bool      `bson:"disabled"`
	CreatedAt   time.Time `bson:"created_at"`
	UpdatedAt   time.Time `bson:"updated_at"`
	SecretHash  string    `bson:"secret_hash"` // empty for a public client
	// The secret the last rotation replaced, valid until its expiry.
	PreviousSecretHash      string    `bson:"previous_secret_hash,omitempty"`
	PreviousSecretExpiresAt time.Time `bson:"previous_secret_expires_at,omitempty"`
	// Grants is absent in clients stored before grants were recorded
	// (they keep account.LegacyGrants).
	Grants                 []string `bson:"grants,omitempty"`
	RedirectURIs           []string `bson:"redirect_uris,omitempty"`
	PostLogoutRedirectURIs []string `bson:"post_logout_redirect_uris,omitempty"`
}

// CreateClient stores c with a new client id ("cli_" and 96 random bits)
// and timestamps.
func (s *Store) CreateClient(ctx context.Context, c account.ServiceClient) (account.ServiceClient, error) {
	now := s.now()
	c.ID, c.CreatedAt, c.UpdatedAt = newID("cli"), now, now
	c.PreviousSecretHash, c.PreviousSecretExpiresAt = "", time.Time{}
	if _, err := s.clients.InsertOne(ctx, toClientDoc(c)); err != nil {
		return account.ServiceClient{}, mongoconn.Wrap(err, "create client")
	}
	return c, nil
}

// ClientByID finds a client of any account by its id.
func (s *Store) ClientByID(ctx context.Context, clientID string) (account.ServiceClient, error) {
	var doc clientDoc
	err := s.clients.FindOne(ctx, bson.D{{Key: "_id", Value: clientID}}).Decode(&doc)
	if errors.Is(err, mongo.ErrNoDocuments) {
		return account.ServiceClient{}, fmt.Errorf("client %q: %w", clientID, account.ErrNotFound)
	}
	if err != nil {
		return account.ServiceClient{}, mongoconn.Wrap(err, "find client")
	}
	return doc.domain(), nil
}

// ListClients returns the clients of an account, oldest first, served by
// the {account_id, created_at, _id} index.
func (s *Store) ListClients(ctx context.Context, accountID string) ([]account.ServiceClient, error) {
	clients, err := listOfAccount(ctx, s.clients, accountID, account.MaxClientsPerAccount, clientDoc.domain)
	if err != nil {
		return nil, mongoconn.Wrap(err, "list clients")
	}
	return clients, nil
}

// RotateClientSecret is one update conditional on the current hash, so of
// two concurrent rotations one wins and the other changes nothing (its
// secret would otherwise be lost, or evict the winner's).
func (s *Store) RotateClientSecret(ctx context.Context, accountID, clientID, currentHash, nextHash string, previousExpiresAt time.Time) error {
	res, err := s.clients.UpdateOne(ctx,
		bson.D{
			{Key: "_id", Value: clientID},
			{Key: "account_id", Value: accountID},
			{Key: "secret_hash", Value: currentHash},
		},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "secret_hash", Value: nextHash},
			{Key: "previous_secret_hash", Value: currentHash},
			{Key: "previous_secret_expires_at", Value: previousExpiresAt.UTC().Truncate(time.Millisecond)},
			{Key: "updated_at", Value: s.now()},
		}}})
	if err != nil {
		return mongoconn.Wrap(err, "rotate client secret")
	}
	if res.MatchedCount == 1 {
		return nil
	}
	// Unknown (or another account's), or rotated meanwhile: tell which.
	c, err := s.ClientByID(ctx, clientID)
	if err != nil {
		return err
	}
	if c.AccountID != accountID {
		return fmt.Errorf("client %q: %w", clientID, account.ErrNotFound)
	}
	return fmt.Errorf("client %q: %w", clientID, account.ErrConflict)
}

// SetClientDisabled disables or re-enables a client of an account.
func (s *Store) SetClientDisabled(ctx context.Context, accountID, clientID string, disabled bool) error {
	res, err := s.clients.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: clientID}, {Key: "account_id", Value: accountID}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "disabled", Value: disabled}, {Key: "updated_at", Value: s.now()}}}})
	if err != nil {
		return mongoconn.Wrap(err, "update client")
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("client %q: %w", clientID, account.ErrNotFound)
	}
	return nil
}

// UpdateClientRegistration sets a client's grants and redirect URIs.
func (s *Store) UpdateClientRegistration(ctx context.Context, accountID, clientID string, r account.ClientRegistration) error {
	res, err := s.clients.UpdateOne(ctx,
		bson.D{{Key: "_id", Value: clientID}, {Key: "account_id", Value: accountID}},
		bson.D{{Key: "$set", Value: bson.D{
			{Key: "grants", Value: nonNil(r.Grants)},
			{Key: "redirect_uris", Value: nonNil(r.RedirectURIs)},
			{Key: "post_logout_redirect_uris", Value: nonNil(r.PostLogoutRedirectURIs)},
			{Key: "updated_at", Value: s.now()},
		}}})
	if err != nil {
		return mongoconn.Wrap(err, "update client")
	}
	if res.MatchedCount == 0 {
		return fmt.Errorf("client %q: %w", clientID, account.ErrNotFound)
	}
	return nil
}

// nonNil stores an empty list as [] rather than null.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func toClientDoc(c account.ServiceClient) clientDoc {
	return clientDoc{
		ID: c.ID, AccountID: c.AccountID, AccountName: c.AccountName, Name: c.Name, Scopes: c.Scopes,
		Public: c.Public, Disabled: c.Disabled, CreatedAt: c.CreatedAt, UpdatedAt: c.UpdatedAt, SecretHash: c.SecretHash,
		PreviousSecretHash: c.PreviousSecretHash, PreviousSecretExpiresAt: c.PreviousSecretExpiresAt,
		Grants: c.Grants, RedirectURIs: c.RedirectURIs, PostLogoutRedirectURIs: c.PostLogoutRedirectURIs,
	}
}

func (d clientDoc) domain() account.ServiceClient {
	scopes := d.Scopes
	if scopes == nil {
		scopes = []string{}
	}
	c := account.ServiceClient{
		ID: d.ID, AccountID: d.AccountID, AccountName: d.AccountName, Name: d.Name, Scopes: scopes,
		Public: d.Public, Disabled: d.Disabled, CreatedAt: d.CreatedAt.UTC(), UpdatedAt: d.UpdatedAt.UTC(), SecretHash: d.SecretHash,
		PreviousSecretHash: d.PreviousSecretHash,
		Grants:             d.Grants, RedirectURIs: d.RedirectURIs, PostLogoutRedirectURIs: d.PostLogoutRedirectURIs,
	}
	if !d.PreviousSecretExpiresAt.IsZero() {
		c.PreviousSecretExpiresAt = d.PreviousSecretExpiresAt.UTC()
	}
	return c
}
