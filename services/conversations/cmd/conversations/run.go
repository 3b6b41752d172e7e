package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/secretbox"
	"github.com/acme/platform/pkg/servicecmd"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/cursor"
	conversationshttp "github.com/acme/platform/services/conversations/http"
	"github.com/acme/platform/services/conversations/mongostore"
	"github.com/acme/platform/services/conversations/webhook"
	"github.com/acme/platform/services/conversations/webhook/delivery"
)

const usage = `conversations runs the conversations service (Interface B).

Usage:
  conversations            run the service
  conversations healthcheck
                           exit 0 when this host's service is ready (container health checks)
  conversations --version | --help

It verifies bearer tokens against the account service's JWKS, fetched in the
background: it never calls the account service per request.

Configuration (environment variables):
`

// run is the whole program behind main, with its inputs and outputs passed
// in so that tests can drive it. Configuration comes from the process
// environment (envconfig reads os.Getenv).
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	healthcheck := false
	if len(args) > 0 {
		switch args[0] {
		case "-h", "--help", "help":
			fmt.Fprint(stdout, usage)
			return servicecmd.PrintUsage(stdout, envPrefix, &config{})
		case "-v", "--version", "version":
			fmt.Fprintln(stdout, "conversations", version)
			return nil
		case "serve", "healthcheck":
			if len(args) == 1 {
				healthcheck = args[0] == "healthcheck"
				break
			}
			fallthrough
		default:
			return fmt.Errorf("unknown arguments %q (see conversations --help)", strings.Join(args, " "))
		}
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	if healthcheck {
		return servicecmd.HealthCheck(ctx, cfg.OpsAddr)
	}
	return serve(ctx, cfg, stderr)
}

