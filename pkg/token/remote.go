package token

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/httprc/v3/errsink"
	"github.com/lestrrat-go/jwx/v3/jwk"
)

// Defaults of RemoteOptions.
const (
	DefaultRefreshInterval    = 5 * time.Minute
	DefaultMinRefreshInterval = 30 * time.Second
)

// refetchTimeout bounds how long an on-demand refetch may hold the
// verifiers waiting for it. The HTTP client has its own timeout; this one
// also covers time spent queued behind a background fetch.
const refetchTimeout = 10 * time.Second

// RemoteOptions configures a RemoteKeySet.
type RemoteOptions struct {
	// RefreshInterval is the longest time between two background fetches
	// (default 5m). The cache refetches sooner when the response's
	// Cache-Control max-age (or Expires) says so, but never sooner than
	// MinRefreshInterval; a response without either is refetched after
	// MinRefreshInterval.
	RefreshInterval time.Duration
	// MinRefreshInterval is the shortest time between two fetches, and
	// between two refetches triggered by an unknown kid (default 30s).
	MinRefreshInterval time.Duration
	// HTTPClient fetches the JWKS. Default: jwx's client (30 s timeout, no
	// HTTPS to HTTP redirect); a given client without a timeout gets that
	// one.
	HTTPClient *http.Client
	// Logger receives fetch failures, at most one line per
	// RefreshInterval (default slog.Default()).
	Logger *slog.Logger
}

// RemoteKeySet is a KeySetRefresher over a JWKS URL, backed by jwk.Cache
// (httprc): the set is fetched and refreshed in the background, and the
// last good set is kept when the endpoint fails or returns garbage.
type RemoteKeySet struct {
	url      string
	cache    *jwk.Cache
	resource *httprc.ResourceBase[jwk.Set]
	// lastGood is the last fetched set that held keys. jwk.Cache stores
	// any set that parses, also an empty one, which would make every token
	// unverifiable until the endpoint recovers.
	lastGood   atomic.Pointer[jwk.Set]
	minRefresh time.Duration
	failures   *failureLog
	now        func() time.Time

	// ctx lives until Shutdown; on-demand refetches run under it, not
	// under the request that triggered them, so that a cancelled request
	// does not abort a refetch other verifiers are waiting for.
	ctx    context.Context
	cancel context.CancelFunc

	mu          sync.Mutex
	lastRefetch time.Time     // start of the last on-demand refetch
	inflight    chan struct{} // closed when the running refetch ends; nil when none runs
}

// NewRemoteKeySet starts fetching the JWKS at jwksURL in the background and
// returns at once: it neither waits for nor fails on the first fetch, so a
// service can start while the JWKS host is down (Ready reports when keys
// have arrived; until then KeySet returns ErrKeysUnavailable). ctx bounds
// the life of the cache's goroutines; Shutdown or Close stops them sooner.
func NewRemoteKeySet(ctx context.Context, jwksURL string, opts RemoteOptions) (*RemoteKeySet, error) {
	u, err := url.Parse(jwksURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("new remote key set: %q is not an http(s) URL", jwksURL)
	}
	if opts.RefreshInterval < 0 || opts.MinRefreshInterval < 0 {
		return nil, errors.New("new remote key set: negative interval")
	}
	if opts.RefreshInterval == 0 {
		opts.RefreshInterval = DefaultRefreshInterval
	}
	if opts.MinRefreshInterval == 0 {
		opts.MinRefreshInterval = DefaultMinRefreshInterval
	}
	if opts.MinRefreshInterval > opts.RefreshInterval {
		opts.MinRefreshInterval = opts.RefreshInterval
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.Default()
	}

	r := &RemoteKeySet{
		url:        jwksURL,
		minRefresh: opts.MinRefreshInterval,
		now:        time.Now,
		failures: &failureLog{
			logger: logger,
			url:    u.Redacted(),
			every:  opts.RefreshInterval,
			now:    time.Now,
		},
	}
	r.ctx, r.cancel = context.WithCancel(ctx)

	// One worker: there is one URL, and it keeps at most one request in
	// flight to the JWKS host. Background fetch failures only reach the
	// error sink; nothing else would ever report them.
	client := httprc.NewClient(
		httprc.WithWorkers(1),
		httprc.WithErrorSink(errsink.NewFunc(r.failures.put)),
	)
	cache, err := jwk.NewCache(r.ctx, client)
	if err != nil {
		r.cancel()
		return nil, fmt.Errorf("new remote key set: start cache: %w", err)
	}
	r.cache = cache

	regOpts := []jwk.RegisterOption{
		jwk.WithWaitReady(false),
		jwk.WithMinInterval(opts.MinRefreshInterval),
		jwk.WithMaxInterval(opts.RefreshInterval),
	}
	if opts.HTTPClient != nil {
		regOpts = append(regOpts, jwk.WithHTTPClient(jwk.WrapHTTPClientDefaults(opts.HTTPClient)))
	}
	if err := cache.Register(r.ctx, jwksURL, regOpts...); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("new remote key set: register %s: %w", u.Redacted(), err)
	}
	// The resource is looked up once: reading it is an atomic load, while
	// every call on the cache is a round trip through its controller
	// goroutine.
	res, err := cache.LookupResource(r.ctx, jwksURL)
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("new remote key set: %w", err)
	}
	r.resource = res
	go r.fetchUntilReady()
	return r, nil
}

