package storetest

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/account"
)

func testTOTPLifecycle(t *testing.T, s account.Store) {
	ctx := context.Background()
	a := mustAccount(t, s, "a")
	u, err := s.CreateUser(ctx, a.ID, "alice", "hash")
	if err != nil {
		t.Fatal(err)
	}
	if pending, err := s.PendingTOTP(ctx, a.ID, u.ID); err != nil || pending != nil {
		t.Fatalf("pending before enrolment: %v, %v", pending, err)
	}
	first, second := []byte("sealed-1"), []byte("sealed-2")
	for _, sealed := range [][]byte{first, second} {
		if err := s.BeginTOTP(ctx, a.ID, u.ID, sealed); err != nil {
			t.Fatal(err)
		}
	}
	if pending, err := s.PendingTOTP(ctx, a.ID, u.ID); err != nil || string(pending) != "sealed-2" {
		t.Fatalf("pending = %q, %v; want the last begun", pending, err)
	}
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	if ok, err := s.ActivateTOTP(ctx, a.ID, u.ID, first, 100, []string{"h1", "h2"}, at); err != nil || ok {
		t.Fatalf("activate a replaced enrolment: %v, %v; want refused", ok, err)
	}
	if ok, err := s.ActivateTOTP(ctx, a.ID, u.ID, second, 100, []string{"h1", "h2"}, at); err != nil || !ok {
		t.Fatalf("activate: %v, %v", ok, err)
	}
	if ok, err := s.ActivateTOTP(ctx, a.ID, u.ID, second, 101, nil, at); err != nil || ok {
		t.Fatalf("activate twice: %v, %v; want refused", ok, err)
	}
	got, err := s.UserByID(ctx, a.ID, u.ID)
	if err != nil || got.TOTP == nil || string(got.TOTP.Sealed) != "sealed-2" || got.TOTP.LastStep != 100 ||
		!slices.Equal(got.TOTP.RecoveryCodes, []string{"h1", "h2"}) || !got.TOTP.EnrolledAt.Equal(at) {
		t.Fatalf("user after activation: %+v, %v", got.TOTP, err)
	}
	if pending, _ := s.PendingTOTP(ctx, a.ID, u.ID); pending != nil {
		t.Fatalf("pending after activation = %q", pending)
	}

	for _, tc := range []struct {
		step   int64
		sealed []byte
		want   bool
	}{{100, second, false}, {99, second, false}, {102, first, false}, {101, second, true}, {101, second, false}, {103, second, true}} {
		if ok, err := s.UseTOTPStep(ctx, a.ID, u.ID, tc.sealed, tc.step); err != nil || ok != tc.want {
			t.Fatalf("UseTOTPStep(%s, %d) = %v, %v; want %v", tc.sealed, tc.step, ok, err, tc.want)
		}
	}
	if ok, err := s.UseTOTPStep(ctx, "acc_other", u.ID, second, 200); err != nil || ok {
		t.Fatalf("use a step in another account: %v, %v", ok, err)
	}
	for _, tc := range []struct {
		hash string
		want bool
	}{{"h1", true}, {"h1", false}, {"nope", false}, {"h2", true}} {
		if ok, err := s.UseRecoveryCode(ctx, a.ID, u.ID, tc.hash); err != nil || ok != tc.want {
			t.Fatalf("UseRecoveryCode(%s) = %v, %v; want %v", tc.hash, ok, err, tc.want)
		}
	}
	if err := s.RemoveTOTP(ctx, a.ID, u.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.UserByID(ctx, a.ID, u.ID); got.TOTP != nil {
		t.Fatalf("TOTP after removal: %+v", got.TOTP)
	}
	if err := s.RemoveTOTP(ctx, a.ID, u.ID); err != nil {
		t.Fatalf("remove twice: %v", err)
	}
	if err := s.RemoveTOTP(ctx, "acc_other", u.ID); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("remove in another account: %v", err)
	}
	if err := s.BeginTOTP(ctx, "acc_other", u.ID, first); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("begin in another account: %v", err)
	}
}

// testTOTPStepHasOneWinner: replicas checking one code at once record its
// step once.
func testTOTPStepHasOneWinner(t *testing.T, s account.Store) {
	ctx := context.Background()
	a := mustAccount(t, s, "a")
	u, err := s.CreateUser(ctx, a.ID, "alice", "hash")
	if err != nil {
		t.Fatal(err)
	}
	sealed := []byte("sealed")
	if err := s.BeginTOTP(ctx, a.ID, u.ID, sealed); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.ActivateTOTP(ctx, a.ID, u.ID, sealed, 1, []string{"h"}, time.Now()); err != nil || !ok {
		t.Fatalf("activate: %v, %v", ok, err)
	}
	var wins, spent atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if ok, err := s.UseTOTPStep(ctx, a.ID, u.ID, sealed, 2); err != nil {
				t.Error(err)
			} else if ok {
				wins.Add(1)
			}
			if ok, err := s.UseRecoveryCode(ctx, a.ID, u.ID, "h"); err != nil {
				t.Error(err)
			} else if ok {
				spent.Add(1)
			}
		})
	}
	wg.Wait()
	if wins.Load() != 1 || spent.Load() != 1 {
		t.Fatalf("%d uses of one step and %d of one recovery code succeeded; want 1 each", wins.Load(), spent.Load())
	}
}

func testReplacePasswordHash(t *testing.T, s account.Store) {
	ctx := context.Background()
	a := mustAccount(t, s, "a")
	u, err := s.CreateUser(ctx, a.ID, "alice", "typed")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.ReplacePasswordHash(ctx, a.ID, u.ID, "other", "nfkc"); !errors.Is(err, account.ErrNotFound) {
		t.Fatalf("replace a hash that changed: %v", err)
	}
	if err := s.ReplacePasswordHash(ctx, a.ID, u.ID, "typed", "nfkc"); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.UserByID(ctx, a.ID, u.ID); got.PasswordHash != "nfkc" {
		t.Fatalf("hash = %q, want nfkc", got.PasswordHash)
	}
}
