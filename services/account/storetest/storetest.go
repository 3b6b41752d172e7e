// Package storetest is the behaviour of an account.Store, written once as
// tests (after Dex's storage conformance suite). Every implementation runs
// it from its own tests:
//
//	func TestStore(t *testing.T) { storetest.Run(t, func(t *testing.T) account.Store { ... }) }
package storetest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/account"
)

// NewStore returns an empty store for one subtest.
type NewStore func(t *testing.T) account.Store

// Run runs the conformance suite against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	tests := []struct {
		name string
		fn   func(t *testing.T, s account.Store)
	}{
		{"AccountNamesAreUniqueAndCaseInsensitive", testAccountNames},
		{"ListAccountsSortedByName", testListAccounts},
		{"UsernamesAreUniquePerAccount", testUsernames},
		{"UserUpdates", testUserUpdates},
		{"ReplacePasswordHashIsConditional", testReplacePasswordHash},
		{"TOTPLifecycle", testTOTPLifecycle},
		{"TOTPStepAndRecoveryCodeHaveOneWinner", testTOTPStepHasOneWinner},
		{"DefinitionLifecycle", testDefinitionLifecycle},
		{"DefinitionsAreScopedByAccount", testDefinitionIsolation},
		{"ListDefinitionsEmptyIsNotNil", testListDefinitionsEmpty},
		{"SigningKeysCreatedOnceUnderRace", testSigningKeysCreatedOnceUnderRace},
		{"SigningKeysConditionalUpdate", testSigningKeysConditionalUpdate},
		{"SessionRefreshRotation", testSessionRotation},
		{"SessionConcurrentExchangeHasOneWinner", testSessionConcurrentRotate},
		{"SessionRevokeAndScope", testSessionRevoke},
		{"SessionPurge", testSessionPurge},
		{"ThrottleLocksAtTheLimitUntilTheLockEnds", testThrottleLockout},
		{"ThrottleWindowStartsOver", testThrottleWindow},
		{"ThrottleLockoutGrows", testThrottleLockoutGrows},
		{"ThrottleResetAndRefund", testThrottleResetAndRefund},
		{"ThrottleKeysAreIndependent", testThrottleKeysAreIndependent},
		{"ThrottleLocksOnlyOnConfirmedFailures", testThrottleLocksOnlyOnFailures},
		{"ThrottleResetFreesTheWindow", testThrottleResetFreesTheWindow},
		{"ThrottleAttemptsInFlightPastTheirLeaseAreReleased", testThrottleLeaseEnds},
		{"ThrottleConcurrentAttemptsCountExactly", testThrottleConcurrentAttempts},
		{"ThrottleConcurrentAttemptsInFlightNeverExceedTheLimit", testThrottleConcurrentAttemptsInFlight},
		{"ThrottleConcurrentSuccessesNeverLock", testThrottleConcurrentSuccessesNeverLock},
		{"ThrottlePurge", testThrottlePurge},
		{"ClientCreateAndFind", testClientCreateAndFind},
		{"ListClientsOfOneAccountOldestFirst", testListClients},
		{"ClientSecretRotation", testClientRotation},
		{"ClientConcurrentRotationHasOneWinner", testClientConcurrentRotation},
		{"ClientDisableIsScopedByAccount", testClientDisable},
		{"ClientRegistration", testClientRegistration},
		{"BrowserSessions", testBrowserSessions},
		{"AuthCodesAreSpentOnce", testAuthCodes},
		{"AuthCodesAreRedeemedOnceWhenTheyMatch", testRedeemAuthCode},
		{"PendingSignInsAreTakenOnce", testPendingSignIns},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.fn(t, newStore(t))
		})
	}
}

func mustAccount(t *testing.T, s account.Store, name string) account.Account {
	t.Helper()
	a, err := s.CreateAccount(context.Background(), name)
	if err != nil {
		t.Fatalf("CreateAccount(%q): %v", name, err)
	}
	return a
}

