package storetest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/account"
)

// testBrowserSessions: a browser session is found by its id until it is
// ended, purged after it expires, and ends with its user's sessions;
// RevokeBrowserSessionSessions revokes only the sessions it started.
func testBrowserSessions(t *testing.T, s account.Store) {
	ctx := context.Background()
	acc := mustAccount(t, s, "acme")
	now := time.Now().UTC().Truncate(time.Millisecond)
	bs := account.BrowserSession{ID: "bs-1", AccountID: acc.ID, UserID: "u1", AccountName: "acme", Username: "alice",
		AuthTime: now, CreatedAt: now, ExpiresAt: now.Add(time.Hour), AMR: []string{"pwd"}}
	if err := s.CreateBrowserSession(ctx, bs); err != nil {
		t.Fatal(err)
	}
	got, err := s.BrowserSessionByID(ctx, "bs-1")
	if err != nil || got.UserID != "u1" || got.Username != "alice" || !got.AuthTime.Equal(now) || !got.ExpiresAt.Equal(bs.ExpiresAt) || len(got.AMR) != 1 {
		t.Fatalf("BrowserSessionByID = %+v, %v", got, err)
	}
	if _, err := s.BrowserSessionByID(ctx, "bs-unknown"); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("unknown browser session: %v, want ErrNotFound", err)
	}
	// Sessions its codes started, and one of another browser session.
	for _, sess := range []account.Session{
		{ID: "s-in", AccountID: acc.ID, UserID: "u1", RefreshID: "r1", BrowserSessionID: "bs-1", ExpiresAt: now.Add(time.Hour)},
		{ID: "s-out", AccountID: acc.ID, UserID: "u1", RefreshID: "r2", BrowserSessionID: "bs-2", ExpiresAt: now.Add(time.Hour)},
	} {
		if err := s.CreateSession(ctx, sess); err != nil {
			t.Fatal(err)
		}
	}
	// A session id is stored once: a replayed code stores its session
	// revoked first, so that the code's exchange cannot store it live.
	dup := account.Session{ID: "s-in", AccountID: acc.ID, UserID: "u1", RefreshID: "r9", ExpiresAt: now.Add(time.Hour)}
	if err := s.CreateSession(ctx, dup); !errors.Is(err, account.ErrDuplicate) {
		t.Fatalf("a second session with one id: %v, want ErrDuplicate", err)
	}
	placeholder := account.Session{ID: "s-revoked", AccountID: acc.ID, UserID: "u1", Revoked: true, ExpiresAt: now.Add(time.Hour)}
	if err := s.CreateSession(ctx, placeholder); err != nil {
		t.Fatal(err)
	}
	if got, err := s.SessionByID(ctx, acc.ID, "s-revoked"); err != nil || !got.Revoked {
		t.Fatalf("a session stored revoked: %+v, %v", got, err)
	}
	if err := s.RevokeBrowserSessionSessions(ctx, acc.ID, "bs-1"); err != nil {
		t.Fatal(err)
	}
	in, _ := s.SessionByID(ctx, acc.ID, "s-in")
	out, _ := s.SessionByID(ctx, acc.ID, "s-out")
	if !in.Revoked || out.Revoked || in.BrowserSessionID != "bs-1" {
		t.Fatalf("after RevokeBrowserSessionSessions: in %+v, out %+v", in, out)
	}
	if err := s.EndBrowserSession(ctx, "bs-1"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.BrowserSessionByID(ctx, "bs-1"); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("ended browser session: %v", err)
	}
	if err := s.EndBrowserSession(ctx, "bs-1"); err != nil {
		t.Fatalf("ending twice: %v", err)
	}

	// A user's sessions end with their browser sessions.
	for _, id := range []string{"bs-a", "bs-b"} {
		b := bs
		b.ID, b.UserID = id, map[string]string{"bs-a": "u2", "bs-b": "u3"}[id]
		if err := s.CreateBrowserSession(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.RevokeUserSessions(ctx, acc.ID, "u2"); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteUserSessions(ctx, acc.ID, "u3"); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"bs-a", "bs-b"} {
		if _, err := s.BrowserSessionByID(ctx, id); !errors.Is(err, account.ErrNotFound) {
			t.Fatalf("browser session %s after its user's sessions ended: %v", id, err)
		}
	}

	// Purge: what expired before t goes.
	old := bs
	old.ID, old.ExpiresAt = "bs-old", now.Add(-time.Minute)
	live := bs
	live.ID = "bs-live"
	for _, b := range []account.BrowserSession{old, live} {
		if err := s.CreateBrowserSession(ctx, b); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.PurgeExpiredBrowserSessions(ctx, now); err != nil || n != 1 {
		t.Fatalf("PurgeExpiredBrowserSessions = %d, %v; want 1", n, err)
	}
	if _, err := s.BrowserSessionByID(ctx, "bs-live"); err != nil {
		t.Fatalf("live browser session purged: %v", err)
	}
}

// testAuthCodes: a code is found by its id, spent once (of concurrent
// spends exactly one wins), and purged after it expires.
func testAuthCodes(t *testing.T, s account.Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	c := account.AuthCode{ID: "code-1", ClientID: "cli_1", RedirectURI: "https://app.example/cb", CodeChallenge: "ch",
		AccountID: "acc", AccountName: "acme", UserID: "u1", BrowserSessionID: "bs", SessionID: "sid", Nonce: "n",
		AuthTime: now, ExpiresAt: now.Add(time.Minute), AMR: []string{"pwd"}}
	if err := s.CreateAuthCode(ctx, c); err != nil {
		t.Fatal(err)
	}
	got, err := s.AuthCodeByID(ctx, "code-1")
	if err != nil || got.ClientID != c.ClientID || got.RedirectURI != c.RedirectURI || got.SessionID != "sid" ||
		got.Nonce != "n" || !got.ExpiresAt.Equal(c.ExpiresAt) || got.Spent {
		t.Fatalf("AuthCodeByID = %+v, %v", got, err)
	}
	if _, err := s.AuthCodeByID(ctx, "code-unknown"); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("unknown code: %v", err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Go(func() { errs[i] = s.SpendAuthCode(ctx, "code-1") })
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, account.ErrConflict):
			t.Fatalf("SpendAuthCode: %v", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d concurrent spends of one code succeeded, want 1", won)
	}
	if got, _ := s.AuthCodeByID(ctx, "code-1"); !got.Spent {
		t.Fatal("the code is not spent")
	}
	old := c
	old.ID, old.ExpiresAt = "code-old", now.Add(-time.Minute)
	if err := s.CreateAuthCode(ctx, old); err != nil {
		t.Fatal(err)
	}
	if n, err := s.PurgeAuthCodes(ctx, now); err != nil || n != 1 {
		t.Fatalf("PurgeAuthCodes = %d, %v; want 1", n, err)
	}
	if _, err := s.AuthCodeByID(ctx, "code-1"); err != nil {
		t.Fatalf("unexpired code purged: %v", err)
	}
}

// testClientRegistration: grants and redirect URIs are stored and read
// back; a client stored without grants reads as nil (LegacyGrants).
func testClientRegistration(t *testing.T, s account.Store) {
	ctx := context.Background()
	acc := mustAccount(t, s, "acme")
	pc, err := account.NewPublicClient(acc, "spa")
	if err != nil {
		t.Fatal(err)
	}
	pc.RedirectURIs = []string{"https://app.example/cb"}
	created, err := s.CreateClient(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	got, err := s.ClientByID(ctx, created.ID)
	if err != nil || len(got.Grants) != 2 || got.RedirectURIs[0] != "https://app.example/cb" || got.AllowsGrant(account.GrantPassword) {
		t.Fatalf("ClientByID = %+v, %v", got, err)
	}
	r := account.ClientRegistration{Grants: []string{account.GrantAuthorizationCode, account.GrantPassword},
		RedirectURIs: []string{"http://127.0.0.1/cb"}, PostLogoutRedirectURIs: []string{"https://app.example/bye"}}
	if err := s.UpdateClientRegistration(ctx, "other-account", created.ID, r); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("update of another account's client: %v", err)
	}
	if err := s.UpdateClientRegistration(ctx, acc.ID, created.ID, r); err != nil {
		t.Fatal(err)
	}
	got, _ = s.ClientByID(ctx, created.ID)
	if !got.AllowsGrant(account.GrantPassword) || got.AllowsGrant(account.GrantRefreshToken) ||
		got.RedirectURIs[0] != "http://127.0.0.1/cb" || got.PostLogoutRedirectURIs[0] != "https://app.example/bye" {
		t.Fatalf("after update: %+v", got)
	}
	legacy := pc
	legacy.Grants = nil
	old, err := s.CreateClient(ctx, legacy)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := s.ClientByID(ctx, old.ID); got.Grants != nil || !got.AllowsGrant(account.GrantPassword) {
		t.Fatalf("a client stored without grants: %+v", got)
	}
}

// testPendingSignIns: a pending second step is returned as stored by the
// one take that wins among concurrent ones, then is gone; the expired
// ones are purged.
func testPendingSignIns(t *testing.T, s account.Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	p := account.PendingSignIn{ID: "ps-1", CSRFHash: "c", RequestHash: "r", AccountID: "a1", AccountName: "acme", UserID: "u1",
		TypedAccountName: "ACME", TypedUsername: "Alice", PasswordOK: true, ExpiresAt: now.Add(5 * time.Minute)}
	if err := s.CreatePendingSignIn(ctx, p); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	results := make(chan account.PendingSignIn, 8)
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got, err := s.TakePendingSignIn(ctx, "ps-1")
			if err == nil {
				results <- got
			} else {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(results)
	close(errs)
	if len(results) != 1 {
		t.Fatalf("%d takes of one pending sign-in succeeded, want 1", len(results))
	}
	if got := <-results; got != p {
		t.Fatalf("TakePendingSignIn = %+v, want %+v", got, p)
	}
	for err := range errs {
		if !errors.Is(err, account.ErrNotFound) {
			t.Fatalf("a losing take: %v, want ErrNotFound", err)
		}
	}
	old := p
	old.ID, old.ExpiresAt = "ps-old", now.Add(-time.Minute)
	live := p
	live.ID = "ps-live"
	for _, q := range []account.PendingSignIn{old, live} {
		if err := s.CreatePendingSignIn(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := s.PurgePendingSignIns(ctx, now); err != nil || n != 1 {
		t.Fatalf("PurgePendingSignIns = %d, %v, want 1", n, err)
	}
	if _, err := s.TakePendingSignIn(ctx, "ps-live"); err != nil {
		t.Fatalf("a live pending sign-in after the purge: %v", err)
	}
}

// testRedeemAuthCode: RedeemAuthCode spends a code only when its client,
// redirect URI and challenge match and it has not expired, leaving it
// unchanged otherwise; of concurrent redemptions one wins.
func testRedeemAuthCode(t *testing.T, s account.Store) {
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Millisecond)
	c := account.AuthCode{ID: "code-r", ClientID: "cli_1", RedirectURI: "https://app.example/cb", CodeChallenge: "ch",
		AccountID: "acc", AccountName: "acme", UserID: "u1", SessionID: "sid", AuthTime: now, ExpiresAt: now.Add(time.Minute)}
	if err := s.CreateAuthCode(ctx, c); err != nil {
		t.Fatal(err)
	}
	ok := account.AuthCodeRedemption{ClientID: "cli_1", RedirectURI: "https://app.example/cb", CodeChallenge: "ch", Now: now}
	for name, r := range map[string]account.AuthCodeRedemption{
		"another client":       {ClientID: "cli_2", RedirectURI: ok.RedirectURI, CodeChallenge: ok.CodeChallenge, Now: now},
		"another redirect URI": {ClientID: ok.ClientID, RedirectURI: "https://app.example/other", CodeChallenge: ok.CodeChallenge, Now: now},
		"another challenge":    {ClientID: ok.ClientID, RedirectURI: ok.RedirectURI, CodeChallenge: "other", Now: now},
		"after its expiry":     {ClientID: ok.ClientID, RedirectURI: ok.RedirectURI, CodeChallenge: ok.CodeChallenge, Now: c.ExpiresAt},
	} {
		if _, err := s.RedeemAuthCode(ctx, "code-r", r); !errors.Is(err, account.ErrConflict) {
			t.Fatalf("%s: %v, want ErrConflict", name, err)
		}
	}
	if got, err := s.AuthCodeByID(ctx, "code-r"); err != nil || got.Spent {
		t.Fatalf("after refused redemptions: %+v, %v, want the code unspent", got, err)
	}
	if _, err := s.RedeemAuthCode(ctx, "code-unknown", ok); !errors.Is(err, account.ErrConflict) {
		t.Fatalf("an unknown code: %v, want ErrConflict", err)
	}
	var wg sync.WaitGroup
	won := make(chan account.AuthCode, 8)
	for range 8 {
		wg.Go(func() {
			if got, err := s.RedeemAuthCode(ctx, "code-r", ok); err == nil {
				won <- got
			} else if !errors.Is(err, account.ErrConflict) {
				t.Errorf("a losing redemption: %v", err)
			}
		})
	}
	wg.Wait()
	close(won)
	if len(won) != 1 {
		t.Fatalf("%d redemptions won, want 1", len(won))
	}
	if got := <-won; got.UserID != "u1" || got.SessionID != "sid" || !got.ExpiresAt.Equal(c.ExpiresAt) {
		t.Fatalf("RedeemAuthCode = %+v", got)
	}
	if got, _ := s.AuthCodeByID(ctx, "code-r"); !got.Spent {
		t.Fatal("a redeemed code is not spent")
	}
}
