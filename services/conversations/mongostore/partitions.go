package mongostore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.mongodb.org/mongo-driver/v2/bson"
	"go.mongodb.org/mongo-driver/v2/mongo/options"

	"github.com/acme/platform/pkg/mongoconn"
	"github.com/acme/platform/services/conversations"
)

// The relay's partitions (conversations.RelayPartitions), in leases: a
// lease per partition, relay/<count>/<partition>, and one per replica
// sharing them, relay/<count>/members/<replica>, its membership, held by
// itself. A replica's tick is two commands: one update renewing its
// partitions and its membership together, and one read of every lease
// of its count (a range of _id). Every other write is one conditional
// update.

var _ conversations.PartitionStore = (*Store)(nil)

func partitionLeaseID(count, p int) string { return fmt.Sprintf("relay/%d/%d", count, p) }

func memberLeaseID(count int, member string) string {
	return fmt.Sprintf("relay/%d/members/%s", count, member)
}

// relayPrefix is the start of the ids of count's leases; they all sort
// below relayPrefix with its final "/" replaced by "0", the next byte.
func relayPrefix(count int) string { return fmt.Sprintf("relay/%d/", count) }

type leaseDoc struct {
	ID        string    `bson:"_id"`
	Holder    string    `bson:"holder"`
	ExpiresAt time.Time `bson:"expires_at"`
}

// goneMembersAfter is how long after its membership expired a replica's
// lease is deleted when seen (it is not live long before).
const goneMembersAfter = time.Minute

// PartitionState implements conversations.PartitionStore: one read of
// the range of _id of count's leases; memberships expired long ago are
// deleted when seen.
func (s *Store) PartitionState(ctx context.Context, count int, now time.Time) ([]conversations.PartitionLease, []string, error) {
	prefix := relayPrefix(count)
	var docs []leaseDoc
	cur, err := s.leases.Find(ctx, bson.D{{Key: "_id", Value: bson.D{
		{Key: "$gte", Value: prefix}, {Key: "$lt", Value: prefix[:len(prefix)-1] + "0"},
	}}})
	if err == nil {
		err = cur.All(ctx, &docs)
	}
	if err != nil {
		return nil, nil, mongoconn.Wrap(err, "relay partitions")
	}
	var leases []conversations.PartitionLease
	var live []string
	var gone bson.A
	for _, d := range docs {
		rest := strings.TrimPrefix(d.ID, prefix)
		if member, ok := strings.CutPrefix(rest, "members/"); ok {
			switch {
			case d.ExpiresAt.After(now):
				live = append(live, member)
			case d.ExpiresAt.Before(now.Add(-goneMembersAfter)):
				gone = append(gone, d.ID)
			}
			continue
		}
		if p, err := strconv.Atoi(rest); err == nil && p >= 0 && p < count {
			leases = append(leases, conversations.PartitionLease{Partition: p, Holder: d.Holder, ExpiresAt: d.ExpiresAt.UTC()})
		}
	}
	if len(gone) > 0 {
		if _, err := s.leases.DeleteMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: gone}}},
			{Key: "expires_at", Value: bson.D{{Key: "$lt", Value: now.Add(-goneMembersAfter)}}}}); err != nil {
			return nil, nil, mongoconn.Wrap(err, "relay members")
		}
	}
	return leases, live, nil
}

// LeaveMembers implements conversations.PartitionStore.
func (s *Store) LeaveMembers(ctx context.Context, count int, member string) error {
	_, err := s.leases.DeleteOne(ctx, bson.D{{Key: "_id", Value: memberLeaseID(count, member)}})
	return mongoconn.Wrap(err, "leave relay members")
}

// AcquirePartition implements conversations.PartitionStore: the
// conditional upsert of AcquireLease.
func (s *Store) AcquirePartition(ctx context.Context, count, p int, holder string, now time.Time, ttl time.Duration) (bool, error) {
	return s.AcquireLease(ctx, partitionLeaseID(count, p), holder, now, ttl)
}

// RenewPartitions implements conversations.PartitionStore: one update of
// the leases still held, the membership's among them; only when it
// matched fewer than asked, a read of which those were (this replica
// takes no lease meanwhile), and when the membership was not among them
// (the first tick, or deleted as long gone), its upsert.
func (s *Store) RenewPartitions(ctx context.Context, count int, ps []int, holder string, now time.Time, ttl time.Duration) ([]int, error) {
	member := memberLeaseID(count, holder)
	ids := bson.A{member}
	byID := map[string]int{}
	for _, p := range ps {
		ids = append(ids, partitionLeaseID(count, p))
		byID[partitionLeaseID(count, p)] = p
	}
	until := now.UTC().Add(ttl)
	filter := bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "holder", Value: holder}}
	res, err := s.leases.UpdateMany(ctx, filter, bson.D{{Key: "$set", Value: bson.D{{Key: "expires_at", Value: until}}}})
	if err != nil {
		return nil, mongoconn.Wrap(err, "renew relay partitions")
	}
	if int(res.MatchedCount) == len(ids) {
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
	renewed := []int{}
	joined := false
	for _, d := range docs {
		if d.ID == member {
			joined = true
		} else {
			renewed = append(renewed, byID[d.ID])
		}
	}
	if !joined {
		if _, err := s.leases.UpdateOne(ctx, bson.D{{Key: "_id", Value: member}},
			bson.D{{Key: "$set", Value: bson.D{{Key: "holder", Value: holder}, {Key: "expires_at", Value: until}}}},
			options.UpdateOne().SetUpsert(true)); err != nil {
			return nil, mongoconn.Wrap(err, "join relay members")
		}
	}
	return renewed, nil
}

// ReleasePartitions implements conversations.PartitionStore: one update
// conditional on the holder.
func (s *Store) ReleasePartitions(ctx context.Context, count int, ps []int, holder string) error {
	if len(ps) == 0 {
		return nil
	}
	ids := make(bson.A, len(ps))
	for i, p := range ps {
		ids[i] = partitionLeaseID(count, p)
	}
	_, err := s.leases.UpdateMany(ctx, bson.D{{Key: "_id", Value: bson.D{{Key: "$in", Value: ids}}}, {Key: "holder", Value: holder}},
		bson.D{{Key: "$set", Value: bson.D{{Key: "holder", Value: ""}, {Key: "expires_at", Value: epoch}}}})
	return mongoconn.Wrap(err, "release relay partitions")
}