// fetchUntilReady retries the first fetch with a short backoff (0.25 s,
// doubling up to MinRefreshInterval) until a key set has arrived. After a
// failed fetch the cache itself waits MinRefreshInterval (30 s by default);
// without this, a service started before its JWKS host (the usual order in
// docker compose or a fresh cluster) would stay unready that long after the
// host came up.
func (r *RemoteKeySet) fetchUntilReady() {
	backoff := 250 * time.Millisecond
	for !r.Ready(r.ctx) {
		select {
		case <-r.ctx.Done():
			return
		case <-time.After(backoff):
		}
		if r.Ready(r.ctx) {
			return
		}
		ctx, cancel := context.WithTimeout(r.ctx, refetchTimeout)
		if _, err := r.cache.Refresh(ctx, r.url); err != nil && r.ctx.Err() == nil {
			r.failures.put(ctx, err)
		}
		cancel()
		backoff = min(backoff*2, r.minRefresh)
	}
}

// KeySet returns the last key set fetched, or ErrKeysUnavailable when none
// has been fetched yet. It never waits for the network.
func (r *RemoteKeySet) KeySet(context.Context) (jwk.Set, error) {
	if set := r.resource.Resource(); set != nil && set.Len() > 0 {
		if last := r.lastGood.Load(); last == nil || *last != set {
			r.lastGood.Store(&set)
		}
		return set, nil
	}
	if last := r.lastGood.Load(); last != nil {
		return *last, nil
	}
	return nil, fmt.Errorf("JWKS %s not fetched yet: %w", r.failures.url, ErrKeysUnavailable)
}

// Ready reports whether a key set has been fetched (once is enough: later
// failures keep the last good set). It does not wait, so it suits a
// readiness probe.
func (r *RemoteKeySet) Ready(ctx context.Context) bool {
	_, err := r.KeySet(ctx)
	return err == nil
}

// RefreshKeySet refetches the key set unless an on-demand refetch started
// less than MinRefreshInterval ago, and returns the current set. Callers
// that arrive while a refetch runs wait for that one instead of starting
// another, so a burst of tokens with a new kid costs one request.
func (r *RemoteKeySet) RefreshKeySet(ctx context.Context) (jwk.Set, error) {
	r.mu.Lock()
	done := r.inflight
	if done == nil {
		if now := r.now(); r.lastRefetch.IsZero() || now.Sub(r.lastRefetch) >= r.minRefresh {
			r.lastRefetch = now
			done = make(chan struct{})
			r.inflight = done
			go r.refetch(done)
		}
	}
	r.mu.Unlock()

	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for JWKS refetch: %w", ctx.Err())
		}
	}
	return r.KeySet(ctx)
}

func (r *RemoteKeySet) refetch(done chan struct{}) {
	defer func() {
		r.mu.Lock()
		r.inflight = nil
		r.mu.Unlock()
		close(done)
	}()
	ctx, cancel := context.WithTimeout(r.ctx, refetchTimeout)
	defer cancel()
	// A failed synchronous refresh is not sent to the error sink by
	// httprc, so it is logged here. The cache keeps the last good set.
	if _, err := r.cache.Refresh(ctx, r.url); err != nil && r.ctx.Err() == nil {
		r.failures.put(ctx, err)
	}
}

// Shutdown stops the cache's goroutines and waits for them until ctx ends.
func (r *RemoteKeySet) Shutdown(ctx context.Context) error {
	r.cancel()
	if r.cache == nil {
		return nil
	}
	if err := r.cache.Shutdown(ctx); err != nil {
		return fmt.Errorf("shut down JWKS cache: %w", err)
	}
	return nil
}

// Close is Shutdown without a deadline. Stopping is quick: the cache's
// goroutines, and a fetch in progress, end with its context.
func (r *RemoteKeySet) Close() error {
	return r.Shutdown(context.Background())
}

// failureLog logs JWKS fetch failures at most once per interval, with the
// number of failures it kept quiet about since the last line. An endpoint
// that is down is retried every MinRefreshInterval, which is too often to
// log every time.
type failureLog struct {
	logger *slog.Logger
	url    string
	every  time.Duration
	now    func() time.Time

	mu         sync.Mutex
	last       time.Time
	suppressed int
}

func (l *failureLog) put(ctx context.Context, err error) {
	l.mu.Lock()
	now := l.now()
	if !l.last.IsZero() && now.Sub(l.last) < l.every {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	suppressed := l.suppressed
	l.last, l.suppressed = now, 0
	l.mu.Unlock()
	l.logger.LogAttrs(ctx, slog.LevelWarn, "JWKS fetch failed; verifying with the last good key set, if any",
		slog.String("jwks_url", l.url),
		slog.String("error", err.Error()),
		slog.Int("suppressed_failures", suppressed),
	)
}
