// Package signing rotates the account service's generated signing keys,
// which live in MongoDB (account.SigningKeyStore) when no key files are
// configured.
//
// The keys of one algorithm form one stored document. Each key has a
// timeline, fixed when it is added and the same for every replica:
//
//	created_at   the key is added and published in the JWKS at once
//	signs_from   created_at + publish-ahead: it becomes the active key
//	             (the very first key signs from created_at)
//	             ... it signs for the rotation period ...
//	next key's signs_from: it stops signing; expires_at is set to that
//	             time + the longest token lifetime + leeway
//	expires_at   the last token it signed has expired: it is unpublished,
//	             and removed from the document by the next change
//
// Every replica derives the same state from the document and the clock:
// the active key is the one with the latest signs_from not after now, the
// published keys those whose expires_at is unset or still ahead. A
// successor is added when the newest key has been signing for period minus
// publish-ahead, so that it takes over exactly one period after its
// predecessor started. Every change is one conditional update on the
// document's version: when several replicas rotate at the same moment, one
// write wins and the others reload it, so all agree on one successor.
package signing

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/services/account"
)

// ErrStoredKey marks a stored key that cannot be used (corrupt JWK, wrong
// algorithm, kid mismatch). Retrying does not fix it.
var ErrStoredKey = errors.New("unusable stored signing key")

// maxAttempts bounds the reload-and-retry loop of one Sync when other
// replicas keep winning the conditional update.
const maxAttempts = 5

// maxPublishedKeys is how many keys at once New warns about: retention
// (the longest token lifetime) many times the rotation period makes a
// large JWKS and keyring document.
const maxPublishedKeys = 10

// warnEvery is the least time between two log lines about failed syncs.
const warnEvery = time.Minute

// Options configures a Manager.
type Options struct {
	// Store keeps the keys. Required.
	Store account.SigningKeyStore
	// Alg is the algorithm of generated keys (default RS256).
	Alg string
	// Period is how long each key signs before its successor takes over;
	// 0 disables rotation (the stored keys are still loaded, and a
	// successor added by another replica still takes over on time).
	Period time.Duration
	// PublishAhead is how long a successor is published before it signs.
	// It must exceed CheckInterval plus the JWKS refresh interval of every
	// verifier. Required (and below Period) when Period > 0.
	PublishAhead time.Duration
	// CheckInterval is the longest time between two reloads of the stored
	// keys. Default 1 minute.
	CheckInterval time.Duration
	// Retain is how long a key stays published after it stopped signing:
	// the longest lifetime of a token it signed, plus clock leeway.
	// Required.
	Retain time.Duration
	// Logger receives rotations and (rate-limited) sync failures. Default
	// slog.Default().
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Generate makes a new private key. Default token.GenerateKey.
	Generate func(alg string) (jwk.Key, error)
}

// Manager keeps the current keyring of the generated keys: it is a
// token.KeyringProvider whose keyring is swapped atomically as keys are
// added, take over and expire. Run keeps it up to date.
type Manager struct {
	opts    Options
	current atomic.Pointer[token.Keyring]

	reloadMu   sync.Mutex // serialises ReloadKeyring
	lastReload time.Time  // when ReloadKeyring last synced

	mu     sync.Mutex // serialises Sync
	stored account.SigningKeys
	// unconfirmed is a key this replica wrote when the write answered
	// with an error: it may have been stored all the same (a reply lost
	// or late on a slow database). The next read logs its creation if it
	// is there, so that every key's creation is logged once.
	unconfirmed *unconfirmedKey
	loaded      bool
	parsed      map[string]jwk.Key // private keys by kid, parsed once
	ringSig     string             // active and published kids of current

	warnMu     sync.Mutex
	lastWarn   time.Time
	suppressed int
	failing    bool
}

var _ token.KeyringReloader = (*Manager)(nil)

