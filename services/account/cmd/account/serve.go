package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/acme/platform/pkg/mongodb"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
	accounthttp "github.com/acme/platform/services/account/http"
	"github.com/acme/platform/services/account/mongo"
	"github.com/acme/platform/services/account/password"
)

// serve runs the service until ctx is cancelled (SIGTERM, Ctrl-C), then
// drains in-flight requests and closes the database connection.
//
// Both listeners open at once. Initialisation that needs MongoDB (indexes,
// the signing key) runs in the background and is retried until it succeeds;
// until then /readyz is 503 and the API answers 503, and the process stays
// up, so a database that starts after the service is not a crash loop.
func serve(ctx context.Context, cfg config, logs io.Writer) error {
	logger := newLogger(logs, cfg.LogLevel)

	client, err := mongodb.Connect(cfg.MongoDBURI, cfg.MongoDBTimeout)
	if err != nil {
		return err
	}
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = client.Disconnect(closeCtx)
	}()
	store := mongo.New(client.Database(cfg.MongoDBDatabase))

	hasher, err := password.New(password.Options{
		Params:      passwordParams(cfg),
		Concurrency: cfg.HashConcurrency,
	})
	if err != nil {
		return err
	}

	apiListener, err := web.Listen(cfg.HTTPAddr)
	if err != nil {
		return err
	}
	opsListener, err := web.Listen(cfg.OpsAddr)
	if err != nil {
		_ = apiListener.Close()
		return err
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	api := &web.Pending{}
	ops := web.OpsHandler(registry, map[string]web.Check{
		"mongodb": func(ctx context.Context) error { return mongodb.Ping(ctx, client) },
		"initialised": func(context.Context) error {
			if !api.IsReady() {
				return errors.New("initialising")
			}
			return nil
		},
	})

	// Configuration errors found while wiring stop the process: retrying
	// cannot fix them.
	fatal := make(chan error, 1)
	go func() {
		keys, err := initialise(ctx, logger, cfg, store)
		if err != nil {
			return // ctx was cancelled; Serve is shutting down
		}
		h, err := newAPIHandler(cfg, logger, registry, store, hasher, keys)
		if err != nil {
			fatal <- err
			return
		}
		api.Ready(h)
		logger.Info("ready", "issuer", cfg.Issuer, "kid", keys.Keyring().KeyID())
	}()

	serveCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		select {
		case err := <-fatal:
			cancel(err)
		case <-serveCtx.Done():
		}
	}()

	logger.Info("starting account service", "version", version)
	err = web.Serve(serveCtx, logger, cfg.ShutdownTimeout,
		web.Server{Name: "api", Listener: apiListener, Handler: api},
		web.Server{Name: "ops", Listener: opsListener, Handler: ops},
	)
	if cause := context.Cause(serveCtx); err == nil && cause != nil && !errors.Is(cause, context.Canceled) {
		err = cause
	}
	return err
}

// newAPIHandler wires the API once the keys are known.
func newAPIHandler(cfg config, logger *slog.Logger, registry prometheus.Registerer, store *mongo.Store,
	hasher *password.Hasher, keys token.KeyringProvider) (http.Handler, error) {
	issuer, err := token.NewIssuer(token.IssuerConfig{
		Issuer:     cfg.Issuer,
		Audience:   cfg.Audience,
		Keys:       keys,
		TokenTTL:   cfg.TokenTTL,
		RefreshTTL: cfg.RefreshTTL,
	})
	if err != nil {
		return nil, err
	}
	verifier, err := token.NewVerifier(token.KeyringKeySet(keys), token.VerifierConfig{
		Issuer:   cfg.Issuer,
		Audience: cfg.Audience,
	})
	if err != nil {
		return nil, err
	}
	return accounthttp.NewHandler(accounthttp.Deps{
		Logger:        logger,
		Metrics:       registry,
		Authenticator: account.Authenticator{Accounts: store, Users: store, Hasher: hasher},
		Definitions:   store,
		Issuer:        issuer,
		Verifier:      verifier,
		Keys:          keys,
		IssuerURL:     cfg.Issuer,
	}), nil
}

// initialise creates the indexes and loads the signing keys, retrying with
// backoff while MongoDB is unreachable. It returns only on success or when
// ctx is cancelled.
func initialise(ctx context.Context, logger *slog.Logger, cfg config, store *mongo.Store) (token.KeyringProvider, error) {
	backoff := 500 * time.Millisecond
	for {
		keys, err := tryInitialise(ctx, cfg, store)
		if err == nil {
			return keys, nil
		}
		logger.Warn("initialisation failed; retrying", "error", err.Error(), "retry_in", backoff.String())
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

func tryInitialise(ctx context.Context, cfg config, store *mongo.Store) (token.KeyringProvider, error) {
	if err := store.EnsureIndexes(ctx); err != nil {
		return nil, err
	}
	ring, err := loadKeyring(ctx, cfg, store)
	if err != nil {
		return nil, err
	}
	return token.StaticKeyring(ring), nil
}

// loadKeyring builds the signing keys: from the configured files (a mounted
// Secret) when there are any, else the key generated once and kept in
// MongoDB, so that replicas agree and restarts invalidate nothing.
func loadKeyring(ctx context.Context, cfg config, store account.SigningKeyStore) (*token.Keyring, error) {
	if len(cfg.KeyFiles) > 0 {
		return keyringFromFiles(cfg.KeyFiles, cfg.ActiveKeyID)
	}
	stored, err := store.LoadOrCreateSigningKey(ctx, cfg.SigningAlg, func() ([]byte, error) {
		key, err := token.GenerateKey(cfg.SigningAlg)
		if err != nil {
			return nil, err
		}
		return token.MarshalPrivateJWK(key)
	})
	if err != nil {
		return nil, err
	}
	key, err := token.ParseKey(stored, cfg.SigningAlg)
	if err != nil {
		return nil, fmt.Errorf("stored signing key: %w", err)
	}
	return token.NewKeyring(key)
}

func keyringFromFiles(paths []string, activeKID string) (*token.Keyring, error) {
	var active jwk.Key
	var others []jwk.Key
	for _, p := range paths {
		key, err := token.LoadKeyFile(p)
		if err != nil {
			return nil, err
		}
		kid, _ := key.KeyID()
		if active == nil && (activeKID == "" || kid == activeKID) {
			active = key
			continue
		}
		others = append(others, key)
	}
	if active == nil {
		return nil, fmt.Errorf("ACCOUNT_ACTIVE_KEY_ID %q matches none of the key files", activeKID)
	}
	return token.NewKeyring(active, others...)
}

func passwordParams(cfg config) password.Params {
	p := password.DefaultParams
	p.Memory, p.Iterations = cfg.Argon2MemoryKiB, cfg.Argon2Time
	return p
}
