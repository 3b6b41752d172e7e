package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/secretbox"
	"github.com/acme/platform/pkg/servicecmd"
	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
	accounthttp "github.com/acme/platform/services/account/http"
	"github.com/acme/platform/services/account/mongostore"
	"github.com/acme/platform/services/account/password"
	"github.com/acme/platform/services/account/signing"
)

// serve runs the service until ctx is cancelled (SIGTERM, Ctrl-C), then
// drains in-flight requests and closes the database connection.
//
// Everything the configuration decides (key files, trusted proxies, token
// settings, the handler itself) is built before anything listens, so a
// mistake in it ends the process at once with its message. Only what
// lives in MongoDB (indexes, generated signing keys) is set up in the
// background, retried while MongoDB is unreachable (servicecmd.Service).
func serve(ctx context.Context, cfg config, logs io.Writer) error {
	logger := servicecmd.NewLogger(logs, cfg.LogLevel)

	registry := servicecmd.NewRegistry()
	db, err := servicecmd.DialMongo(cfg.MongoDBURI, cfg.MongoDBTimeout, registry)
	if err != nil {
		return err
	}
	defer db.Close()
	store := mongostore.New(db.Client.Database(cfg.MongoDBDatabase))

	hasher, err := password.New(password.Options{Params: passwordParams(cfg), Concurrency: cfg.HashConcurrency, Metrics: registry})
	if err != nil {
		return err
	}
	keys, syncKeys, err := newKeyring(cfg, store, logger)
	if err != nil {
		return err
	}
	handler, mfa, err := newAPIHandler(cfg, logger, registry, store, hasher, keys)
	if err != nil {
		return err
	}

	// Background work (purges, key rotation) ends with the service's
	// context; wait for it before disconnecting.
	// serve cancels it itself on return, also when Run fails early, so
	// that the Wait below cannot block on a context nobody cancels.
	var background sync.WaitGroup
	defer background.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	background.Go(func() { servicecmd.PurgeEvery(ctx, logger, time.Hour, "expired sessions", store.PurgeExpiredSessions) })
	background.Go(func() {
		servicecmd.PurgeEvery(ctx, logger, time.Hour, "login throttle counters", store.PurgeLoginThrottle)
	})
	background.Go(func() {
		servicecmd.PurgeEvery(ctx, logger, time.Hour, "expired browser sessions", store.PurgeExpiredBrowserSessions)
	})
	background.Go(func() {
		servicecmd.PurgeEvery(ctx, logger, time.Hour, "expired pending sign-ins", store.PurgePendingSignIns)
	})
	background.Go(func() {
		// Spent codes stay a day past their expiry, so that a replay still
		// finds its code and ends the session it started.
		servicecmd.PurgeEvery(ctx, logger, time.Hour, "expired authorization codes", func(ctx context.Context, now time.Time) (int64, error) {
			return store.PurgeAuthCodes(ctx, now.Add(-account.SpentCodeRetention))
		})
	})

	return cfg.Config.Configure(servicecmd.Service{
		Name:     "account",
		Version:  version,
		Logger:   logger,
		APIAddr:  cfg.HTTPAddr,
		OpsAddr:  cfg.OpsAddr,
		Registry: registry,
		Checks: map[string]web.Check{
			"mongodb": db.Ready,
		},
		Init: func(ctx context.Context) (http.Handler, error) {
			if err := servicecmd.EnsureIndexes(ctx, cfg.MongoDBTimeout, store.EnsureIndexes); err != nil {
				return nil, err
			}
			if mfa.Box, err = mfaSecretBox(ctx, cfg, store, logger); err != nil {
				return nil, err
			}
			if syncKeys != nil {
				if err := syncKeys.Sync(ctx); err != nil {
					return nil, err
				}
				background.Go(func() { syncKeys.Run(ctx) })
			}
			logger.Info("signing keys loaded", "kid", keys.Keyring().KeyID(), "issuer", cfg.Issuer)
			return handler, nil
		},
	}).Run(ctx)
}

// mfaSecretBox is the box of the users' TOTP secrets: under the configured
// key, else under one generated into MongoDB (development only), as the
// conversations service keeps its webhook secrets' key.
func mfaSecretBox(ctx context.Context, cfg config, store *mongostore.Store, logger *slog.Logger) (*secretbox.Box, error) {
	key, err := secretbox.ParseKey(cfg.MFASecretKey)
	if err != nil {
		return nil, err
	}
	if key == nil {
		logger.Warn("ACCOUNT_MFA_SECRET_KEY is not set: TOTP secrets are encrypted under a key kept in MongoDB beside them; set it in production")
		if key, err = secretbox.StoredKey(ctx, store, "mfa_secret_key"); err != nil {
			return nil, err
		}
	}
	return secretbox.New(key)
}

