package conversations

import (
	"context"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// RelayPartitions leases this replica its share of the relay's
// partitions (groups of account slots), so that one relay at a time
// orders each account whatever the number of replicas. Each command of
// the Relay for an account runs under its partition's fence, a deadline
// before the lease ends, and the order survives relays that overlap; see
// docs/decisions.md ("One relay at a time per account").
type RelayPartitions struct {
	Store PartitionStore
	// Holder names this replica in the leases: unique per process.
	Holder string
	// Count is the number of partitions, 1 to PendingSlots; every replica
	// must use the same.
	Count int
	// Lease is how long a lease holds without renewal: a killed holder's
	// partitions are taken over after it.
	Lease  time.Duration
	Logger *slog.Logger
	// Gained, when set, is called when this replica took partitions
	// (their events may have waited).
	Gained func()
	// Notify, when set, is called with the other live replicas when the
	// shares or the holders changed for them: this replica joined (its
	// first read of the leases), took partitions, or released some (above
	// its share, or stopping). Each should then call ReadSoon, so that it
	// gives up or takes its share, and learns whom to wake, now rather
	// than at its next read.
	Notify func(peers []string)

	mu   sync.Mutex
	held map[int]time.Time // partition → fence deadline
	// holders and members are those of the last read of the leases: the
	// holder of each partition leased then, and the live members.
	holders map[int]string
	members []string
	// nextRead is when Tick reads the leases again (zero: at the next
	// tick); see Tick.
	nextRead time.Time
	// joined is set once this replica has read the leases and told the
	// others (Notify).
	joined bool
	// soon makes Run tick at once (ReadSoon).
	soon chan struct{}
	// inflight is read-locked by each fenced command of the relay, so
	// that a partition is released only once no command for it runs.
	inflight sync.RWMutex
}

// PartitionLease is one partition's lease as stored.
type PartitionLease struct {
	Partition int
	Holder    string // "" when released
	ExpiresAt time.Time
}

// PartitionStore keeps the relay's partition leases and the replicas that
// share them. The leases of one Count are apart from another's, so that
// replicas configured with another Count (during a change of it) never
// take each other's; their relays may then overlap, which the order
// survives.
type PartitionStore interface {
	// RenewPartitions extends holder's leases of ps, and its membership
	// among the replicas sharing the count partitions (joining when it is
	// not a member), until now+ttl, and returns the partitions it
	// renewed: those holder still held, expired or not; a partition taken
	// over since is not renewed.
	RenewPartitions(ctx context.Context, count int, ps []int, holder string, now time.Time, ttl time.Duration) ([]int, error)
	// PartitionState returns the stored leases of the count partitions
	// (a partition never taken has none) and the members of count live
	// at now.
	PartitionState(ctx context.Context, count int, now time.Time) ([]PartitionLease, []string, error)
	// AcquirePartition gives partition p of count to holder until now+ttl
	// when it is free, expired (at now) or held by holder already; false
	// when another holder's lease runs.
	AcquirePartition(ctx context.Context, count, p int, holder string, now time.Time, ttl time.Duration) (bool, error)
	// ReleasePartitions frees those of ps that holder holds.
	ReleasePartitions(ctx context.Context, count int, ps []int, holder string) error
	// LeaveMembers ends member's membership (a replica stopping).
	LeaveMembers(ctx context.Context, count int, member string) error
}

// DefaultRelayPartitions and DefaultRelayLease are the defaults of the
// configuration.
const (
	DefaultRelayPartitions = 16
	DefaultRelayLease      = 5 * time.Second
)

// Partition is the partition of an account.
func (rp *RelayPartitions) Partition(accountID string) int { return PendingSlot(accountID) % rp.Count }

// Holds reports whether this replica orders the account's partition now.
func (rp *RelayPartitions) Holds(accountID string) bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	d, ok := rp.held[rp.Partition(accountID)]
	return ok && time.Now().Before(d)
}

