package storetest

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/account"
)

// mustClient creates a client of acc with the given scopes and returns it
// with its secret.
func mustClient(t *testing.T, s account.Store, acc account.Account, name string, scopes ...string) (account.ServiceClient, string) {
	t.Helper()
	c, secret, err := account.NewServiceClient(acc, name, scopes)
	if err != nil {
		t.Fatalf("NewServiceClient(%q): %v", name, err)
	}
	created, err := s.CreateClient(context.Background(), c)
	if err != nil {
		t.Fatalf("CreateClient(%q): %v", name, err)
	}
	return created, secret
}

func testClientCreateAndFind(t *testing.T, s account.Store) {
	ctx := context.Background()
	acc := mustAccount(t, s, "acme")
	c, secret := mustClient(t, s, acc, "billing", account.ScopeConversationsRead, account.ScopeDefinitionsRead)
	if c.ID == "" || c.AccountID != acc.ID || c.AccountName != "acme" || c.Name != "billing" || c.Disabled ||
		c.CreatedAt.IsZero() || c.SecretHash != account.HashClientSecret(secret) {
		t.Fatalf("created client = %+v", c)
	}
	got, err := s.ClientByID(ctx, c.ID)
	if err != nil {
		t.Fatalf("ClientByID: %v", err)
	}
	want := []string{account.ScopeConversationsRead, account.ScopeDefinitionsRead}
	if got.ID != c.ID || got.AccountID != acc.ID || got.AccountName != "acme" || got.Name != "billing" ||
		!slices.Equal(got.Scopes, want) || got.SecretHash != c.SecretHash || got.PreviousSecretHash != "" ||
		!got.PreviousSecretExpiresAt.IsZero() || !got.CreatedAt.Equal(c.CreatedAt) {
		t.Fatalf("ClientByID = %+v, want %+v", got, c)
	}
	if _, err := s.ClientByID(ctx, "cli_nope"); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("unknown client: err = %v, want ErrNotFound", err)
	}
	other, _ := mustClient(t, s, acc, "billing", account.ScopeDefinitionsRead)
	if other.ID == c.ID {
		t.Fatalf("two clients share the id %q", c.ID)
	}
}