// serve runs the service until ctx is cancelled (SIGTERM, Ctrl-C), then
// drains in-flight requests and closes the database connection. It is
// ready once MongoDB answers and the first key set has been fetched; it
// starts (not ready) while the account service is still down.
func serve(ctx context.Context, cfg config, logs io.Writer) error {
	logger := servicecmd.NewLogger(logs, cfg.LogLevel)

	registry := servicecmd.NewRegistry()
	db, err := servicecmd.DialMongo(cfg.MongoDBURI, cfg.MongoDBTimeout, registry)
	if err != nil {
		return err
	}
	defer db.Close()
	store := mongostore.New(db.Client.Database(cfg.MongoDBDatabase))

	keys, err := token.NewRemoteKeySet(ctx, cfg.JWKSURL, token.RemoteOptions{
		RefreshInterval:    cfg.JWKSRefreshInterval,
		MinRefreshInterval: cfg.JWKSMinRefreshInterval,
		Logger:             logger,
		Metrics:            registry,
	})
	if err != nil {
		return err
	}
	defer keys.Close()
	verifier, err := token.NewVerifier(keys, token.VerifierConfig{Issuer: cfg.Issuer, Audience: cfg.Audience})
	if err != nil {
		return err
	}

	// A configured cursor secret is checked before anything listens.
	var configuredCursors *cursor.Codec
	if cfg.CursorSecret != "" {
		if configuredCursors, err = cursor.New([]byte(cfg.CursorSecret)); err != nil {
			return fmt.Errorf("configuration: CONVERSATIONS_CURSOR_SECRET: %w", err)
		}
	}

	// The idempotency keys' purge ends with the service's context; wait
	// for it before disconnecting. serve cancels it itself on return, so
	// that the Wait cannot block on a context nobody cancels.
	var background sync.WaitGroup
	defer background.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	service := &conversations.Service{Store: store, Logger: logger}
	background.Go(func() {
		servicecmd.PurgeEvery(ctx, logger, time.Hour, "idempotency keys", service.PurgeIdempotencyKeys)
	})

	// Events: every change records its events pending on its document;
	// this replica's relay orders them into the account logs (woken at
	// once by a change made here), and its hub feeds its open streams,
	// which end, with retry:, at SIGTERM before the drain waits for them.
	events := newEventMetrics(registry)
	hub := &conversations.Hub{
		Store: store, Interval: cfg.EventsPollInterval, MaxPerCaller: cfg.EventsMaxStreams, Logger: logger,
		MaxStreamBytes: cfg.EventsStreamBytes, MaxBytes: cfg.EventsStreamsBytes,
		Opened: events.open.Inc, Dropped: events.streamClosed, Read: events.reads.Inc,
	}
	background.Go(func() {
		<-ctx.Done()
		hub.Close()
	})
	// The holder's name carries the address the other replicas wake its
	// relay at, when it has one: a replica recording a change of an
	// account whose partition another holds wakes that one.
	holder := conversations.HolderName(newHolderID(), wakeAddr(cfg.RelayWakeHost, cfg.OpsAddr))
	waker := newRelayWaker(logger)
	wakeRelay := make(chan struct{}, 1)
	wake := func() {
		select {
		case wakeRelay <- struct{}{}:
		default:
		}
	}
	// The webhook engine, once Init has made it, fans out what this
	// replica's relay orders, and sweeps the accounts of partitions it
	// takes over; its first sweep covers what was ordered before.
	var engine atomic.Pointer[delivery.Engine]
	// One relay at a time orders an account: the one of the replica
	// leasing its partition.
	partitions := &conversations.RelayPartitions{
		Store: store, Holder: holder, Count: cfg.RelayPartitions, Lease: cfg.RelayLease, Logger: logger,
		Gained: func() {
			wake()
			if e := engine.Load(); e != nil {
				e.SweepSoon()
			}
		},
		Notify: func(peers []string) {
			for _, p := range peers {
				if addr := conversations.WakeAddr(p); addr != "" {
					waker.wake(addr, relayPartitionsPath)
				}
			}
		},
	}
	recorded := func(accountID string, n int) {
		events.recorded.Add(float64(n))
		if partitions.Holds(accountID) {
			wake()
		} else if addr := conversations.WakeAddr(partitions.HolderOf(accountID)); addr != "" {
			waker.wake(addr, relayWakePath)
		}
	}
	relay := &conversations.Relay{
		Store: store, Logger: logger, Partitions: partitions, Woken: partitions.PeersWake,
		Lag: func(d time.Duration) { events.lag.Set(d.Seconds()) },
		Copied: func(n int) {
			events.ordered.Add(float64(n))
			hub.Wake()
		},
		Ordered: func(accounts []string) {
			if e := engine.Load(); e != nil {
				e.Ordered(accounts)
			}
		},
	}
	relayPartitions(registry, cfg.RelayPartitions, func() int { return len(partitions.Held()) })
	purgeEvents := func(ctx context.Context, now time.Time) (int64, error) {
		// One replica at a time; one that stalls past the lease loses it
		// to the next that asks, and a purge repeated is harmless.
		held, err := store.AcquireLease(ctx, "events_purge", holder, now, cfg.EventsPurgeInterval)
		if err != nil || !held {
			return 0, err
		}
		return service.PurgeEvents(ctx, now, cfg.EventsRetention)
	}
	var startEvents sync.Once

	return cfg.Config.Configure(servicecmd.Service{
		Name:     "conversations",
		Version:  version,
		Logger:   logger,
		APIAddr:  cfg.HTTPAddr,
		OpsAddr:  cfg.OpsAddr,
		Registry: registry,
		Ops: map[string]http.Handler{
			"POST " + relayWakePath:       relayWakeHandler(wake),
			"POST " + relayPartitionsPath: relayWakeHandler(partitions.ReadSoon),
		},
		Checks: map[string]web.Check{
			"mongodb": db.Ready,
			"signing_keys": func(ctx context.Context) error {
				if !keys.Ready(ctx) {
					return errors.New("no key set fetched yet from " + cfg.JWKSURL)
				}
				return nil
			},
		},
		Init: func(ctx context.Context) (http.Handler, error) {
			if err := servicecmd.EnsureIndexes(ctx, cfg.MongoDBTimeout, store.EnsureIndexes); err != nil {
				return nil, err
			}
			// The relay and the purge query by the indexes just made.
			startEvents.Do(func() {
				background.Go(func() { partitions.Run(ctx) })
				background.Go(func() { relay.Run(ctx, cfg.EventsPollInterval, wakeRelay) })
				background.Go(func() {
					servicecmd.PurgeEvery(ctx, logger, cfg.EventsPurgeInterval, "events", purgeEvents)
				})
			})
			cursors := configuredCursors
			if cursors == nil {
				// No secret configured: the one stored in MongoDB, made by
				// the first replica that starts.
				secret, err := store.LoadOrCreateSecret(ctx, "cursor_key", newCursorSecret)
				if err != nil {
					return nil, err
				}
				if cursors, err = cursor.New([]byte(secret)); err != nil {
					return nil, fmt.Errorf("stored cursor secret: %w", err)
				}
			}
			webhooks, err := startWebhooks(ctx, cfg, store, logger, registry, &background, holder, partitions, &engine)
			if err != nil {
				return nil, err
			}
			return conversationshttp.NewHandler(conversationshttp.Deps{
				Webhooks:        webhooks,
				Logger:          logger,
				Metrics:         registry,
				Store:           store,
				Cursors:         cursors,
				Verifier:        verifier,
				DefaultPageSize: cfg.DefaultPageSize,
				MaxPageSize:     cfg.MaxPageSize,
				CORSOrigins:     cfg.CORSOrigins,
				Hub:             hub,
				Recorded:        recorded,
				Stream:          conversationshttp.StreamConfig{KeepAlive: cfg.EventsKeepAlive},
			}), nil
		},
	}).Run(ctx)
}

