package mongostore_test

import (
	"context"
	"testing"

	"github.com/acme/platform/pkg/testkit/indexcheck"
	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/services/account"
	"github.com/acme/platform/services/account/mongostore"
	"github.com/acme/platform/services/account/storetest"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

func TestStore(t *testing.T) {
	storetest.Run(t, func(t *testing.T) account.Store {
		s := mongostore.New(indexcheck.New(t))
		if err := s.EnsureIndexes(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s
	})
}

func TestEnsureIndexesIsIdempotent(t *testing.T) {
	s := mongostore.New(mongotest.New(t))
	for range 2 {
		if err := s.EnsureIndexes(context.Background()); err != nil {
			t.Fatalf("EnsureIndexes: %v", err)
		}
	}
}
