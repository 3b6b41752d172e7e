package password_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/acme/platform/services/account/password"
)

// fastParams keep tests quick; production uses DefaultParams.
var fastParams = password.Params{Memory: 64, Iterations: 1, Parallelism: 1, SaltLen: 16, KeyLen: 32}

func TestHashVerifyRoundTrip(t *testing.T) {
	ctx := context.Background()
	h, err := password.New(password.Options{Params: fastParams})
	if err != nil {
		t.Fatal(err)
	}
	hash, err := h.Hash(ctx, "correct horse")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(hash, "$argon2id$v=19$m=64,t=1,p=1$") {
		t.Fatalf("hash %q does not carry its parameters", hash)
	}
	if ok, err := h.Verify(ctx, hash, "correct horse"); err != nil || !ok {
		t.Fatalf("right password: ok=%v err=%v", ok, err)
	}
	if ok, err := h.Verify(ctx, hash, "correct horse "); err != nil || ok {
		t.Fatalf("wrong password: ok=%v err=%v", ok, err)
	}
	other, _ := h.Hash(ctx, "correct horse")
	if other == hash {
		t.Fatal("two hashes of one password are equal: salt is not random")
	}
}

func TestVerifyUsesStoredParameters(t *testing.T) {
	ctx := context.Background()
	old, _ := password.New(password.Options{Params: fastParams})
	hash, _ := old.Hash(ctx, "pw")
	stronger := fastParams
	stronger.Memory, stronger.Iterations = 128, 2
	h, _ := password.New(password.Options{Params: stronger})
	if ok, err := h.Verify(ctx, hash, "pw"); err != nil || !ok {
		t.Fatalf("hash made with older parameters must still verify: ok=%v err=%v", ok, err)
	}
}

func TestDefaultsAreOWASPMinimum(t *testing.T) {
	h, err := password.New(password.Options{})
	if err != nil {
		t.Fatal(err)
	}
	hash, _ := h.Hash(context.Background(), "x")
	if !strings.Contains(hash, "$m=19456,t=2,p=1$") {
		t.Fatalf("default parameters: %s", hash)
	}
}

func TestMalformedHashesAreErrorsNotPanics(t *testing.T) {
	h, _ := password.New(password.Options{Params: fastParams})
	for _, bad := range []string{
		"", "plain", "$argon2i$v=19$m=64,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5",
		"$argon2id$v=18$m=64,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5",
		"$argon2id$v=19$m=99999999,t=1,p=1$c2FsdHNhbHQ$a2V5a2V5a2V5a2V5a2V5a2V5",
		"$argon2id$v=19$m=64,t=1,p=1$!!$a2V5a2V5a2V5a2V5a2V5a2V5",
	} {
		if _, err := h.Verify(context.Background(), bad, "x"); !errors.Is(err, password.ErrMalformedHash) {
			t.Errorf("Verify(%q): err = %v, want ErrMalformedHash", bad, err)
		}
	}
}

func TestConcurrencyLimitFailsFastWithErrBusy(t *testing.T) {
	// One slot, and hashes slow enough that a queue forms.
	slow := password.Params{Memory: 32 * 1024, Iterations: 3, Parallelism: 1, SaltLen: 16, KeyLen: 32}
	h, err := password.New(password.Options{Params: slow, Concurrency: 1, QueueWait: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	busy := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := h.Hash(context.Background(), "pw"); errors.Is(err, password.ErrBusy) {
				mu.Lock()
				busy++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if busy == 0 {
		t.Fatal("8 concurrent hashes on 1 slot with 1ms queue wait: none was refused")
	}
}
