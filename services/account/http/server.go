// Package http serves the account service's API (Interface A) with Echo.
// routes.go lists every route; each handler is built by a function that
// takes exactly the dependencies it uses.
package http

import (
	_ "embed"
	"log/slog"
	"net/http"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/account"
)

// OpenAPI is the service's OpenAPI 3.1 document, served at /openapi.yaml and
// validated against real responses in the tests.
//
//go:embed openapi.yaml
var OpenAPI []byte

// Deps are what the handlers need.
type Deps struct {
	Logger        *slog.Logger
	Metrics       prometheus.Registerer
	Authenticator account.Authenticator
	Definitions   account.DefinitionStore
	Sessions      account.SessionStore
	Issuer        *token.Issuer
	// Verifier checks bearer tokens (id and access); RefreshVerifier checks
	// the refresh tokens sent to /token/refresh and /logout.
	Verifier        *token.Verifier
	RefreshVerifier *token.Verifier
	Keys            token.KeyringProvider
	// IssuerURL is the public base URL of this service (the tokens' iss).
	IssuerURL string
	// Throttle limits failed logins; nil disables throttling.
	Throttle *account.LoginThrottle
	// TrustedProxies are the reverse proxies whose X-Forwarded-For gives
	// the client address (web.ClientIP); empty: the TCP peer.
	TrustedProxies []netip.Prefix
}

// NewHandler returns the API handler.
func NewHandler(d Deps) http.Handler {
	e := web.New(web.Config{Logger: d.Logger, Metrics: d.Metrics, TrustedProxies: d.TrustedProxies})
	addRoutes(e, d)
	return e
}