// New checks opts and returns a Manager without a keyring: call Sync once
// (until it succeeds) before serving, then Run in the background.
func New(opts Options) (*Manager, error) {
	if opts.Store == nil {
		return nil, errors.New("signing: Store is required")
	}
	if opts.Alg == "" {
		opts.Alg = token.DefaultAlgorithm
	}
	if opts.CheckInterval == 0 {
		opts.CheckInterval = time.Minute
	}
	switch {
	case opts.Period < 0 || opts.PublishAhead < 0 || opts.CheckInterval < 0 || opts.Retain < 0:
		return nil, errors.New("signing: negative duration")
	case opts.Retain == 0:
		return nil, errors.New("signing: Retain is required")
	case opts.Period > 0 && (opts.PublishAhead == 0 || opts.PublishAhead >= opts.Period):
		return nil, fmt.Errorf("signing: publish-ahead (%v) must be above 0 and below the rotation period (%v)", opts.PublishAhead, opts.Period)
	case opts.Period > 0 && opts.CheckInterval >= opts.PublishAhead:
		return nil, fmt.Errorf("signing: check interval (%v) must be below publish-ahead (%v), so that every replica has the next key before it signs", opts.CheckInterval, opts.PublishAhead)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Generate == nil {
		opts.Generate = token.GenerateKey
	}
	if opts.Period > 0 && opts.Retain/opts.Period >= maxPublishedKeys {
		opts.Logger.Warn("signing keys are retained for many rotation periods: the JWKS will hold many keys",
			"period", opts.Period.String(), "retain", opts.Retain.String(), "keys", int(opts.Retain/opts.Period)+2)
	}
	if opts.Alg != token.AlgRS256 && opts.Alg != token.AlgES256 && opts.Alg != token.AlgEdDSA {
		return nil, fmt.Errorf("signing: unsupported algorithm %q (want %s, %s or %s)", opts.Alg, token.AlgRS256, token.AlgES256, token.AlgEdDSA)
	}
	return &Manager{opts: opts, parsed: map[string]jwk.Key{}}, nil
}

// Keyring returns the current keyring: the active key and every published
// key. It is nil until the first Sync succeeded.
func (m *Manager) Keyring() *token.Keyring { return m.current.Load() }

// reloadEvery is the least time between two on-demand reloads: a token
// naming an unknown kid (a forged one, or one signed by a key another
// replica added moments ago) costs the database at most one read per
// reloadEvery, however many such tokens arrive.
const reloadEvery = time.Second

// ReloadKeyring syncs now, unless an on-demand reload ran less than
// reloadEvery ago. It makes the Manager a token.KeyringReloader: a replica
// that has not yet seen a key another replica published (its scheduled
// reload delayed by load) verifies that key's tokens all the same.
//
// Callers arriving while a reload runs wait for it rather than return at
// once: requests carrying the new key's tokens arrive together, and each
// must see the keyring the reload installs.
func (m *Manager) ReloadKeyring(ctx context.Context) error {
	m.reloadMu.Lock()
	defer m.reloadMu.Unlock()
	now := m.now()
	if !m.lastReload.IsZero() && now.Sub(m.lastReload) < reloadEvery {
		return nil // reloaded moments ago, and finished: the keyring is current
	}
	m.lastReload = now
	// Not reported: a caller may give up waiting (the JWKS waits a
	// second), and Run reports the store's health on its own schedule.
	return m.Sync(ctx)
}

// Sync loads the stored keys (creating the first one when there is none),
// adds a successor when one is due, drops expired keys, and installs the
// resulting keyring. Several managers may Sync at once, in this process or
// others: they agree on one result.
//
// When the store fails, the last keyring stays, but it still moves on in
// time: a successor already loaded takes over at its signs_from and
// expired keys are unpublished.
func (m *Manager) Sync(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	err := m.sync(ctx)
	if err != nil && m.loaded && !errors.Is(err, ErrStoredKey) {
		// Time-based transitions need no database.
		if ierr := m.install(m.stored, m.now()); ierr != nil {
			err = errors.Join(err, ierr)
		}
	}
	return err
}

func (m *Manager) sync(ctx context.Context) error {
	alg := m.opts.Alg
	for range maxAttempts {
		stored, err := m.opts.Store.SigningKeys(ctx, alg)
		if errors.Is(err, account.ErrNotFound) {
			stored, err = m.create(ctx)
			if errors.Is(err, account.ErrDuplicate) {
				continue // another replica was first: load its key
			}
		}
		if err != nil {
			return err
		}
		m.confirm(stored)
		m.remember(stored)

		now := m.now()
		keys, changed, added, err := m.plan(stored.Keys, now)
		if err != nil {
			return err
		}
		if changed {
			updated, err := m.opts.Store.UpdateSigningKeys(ctx, alg, stored.Version, keys)
			if errors.Is(err, account.ErrSigningKeysChanged) {
				continue // another replica changed them first: reload
			}
			if err != nil {
				if added != nil {
					m.unconfirmed = &unconfirmedKey{msg: nextKeyAdded, kid: added.KID}
				}
				return err
			}
			m.logChange(stored.Keys, updated, added)
			m.remember(updated)
			if added != nil {
				// The keyring as of the decision first: a successor this
				// replica added is published before it signs here, even
				// when the write took longer than the publish-ahead (a
				// starved machine). Until the next sync (within the check
				// interval) the predecessor, still published, signs on.
				return m.install(m.stored, now)
			}
		}
		return m.install(m.stored, m.now())
	}
	return fmt.Errorf("signing keys %s: still changing after %d attempts", alg, maxAttempts)
}

// create stores the first key, which signs at once: nobody can hold a
// token of this keyring yet, so there is nothing to publish ahead of.
func (m *Manager) create(ctx context.Context) (account.SigningKeys, error) {
	now := m.now()
	first, err := m.newKey(now, now)
	if err != nil {
		return account.SigningKeys{}, err
	}
	created, err := m.opts.Store.CreateSigningKeys(ctx, m.opts.Alg, []account.SigningKey{first})
	if err != nil {
		if !errors.Is(err, account.ErrDuplicate) {
			m.unconfirmed = &unconfirmedKey{msg: firstKeyCreated, kid: first.KID}
		}
		return account.SigningKeys{}, err
	}
	m.opts.Logger.Info(firstKeyCreated, "alg", m.opts.Alg, "kid", first.KID)
	return created, nil
}

// The log messages of a key's creation, one per key across the replicas.
const (
	firstKeyCreated = "first signing key created"
	nextKeyAdded    = "next signing key added"
)

// unconfirmedKey is a key whose write answered with an error, and the
// message that logs its creation.
type unconfirmedKey struct{ msg, kid string }

// confirm logs the creation of the unconfirmed key when stored holds it:
// the write that answered with an error was applied.
func (m *Manager) confirm(stored account.SigningKeys) {
	u := m.unconfirmed
	if u == nil {
		return
	}
	m.unconfirmed = nil
	i := slices.IndexFunc(stored.Keys, func(k account.SigningKey) bool { return k.KID == u.kid })
	if i < 0 {
		return
	}
	m.opts.Logger.Info(u.msg, "alg", m.opts.Alg, "kid", u.kid, "signs_from", stored.Keys[i].SignsFrom,
		"version", stored.Version, "confirmed_after_error", true)
}

// plan returns the keys as they should be stored at now: expired keys
// dropped, and a successor appended when the newest key is due for one.
// changed reports whether they differ from keys; added is the successor.
func (m *Manager) plan(keys []account.SigningKey, now time.Time) (out []account.SigningKey, changed bool, added *account.SigningKey, err error) {
	for _, k := range keys {
		if k.ExpiresAt.IsZero() || k.ExpiresAt.After(now) {
			out = append(out, k)
		}
	}
	changed = len(out) != len(keys)
	switch {
	case len(out) == 0:
		// Cannot happen with documents this package writes (the newest
		// key never expires); start over rather than sign with nothing.
		first, err := m.newKey(now, now)
		if err != nil {
			return nil, false, nil, err
		}
		return []account.SigningKey{first}, true, &first, nil
	case m.rotationDue(out, now):
		next, err := m.newKey(now, now.Add(m.opts.PublishAhead))
		if err != nil {
			return nil, false, nil, err
		}
		out[len(out)-1].ExpiresAt = next.SignsFrom.Add(m.opts.Retain)
		out = append(out, next)
		return out, true, &out[len(out)-1], nil
	}
	return out, changed, nil, nil
}

// rotationDue reports whether the newest key has signed long enough for its
// successor to be added now: period - publish-ahead after it started, so
// that the successor takes over exactly one period after it. A newest key
// that does not sign yet is itself the pending successor.
func (m *Manager) rotationDue(keys []account.SigningKey, now time.Time) bool {
	if m.opts.Period <= 0 || len(keys) == 0 {
		return false
	}
	newest := keys[len(keys)-1]
	return !now.Before(newest.SignsFrom.Add(m.opts.Period - m.opts.PublishAhead))
}

func (m *Manager) newKey(created, signsFrom time.Time) (account.SigningKey, error) {
	key, err := m.opts.Generate(m.opts.Alg)
	if err != nil {
		return account.SigningKey{}, fmt.Errorf("generate signing key: %w", err)
	}
	data, err := token.MarshalPrivateJWK(key)
	if err != nil {
		return account.SigningKey{}, err
	}
	kid, _ := key.KeyID()
	m.parsed[kid] = key
	return account.SigningKey{KID: kid, Alg: m.opts.Alg, JWK: data, CreatedAt: created, SignsFrom: signsFrom}, nil
}

// remember keeps stored as the last known state and forgets parsed keys
// that are no longer in it.
func (m *Manager) remember(stored account.SigningKeys) {
	m.stored, m.loaded = stored, true
	for kid := range m.parsed {
		if !slices.ContainsFunc(stored.Keys, func(k account.SigningKey) bool { return k.KID == kid }) {
			delete(m.parsed, kid)
		}
	}
}

// State is what a keyring document means at one instant.
type State struct {
	// Active is the index of the signing key: the latest SignsFrom not
	// after now (the earliest SignsFrom when none has started, which only
	// a clock behind the other replicas' sees).
	Active int
	// Published are the indexes of the keys in the JWKS: ExpiresAt unset
	// or after now, and the active key in any case.
	Published []int
}

// StateAt derives the state of keys (in stored order) at now. Every replica
// computes the same from the same document and time.
func StateAt(keys []account.SigningKey, now time.Time) State {
	s := State{Active: -1}
	earliest := -1
	for i, k := range keys {
		if earliest == -1 || k.SignsFrom.Before(keys[earliest].SignsFrom) {
			earliest = i
		}
		if !k.SignsFrom.After(now) && (s.Active == -1 || !k.SignsFrom.Before(keys[s.Active].SignsFrom)) {
			s.Active = i
		}
	}
	if s.Active == -1 {
		s.Active = earliest
	}
	for i, k := range keys {
		if i == s.Active || k.ExpiresAt.IsZero() || k.ExpiresAt.After(now) {
			s.Published = append(s.Published, i)
		}
	}
	return s
}

// install swaps in the keyring of stored at now, unless the current one
// has the same active and published keys already.
func (m *Manager) install(stored account.SigningKeys, now time.Time) error {
	if len(stored.Keys) == 0 {
		return fmt.Errorf("signing keys %s: %w: the keyring is empty", m.opts.Alg, ErrStoredKey)
	}
	state := StateAt(stored.Keys, now)
	kids := make([]string, 0, len(state.Published))
	for _, i := range state.Published {
		kids = append(kids, stored.Keys[i].KID)
	}
	sig := stored.Keys[state.Active].KID + "|" + strings.Join(kids, ",")
	if sig == m.ringSig && m.current.Load() != nil {
		return nil
	}
	active, err := m.key(stored.Keys[state.Active])
	if err != nil {
		return err
	}
	var others []jwk.Key
	for _, i := range state.Published {
		if i == state.Active {
			continue
		}
		k, err := m.key(stored.Keys[i])
		if err != nil {
			return err
		}
		others = append(others, k)
	}
	ring, err := token.NewKeyring(active, others...)
	if err != nil {
		return fmt.Errorf("signing keys %s: %w: %w", m.opts.Alg, ErrStoredKey, err)
	}
	previous := m.current.Swap(ring)
	m.ringSig = sig
	m.opts.Logger.Info("signing keys in use", "alg", m.opts.Alg, "active_kid", ring.KeyID(),
		"published_kids", kids, "version", stored.Version, "rotated", previous != nil && previous.KeyID() != ring.KeyID())
	return nil
}

// key returns the parsed private key of k, checking that it is what the
// document says it is.
func (m *Manager) key(k account.SigningKey) (jwk.Key, error) {
	if key, ok := m.parsed[k.KID]; ok {
		return key, nil
	}
	key, err := token.ParsePrivateJWK(k.JWK)
	if err != nil {
		return nil, fmt.Errorf("signing key %s: %w: %w", k.KID, ErrStoredKey, err)
	}
	kid, _ := key.KeyID()
	alg, _ := key.Algorithm()
	if kid != k.KID || alg.String() != m.opts.Alg {
		return nil, fmt.Errorf("signing key %s: %w: the JWK is a %s key with kid %s", k.KID, ErrStoredKey, alg, kid)
	}
	m.parsed[k.KID] = key
	return key, nil
}

func (m *Manager) logChange(before []account.SigningKey, after account.SigningKeys, added *account.SigningKey) {
	for _, k := range before {
		if !slices.ContainsFunc(after.Keys, func(a account.SigningKey) bool { return a.KID == k.KID }) {
			m.opts.Logger.Info("expired signing key removed", "alg", m.opts.Alg, "kid", k.KID, "expired_at", k.ExpiresAt)
		}
	}
	if added != nil {
		m.opts.Logger.Info(nextKeyAdded, "alg", m.opts.Alg, "kid", added.KID,
			"signs_from", added.SignsFrom, "version", after.Version)
	}
}

// Run keeps the keyring up to date until ctx ends: it syncs every
// CheckInterval, and also exactly when a loaded key is due to take over or
// expire or a rotation is due, so transitions do not wait for the next
// check. Failures keep the last keyring and are logged at most once a
// minute.
func (m *Manager) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.untilNext()):
		}
		err := m.Sync(ctx)
		if ctx.Err() != nil {
			return
		}
		m.report(err)
	}
}

