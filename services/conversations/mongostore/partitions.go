package mongostore

import (
	"context"
	"fmt"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/conversations"
)

// The relay's partitions (conversations.RelayPartitions): a lease per
// partition in leases, named relay/<count>/<partition>, and a heartbeat
// per replica in relay_members. Every write is one single-document
// conditional update but the renewal, one update of the holder's leases
// by _id.

var _ conversations.PartitionStore = (*Store)(nil)

func partitionLeaseID(count, p int) string { return fmt.Sprintf("relay/%d/%d", count, p) }

type leaseDoc struct {
	ID        string    `bson:"_id"`
	Holder    string    `bson:"holder"`
	ExpiresAt time.Time `bson:"expires_at"`
}

type memberDoc struct {
	ID         string    `bson:"_id"`
	Partitions int       `bson:"partitions"`
	ExpiresAt  time.Time `bson:"expires_at"`
}

// Heartbeat implements conversations.PartitionStore: an upsert by _id,
// then a read of the whole (small) collection; members expired a lease
// ago or more are deleted when seen.
func (s *Store) Heartbeat(ctx context.Context, count int, member string, now time.Time, ttl time.Duration) ([]string, error) {
	now = now.UTC()
	if _, err := s.members.UpdateOne(ctx, bson.D{{Key: "_id", Value: member}}, bson.D{{Key: "$set", Value: bson.D{
		{Key: "partitions", Value: count}, {Key: "expires_at", Value: now.Add(ttl)},
	}}}, options.UpdateOne().SetUpsert(true)); err != nil {
		return nil, mongoconn.Wrap(err, "relay heartbeat")
	}
	var docs []memberDoc
	cur, err := s.members.Find(ctx, bson.D{})
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	if err != nil {
		return nil, mongoconn.Wrap(err, "relay members")
	}
	var live []string
	var gone bson.A
	for _, d := range docs {
		switch {
		case d.ExpiresAt.After(now) && d.Partitions == count:
			live = append(live, d.ID)
		case !d.ExpiresAt.After(now.Add(-ttl)):
			gone = append(gone, d.ID)
		}
	}
	if len(gone) > 0 {
		if _, err := s.members.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: gone}}},
			{Key: "expires_at", Value: bson.D{{Key: "$lte", Value: now.Add(-ttl)}}}}); err != nil {
			return nil, mongoconn.Wrap(err, "relay members")
		}
	}
	return live, nil
}

// LeaveMembers implements conversations.PartitionStore.
func (s *Store) LeaveMembers(ctx context.Context, member string) error {
	_, err := s.members.DeleteOne(ctx, bson.D{{Key: "_id", Value: member}})
	return mongoconn.Wrap(err, "leave relay members")
}

// PartitionLeases implements conversations.PartitionStore: one read by
// _id.
func (s *Store) PartitionLeases(ctx context.Context, count int) ([]conversations.PartitionLease, error) {
	ids := make(bson.A, count)
	byID := map[string]int{}
	for p := range count {
		ids[p] = partitionLeaseID(count, p)
		byID[partitionLeaseID(count, p)] = p
	}
	var docs []leaseDoc
	cur, err := s.leases.Find(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}})
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	if err != nil {
		return nil, mongoconn.Wrap(err, "relay partitions")
	}
	out := make([]conversations.PartitionLease, len(docs))
	for i, d := range docs {
		out[i] = conversations.PartitionLease{Partition: byID[d.ID], Holder: d.Holder, ExpiresAt: d.ExpiresAt.UTC()}
	}
	return out, nil
}

// AcquirePartition implements conversations.PartitionStore: the
// conditional upsert of AcquireLease.
func (s *Store) AcquirePartition(ctx context.Context, count, p int, holder string, now time.Time, ttl time.Duration) (bool, error) {
	return s.AcquireLease(ctx, partitionLeaseID(count, p), holder, now, ttl)
}

// RenewPartitions implements conversations.PartitionStore: one update of
// the leases still held, and only when it matched fewer than asked, a
// read of which those were (this replica takes no lease meanwhile).
func (s *Store) RenewPartitions(ctx context.Context, count int, ps []int, holder string, now time.Time, ttl time.Duration) ([]int, error) {
	ids := make(bson.A, len(ps))
	byID := map[string]int{}
	for i, p := range ps {
		ids[i] = partitionLeaseID(count, p)
		byID[partitionLeaseID(count, p)] = p
	}
	until := now.UTC().Add(ttl)
	filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "holder", Value: holder}}
	res, err := s.leases.UpdateMany(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "expires_at", Value: until}}}})
	if err != nil {
		return nil, mongoconn.Wrap(err, "renew relay partitions")
	}
	if int(res.MatchedCount) == len(ps) {
		return ps, nil
	}
	var docs []leaseDoc
	cur, err := s.leases.Find(ctx, filter)
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	if err != nil {
		return nil, mongoconn.Wrap(err, "renew relay partitions")
	}
	renewed := make([]int, len(docs))
	for i, d := range docs {
		renewed[i] = byID[d.ID]
	}
	return renewed, nil
}

// ReleasePartition implements conversations.PartitionStore: one update
// conditional on the holder.
func (s *Store) ReleasePartition(ctx context.Context, count, p int, holder string) error {
	_, err := s.leases.UpdateOne(ctx, bson.D{{Key: "_id", Value: partitionLeaseID(count, p)}, {Key: "holder", Value: holder}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "holder", Value: ""}, {Key: "expires_at", Value: epoch}}}})
	return mongoconn.Wrap(err, "release relay partition")
}
