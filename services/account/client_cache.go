package account

import (
	"crypto/subtle"
	"sync"
	"time"
)

// DefaultClientCacheSize bounds a ClientCache: far more service clients
// than one account service answers for at once.
const DefaultClientCacheSize = 10_000

// ClientCache remembers, for TTL, the service clients that authenticated
// on this replica and the hash of the secret they presented. A backend
// fetching tokens in a burst (its instances starting at once, a client
// without a token cache) then costs two database reads (the client and
// its throttle counter) per TTL instead of two per token: the token
// endpoint's cost is the signature.
//
// What it costs: disabling a client or ending a previous secret's overlap
// (the operator commands, in another process) takes effect on a replica
// up to TTL later, and a lock set by failures on another replica too. A
// failed authentication on this replica forgets the client at once, so
// its next request reads the store (and sees a lock). An entry of a
// previous secret never outlives that secret's overlap.
//
// A nil *ClientCache remembers nothing. Safe for concurrent use.
type ClientCache struct {
	ttl     time.Duration
	max     int
	mu      sync.Mutex
	entries map[string]cachedClient // by client id
}

type cachedClient struct {
	client     ServiceClient
	secretHash string // HashClientSecret of the secret that authenticated
	expires    time.Time
}

// NewClientCache returns a cache whose entries last ttl, holding at most
// max clients (DefaultClientCacheSize when max <= 0); nil, which caches
// nothing, when ttl <= 0.
func NewClientCache(ttl time.Duration, max int) *ClientCache {
	if ttl <= 0 {
		return nil
	}
	if max <= 0 {
		max = DefaultClientCacheSize
	}
	return &ClientCache{ttl: ttl, max: max, entries: map[string]cachedClient{}}
}

// get returns the client remembered for clientID when secretHash is the
// hash it authenticated with and the entry has not expired at now.
func (c *ClientCache) get(clientID, secretHash string, now time.Time) (ServiceClient, bool) {
	if c == nil {
		return ServiceClient{}, false
	}
	c.mu.Lock()
	e, ok := c.entries[clientID]
	c.mu.Unlock()
	if !ok || !now.Before(e.expires) || subtle.ConstantTimeCompare([]byte(e.secretHash), []byte(secretHash)) != 1 {
		return ServiceClient{}, false
	}
	return e.client, true
}

// put remembers client, authenticated at now by the secret whose hash is
// secretHash, until now + TTL or the end of that secret's overlap when it
// is the previous one (a public client, authenticated by no secret, until
// now + TTL).
func (c *ClientCache) put(client ServiceClient, secretHash string, now time.Time) {
	if c == nil {
		return
	}
	expires := now.Add(c.ttl)
	if !client.Public && !hashEqual(client.SecretHash, secretHash) && client.PreviousSecretExpiresAt.Before(expires) {
		expires = client.PreviousSecretExpiresAt
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[client.ID]; !ok && len(c.entries) >= c.max {
		c.evict(now)
	}
	c.entries[client.ID] = cachedClient{client: client, secretHash: secretHash, expires: expires}
}

// forget drops what is remembered of clientID.
func (c *ClientCache) forget(clientID string) {
	if c == nil {
		return
	}
	c.mu.Lock()
	delete(c.entries, clientID)
	c.mu.Unlock()
}

// evict makes room for one entry: the expired ones go, and when none has
// expired, an arbitrary one (a full cache only costs store reads).
// Called with c.mu held.
func (c *ClientCache) evict(now time.Time) {
	for id, e := range c.entries {
		if !now.Before(e.expires) {
			delete(c.entries, id)
		}
	}
	for id := range c.entries {
		if len(c.entries) < c.max {
			return
		}
		delete(c.entries, id)
	}
}