func testAccountNames(t *testing.T, s account.Store) {
	ctx := context.Background()
	a := mustAccount(t, s, "Acme")
	if a.ID == "" || a.Name != "acme" || a.CreatedAt.IsZero() {
		t.Fatalf("created account = %+v", a)
	}
	if _, err := s.CreateAccount(ctx, " ACME "); !errors.Is(err, account.ErrDuplicate) {
		t.Fatalf("duplicate name: err = %v, want ErrDuplicate", err)
	}
	got, err := s.AccountByName(ctx, "aCmE")
	if err != nil || got.ID != a.ID {
		t.Fatalf("AccountByName = %+v, %v", got, err)
	}
	if _, err := s.AccountByName(ctx, "nope"); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("unknown account: err = %v, want ErrNotFound", err)
	}
}

func testListAccounts(t *testing.T, s account.Store) {
	for _, n := range []string{"zeta", "alpha", "mid"} {
		mustAccount(t, s, n)
	}
	list, err := s.ListAccounts(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, a := range list {
		names = append(names, a.Name)
	}
	if fmt.Sprint(names) != "[alpha mid zeta]" {
		t.Fatalf("ListAccounts names = %v", names)
	}
}

func testUsernames(t *testing.T, s account.Store) {
	ctx := context.Background()
	a, b := mustAccount(t, s, "a"), mustAccount(t, s, "b")
	u, err := s.CreateUser(ctx, a.ID, "Alice", "hash-1")
	if err != nil {
		t.Fatal(err)
	}
	if u.ID == "" || u.Username != "alice" || u.AccountID != a.ID || u.Disabled {
		t.Fatalf("created user = %+v", u)
	}
	if _, err := s.CreateUser(ctx, a.ID, "alice", "hash-2"); !errors.Is(err, account.ErrDuplicate) {
		t.Fatalf("duplicate username: err = %v", err)
	}
	if _, err := s.CreateUser(ctx, b.ID, "alice", "hash-3"); err != nil {
		t.Fatalf("same username in another account must be allowed: %v", err)
	}
	got, err := s.UserByName(ctx, a.ID, "ALICE")
	if err != nil || got.ID != u.ID || got.PasswordHash != "hash-1" {
		t.Fatalf("UserByName = %+v, %v", got, err)
	}
	if _, err := s.UserByName(ctx, a.ID, "bob"); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("unknown user: err = %v", err)
	}
	if byID, err := s.UserByID(ctx, a.ID, u.ID); err != nil || byID.Username != "alice" {
		t.Fatalf("UserByID = %+v, %v", byID, err)
	}
	if _, err := s.UserByID(ctx, b.ID, u.ID); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("UserByID in another account: err = %v", err)
	}
}

func testUserUpdates(t *testing.T, s account.Store) {
	ctx := context.Background()
	a := mustAccount(t, s, "a")
	created, err := s.CreateUser(ctx, a.ID, "alice", "old")
	if err != nil {
		t.Fatal(err)
	}
	newHash, other, disabled := "new", "x", true
	updated, err := s.UpdateUserByID(ctx, a.ID, created.ID, account.UserChange{PasswordHash: &newHash})
	if err != nil || updated.PasswordHash != "new" {
		t.Fatalf("set password hash: %+v, %v", updated, err)
	}
	if updated, err = s.UpdateUserByID(ctx, a.ID, created.ID, account.UserChange{Disabled: &disabled}); err != nil || !updated.Disabled {
		t.Fatalf("disable: %+v, %v", updated, err)
	}
	u, err := s.UserByName(ctx, a.ID, "alice")
	if err != nil || u.PasswordHash != "new" || !u.Disabled {
		t.Fatalf("after updates: %+v, %v", u, err)
	}
	if _, err := s.UpdateUserByID(ctx, a.ID, "usr_"+strings.Repeat("0", 24), account.UserChange{Disabled: &disabled}); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("disable unknown user: err = %v", err)
	}
	if _, err := s.UpdateUserByID(ctx, "acc_other", created.ID, account.UserChange{PasswordHash: &other}); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("set password in wrong account: err = %v", err)
	}
}

