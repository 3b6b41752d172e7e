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
	"sync"
	"testing"

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
		{"DefinitionLifecycle", testDefinitionLifecycle},
		{"DefinitionsAreScopedByAccount", testDefinitionIsolation},
		{"ListDefinitionsEmptyIsNotNil", testListDefinitionsEmpty},
		{"SigningKeyCreatedOnceUnderRace", testSigningKeyRace},
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
}

func testUserUpdates(t *testing.T, s account.Store) {
	ctx := context.Background()
	a := mustAccount(t, s, "a")
	if _, err := s.CreateUser(ctx, a.ID, "alice", "old"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetPasswordHash(ctx, a.ID, "alice", "new"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetUserDisabled(ctx, a.ID, "alice", true); err != nil {
		t.Fatal(err)
	}
	u, err := s.UserByName(ctx, a.ID, "alice")
	if err != nil || u.PasswordHash != "new" || !u.Disabled {
		t.Fatalf("after updates: %+v, %v", u, err)
	}
	if err := s.SetUserDisabled(ctx, a.ID, "nobody", true); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("disable unknown user: err = %v", err)
	}
	if err := s.SetPasswordHash(ctx, "acc_other", "alice", "x"); !errors.Is(err, account.ErrNotFound) {
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

func testSigningKeyRace(t *testing.T, s account.Store) {
	const replicas = 8
	var wg sync.WaitGroup
	got := make([]string, replicas)
	errs := make([]error, replicas)
	for i := range replicas {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key, err := s.LoadOrCreateSigningKey(context.Background(), "RS256", func() ([]byte, error) {
				return fmt.Appendf(nil, `{"replica":%d}`, i), nil
			})
			got[i], errs[i] = string(key), err
		}()
	}
	wg.Wait()
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if got[i] != got[0] {
			t.Fatalf("replicas disagree on the key: %q vs %q", got[i], got[0])
		}
	}
	again, err := s.LoadOrCreateSigningKey(context.Background(), "RS256", func() ([]byte, error) {
		return nil, errors.New("must not generate when a key exists")
	})
	if err != nil || string(again) != got[0] {
		t.Fatalf("second load = %q, %v", again, err)
	}
}