// newHolderID names this process in leases: its host and a random part.
func newHolderID() string {
	host, _ := os.Hostname()
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return host + "/" + base64.RawURLEncoding.EncodeToString(b)
}

func newCursorSecret() (string, error) {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // never fails since Go 1.24
	return base64.RawStdEncoding.EncodeToString(b), nil
}

// startWebhooks builds the webhooks' use cases and starts this replica's
// delivery engine (stored in started) and the leased purge of
// deliveries, which end with ctx (background waits for them); holder
// names this replica in the lease, and partitions are its relay's (the
// engine's fan-out sweep looks at their accounts, and the holder of
// partition 0 reads the oldest pending delivery for the gauge).
func startWebhooks(ctx context.Context, cfg config, store *mongostore.Store, logger *slog.Logger,
	registry prometheus.Registerer, background *sync.WaitGroup, holder string,
	partitions *conversations.RelayPartitions, started *atomic.Pointer[delivery.Engine],
) (*webhook.Service, error) {
	key, err := cfg.webhookKey()
	if err != nil {
		return nil, err
	}
	if key == nil {
		logger.Warn("CONVERSATIONS_WEBHOOK_SECRET_KEY is not set: webhook secrets are encrypted under a key kept in MongoDB beside them; set it in production")
		if key, err = secretbox.StoredKey(ctx, store, "webhook_secret_key"); err != nil {
			return nil, err
		}
	}
	box, err := webhook.NewSecretBox(key)
	if err != nil {
		return nil, err
	}
	schedule, _ := cfg.webhookSchedule() // checked by validate
	allowed, _ := delivery.ParseAllowedCIDRs(cfg.WebhookAllowedCIDRs)
	// One dialler: its check refuses addresses when dialling and, named
	// literally in an endpoint's URL, at registration.
	dialer := delivery.NewDialer(allowed, nil)
	sender := delivery.NewSender(dialer, cfg.WebhookTimeout, cfg.WebhookWorkers)
	engine := &delivery.Engine{
		Sender: sender, Logger: logger, Poll: cfg.WebhookPollInterval, Lease: cfg.WebhookLease, Slots: partitions.Slots,
		Gauges:  func() bool { return slices.Contains(partitions.Held(), 0) },
		Workers: cfg.WebhookWorkers, PerEndpoint: cfg.WebhookPerEndpoint, Metrics: delivery.NewMetrics(registry),
	}
	webhooks := &webhook.Service{
		Store: store, Events: store, Box: box, URLs: webhook.URLPolicy{AllowHTTP: cfg.WebhookAllowHTTP, Dialable: dialer.Check},
		MaxEndpoints: cfg.WebhookMaxEndpoints, ManualPerMinute: cfg.WebhookManualPerMinute,
		RetrySchedule: schedule, DisableAfter: cfg.WebhookDisableAfter, Wake: engine.Wake,
	}
	engine.Webhooks = webhooks
	started.Store(engine)
	background.Go(func() { engine.Run(ctx) })
	purge := func(ctx context.Context, now time.Time) (int64, error) {
		// One replica at a time, as the events' purge.
		held, err := store.AcquireLease(ctx, "webhook_deliveries_purge", holder, now, cfg.WebhookPurgeInterval)
		if err != nil || !held {
			return 0, err
		}
		return webhooks.PurgeDeliveries(ctx, now, cfg.WebhookDeliveriesRetention)
	}
	background.Go(func() {
		servicecmd.PurgeEvery(ctx, logger, cfg.WebhookPurgeInterval, "webhook deliveries", purge)
	})
	return webhooks, nil
}