// untilNext is the time until the next sync: the check interval, or less
// when a transition of the loaded keys comes sooner.
func (m *Manager) untilNext() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	now := m.now()
	next := now.Add(m.opts.CheckInterval)
	consider := func(t time.Time) {
		if t.After(now) && t.Before(next) {
			next = t
		}
	}
	for _, k := range m.stored.Keys {
		consider(k.SignsFrom)
		if !k.ExpiresAt.IsZero() {
			consider(k.ExpiresAt)
		}
	}
	if m.opts.Period > 0 && len(m.stored.Keys) > 0 {
		consider(m.stored.Keys[len(m.stored.Keys)-1].SignsFrom.Add(m.opts.Period - m.opts.PublishAhead))
	}
	// Times are stored in milliseconds: wake just after, not just before.
	return max(next.Sub(now)+time.Millisecond, time.Millisecond)
}

// report logs a failed sync at most once per warnEvery, and the recovery.
func (m *Manager) report(err error) {
	m.warnMu.Lock()
	defer m.warnMu.Unlock()
	now := m.opts.Now()
	if err == nil {
		if m.failing {
			m.opts.Logger.Info("signing keys reloaded again", "alg", m.opts.Alg)
		}
		m.failing, m.suppressed = false, 0
		return
	}
	m.failing = true
	if !m.lastWarn.IsZero() && now.Sub(m.lastWarn) < warnEvery {
		m.suppressed++
		return
	}
	m.opts.Logger.Warn("signing keys not reloaded; keeping the last ones", "alg", m.opts.Alg,
		"error", err.Error(), "failures_not_logged", m.suppressed)
	m.lastWarn, m.suppressed = now, 0
}

// now is the clock in the precision of the store (BSON dates are
// milliseconds), so that what is computed equals what is read back.
func (m *Manager) now() time.Time { return m.opts.Now().UTC().Truncate(time.Millisecond) }
