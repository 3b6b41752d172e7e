package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/mongodb"
	"github.com/acme/platform/pkg/servicecmd"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
	accounthttp "github.com/acme/platform/services/account/http"
	"github.com/acme/platform/services/account/mongo"
	"github.com/acme/platform/services/account/password"
)

// serve runs the service until ctx is cancelled (SIGTERM, Ctrl-C), then
// drains in-flight requests and closes the database connection. Indexes and
// signing keys are set up in the background, retried while MongoDB is
// unreachable (servicecmd.Service).
func serve(ctx context.Context, cfg config, logs io.Writer) error {
	logger := servicecmd.NewLogger(logs, cfg.LogLevel)

	client, disconnect, err := servicecmd.ConnectMongo(ctx, cfg.MongoDBURI, cfg.MongoDBTimeout)
	if err != nil {
		return err
	}
	defer disconnect()
	store := mongo.New(client.Database(cfg.MongoDBDatabase))

	hasher, err := password.New(password.Options{Params: passwordParams(cfg), Concurrency: cfg.HashConcurrency})
	if err != nil {
		return err
	}

	registry := servicecmd.NewRegistry()

	return servicecmd.Service{
		Name:     "account",
		Version:  version,
		Logger:   logger,
		APIAddr:  cfg.HTTPAddr,
		OpsAddr:  cfg.OpsAddr,
		Drain:    cfg.ShutdownTimeout,
		Registry: registry,
		Checks: map[string]web.Check{
			"mongodb": func(ctx context.Context) error { return mongodb.Ping(ctx, client) },
		},
		Init: func(ctx context.Context) (http.Handler, error) {
			if err := store.EnsureIndexes(ctx); err != nil {
				return nil, err
			}
			keys, err := loadKeyring(ctx, cfg, store)
			if err != nil {
				return nil, err
			}
			logger.Info("signing keys loaded", "kid", keys.Keyring().KeyID(), "issuer", cfg.Issuer)
			return newAPIHandler(cfg, logger, registry, store, hasher, keys)
		},
	}.Run(ctx)
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
		return nil, servicecmd.Permanent(err)
	}
	verifier, err := token.NewVerifier(token.KeyringKeySet(keys), token.VerifierConfig{
		Issuer:   cfg.Issuer,
		Audience: cfg.Audience,
	})
	if err != nil {
		return nil, servicecmd.Permanent(err)
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

// loadKeyring builds the signing keys: from the configured files (a mounted
// Secret) when there are any, else the key generated once and kept in
// MongoDB, so that replicas agree and restarts invalidate nothing.
func loadKeyring(ctx context.Context, cfg config, store account.SigningKeyStore) (token.KeyringProvider, error) {
	if files := nonEmpty(cfg.KeyFiles); len(files) > 0 {
		ring, err := keyringFromFiles(files, cfg.ActiveKeyID)
		if err != nil {
			return nil, servicecmd.Permanent(err)
		}
		return token.StaticKeyring(ring), nil
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
		return nil, servicecmd.Permanent(fmt.Errorf("stored signing key: %w", err))
	}
	ring, err := token.NewKeyring(key)
	if err != nil {
		return nil, servicecmd.Permanent(err)
	}
	return token.StaticKeyring(ring), nil
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

// nonEmpty drops blank entries, so that ACCOUNT_KEY_FILES="" (how an
// overlay switches key files off) means no files.
func nonEmpty(list []string) []string {
	var out []string
	for _, s := range list {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
