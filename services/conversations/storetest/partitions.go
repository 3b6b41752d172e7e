package storetest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/acme/platform/services/conversations"
)

// The relay's partitions: leased to one replica at a time, taken over
// after their lease, never renewed by a holder that lost them.

// testPartitionLeases: a lease runs until it expires or is released; a
// holder that lost it cannot renew it; the leases of one count of
// partitions are apart from another's.
func testPartitionLeases(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	st := s.Store
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	const ttl = 5 * time.Second
	acquire := func(p int, holder string, at time.Duration, want bool) {
		t.Helper()
		if got, err := st.AcquirePartition(ctx, 16, p, holder, t0.Add(at), ttl); err != nil || got != want {
			t.Fatalf("%s acquires %d at %v: %v, %v; want %v", holder, p, at, got, err, want)
		}
	}
	renew := func(holder string, at time.Duration, ps []int, want ...int) {
		t.Helper()
		got, err := st.RenewPartitions(ctx, 16, ps, holder, t0.Add(at), ttl)
		slices.Sort(got)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s renews %v at %v: %v, %v; want %v", holder, ps, at, got, err, want)
		}
	}
	holders := func() map[int]string {
		t.Helper()
		leases, _, err := st.PartitionState(ctx, 16, t0)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int]string{}
		for _, l := range leases {
			out[l.Partition] = l.Holder
		}
		return out
	}
	acquire(0, "a", 0, true)
	acquire(0, "a", time.Second, true) // its own: renewed
	acquire(0, "b", 2*time.Second, false)
	renew("a", 3*time.Second, []int{0}, 0)
	acquire(0, "b", 3*time.Second+ttl-time.Millisecond, false) // still running
	// a stalls: its lease runs out, b takes over, and a's renewal is refused.
	acquire(0, "b", 3*time.Second+ttl, true)
	renew("a", 9*time.Second, []int{0})
	if h := holders(); h[0] != "b" {
		t.Fatalf("holders %v, want b", h)
	}
	// A released partition is free at once; a release by another holder
	// does nothing.
	acquire(1, "a", 9*time.Second, true)
	if err := st.ReleasePartitions(ctx, 16, []int{0, 1}, "b"); err != nil {
		t.Fatal(err)
	}
	if h := holders(); h[0] != "" || h[1] != "a" {
		t.Fatalf("holders after the releases %v", h)
	}
	acquire(0, "a", 10*time.Second, true)
	renew("a", 11*time.Second, []int{0, 1}, 0, 1)
	renew("b", 11*time.Second, []int{0, 1})
	// Another count of partitions has leases of its own.
	if got, err := st.AcquirePartition(ctx, 4, 0, "b", t0.Add(11*time.Second), ttl); err != nil || !got {
		t.Fatalf("partition 0 of 4: %v, %v", got, err)
	}
	if h := holders(); h[0] != "a" || len(h) != 2 {
		t.Fatalf("holders of 16 %v", h)
	}
}

// testRelayMembers: a replica's renewal counts it live until it expires
// or it leaves, among the replicas of its count of partitions, whether it
// holds partitions or not.
func testRelayMembers(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	st := s.Store
	t0 := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	const ttl = 5 * time.Second
	beat := func(member string, count int, at time.Duration, want ...string) {
		t.Helper()
		if _, err := st.RenewPartitions(ctx, count, nil, member, t0.Add(at), ttl); err != nil {
			t.Fatal(err)
		}
		_, live, err := st.PartitionState(ctx, count, t0.Add(at))
		slices.Sort(live)
		if err != nil || !slices.Equal(live, want) {
			t.Fatalf("%s's renewal at %v: members %v, %v; want %v", member, at, live, err, want)
		}
	}
	beat("a", 16, 0, "a")
	beat("b", 16, time.Second, "a", "b")
	beat("c", 8, time.Second, "c")
	beat("b", 16, 5*time.Second, "b") // a's expired
	beat("a", 16, 6*time.Second, "a", "b")
	if err := st.LeaveMembers(ctx, 16, "b"); err != nil {
		t.Fatal(err)
	}
	beat("a", 16, 7*time.Second, "a")
	// A member holding partitions renews them and itself together.
	if got, err := st.AcquirePartition(ctx, 16, 3, "a", t0.Add(7*time.Second), ttl); err != nil || !got {
		t.Fatalf("acquire: %v %v", got, err)
	}
	if got, err := st.RenewPartitions(ctx, 16, []int{3}, "a", t0.Add(11*time.Second), ttl); err != nil || !slices.Equal(got, []int{3}) {
		t.Fatalf("renew: %v %v", got, err)
	}
	leases, live, err := st.PartitionState(ctx, 16, t0.Add(15*time.Second))
	if err != nil || !slices.Equal(live, []string{"a"}) || len(leases) != 1 || leases[0].Partition != 3 || leases[0].Holder != "a" {
		t.Fatalf("after a renewal of both: leases %+v, members %v, %v", leases, live, err)
	}
}