func newDefinition(accountID, name string) account.Definition {
	return account.Definition{
		AccountID: accountID, Name: name, Type: "salesforce",
		Config: json.RawMessage(`{"url":"https://example.test","n":12345678901234567890,"$weird.key":true}`), Enabled: true,
	}
}

func testDefinitionLifecycle(t *testing.T, s account.Store) {
	ctx := context.Background()
	a := mustAccount(t, s, "a")
	d1, err := s.CreateDefinition(ctx, newDefinition(a.ID, "first"))
	if err != nil {
		t.Fatal(err)
	}
	if d1.ID == "" || d1.CreatedAt.IsZero() || !d1.CreatedAt.Equal(d1.UpdatedAt) {
		t.Fatalf("created = %+v", d1)
	}
	d2, err := s.CreateDefinition(ctx, newDefinition(a.ID, "second"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := s.ListDefinitions(ctx, a.ID)
	if err != nil || len(list) != 2 {
		t.Fatalf("ListDefinitions = %+v, %v", list, err)
	}
	// The order is createdAt, then id: two definitions made in the same
	// millisecond come in id order.
	first, second := d1, d2
	if d2.CreatedAt.Before(d1.CreatedAt) || d2.CreatedAt.Equal(d1.CreatedAt) && d2.ID < d1.ID {
		first, second = d2, d1
	}
	if list[0].ID != first.ID || list[1].ID != second.ID {
		t.Fatalf("ListDefinitions order = [%s %s], want [%s %s]", list[0].ID, list[1].ID, first.ID, second.ID)
	}
	if string(list[0].Config) != string(newDefinition("", "").Config) {
		t.Fatalf("config did not round-trip exactly: %s", list[0].Config)
	}
	got, err := s.GetDefinition(ctx, a.ID, d1.ID)
	if err != nil || got.Name != "first" || !got.CreatedAt.Equal(d1.CreatedAt) {
		t.Fatalf("GetDefinition = %+v, %v", got, err)
	}
	upd := got
	upd.Name, upd.Enabled, upd.Config = "renamed", false, json.RawMessage(`{}`)
	replaced, err := s.ReplaceDefinition(ctx, upd)
	if err != nil || replaced.Name != "renamed" || replaced.Enabled || string(replaced.Config) != "{}" ||
		!replaced.CreatedAt.Equal(d1.CreatedAt) || replaced.UpdatedAt.Before(d1.UpdatedAt) {
		t.Fatalf("ReplaceDefinition = %+v, %v", replaced, err)
	}
	if err := s.DeleteDefinition(ctx, a.ID, d1.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetDefinition(ctx, a.ID, d1.ID); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("get deleted: err = %v", err)
	}
	if err := s.DeleteDefinition(ctx, a.ID, d1.ID); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("delete twice: err = %v", err)
	}
}

func testDefinitionIsolation(t *testing.T, s account.Store) {
	ctx := context.Background()
	a, b := mustAccount(t, s, "a"), mustAccount(t, s, "b")
	d, err := s.CreateDefinition(ctx, newDefinition(a.ID, "mine"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetDefinition(ctx, b.ID, d.ID); !errors.Is(err, account.ErrNotFound) {
		t.Errorf("get from other account: err = %v", err)
	}
	foreign := d
	foreign.AccountID, foreign.Name = b.ID, "stolen"
	if _, err := s.ReplaceDefinition(ctx, foreign); !errors.Is(err, account.ErrNotFound) {
		t.Errorf("replace from other account: err = %v", err)
	}
	if err := s.DeleteDefinition(ctx, b.ID, d.ID); !errors.Is(err, account.ErrNotFound) {
		t.Errorf("delete from other account: err = %v", err)
	}
	if list, _ := s.ListDefinitions(ctx, b.ID); len(list) != 0 {
		t.Errorf("other account lists %d definitions", len(list))
	}
	if got, err := s.GetDefinition(ctx, a.ID, d.ID); err != nil || got.Name != "mine" {
		t.Errorf("owner's definition changed: %+v, %v", got, err)
	}
}

func testListDefinitionsEmpty(t *testing.T, s account.Store) {
	list, err := s.ListDefinitions(context.Background(), mustAccount(t, s, "empty").ID)
	if err != nil || list == nil || len(list) != 0 {
		t.Fatalf("ListDefinitions of new account = %#v, %v; want empty non-nil", list, err)
	}
}

func testSigningKeysCreatedOnceUnderRace(t *testing.T, s account.Store) {
	ctx := context.Background()
	if _, err := s.SigningKeys(ctx, "RS256"); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("empty store: err = %v, want ErrNotFound", err)
	}
	const replicas = 8
	var wg sync.WaitGroup
	errs := make([]error, replicas)
	start := make(chan struct{})
	for i := range replicas {
		wg.Go(func() {
			<-start
			_, errs[i] = s.CreateSigningKeys(ctx, "RS256", []account.SigningKey{signingKey(fmt.Sprint("kid-", i), time.Now(), time.Time{})})
		})
	}
	close(start)
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner == -1:
			winner = i
		case err == nil:
			t.Fatalf("replicas %d and %d both created the signing keys", winner, i)
		case !errors.Is(err, account.ErrDuplicate):
			t.Fatalf("replica %d: err = %v, want ErrDuplicate", i, err)
		}
	}
	if winner == -1 {
		t.Fatal("no replica created the signing keys")
	}
	got, err := s.SigningKeys(ctx, "RS256")
	if err != nil || got.Version != 1 || len(got.Keys) != 1 || got.Keys[0].KID != fmt.Sprint("kid-", winner) {
		t.Fatalf("stored keys = %+v, %v; want version 1 with the winner's key", got, err)
	}
	// Keyrings of other algorithms are separate.
	if _, err := s.SigningKeys(ctx, "ES256"); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("ES256 after creating RS256: err = %v, want ErrNotFound", err)
	}
}