func testListClients(t *testing.T, s account.Store) {
	ctx := context.Background()
	a, b := mustAccount(t, s, "a"), mustAccount(t, s, "b")
	if list, err := s.ListClients(ctx, a.ID); err != nil || list == nil || len(list) != 0 {
		t.Fatalf("ListClients of an account without clients = %#v, %v; want an empty, non-nil slice", list, err)
	}
	var created []account.ServiceClient
	for _, name := range []string{"first", "second", "third", "fourth"} {
		c, _ := mustClient(t, s, a, name, account.ScopeDefinitionsRead)
		created = append(created, c)
	}
	// Oldest first; clients created within one millisecond in id order.
	slices.SortFunc(created, func(x, y account.ServiceClient) int {
		return cmp.Or(x.CreatedAt.Compare(y.CreatedAt), strings.Compare(x.ID, y.ID))
	})
	var ids []string
	for _, c := range created {
		ids = append(ids, c.ID)
	}
	mustClient(t, s, b, "foreign", account.ScopeDefinitionsRead)
	list, err := s.ListClients(ctx, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range list {
		got = append(got, c.ID)
		if c.AccountID != a.ID {
			t.Errorf("ListClients(a) returned a client of account %s", c.AccountID)
		}
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("ListClients ids = %v, want oldest first %v", got, ids)
	}
}

func testClientRotation(t *testing.T, s account.Store) {
	ctx := context.Background()
	acc, other := mustAccount(t, s, "acme"), mustAccount(t, s, "other")
	c, _ := mustClient(t, s, acc, "billing", account.ScopeDefinitionsRead)
	until := t0.Add(time.Hour)
	next := account.HashClientSecret(account.NewClientSecret())
	if err := s.RotateClientSecret(ctx, other.ID, c.ID, c.SecretHash, next, until); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("rotation through another account: err = %v, want ErrNotFound", err)
	}
	if err := s.RotateClientSecret(ctx, acc.ID, "cli_nope", c.SecretHash, next, until); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("rotation of an unknown client: err = %v, want ErrNotFound", err)
	}
	if err := s.RotateClientSecret(ctx, acc.ID, c.ID, c.SecretHash, next, until); err != nil {
		t.Fatalf("RotateClientSecret: %v", err)
	}
	got, err := s.ClientByID(ctx, c.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.SecretHash != next || got.PreviousSecretHash != c.SecretHash || !got.PreviousSecretExpiresAt.Equal(until) {
		t.Fatalf("after rotation: %+v; want current %s, previous %s until %v", got, next, c.SecretHash, until)
	}
	// A rotation based on the replaced secret lost a race: nothing changes.
	third := account.HashClientSecret(account.NewClientSecret())
	if err := s.RotateClientSecret(ctx, acc.ID, c.ID, c.SecretHash, third, until); !errors.Is(err, account.ErrConflict) {
		t.Fatalf("stale rotation: err = %v, want ErrConflict", err)
	}
	if again, _ := s.ClientByID(ctx, c.ID); again.SecretHash != next || again.PreviousSecretHash != c.SecretHash {
		t.Fatalf("a stale rotation changed the client: %+v", again)
	}
	// The next rotation evicts the older previous secret.
	if err := s.RotateClientSecret(ctx, acc.ID, c.ID, next, third, until.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ClientByID(ctx, c.ID); got.SecretHash != third || got.PreviousSecretHash != next || !got.PreviousSecretExpiresAt.Equal(until.Add(time.Hour)) {
		t.Fatalf("after the second rotation: %+v", got)
	}
}

func testClientConcurrentRotation(t *testing.T, s account.Store) {
	ctx := context.Background()
	acc := mustAccount(t, s, "acme")
	c, _ := mustClient(t, s, acc, "billing", account.ScopeDefinitionsRead)
	const n = 8
	hashes := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		hashes[i] = account.HashClientSecret(account.NewClientSecret())
		wg.Go(func() {
			errs[i] = s.RotateClientSecret(ctx, acc.ID, c.ID, c.SecretHash, hashes[i], t0)
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("rotations %d and %d both succeeded", winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, account.ErrConflict):
			t.Fatalf("rotation %d: err = %v, want ErrConflict", i, err)
		}
	}
	if winner < 0 {
		t.Fatal("no rotation succeeded")
	}
	if got, _ := s.ClientByID(ctx, c.ID); got.SecretHash != hashes[winner] || got.PreviousSecretHash != c.SecretHash {
		t.Fatalf("after concurrent rotations: %+v, want the winner's secret %s", got, hashes[winner])
	}
}

func testClientDisable(t *testing.T, s account.Store) {
	ctx := context.Background()
	acc, other := mustAccount(t, s, "acme"), mustAccount(t, s, "other")
	c, _ := mustClient(t, s, acc, "billing", account.ScopeDefinitionsRead)
	if err := s.SetClientDisabled(ctx, other.ID, c.ID, true); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("disable through another account: err = %v, want ErrNotFound", err)
	}
	if got, _ := s.ClientByID(ctx, c.ID); got.Disabled {
		t.Fatal("another account disabled the client")
	}
	if err := s.SetClientDisabled(ctx, acc.ID, c.ID, true); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ClientByID(ctx, c.ID); !got.Disabled {
		t.Fatalf("after disable: %+v", got)
	}
	if err := s.SetClientDisabled(ctx, acc.ID, c.ID, false); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ClientByID(ctx, c.ID); got.Disabled {
		t.Fatalf("after enable: %+v", got)
	}
	if err := s.SetClientDisabled(ctx, acc.ID, "cli_nope", true); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("disable an unknown client: err = %v, want ErrNotFound", err)
	}
}