// HolderOf returns the replica that held the account's partition when
// this replica last read the leases ("": none, or not read yet).
func (rp *RelayPartitions) HolderOf(accountID string) string {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return rp.holders[rp.Partition(accountID)]
}

// PeersWake reports whether every live replica, when this one last read
// the leases, names an address to be woken at (WakeAddr): then each
// wakes the holder of the changes it records, and the holder's relay
// need not poll for them often.
func (rp *RelayPartitions) PeersWake() bool {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return len(rp.members) > 0 && !slices.ContainsFunc(rp.members, func(m string) bool { return WakeAddr(m) == "" })
}

// HolderName names a replica in the leases: id, unique per process, and
// the address at which the other replicas wake its relay ("": none).
func HolderName(id, wakeAddr string) string {
	if wakeAddr == "" {
		return id
	}
	return id + "@" + wakeAddr
}

// WakeAddr is the address a holder named by HolderName is woken at ("":
// none).
func WakeAddr(holder string) string {
	_, addr, _ := strings.Cut(holder, "@")
	return addr
}

// Held returns the partitions this replica holds, in increasing order.
func (rp *RelayPartitions) Held() []int {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return slices.Sorted(maps.Keys(rp.held))
}

// Slots returns the account slots (PendingSlot) of the partitions held
// whose fence has not passed, in increasing order.
func (rp *RelayPartitions) Slots() []int {
	slots, _ := rp.slots()
	if slots == nil {
		return []int{}
	}
	return slots
}

// slots returns the slots of the partitions held whose fence has not
// passed; false when there are none.
func (rp *RelayPartitions) slots() ([]int, bool) {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	var slots []int
	now := time.Now()
	for p, d := range rp.held {
		if !now.Before(d) {
			continue // not renewed in time: ordered again once it is
		}
		for s := p; s < PendingSlots; s += rp.Count {
			slots = append(slots, s)
		}
	}
	slices.Sort(slots)
	return slots, len(slots) > 0
}

// fenced returns ctx bounded by the fence of the account's partition
// ("": the earliest fence of the partitions held), and done, to call once
// the command sent under it has returned; false when the partition is no
// longer held, or its fence has passed.
func (rp *RelayPartitions) fenced(ctx context.Context, accountID string) (context.Context, func(), bool) {
	rp.inflight.RLock()
	rp.mu.Lock()
	var deadline time.Time
	now := time.Now()
	if accountID != "" {
		deadline = rp.held[rp.Partition(accountID)]
	} else {
		for _, d := range rp.held {
			if now.Before(d) && (deadline.IsZero() || d.Before(deadline)) {
				deadline = d
			}
		}
	}
	rp.mu.Unlock()
	if !now.Before(deadline) {
		rp.inflight.RUnlock()
		return nil, nil, false
	}
	c, cancel := context.WithDeadline(ctx, deadline)
	return c, func() {
		cancel()
		rp.inflight.RUnlock()
	}, true
}

// fence is the deadline of a lease won by a command sent at sent: a
// quarter of the lease before it ends, so that a stored expiry read by a
// replica whose clock runs ahead (by less than that) is still later.
func (rp *RelayPartitions) fence(sent time.Time) time.Time {
	return sent.Add(rp.Lease - rp.Lease/4)
}

// Run keeps this replica's share of the partitions until ctx ends, then
// releases them, so that the other replicas (told by Notify) take them
// over at once, not after the lease. It ticks every quarter of the lease,
// counted from the previous tick's start, so that a renewal is late by
// its own latency only and the fence (three quarters of the lease) holds
// while renewals return within half a lease; and when a read of the
// leases falls due before that, then instead, so that a dead holder's
// partitions are taken as its lease ends and the read costs no extra
// renewal.
func (rp *RelayPartitions) Run(ctx context.Context) {
	soon := rp.soonChan()
	for {
		began := time.Now()
		if err := rp.Tick(ctx); err != nil && ctx.Err() == nil && rp.Logger != nil {
			rp.Logger.Warn("relay partitions", "error", err.Error())
		}
		wait := time.Until(began.Add(rp.Lease / 4))
		rp.mu.Lock()
		if !rp.nextRead.IsZero() {
			wait = max(min(wait, time.Until(rp.nextRead)), 0)
		}
		rp.mu.Unlock()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			stop, cancel := context.WithTimeout(context.WithoutCancel(ctx), rp.Lease)
			defer cancel()
			rp.releaseAll(stop)
			return
		case <-t.C:
		case <-soon:
			t.Stop()
		}
	}
}