func testSigningKeysConditionalUpdate(t *testing.T, s account.Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	first := signingKey("k1", now, time.Time{})
	created, err := s.CreateSigningKeys(ctx, "ES256", []account.SigningKey{first})
	if err != nil || created.Version != 1 {
		t.Fatalf("create = %+v, %v", created, err)
	}
	// A successor: the first key gets its expiry, the new key signs later.
	first.ExpiresAt = now.Add(3 * time.Hour)
	second := signingKey("k2", now.Add(time.Minute), time.Time{})
	second.SignsFrom = now.Add(11 * time.Minute)
	updated, err := s.UpdateSigningKeys(ctx, "ES256", 1, []account.SigningKey{first, second})
	if err != nil || updated.Version != 2 || len(updated.Keys) != 2 {
		t.Fatalf("update = %+v, %v", updated, err)
	}
	// A replica still at version 1 loses and changes nothing.
	if _, err := s.UpdateSigningKeys(ctx, "ES256", 1, []account.SigningKey{signingKey("k3", now, time.Time{})}); !errors.Is(err, account.ErrSigningKeysChanged) {
		t.Fatalf("stale update: err = %v, want ErrSigningKeysChanged", err)
	}
	if _, err := s.UpdateSigningKeys(ctx, "EdDSA", 1, nil); !errors.Is(err, account.ErrSigningKeysChanged) {
		t.Fatalf("update of a missing keyring: err = %v, want ErrSigningKeysChanged", err)
	}
	got, err := s.SigningKeys(ctx, "ES256")
	if err != nil || got.Version != 2 || got.Alg != "ES256" || len(got.Keys) != 2 {
		t.Fatalf("stored = %+v, %v", got, err)
	}
	for i, want := range []account.SigningKey{first, second} {
		k := got.Keys[i]
		if k.KID != want.KID || k.Alg != want.Alg || string(k.JWK) != string(want.JWK) ||
			!k.CreatedAt.Equal(want.CreatedAt) || !k.SignsFrom.Equal(want.SignsFrom) || !k.ExpiresAt.Equal(want.ExpiresAt) {
			t.Errorf("key %d = %+v, want %+v", i, k, want)
		}
	}
	if !got.Keys[1].ExpiresAt.IsZero() {
		t.Errorf("the newest key's zero ExpiresAt came back as %v", got.Keys[1].ExpiresAt)
	}
	// Concurrent updates from one version: exactly one wins.
	const racers = 6
	var wg sync.WaitGroup
	errs := make([]error, racers)
	for i := range racers {
		wg.Go(func() {
			_, errs[i] = s.UpdateSigningKeys(ctx, "ES256", 2, []account.SigningKey{signingKey(fmt.Sprint("r", i), now, time.Time{})})
		})
	}
	wg.Wait()
	wins := 0
	for _, err := range errs {
		switch {
		case err == nil:
			wins++
		case !errors.Is(err, account.ErrSigningKeysChanged):
			t.Fatalf("racer: %v", err)
		}
	}
	if got, err := s.SigningKeys(ctx, "ES256"); wins != 1 || err != nil || got.Version != 3 || len(got.Keys) != 1 {
		t.Fatalf("%d racers won; stored %+v, %v; want 1 winner and version 3", wins, got, err)
	}
}

