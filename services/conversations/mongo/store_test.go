package mongo_test

import (
	"context"
	"sync"
	"testing"

	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/mongo"
	"github.com/acme/platform/services/conversations/storetest"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

func newStore(t *testing.T) *mongo.Store {
	s := mongo.New(mongotest.New(t))
	if err := s.EnsureIndexes(context.Background()); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) conversations.Store { return newStore(t) })
}

func TestEnsureIndexesIsIdempotent(t *testing.T) {
	s := newStore(t)
	if err := s.EnsureIndexes(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func TestSecretIsSharedByReplicas(t *testing.T) {
	s := newStore(t)
	var wg sync.WaitGroup
	got := make([]string, 6)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v, err := s.LoadOrCreateSecret(context.Background(), "cursor_key", func() (string, error) {
				return string(rune('a' + i)), nil
			})
			if err != nil {
				t.Error(err)
			}
			got[i] = v
		}()
	}
	wg.Wait()
	for _, v := range got {
		if v != got[0] {
			t.Fatalf("replicas disagree: %q", got)
		}
	}
}