// ReadSoon makes the next tick read the leases, and Run tick now:
// another replica joined, took or released partitions (see Notify).
func (rp *RelayPartitions) ReadSoon() {
	soon := rp.soonChan()
	rp.setNextRead(time.Time{})
	select {
	case soon <- struct{}{}:
	default:
	}
}

func (rp *RelayPartitions) soonChan() chan struct{} {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	if rp.soon == nil {
		rp.soon = make(chan struct{}, 1)
	}
	return rp.soon
}

// notify tells the other live members of the last read (Notify).
func (rp *RelayPartitions) notify() {
	if rp.Notify == nil {
		return
	}
	rp.mu.Lock()
	peers := slices.DeleteFunc(slices.Clone(rp.members), func(m string) bool { return m == rp.Holder })
	rp.mu.Unlock()
	if len(peers) > 0 {
		rp.Notify(peers)
	}
}

// Tick renews the leases held and this replica's membership, and, when
// due, reads the leases and the members and takes or releases partitions
// towards its share: one command, two when it reads, whatever the number
// of partitions.
//
// Once the shares hold (no partition free, none to release, this
// replica at its share at least), nothing changes until another
// replica's lease runs out unrenewed or a replica joins or leaves: the
// next read is then at the earliest expiry of another replica's lease
// read, when a dead holder's partitions become free (Run ticks then, so
// they are taken over as the lease ends), and at most a lease later. A
// replica joining or releasing partitions tells the others (Notify,
// ReadSoon), so the lease bounds only how long a newcomer's share or
// released partitions wait when a notice is lost. Until the shares
// hold, every tick reads.
func (rp *RelayPartitions) Tick(ctx context.Context) error {
	// tell: the others' shares or holders changed (Notify), once a tick.
	tell := false
	defer func() {
		if tell {
			rp.notify()
		}
	}()
	rp.mu.Lock()
	if rp.held == nil {
		rp.held = map[int]time.Time{}
	}
	held := slices.Sorted(maps.Keys(rp.held))
	rp.mu.Unlock()
	sent := time.Now()
	renewed, err := rp.Store.RenewPartitions(ctx, rp.Count, held, rp.Holder, sent, rp.Lease)
	if err != nil {
		return err // the fences run out on their own
	}
	rp.mu.Lock()
	for _, p := range held {
		if slices.Contains(renewed, p) {
			rp.held[p] = rp.fence(sent)
		} else {
			delete(rp.held, p) // taken over while this replica stalled
			rp.nextRead = time.Time{}
		}
	}
	held = slices.Sorted(maps.Keys(rp.held))
	read := !time.Now().Before(rp.nextRead)
	rp.mu.Unlock()
	if !read {
		return nil
	}
	rp.setNextRead(time.Time{}) // every tick until the shares hold
	leases, live, err := rp.Store.PartitionState(ctx, rp.Count, time.Now())
	if err != nil {
		return err
	}
	if !slices.Contains(live, rp.Holder) {
		live = append(live, rp.Holder) // joined by the renewal above
	}
	now := time.Now()
	holders := map[int]string{}
	for _, l := range leases {
		if l.Holder != "" && now.Before(l.ExpiresAt) {
			holders[l.Partition] = l.Holder
		}
	}
	rp.mu.Lock()
	rp.holders, rp.members = holders, live
	tell = !rp.joined // joined: the others' shares fall, they release towards this one's
	rp.joined = true
	rp.mu.Unlock()
	target := (rp.Count + len(live) - 1) / max(len(live), 1)
	counts := map[string]int{}
	free := make([]bool, rp.Count)
	for p := range free {
		free[p] = true
	}
	for _, l := range leases {
		if l.Holder != "" && now.Before(l.ExpiresAt) && l.Partition < rp.Count {
			counts[l.Holder]++
			free[l.Partition] = false
		}
	}
	// Another live replica below its share takes what this one releases;
	// while none is, this one takes every free partition, so that none
	// waits for a dead replica's heartbeat to expire. A share is target
	// (rounded up) or floor (rounded down): while another replica holds
	// less than floor, those above floor release down to it and only
	// those below it take, else a replica could stay short for good
	// (16 partitions held 6, 6 and 4), reading the leases every tick.
	floor := rp.Count / max(len(live), 1)
	under := slices.ContainsFunc(live, func(m string) bool { return m != rp.Holder && counts[m] < target })
	short := slices.ContainsFunc(live, func(m string) bool { return m != rp.Holder && counts[m] < floor })
	gained := false
	start := rand.IntN(rp.Count) // replicas starting together try different ones first
	for i := range rp.Count {
		p := (start + i) % rp.Count
		if !free[p] || slices.Contains(held, p) || len(held) >= target && under || len(held) >= floor && short {
			continue
		}
		sent := time.Now()
		won, err := rp.Store.AcquirePartition(ctx, rp.Count, p, rp.Holder, sent, rp.Lease)
		if err != nil {
			return err
		}
		if won {
			rp.mu.Lock()
			rp.held[p] = rp.fence(sent)
			rp.mu.Unlock()
			held = append(held, p)
			gained = true
		}
	}
	if gained {
		if rp.Gained != nil {
			rp.Gained()
		}
		// The others wake this replica for the changes of these
		// partitions once they have read who holds them.
		tell = true
	}
	keep := len(held)
	switch {
	case short:
		keep = floor
	case under:
		keep = target
	}
	if len(held) > keep {
		slices.Sort(held)
		if err := rp.release(ctx, held[keep:]); err != nil {
			return err
		}
		tell = true // those below their share take them now
		return nil
	}
	if !gained && !slices.Contains(free, true) && len(held) >= floor {
		// Settled: read again when another replica's lease may have run
		// out, or a lease from now.
		next := now.Add(rp.Lease)
		for _, e := range leases {
			if e.Holder != rp.Holder && e.ExpiresAt.After(now) && e.ExpiresAt.Before(next) {
				next = e.ExpiresAt
			}
		}
		rp.setNextRead(next)
	}
	return nil
}

func (rp *RelayPartitions) setNextRead(t time.Time) {
	rp.mu.Lock()
	rp.nextRead = t
	rp.mu.Unlock()
}

// release stops ordering ps, waits for a command of the relay in flight
// to return, and frees them.
func (rp *RelayPartitions) release(ctx context.Context, ps []int) error {
	rp.mu.Lock()
	for _, p := range ps {
		delete(rp.held, p)
	}
	rp.mu.Unlock()
	rp.inflight.Lock() // after the command in flight, if any
	defer rp.inflight.Unlock()
	return rp.Store.ReleasePartitions(ctx, rp.Count, ps, rp.Holder)
}

func (rp *RelayPartitions) releaseAll(ctx context.Context) {
	if err := rp.release(ctx, rp.Held()); err != nil && rp.Logger != nil {
		rp.Logger.Warn("release relay partitions", "error", err.Error())
	}
	if err := rp.Store.LeaveMembers(ctx, rp.Count, rp.Holder); err != nil && rp.Logger != nil {
		rp.Logger.Warn("leave relay members", "error", err.Error())
	}
	rp.notify()
}