// testPartitionsAreShared: replicas' RelayPartitions hold every partition
// once between them, each about its share; the partitions of one that
// stops are taken over after its lease; and their relays, each ordering
// its partitions only, give every event once, in order.
func testPartitionsAreShared(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	const count, lease = 8, 2 * time.Second
	replicas := make([]*conversations.RelayPartitions, 3)
	for i := range replicas {
		replicas[i] = &conversations.RelayPartitions{Store: s.Store, Holder: fmt.Sprint("replica-", i), Count: count, Lease: lease}
	}
	// settle ticks the replicas until the partitions are held once each,
	// none holding more than most.
	settle := func(rs []*conversations.RelayPartitions, most int) {
		t.Helper()
		for range 200 {
			seen := map[int]int{}
			spread := true
			for _, r := range rs {
				if err := r.Tick(ctx); err != nil {
					t.Fatal(err)
				}
			}
			for _, r := range rs {
				held := r.Held()
				spread = spread && len(held) <= most
				for _, p := range held {
					seen[p]++
				}
			}
			if spread && len(seen) == count && !slices.ContainsFunc(slices.Collect(maps.Values(seen)), func(n int) bool { return n > 1 }) {
				return
			}
			time.Sleep(lease / 8)
		}
		var held [][]int
		for _, r := range rs {
			held = append(held, r.Held())
		}
		t.Fatalf("partitions never settled: %v", held)
	}
	settle(replicas, 3) // ceil(8/3)
	// Events of several accounts, each ordered by its partition's holder.
	accounts := []string{"acc_1", "acc_2", "acc_3", "acc_4", "acc_5", "acc_6"}
	for _, acc := range accounts {
		c := create(t, s, acc, "", conversations.StatusOpen, "usr_a")
		post(t, s, caller(acc, "usr_a"), c.ID, "m")
	}
	relayAll := func(rs []*conversations.RelayPartitions) {
		t.Helper()
		for _, r := range rs {
			if err := r.Tick(ctx); err != nil { // renewed, however slow the machine
				t.Fatal(err)
			}
			if _, err := (&conversations.Relay{Store: s.Store, Partitions: r}).RelayOnce(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	third := replicas[2].Held()
	relayAll(replicas[:2])
	// The third replica's accounts wait for it alone. On a machine slow
	// enough for its lease to run out meanwhile, the others may take a
	// partition over and order it; its renewal then fails for that
	// partition, so a partition it still holds after renewing was never
	// ordered by another.
	if err := replicas[2].Tick(ctx); err != nil {
		t.Fatal(err)
	}
	for _, acc := range accounts {
		got := feed(t, s, client(acc, "cli"), 0, 100)
		p := replicas[2].Partition(acc)
		switch {
		case slices.Contains(replicas[2].Held(), p):
			if len(got) != 0 {
				t.Fatalf("%s, of the third replica: %v", acc, types(got))
			}
		case slices.Contains(third, p): // taken over while the machine was slow
		case len(got) != 2:
			t.Fatalf("%s: %v", acc, types(got))
		}
	}
	// The third stops without releasing (killed): the others take its
	// partitions once its lease has run out.
	settle(replicas[:2], 4)
	relayAll(replicas[:2])
	for _, acc := range accounts {
		onceInOrder(t, feed(t, s, client(acc, "cli"), 0, 100), 2)
	}
	// A fourth joins: the others release down to their share, which it
	// takes.
	replicas[2] = &conversations.RelayPartitions{Store: s.Store, Holder: "replica-3", Count: count, Lease: lease}
	settle(replicas, 3)
	if len(replicas[2].Held()) == 0 {
		t.Fatal("the new replica took nothing")
	}
}

// testStalledHolderOrdersNothing: a holder that missed its renewals (a
// pause, a slow store) stops ordering at its fence, before its lease ends;
// the replica that takes the partition over orders the events, and the
// former holder's renewal is refused.
func testStalledHolderOrdersNothing(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	const lease = time.Second
	a := &conversations.RelayPartitions{Store: s.Store, Holder: "a", Count: 1, Lease: lease}
	b := &conversations.RelayPartitions{Store: s.Store, Holder: "b", Count: 1, Lease: lease}
	if err := a.Tick(ctx); err != nil || len(a.Held()) != 1 {
		t.Fatalf("a holds %v: %v", a.Held(), err)
	}
	time.Sleep(lease) // a stalls past its lease
	c := create(t, s, "acc_1", "", conversations.StatusOpen, "usr_a")
	post(t, s, caller("acc_1", "usr_a"), c.ID, "m")
	if n, err := (&conversations.Relay{Store: s.Store, Partitions: a}).RelayOnce(ctx); err != nil || n != 0 {
		t.Fatalf("the stalled holder ordered %d: %v", n, err)
	}
	for len(b.Held()) == 0 {
		if err := b.Tick(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(lease / 10)
	}
	if err := a.Tick(ctx); err != nil || slices.Contains(a.Held(), 0) {
		t.Fatalf("a still holds %v after b took over: %v", a.Held(), err)
	}
	// b renews before each round: on a loaded machine a's tick, or a
	// round itself, can outlast b's fence (three quarters of the lease),
	// which ends the round with an error and orders it again next time.
	for attempt := 1; ; attempt++ {
		if err := b.Tick(ctx); err != nil || len(b.Held()) == 0 {
			t.Fatalf("b's renewal: holds %v, %v", b.Held(), err)
		}
		_, err := (&conversations.Relay{Store: s.Store, Partitions: b}).RelayOnce(ctx)
		if err == nil {
			break
		}
		if attempt == 100 {
			t.Fatalf("b's rounds all failed, the last: %v", err)
		}
	}
	onceInOrder(t, feed(t, s, client("acc_1", "cli"), 0, 100), 2)
}

// readCounter counts the reads of the leases (PartitionState) through it.
type readCounter struct {
	conversations.PartitionStore
	reads atomic.Int32
}

func (c *readCounter) PartitionState(ctx context.Context, count int, now time.Time) ([]conversations.PartitionLease, []string, error) {
	c.reads.Add(1)
	return c.PartitionStore.PartitionState(ctx, count, now)
}

// testSettledSharesReadLess: once the shares hold, a tick renews without
// reading the leases (until another replica's lease may have run out, or
// half a lease has passed); a renewal that finds a partition taken over
// reads at once.
func testSettledSharesReadLess(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	const count, lease = 4, time.Hour
	st := &readCounter{PartitionStore: s.Store}
	a := &conversations.RelayPartitions{Store: st, Holder: conversations.HolderName("a", "10.0.0.1:9091"), Count: count, Lease: lease}
	b := &conversations.RelayPartitions{Store: st, Holder: conversations.HolderName("b", "10.0.0.2:9091"), Count: count, Lease: lease}
	tick := func(rs ...*conversations.RelayPartitions) {
		t.Helper()
		for _, r := range rs {
			if err := r.Tick(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// a takes every partition, b joins, a releases half, b takes them.
	for i := 0; len(a.Held()) != 2 || len(b.Held()) != 2; i++ {
		if i == 20 {
			t.Fatalf("never settled: a %v, b %v", a.Held(), b.Held())
		}
		tick(a, b)
	}
	tick(a, b) // each sees the shares hold
	before := st.reads.Load()
	for range 3 {
		tick(a, b)
	}
	if n := st.reads.Load() - before; n != 0 {
		t.Fatalf("settled replicas read the leases %d times in 6 ticks", n)
	}
	if len(a.Held()) != 2 || len(b.Held()) != 2 {
		t.Fatalf("renewals lost partitions: a %v, b %v", a.Held(), b.Held())
	}
	// Each knows who orders an account, and that both can be woken.
	p := a.Held()[0]
	account := accountIn(a, p)
	if got := b.HolderOf(account); got != a.Holder || conversations.WakeAddr(got) != "10.0.0.1:9091" || !a.PeersWake() || !b.PeersWake() {
		t.Fatalf("b sees %q ordering %s (a holds %v); peers wake: %v, %v", got, account, a.Held(), a.PeersWake(), b.PeersWake())
	}
	// One of a's partitions is taken over (a stalled past its lease, as
	// far as c can tell): a's next renewal drops it and reads at once.
	if won, err := s.Store.AcquirePartition(ctx, count, p, "c", time.Now().Add(2*lease), lease); err != nil || !won {
		t.Fatalf("c takes %d: %v %v", p, won, err)
	}
	tick(a)
	if n := st.reads.Load() - before; n != 1 || slices.Contains(a.Held(), p) || a.HolderOf(account) != "c" {
		t.Fatalf("after losing %d: a holds %v, %d reads, sees %q ordering it", p, a.Held(), n, a.HolderOf(account))
	}
	// c, named without an address, joins: a's relay no longer counts on
	// being woken.
	if _, err := s.Store.RenewPartitions(ctx, count, []int{p}, "c", time.Now(), lease); err != nil {
		t.Fatal(err)
	}
	tick(a) // below its share: it reads every tick
	if a.PeersWake() {
		t.Fatal("a counts on wakes from c, which has no address")
	}
}

// accountIn returns an account of partition p of rp.
func accountIn(rp *conversations.RelayPartitions, p int) string {
	for i := 0; ; i++ {
		if a := fmt.Sprint("acc_", i); rp.Partition(a) == p {
			return a
		}
	}
}

// testSharesChangeOnNotice: a replica joining tells the others, which
// read the leases at once when asked (ReadSoon) rather than at their next
// read, and one releasing partitions, above its share or stopping, tells
// the others, which take them at once.
func testSharesChangeOnNotice(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	const count, lease = 4, time.Hour // no read falls due by itself
	var mu sync.Mutex
	notices := map[string][]string{} // notifier → the peers it told
	replica := func(name string) *conversations.RelayPartitions {
		return &conversations.RelayPartitions{Store: s.Store, Holder: name, Count: count, Lease: lease,
			Notify: func(peers []string) {
				mu.Lock()
				defer mu.Unlock()
				notices[name] = append(notices[name], peers...)
			}}
	}
	told := func(name string) []string {
		mu.Lock()
		defer mu.Unlock()
		got := notices[name]
		delete(notices, name)
		return got
	}
	a, b := replica("a"), replica("b")
	for range 2 {
		if err := a.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(a.Held()) != count || told("a") != nil {
		t.Fatalf("a alone holds %v and told %v", a.Held(), told("a"))
	}
	if err := b.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	if got := told("b"); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("b joined and told %v, want [a]", got)
	}
	// Settled for an hour, a keeps everything until told.
	if err := a.Tick(ctx); err != nil || len(a.Held()) != count {
		t.Fatalf("a, not told, holds %v: %v", a.Held(), err)
	}
	a.ReadSoon()
	if err := a.Tick(ctx); err != nil || len(a.Held()) != count/2 {
		t.Fatalf("a, told, holds %v: %v", a.Held(), err)
	}
	if got := told("a"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("a released and told %v, want [b]", got)
	}
	if err := b.Tick(ctx); err != nil || len(b.Held()) != count/2 {
		t.Fatalf("b holds %v: %v", b.Held(), err)
	}
	// a stops: it releases, leaves and tells b, which takes everything.
	stopped, cancel := context.WithCancel(ctx)
	cancel()
	a.Run(stopped)
	if got := told("a"); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("a stopped and told %v, want [b]", got)
	}
	b.ReadSoon()
	if err := b.Tick(ctx); err != nil || len(b.Held()) != count {
		t.Fatalf("b, told a stopped, holds %v: %v", b.Held(), err)
	}
}

// testSharesEvenOut: 16 partitions among three replicas end held 5, 5
// and 6, whatever order the replicas release in, and then none reads the
// leases any more (a replica left short of its share read them every
// tick).
func testSharesEvenOut(t *testing.T, s *conversations.Service) {
	ctx := context.Background()
	const count, lease = 16, time.Hour // no read falls due by itself
	st := &readCounter{PartitionStore: s.Store}
	var rs []*conversations.RelayPartitions
	for _, name := range []string{"a", "b", "c"} {
		rs = append(rs, &conversations.RelayPartitions{Store: st, Holder: name, Count: count, Lease: lease})
	}
	tick := func(r *conversations.RelayPartitions) {
		t.Helper()
		r.ReadSoon() // as the notices would
		if err := r.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	tick(rs[0]) // a takes all
	for len(rs[1].Held()) != 8 {
		tick(rs[1])
		tick(rs[0])
	}
	// c joins; a, then b, release towards it.
	for range 3 {
		for _, r := range []*conversations.RelayPartitions{rs[2], rs[0], rs[2], rs[1]} {
			tick(r)
		}
	}
	var held []int
	for _, r := range rs {
		held = append(held, len(r.Held()))
	}
	if slices.Sort(held); !slices.Equal(held, []int{5, 5, 6}) {
		t.Fatalf("held %v partitions, want 5, 5 and 6", held)
	}
	for _, r := range rs { // each sees the shares hold
		if err := r.Tick(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before := st.reads.Load()
	for range 3 {
		for _, r := range rs {
			if err := r.Tick(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := st.reads.Load() - before; n != 0 {
		t.Fatalf("settled replicas read the leases %d times in 9 ticks", n)
	}
}
