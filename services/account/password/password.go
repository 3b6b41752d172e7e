// Package password hashes and verifies passwords with argon2id
// (golang.org/x/crypto/argon2), storing the parameters with each hash in the
// PHC string format so that they can be raised later without invalidating
// existing passwords.
//
// Each verification takes Memory KiB of RAM for its duration, so hashing runs
// under a concurrency limit: a burst of logins queues for a bounded time and
// then fails with ErrBusy instead of exhausting memory.
package password

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/crypto/argon2"
	"golang.org/x/text/unicode/norm"

	"github.com/acme/platform/pkg/tracing"
)

// ErrBusy means every hashing slot stayed taken for the whole queue wait.
var ErrBusy = errors.New("password hashing is at capacity")

// ErrMalformedHash means a stored hash is not an argon2id PHC string.
var ErrMalformedHash = errors.New("malformed password hash")

// Params are argon2id cost parameters. The defaults are OWASP's minimum for
// argon2id: 19 MiB, 2 iterations, 1 lane.
type Params struct {
	Memory      uint32 // KiB
	Iterations  uint32
	Parallelism uint8
	SaltLen     uint32
	KeyLen      uint32
}

// DefaultParams is OWASP's recommended minimum.
var DefaultParams = Params{Memory: 19 * 1024, Iterations: 2, Parallelism: 1, SaltLen: 16, KeyLen: 32}

// Hasher hashes and verifies passwords under a concurrency limit.
type Hasher struct {
	params    Params
	slots     chan struct{}
	queueWait time.Duration
	dummy     string
	metrics   *metrics // nil without Options.Metrics
}

// Options configures New.
type Options struct {
	Params Params
	// Concurrency is how many hashes may run at once; default runtime.NumCPU.
	Concurrency int
	// QueueWait bounds how long a call waits for a slot; default 2s.
	QueueWait time.Duration
	// Metrics, when set, receives the hashing queue's metrics (metrics.go),
	// for alerts on saturation.
	Metrics prometheus.Registerer
}

// New returns a Hasher.
func New(opts Options) (*Hasher, error) {
	p := opts.Params
	if p == (Params{}) {
		p = DefaultParams
	}
	if p.Memory < 8*uint32(p.Parallelism) || p.Iterations < 1 || p.Parallelism < 1 || p.SaltLen < 8 || p.KeyLen < 16 {
		return nil, fmt.Errorf("argon2id parameters too weak or invalid: %+v", p)
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = runtime.NumCPU()
	}
	if opts.QueueWait <= 0 {
		opts.QueueWait = 2 * time.Second
	}
	h := &Hasher{params: p, slots: make(chan struct{}, opts.Concurrency), queueWait: opts.QueueWait}
	dummy, err := h.hash("dummy password for timing equalisation")
	if err != nil {
		return nil, err
	}
	h.dummy = dummy
	if opts.Metrics != nil {
		if h.metrics, err = newMetrics(opts.Metrics, h.slots); err != nil {
			return nil, err
		}
	}
	return h, nil
}

// Hash returns the PHC string of password, normalised to NFKC, with a
// fresh random salt: a password typed in another form of the same
// characters (a ligature, a full-width letter) then logs in as well. A
// traced request shows it (the wait for a slot included) as a span.
func (h *Hasher) Hash(ctx context.Context, password string) (encoded string, err error) {
	ctx, span := tracing.Start(ctx, "password hash")
	defer func() { tracing.End(span, err) }()
	release, err := h.acquire(ctx)
	if err != nil {
		return "", err
	}
	defer release()
	return h.hash(norm.NFKC.String(password))
}

// Verify reports whether password matches the PHC string encoded, in its
// NFKC form or as typed (see Check).
func (h *Hasher) Verify(ctx context.Context, encoded, password string) (bool, error) {
	ok, _, err := h.Check(ctx, encoded, password)
	return ok, err
}

