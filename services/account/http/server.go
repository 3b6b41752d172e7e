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
	Logger  *slog.Logger
	Metrics prometheus.Registerer
	// Sessions logs in, refreshes, logs out and issues client tokens: the
	// one implementation behind /login, /token/refresh, /logout and the
	// OAuth 2.0 endpoints.
	Sessions *account.Sessions
	// Authorizations is the authorization code flow: the authorization
	// endpoint, the sign-in page, the code grant and logout.
	Authorizations *account.Authorizations
	Definitions    account.DefinitionStore
	// Users manages the users of the caller's account and answers
	// /userinfo.
	Users *account.Users
	// MFA enrols, checks and removes users' second factors.
	MFA *account.MFA
	// Verifier checks bearer tokens (id and access).
	Verifier *token.Verifier
	Keys     token.KeyringProvider
	// IssuerURL is the public base URL of this service (the tokens' iss).
	IssuerURL string
	// TrustedProxies are the reverse proxies whose X-Forwarded-For gives
	// the client address (web.ClientIP); empty: the TCP peer.
	TrustedProxies []netip.Prefix
	// CORSOrigins are the origins allowed to call the API from a browser
	// (web.ParseCORSOrigins); empty: none.
	CORSOrigins []string
}

// NewHandler returns the API handler.
func NewHandler(d Deps) http.Handler {
	e := web.New(web.Config{Logger: d.Logger, Metrics: d.Metrics, TrustedProxies: d.TrustedProxies, CORSOrigins: d.CORSOrigins, ProblemFor: problemFor})
	addRoutes(e, d)
	return e
}
