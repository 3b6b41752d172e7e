package token

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/lestrrat-go/httprc/v3"
	"github.com/lestrrat-go/httprc/v3/errsink"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
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
	// Metrics, when set, receives the key set's metrics (remote_metrics.go):
	// fetches by result, the time of the last good one, the keys held.
	// One RemoteKeySet per registry.
	Metrics prometheus.Registerer
}

// RemoteKeySet is a KeySetRefresher over a JWKS URL, backed by httprc
// (what jwk.Cache runs on): the set is fetched and refreshed in the
// background, and the last good set is kept when the endpoint fails,
// returns garbage or a set without keys.
type RemoteKeySet struct {
	url        string
	ctrl       httprc.Controller
	resource   *httprc.ResourceBase[jwk.Set]
	minRefresh time.Duration
	failures   *failureLog
	metrics    *remoteMetrics // nil without RemoteOptions.Metrics
	now        func() time.Time

	// ctx lives until Shutdown; on-demand refetches run under it, not
	// under the request that triggered them, so that a cancelled request
	// does not abort a refetch other verifiers are waiting for.
	ctx    context.Context
	cancel context.CancelFunc

	mu          sync.Mutex
	lastRefetch time.Time     // start of the last on-demand refetch
	inflight    chan struct{} // closed when the running refetch ends; nil when none runs

	backgroundFailed     chan struct{} // closed when a background fetch first fails
	backgroundFailedOnce sync.Once
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
		url:              jwksURL,
		minRefresh:       opts.MinRefreshInterval,
		now:              time.Now,
		backgroundFailed: make(chan struct{}),
		failures: &failureLog{
			logger: logger,
			url:    u.Redacted(),
			every:  opts.RefreshInterval,
			now:    time.Now,
		},
	}
	if opts.Metrics != nil {
		r.metrics = newRemoteMetrics()
	}
	r.ctx, r.cancel = context.WithCancel(ctx)

	// One worker: there is one URL, and it keeps at most one request in
	// flight to the JWKS host. Background fetch failures only reach the
	// error sink; nothing else would ever report them.
	client := httprc.NewClient(
		httprc.WithWorkers(1),
		httprc.WithErrorSink(errsink.NewFunc(r.backgroundFetchFailed)),
	)
	ctrl, err := client.Start(r.ctx)
	if err != nil {
		r.cancel()
		return nil, fmt.Errorf("new remote key set: start cache: %w", err)
	}
	r.ctrl = ctrl

	// What jwk.Cache.Register does, with a transformer of our own: it is
	// the one place that sees every fetch that succeeds.
	httpClient := jwk.DefaultHTTPClient()
	if opts.HTTPClient != nil {
		httpClient = jwk.WrapHTTPClientDefaults(opts.HTTPClient)
	}
	// Each fetch is a client span (a root: fetches run in the
	// background) when tracing is on. httpClient is a copy.
	httpClient.Transport = otelhttp.NewTransport(httpClient.Transport,
		otelhttp.WithSpanNameFormatter(func(string, *http.Request) string { return "JWKS fetch" }))
	res, err := httprc.NewResource[jwk.Set](jwksURL, keySetTransformer{r},
		httprc.WithMinInterval(opts.MinRefreshInterval),
		httprc.WithMaxInterval(opts.RefreshInterval),
		httprc.WithHTTPClient(httpClient),
	)
	if err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("new remote key set: %w", err)
	}
	if err := ctrl.Add(r.ctx, res, httprc.WithWaitReady(false)); err != nil {
		_ = r.Close()
		return nil, fmt.Errorf("new remote key set: register %s: %w", u.Redacted(), err)
	}
	// Reading the resource is an atomic load, while every call on the
	// controller is a round trip through its goroutine.
	r.resource = res
	if opts.Metrics != nil {
		if err := r.metrics.register(opts.Metrics); err != nil {
			_ = r.Close()
			return nil, fmt.Errorf("new remote key set: %w", err)
		}
	}
	go r.fetchUntilReady()
	return r, nil
}

// keySetTransformer parses a fetched JWKS as jwk.Cache does, and refuses
// a set without keys (a misconfigured deploy, a proxy's placeholder),
// which would otherwise replace the last good set and make every token
// unverifiable until the endpoint recovers. A refused set is a failed
// fetch: logged, counted, and the last good set stays.
type keySetTransformer struct{ r *RemoteKeySet }

func (t keySetTransformer) Transform(ctx context.Context, res *http.Response) (jwk.Set, error) {
	set, err := jwk.Transformer{}.Transform(ctx, res)
	if err != nil {
		return nil, err
	}
	if set.Len() == 0 {
		return nil, errors.New("the JWKS holds no keys")
	}
	t.r.metrics.fetchSucceeded(t.r.now(), set.Len())
	return set, nil
}

// fetchFailed counts and logs (at most once per RefreshInterval) a fetch
// that brought no key set.
func (r *RemoteKeySet) fetchFailed(ctx context.Context, err error) {
	r.metrics.fetchFailed()
	r.failures.put(ctx, err)
}

// backgroundFetchFailed is fetchFailed for the cache's own fetches, the
// first of which fetchUntilReady waits for.
func (r *RemoteKeySet) backgroundFetchFailed(ctx context.Context, err error) {
	r.fetchFailed(ctx, err)
	r.backgroundFailedOnce.Do(func() { close(r.backgroundFailed) })
}

// fetchUntilReady retries the first fetch with a short backoff (0.25 s,
// doubling up to MinRefreshInterval) until a key set has arrived. After a
// failed fetch the cache itself waits MinRefreshInterval (30 s by default);
// without this, a service started before its JWKS host (the usual order in
// docker compose or a fresh cluster) would stay unready that long after the
// host came up.
func (r *RemoteKeySet) fetchUntilReady() {
	// First the fetch the cache started ends, in success or failure: a
	// retry while it is still in flight (a slow host, a loaded machine)
	// would be a second request for nothing.
	fetched := make(chan struct{})
	go func() {
		if r.resource.Ready(r.ctx) == nil {
			close(fetched)
		}
	}()
	select {
	case <-r.ctx.Done():
		return
	case <-fetched:
		return
	case <-r.backgroundFailed:
	}
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
		if err := r.ctrl.Refresh(ctx, r.url); err != nil && r.ctx.Err() == nil {
			r.fetchFailed(ctx, err)
		}
		cancel()
		backoff = min(backoff*2, r.minRefresh)
	}
}

// KeySet returns the last key set fetched, or ErrKeysUnavailable when none
// has been fetched yet. It never waits for the network.
func (r *RemoteKeySet) KeySet(context.Context) (jwk.Set, error) {
	if set := r.resource.Resource(); set != nil {
		return set, nil
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
	if err := r.ctrl.Refresh(ctx, r.url); err != nil && r.ctx.Err() == nil {
		r.fetchFailed(ctx, err)
	}
}

// Shutdown stops the cache's goroutines and waits for them until ctx ends.
func (r *RemoteKeySet) Shutdown(ctx context.Context) error {
	r.cancel()
	if r.ctrl == nil {
		return nil
	}
	if err := r.ctrl.ShutdownContext(ctx); err != nil {
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
