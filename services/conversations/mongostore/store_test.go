package mongostore_test

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo"

	"github.com/acme/platform/pkg/testkit/indexcheck"
	"github.com/acme/platform/pkg/testkit/mongotest"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/mongostore"
	"github.com/acme/platform/services/conversations/storetest"
)

func TestMain(m *testing.M) { mongotest.Main(m) }

func newStore(t *testing.T) *mongostore.Store {
	_, s := newStoreOn(t)
	return s
}

// newStoreOn returns a fresh store with its database, for tests that
// write documents as earlier versions did.
func newStoreOn(t *testing.T) (*mongo.Database, *mongostore.Store) {
	db := indexcheck.New(t)
	s := mongostore.New(db)
	if err := s.EnsureIndexes(context.Background()); err != nil {
		t.Fatal(err)
	}
	return db, s
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

// TestExpiredKeyIsClaimedAfresh: a key older than 24 hours that the purge
// has not removed yet is a new key.
func TestExpiredKeyIsClaimedAfresh(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	store := newStore(t)
	s := &conversations.Service{Store: store, Now: func() time.Time { return t0 }}
	key := conversations.IdempotencyKey{AccountID: "acc_1", Caller: "usr_1", Key: "k"}
	if _, err := s.ClaimIdempotencyKey(ctx, conversations.IdempotencyRecord{IdempotencyKey: key, Fingerprint: "f1", ResourceID: "r1"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		after time.Duration
		want  string
	}{{conversations.IdempotencyTTL - time.Millisecond, "f1"}, {conversations.IdempotencyTTL, "f2"}} {
		later := &conversations.Service{Store: store, Now: func() time.Time { return t0.Add(tc.after) }}
		rec, err := later.ClaimIdempotencyKey(ctx, conversations.IdempotencyRecord{IdempotencyKey: key, Fingerprint: "f2", ResourceID: "r2"})
		if err != nil || rec.Fingerprint != tc.want {
			t.Fatalf("claim %v later: %+v, %v; want fingerprint %s", tc.after, rec, err, tc.want)
		}
	}
}

// TestDocumentWithoutVersionCanChange: conversations stored before versions
// existed have none; the first change gives them one.
func TestDocumentWithoutVersionCanChange(t *testing.T) {
	ctx := context.Background()
	db, store := newStoreOn(t)
	s := &conversations.Service{Store: store}
	now := time.Now().UTC().Truncate(time.Millisecond)
	if _, err := db.Collection("conversations").InsertOne(ctx, bson.D{
		{Key: "_id", Value: "cnv_old"}, {Key: "account_id", Value: "acc_1"}, {Key: "subject", Value: "old"},
		{Key: "status", Value: "open"}, {Key: "participants", Value: bson.A{"usr_1"}},
		{Key: "created_at", Value: now}, {Key: "updated_at", Value: now}, {Key: "last_message_at", Value: nil},
	}); err != nil {
		t.Fatal(err)
	}
	who := conversations.Caller{AccountID: "acc_1", ID: "usr_1"}
	old, err := s.GetConversation(ctx, who, "cnv_old")
	if err != nil || old.Version != 0 {
		t.Fatalf("old: %+v, %v", old, err)
	}
	subject := "new"
	got, err := s.UpdateConversation(ctx, who, "cnv_old", conversations.Patch{Subject: &subject},
		conversations.Precondition{Given: true, Versions: []int64{0}})
	if err != nil || got.Version != 1 || got.Subject != "new" {
		t.Fatalf("update: %+v, %v", got, err)
	}
	if _, err := s.PostMessage(ctx, who, conversations.Message{ConversationID: "cnv_old", Body: "hi"}); err != nil {
		t.Fatal(err)
	}
	if final, _ := s.GetConversation(ctx, who, "cnv_old"); final.Version != 2 || final.LastMessageAt == nil {
		t.Fatalf("final: %+v", final)
	}
}

// TestAccountWideListHasItsIndexes: a service client's listing (equality on
// account_id, optionally status, then the sort order) has indexes of its
// own; the participant indexes cannot serve it without a scan.
func TestAccountWideListHasItsIndexes(t *testing.T) {
	db := mongotest.New(t)
	if err := mongostore.New(db).EnsureIndexes(context.Background()); err != nil {
		t.Fatal(err)
	}
	assertIndexes(t, db, "conversations", map[string]string{
		"by_account":        "account_id:1 updated_at:-1 _id:-1",
		"by_account_status": "account_id:1 status:1 updated_at:-1 _id:-1",
	})
}

// assertIndexes fails unless coll has each index of want (name: its keys)
// with those keys.
func assertIndexes(t *testing.T, db *mongo.Database, coll string, want map[string]string) {
	t.Helper()
	ctx := context.Background()
	cur, err := db.Collection(coll).Indexes().List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var indexes []struct {
		Name string `bson:"name"`
		Key  bson.D `bson:"key"`
	}
	if err := cur.All(ctx, &indexes); err != nil {
		t.Fatal(err)
	}
	want = maps.Clone(want)
	for _, ix := range indexes {
		var keys []string
		for _, e := range ix.Key {
			keys = append(keys, fmt.Sprintf("%s:%v", e.Key, e.Value))
		}
		if w, ok := want[ix.Name]; ok {
			if got := strings.Join(keys, " "); got != w {
				t.Errorf("index %s of %s = %s, want %s", ix.Name, coll, got, w)
			}
			delete(want, ix.Name)
		}
	}
	if len(want) > 0 {
		t.Fatalf("missing indexes of %s: %v", coll, want)
	}
}

// TestPendingFromBeforeSlotsIsFound: a document pending from before
// pending_slot existed is read by every partition's relay, so it never
// stays pending; its next change gives it its slot.
func TestPendingFromBeforeSlotsIsFound(t *testing.T) {
	ctx := context.Background()
	db, store := newStoreOn(t)
	s := &conversations.Service{Store: store}
	who := conversations.Caller{AccountID: "acc_1", ID: "usr_a"}
	c, err := s.CreateConversation(ctx, who, conversations.Conversation{Status: conversations.StatusOpen, Participants: []string{"usr_a"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Collection("conversations").UpdateOne(ctx, bson.D{{Key: "_id", Value: c.ID}},
		bson.D{{Key: "$unset", Value: bson.D{{Key: "pending_slot", Value: ""}}}}); err != nil {
		t.Fatal(err)
	}
	own := conversations.PendingSlot("acc_1")
	other := (own + 1) % conversations.PendingSlots
	found := func(slot int) bool {
		t.Helper()
		pending, err := store.FindPending(ctx, []int{slot}, time.Now().Add(time.Hour), 10)
		if err != nil {
			t.Fatal(err)
		}
		return len(pending) == 1
	}
	if !found(other) || !found(own) {
		t.Fatal("a pending document without a slot is not read by every partition")
	}
	subject := "changed"
	if _, err := s.UpdateConversation(ctx, who, c.ID, conversations.Patch{Subject: &subject}, conversations.Precondition{}); err != nil {
		t.Fatal(err)
	}
	if found(other) || !found(own) {
		t.Fatal("a change did not give the pending document its slot")
	}
}