// newAPIHandler wires the API. It reads nothing from the database, so it
// runs before the service listens and fails only on configuration; the
// second factor's box is set by the caller before the first request
// (mfaSecretBox), since its key may come from the database.
func newAPIHandler(cfg config, logger *slog.Logger, registry prometheus.Registerer, store *mongostore.Store,
	hasher *password.Hasher, keys token.KeyringProvider) (http.Handler, *account.MFA, error) {
	issuer, err := token.NewIssuer(token.IssuerConfig{
		Issuer:     cfg.Issuer,
		Audience:   cfg.Audience,
		Keys:       keys,
		TokenTTL:   cfg.TokenTTL,
		RefreshTTL: cfg.RefreshTTL,

		FirstPartyClientID: cfg.FirstPartyClientID,
	})
	if err != nil {
		return nil, nil, err
	}
	verifier, err := token.NewVerifier(token.KeyringKeySet(keys), token.VerifierConfig{
		Issuer:   cfg.Issuer,
		Audience: cfg.Audience,
	})
	if err != nil {
		return nil, nil, err
	}
	refreshVerifier, err := token.NewVerifier(token.KeyringKeySet(keys), token.VerifierConfig{
		Issuer:   cfg.Issuer,
		Audience: cfg.Audience,
		Uses:     []token.Use{token.UseRefresh},
	})
	if err != nil {
		return nil, nil, err
	}
	proxies, err := trustedProxies(cfg)
	if err != nil {
		return nil, nil, err
	}
	throttle := &account.LoginThrottle{Store: store, Policy: loginPolicy(cfg)}
	policy, err := account.LoadPasswordPolicy()
	if err != nil {
		return nil, nil, err
	}
	users := &account.Users{Store: store, Sessions: store, Throttle: store, Hasher: hasher, Policy: policy}
	mfa := &account.MFA{Store: store, Users: store, Sessions: store, Issuer: cmp.Or(strings.TrimSpace(cfg.TOTPIssuer), "Acme Platform"), Hasher: hasher, Throttle: throttle}
	sessions := &account.Sessions{
		Authenticator: account.Authenticator{Accounts: store, Users: store, Hasher: hasher},
		Throttle:      throttle,
		Clients:       account.ClientAuthenticator{Clients: store, Throttle: throttle, Cache: account.NewClientCache(cfg.ClientAuthCacheTTL, 0)},
		Store:         store,
		Issuer:        issuer,
		RefreshTokens: refreshVerifier,
		ReuseGrace:    cfg.RefreshReuseGrace,
		Users:         users,
		MFA:           mfa,
	}
	return accounthttp.NewHandler(accounthttp.Deps{
		Logger:   logger,
		Metrics:  registry,
		Users:    users,
		Sessions: sessions,
		Authorizations: &account.Authorizations{
			Sessions: sessions, Clients: store, ClientCache: account.NewClientCache(cfg.ClientAuthCacheTTL, 0),
			Browser: store, Codes: store, IDTokens: verifier, Issuer: cfg.Issuer, BrowserSessionTTL: cfg.BrowserSessionTTL,
		},
		MFA:            mfa,
		Definitions:    store,
		Verifier:       verifier,
		Keys:           keys,
		IssuerURL:      cfg.Issuer,
		TrustedProxies: proxies,
		CORSOrigins:    cfg.CORSOrigins,
	}), mfa, nil
}

// newKeyring builds the signing keys: from the configured files (a mounted
// Secret) when there are any, static; else the keys generated and kept in
// MongoDB, so that replicas agree and restarts invalidate nothing. Those
// are returned as generated too: Sync loads them (in the background, from
// the database) and Run keeps them up to date. Nothing here reads the
// database.
func newKeyring(cfg config, store account.SigningKeyStore, logger *slog.Logger) (token.KeyringProvider, *signing.Manager, error) {
	if files := nonEmpty(cfg.KeyFiles); len(files) > 0 {
		ring, err := keyringFromFiles(files, cfg.ActiveKeyID)
		if err != nil {
			return nil, nil, err
		}
		return token.StaticKeyring(ring), nil, nil
	}
	keys, err := signing.New(signing.Options{
		Store:         store,
		Alg:           cfg.SigningAlg,
		Period:        cfg.KeyRotationPeriod,
		PublishAhead:  cfg.KeyPublishAhead,
		CheckInterval: cfg.KeyCheckInterval,
		Retain:        keyRetention(cfg),
		Logger:        logger,
	})
	if err != nil {
		return nil, nil, err
	}
	return keys, keys, nil
}

// keyRetention is how long a generated key stays published after it stopped
// signing: the longest token lifetime plus the largest leeway a verifier
// may allow.
func keyRetention(cfg config) time.Duration {
	tokenTTL, refreshTTL := cfg.TokenTTL, cfg.RefreshTTL
	if tokenTTL <= 0 {
		tokenTTL = token.DefaultTokenTTL
	}
	if refreshTTL <= 0 {
		refreshTTL = token.DefaultRefreshTTL
	}
	return max(tokenTTL, refreshTTL) + token.MaxLeeway
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
