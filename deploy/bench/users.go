package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"
)

// benchUserPassword is the password of the users the create measure makes:
// it meets the password policy and contains none of their names.
const benchUserPassword = "velvet harbor quietly sings"

// usersPage is the page size of the listing measure.
const usersPage = 100

// storedUserDoc is a user document as the account service stores it
// (services/account/mongostore), for the floor's insert and the seeding.
type storedUserDoc struct {
	ID           string    `bson:"_id"`
	AccountID    string    `bson:"account_id"`
	Username     string    `bson:"username"`
	PasswordHash string    `bson:"password_hash"`
	Disabled     bool      `bson:"disabled"`
	CreatedAt    time.Time `bson:"created_at"`
	UpdatedAt    time.Time `bson:"updated_at"`
}

// usersRows measures the users API of a service client:
//
//   - POST /users against its floor: one argon2id hash with the stored
//     parameters plus one insert of the same document into the same
//     collection (and indexes) through the driver;
//   - GET /users?limit=100 against the driver find of the same page (the
//     service's filter, sort, limit 101 and index).
func usersRows(ctx context.Context, s *stack) ([]row, error) {
	o := s.o
	client := loopbackClient(o.workers)
	bearer, accountID, err := s.usersClientToken(ctx, client)
	if err != nil {
		return nil, err
	}
	coll := s.client.Database(s.accountDB).Collection("users")

	// The floor hashes with the parameters the service stores.
	name, password := benchUser(0)
	hash, err := s.storedHash(ctx, name)
	if err != nil {
		return nil, err
	}
	bareHash, _, err := bareArgon2id(hash, password)
	if err != nil {
		return nil, err
	}
	var created atomic.Int64
	create := func(ctx context.Context, _ int) error {
		body, _ := json.Marshal(map[string]string{"username": fmt.Sprintf("cu%d", created.Add(1)), "password": benchUserPassword})
		status, resp, err := postBearer(ctx, client, s.accountURL+"/users", bearer, string(body))
		if err != nil {
			return err
		}
		if status != http.StatusCreated {
			return fmt.Errorf("POST /users answered %d: %s", status, resp)
		}
		return nil
	}
	// The floor's users belong to an account of their own, so that they
	// neither collide with nor enlarge the listed account.
	var floored atomic.Int64
	floor := func(ctx context.Context, _ int) error {
		if err := bareHash(); err != nil {
			return err
		}
		now := time.Now().UTC().Truncate(time.Millisecond)
		n := floored.Add(1)
		_, err := coll.InsertOne(ctx, storedUserDoc{
			ID: fmt.Sprintf("usr_f%023d", n), AccountID: "acc_floor", Username: fmt.Sprintf("fu%d", n),
			PasswordHash: hash, CreatedAt: now, UpdatedAt: now,
		})
		return err
	}

	if err := seedUsers(ctx, s, accountID, usersPage+1); err != nil {
		return nil, err
	}
	listURL := s.accountURL + "/users?limit=" + fmt.Sprint(usersPage)
	list := func(ctx context.Context, _ int) error {
		status, _, body, err := get(ctx, client, listURL, bearer)
		if err != nil {
			return err
		}
		if status != http.StatusOK || strings.Count(string(body), `"id":`) != usersPage {
			return fmt.Errorf("GET /users answered %d with %d bytes", status, len(body))
		}
		return nil
	}
	filter := bson.D{{Key: "account_id", Value: accountID}}
	findOpts := options.Find().
		SetSort(bson.D{{Key: "created_at", Value: 1}, {Key: "_id", Value: 1}}).
		SetLimit(usersPage + 1).
		SetHint("account_created")
	driverFind := func(ctx context.Context, _ int) error {
		cur, err := coll.Find(ctx, filter, findOpts)
		if err != nil {
			return err
		}
		var docs []storedUserDoc
		if err := cur.All(ctx, &docs); err != nil {
			return err
		}
		if len(docs) != usersPage+1 {
			return fmt.Errorf("driver find returned %d users, want %d", len(docs), usersPage+1)
		}
		return nil
	}

	sides := []side{
		{name: "POST /users", workers: o.workers, op: create, commands: s.accountCommands},
		{name: "argon2id + insert", workers: o.workers, op: floor, commands: s.driverCmds.read},
		{name: "GET /users?limit=100", workers: o.workers, op: list, commands: s.accountCommands},
		{name: "driver find", workers: o.workers, op: driverFind, commands: s.driverCmds.read},
	}
	samples, err := alternate(ctx, o.rounds, o.serviceRun, sides...)
	if err != nil {
		return nil, fmt.Errorf("users: %w", err)
	}
	creates, floors, lists, finds := samples[0], samples[1], samples[2], samples[3]
	vsFloor := ratios(creates, floors, throughputRatio)
	vsDriver := ratios(lists, finds, throughputRatio)
	perSecond := func(s []sample) string { return thousands(medianOf(s, sample.perSecond)) + "/s" }
	return []row{
		{
			measure: fmt.Sprintf("Users: POST /users vs one argon2id hash + one insert, %d concurrent", o.workers),
			subject: perSecond(creates) + " users created (a service client with users:write)",
			against: perSecond(floors) + " floors (argon2id with the stored parameters + `InsertOne` of the same document)",
			ratio:   vsFloor, unit: "× floor", target: "≥ 0.85", hasGoal: true, met: vsFloor.median >= 0.85, id: "users",
			cmds: cmdsCell(creates, floors),
		},
		{
			measure: fmt.Sprintf("Users: GET /users (%d per page) vs driver find, %d concurrent", usersPage, o.workers),
			subject: perSecond(lists) + " pages",
			against: perSecond(finds) + fmt.Sprintf(" finds (same filter, sort, limit %d, hint)", usersPage+1),
			ratio:   vsDriver, unit: "× driver", target: "≥ 0.90", hasGoal: true, met: vsDriver.median >= 0.90, id: "users",
			cmds: cmdsCell(lists, finds),
		},
	}, nil
}

// usersClientToken creates a service client with users:read and
// users:write and returns an access token of it, and its account's id.
func (s *stack) usersClientToken(ctx context.Context, client *http.Client) (string, string, error) {
	token, err := s.clientCredentialsToken(ctx, client, "users:read,users:write")
	if err != nil {
		return "", "", err
	}
	claims, err := jwtClaims(token)
	if err != nil {
		return "", "", err
	}
	accountID, _ := claims["account_id"].(string)
	return token, accountID, nil
}

// seedUsers stores users of the account through the driver until it has
// at least n: the listing measure reads full pages whatever ran before.
func seedUsers(ctx context.Context, s *stack, accountID string, n int) error {
	coll := s.client.Database(s.accountDB).Collection("users")
	have, err := coll.CountDocuments(ctx, bson.D{{Key: "account_id", Value: accountID}})
	if err != nil {
		return err
	}
	var docs []any
	start := time.Now().UTC().Truncate(time.Millisecond)
	for i := int(have); i < n; i++ {
		at := start.Add(time.Duration(i) * time.Millisecond)
		docs = append(docs, storedUserDoc{
			ID: fmt.Sprintf("usr_s%023d", i), AccountID: accountID, Username: fmt.Sprintf("seeded%d", i),
			PasswordHash: "$argon2id$seeded", CreatedAt: at, UpdatedAt: at,
		})
	}
	if len(docs) == 0 {
		return nil
	}
	_, err = coll.InsertMany(ctx, docs)
	return err
}

// postBearer POSTs a JSON body with a bearer token.
func postBearer(ctx context.Context, c *http.Client, url, bearer, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+bearer)
	return do(c, req)
}