// Check reports whether password matches the PHC string encoded, using the
// parameters stored in it. The NFKC form is tried first; when it differs
// from the password as typed and does not match, the typed form is tried,
// since hashes stored before passwords were normalised hold that form.
// stale reports such a match: the caller should store a new hash. Whether
// a second verification runs depends on the password presented alone,
// never on the stored hash. A traced request shows it as a span.
func (h *Hasher) Check(ctx context.Context, encoded, password string) (ok, stale bool, err error) {
	ctx, span := tracing.Start(ctx, "password verify")
	defer func() { tracing.End(span, err) }()
	p, salt, want, err := decode(encoded)
	if err != nil {
		return false, false, err
	}
	normalized := norm.NFKC.String(password)
	if ok, err := h.verify(ctx, p, salt, want, normalized); err != nil || ok || normalized == password {
		return ok, false, err
	}
	ok, err = h.verify(ctx, p, salt, want, password)
	return ok, ok, err
}

func (h *Hasher) verify(ctx context.Context, p Params, salt, want []byte, password string) (bool, error) {
	release, err := h.acquire(ctx)
	if err != nil {
		return false, err
	}
	defer release()
	got := argon2.IDKey([]byte(password), salt, p.Iterations, p.Memory, p.Parallelism, uint32(len(want)))
	return subtle.ConstantTimeCompare(got, want) == 1, nil
}

// VerifyDummy runs the verifications of a mismatch against a fixed hash
// with the current parameters, so that a login for an unknown user costs
// what a wrong password costs.
func (h *Hasher) VerifyDummy(ctx context.Context, password string) error {
	_, err := h.Verify(ctx, h.dummy, password)
	return err
}

func (h *Hasher) acquire(ctx context.Context) (release func(), err error) {
	select {
	case h.slots <- struct{}{}:
		h.metrics.slotTaken(0)
		return func() { <-h.slots }, nil
	default:
	}
	h.metrics.queued()
	queuedAt := time.Now()
	defer func() { h.metrics.dequeued(time.Since(queuedAt), err) }()
	timer := time.NewTimer(h.queueWait)
	defer timer.Stop()
	select {
	case h.slots <- struct{}{}:
		return func() { <-h.slots }, nil
	case <-timer.C:
		return nil, ErrBusy
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for hashing slot: %w", ctx.Err())
	}
}

func (h *Hasher) hash(password string) (string, error) {
	p := h.params
	salt := make([]byte, p.SaltLen)
	if _, err := rand.Read(salt); err != nil {
		return "", fmt.Errorf("read salt: %w", err)
	}
	key := argon2.IDKey([]byte(password), salt, p.Iterations, p.Memory, p.Parallelism, p.KeyLen)
	b64 := base64.RawStdEncoding
	return fmt.Sprintf("$argon2id$v=%d$m=%d,t=%d,p=%d$%s$%s",
		argon2.Version, p.Memory, p.Iterations, p.Parallelism, b64.EncodeToString(salt), b64.EncodeToString(key)), nil
}

// decode parses "$argon2id$v=19$m=19456,t=2,p=1$<salt>$<key>". Parameters
// are bounded so that a corrupt or hostile stored hash cannot make one
// verification allocate gigabytes.
func decode(encoded string) (Params, []byte, []byte, error) {
	parts := strings.Split(encoded, "$")
	if len(parts) != 6 || parts[0] != "" || parts[1] != "argon2id" {
		return Params{}, nil, nil, ErrMalformedHash
	}
	var version int
	if _, err := fmt.Sscanf(parts[2], "v=%d", &version); err != nil || version != argon2.Version {
		return Params{}, nil, nil, ErrMalformedHash
	}
	var p Params
	if _, err := fmt.Sscanf(parts[3], "m=%d,t=%d,p=%d", &p.Memory, &p.Iterations, &p.Parallelism); err != nil {
		return Params{}, nil, nil, ErrMalformedHash
	}
	if p.Memory < 8 || p.Memory > 1<<21 || p.Iterations < 1 || p.Iterations > 64 || p.Parallelism < 1 {
		return Params{}, nil, nil, ErrMalformedHash
	}
	salt, err := base64.RawStdEncoding.DecodeString(parts[4])
	if err != nil || len(salt) < 8 {
		return Params{}, nil, nil, ErrMalformedHash
	}
	key, err := base64.RawStdEncoding.DecodeString(parts[5])
	if err != nil || len(key) < 16 || len(key) > 128 {
		return Params{}, nil, nil, ErrMalformedHash
	}
	return p, salt, key, nil
}