// signingKey is a stored key for store tests; the JWK is opaque to stores.
func signingKey(kid string, created, expires time.Time) account.SigningKey {
	created = created.UTC().Truncate(time.Millisecond)
	return account.SigningKey{
		KID: kid, Alg: "ES256", JWK: fmt.Appendf(nil, `{"kty":"EC","kid":%q}`, kid),
		CreatedAt: created, SignsFrom: created, ExpiresAt: expires,
	}
}

func newSession(t *testing.T, s account.Store, accountID, id, refreshID string) {
	t.Helper()
	err := s.CreateSession(context.Background(), account.Session{
		ID: id, AccountID: accountID, UserID: "usr_1", ClientID: "cli_1", RefreshID: refreshID,
		AuthTime: time.Now(), ExpiresAt: time.Now().Add(time.Hour),
	})
	if err != nil {
		t.Fatal(err)
	}
}

func testSessionRotation(t *testing.T, s account.Store) {
	ctx := context.Background()
	newSession(t, s, "acc_1", "sid_1", "r1")
	exp := time.Now().Add(2 * time.Hour)
	first := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	if err := s.RotateRefresh(ctx, "acc_1", "sid_1", "r1", "r2", first, exp); err != nil {
		t.Fatalf("first exchange: %v", err)
	}
	sess, err := s.SessionByID(ctx, "acc_1", "sid_1")
	if err != nil || sess.RefreshID != "r2" || sess.PreviousRefreshID != "r1" || !sess.RotatedAt.Equal(first) ||
		sess.UserID != "usr_1" || sess.ClientID != "cli_1" || sess.AuthTime.IsZero() || sess.Revoked ||
		!sess.ExpiresAt.Equal(exp.UTC().Truncate(time.Millisecond)) {
		t.Fatalf("session after exchange = %+v, %v", sess, err)
	}
	if err := s.RotateRefresh(ctx, "acc_1", "sid_1", "r2", "r3", time.Now(), exp); err != nil {
		t.Fatalf("second exchange: %v", err)
	}
	// r1 and r2 were spent: presenting either again changes nothing (the
	// caller decides between a retry and reuse)...
	for _, spent := range []string{"r1", "r2"} {
		if err := s.RotateRefresh(ctx, "acc_1", "sid_1", spent, "r9", time.Now(), exp); !errors.Is(err, account.ErrRefreshNotCurrent) {
			t.Fatalf("spent %s: err = %v, want ErrRefreshNotCurrent", spent, err)
		}
	}
	if sess, err := s.SessionByID(ctx, "acc_1", "sid_1"); err != nil || sess.RefreshID != "r3" || sess.PreviousRefreshID != "r2" || sess.Revoked {
		t.Fatalf("session after spent tokens = %+v, %v", sess, err)
	}
	// ...and the current token r3 still works.
	if err := s.RotateRefresh(ctx, "acc_1", "sid_1", "r3", "r4", time.Now(), exp); err != nil {
		t.Fatalf("current token after spent ones: %v", err)
	}
	if err := s.RotateRefresh(ctx, "acc_1", "sid_nope", "r1", "r2", time.Now(), exp); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("unknown session: err = %v", err)
	}
}

