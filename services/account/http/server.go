// Package http serves the account service's API (Interface A) with Echo.
// routes.go lists every route; each handler is built by a function that
// takes exactly the dependencies it uses.
package http

import (
	_ "embed"
	"log/slog"
	"net/http"

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
	Issuer        *token.Issuer
	Verifier      *token.Verifier
	Keys          token.KeyringProvider
	// IssuerURL is the public base URL of this service (the tokens' iss).
	IssuerURL string
}

// NewHandler returns the API handler.
func NewHandler(d Deps) http.Handler {
	e := web.New(web.Config{Logger: d.Logger, Metrics: d.Metrics})
	addRoutes(e, d)
	return e
}