func testSessionConcurrentRotate(t *testing.T, s account.Store) {
	for round := range 5 {
		sid := fmt.Sprint("sid_race_", round)
		newSession(t, s, "acc_1", sid, "r1")
		const racers = 10
		var wg sync.WaitGroup
		errs := make([]error, racers)
		for i := range racers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs[i] = s.RotateRefresh(context.Background(), "acc_1", sid, "r1", fmt.Sprint("next", i), time.Now(), time.Now().Add(time.Hour))
			}()
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			switch {
			case err == nil:
				wins++
			case errors.Is(err, account.ErrRefreshNotCurrent):
			default:
				t.Fatalf("unexpected error: %v", err)
			}
		}
		if wins != 1 {
			t.Fatalf("round %d: %d of %d concurrent exchanges of one token succeeded, want exactly 1", round, wins, racers)
		}
	}
}

func testSessionRevoke(t *testing.T, s account.Store) {
	ctx := context.Background()
	newSession(t, s, "acc_1", "sid_1", "r1")
	if err := s.RevokeSession(ctx, "acc_2", "sid_1"); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("revoke from another account: err = %v", err)
	}
	if err := s.RotateRefresh(ctx, "acc_2", "sid_1", "r1", "r2", time.Now(), time.Now().Add(time.Hour)); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("exchange from another account: err = %v", err)
	}
	for range 2 { // idempotent
		if err := s.RevokeSession(ctx, "acc_1", "sid_1"); err != nil {
			t.Fatalf("revoke: %v", err)
		}
	}
	if err := s.RotateRefresh(ctx, "acc_1", "sid_1", "r1", "r2", time.Now(), time.Now().Add(time.Hour)); !errors.Is(err, account.ErrSessionRevoked) {
		t.Fatalf("exchange after revoke: err = %v", err)
	}
	if err := s.RevokeSession(ctx, "acc_1", "sid_nope"); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("revoke unknown: err = %v", err)
	}
}

func testSessionPurge(t *testing.T, s account.Store) {
	ctx := context.Background()
	for i, exp := range []time.Duration{-2 * time.Hour, -time.Minute, time.Hour} {
		err := s.CreateSession(ctx, account.Session{ID: fmt.Sprint("sid_", i), AccountID: "acc_1", UserID: "u", RefreshID: "r",
			AuthTime: time.Now(), ExpiresAt: time.Now().Add(exp)})
		if err != nil {
			t.Fatal(err)
		}
	}
	n, err := s.PurgeExpiredSessions(ctx, time.Now())
	if err != nil || n != 2 {
		t.Fatalf("purged %d, %v; want 2", n, err)
	}
	if err := s.RotateRefresh(ctx, "acc_1", "sid_2", "r", "r2", time.Now(), time.Now().Add(time.Hour)); err != nil {
		t.Fatalf("live session was purged: %v", err)
	}
}
