// Package http serves the conversations API (Interface B) with Echo.
// routes.go lists every route; each handler is built by a function that
// takes exactly the dependencies it uses.
package http

import (
	"crypto/rand"
	_ "embed"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/conversations"
	"github.com/acme/platform/services/conversations/cursor"
	"github.com/acme/platform/services/conversations/webhook"
	"github.com/acme/platform/services/conversations/webhook/delivery"
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
	// Store is what the conversations.Service of the handlers keeps its
	// conversations in.
	Store    conversations.Store
	Cursors  *cursor.Codec
	Verifier *token.Verifier
	// DefaultPageSize and MaxPageSize bound limit (10 and 100, as the OpenAPI document says).
	DefaultPageSize int
	MaxPageSize     int
	// Webhooks manages the account's webhook endpoints; nil: one on
	// Store (which must then be a webhook.Store) with a key
	// of its own, for tests that do not look at secrets at rest, refusing
	// URLs as the default dialler does (no range allowed).
	Webhooks *webhook.Service
	// CORSOrigins are the origins whose web pages may call the API
	// (web.ParseCORSOrigins); empty: none.
	CORSOrigins []string
	// Hub fans the event logs out to this replica's live streams; nil: one
	// of the handler's own, on Store, with at most 10 streams per caller.
	Hub *conversations.Hub
	// Recorded is told of the events each change records, by account (the
	// relay's wake-up and the metric); nil: nobody.
	Recorded func(accountID string, n int)
	// Stream tunes the live streams; zero values: a comment every 15 s,
	// retry: 2 s.
	Stream StreamConfig
}

// DefaultMaxStreamsPerCaller is the contract's bound of open streams per
// caller (11.2).
const DefaultMaxStreamsPerCaller = 10

// NewHandler returns the API handler.
func NewHandler(d Deps) http.Handler {
	if d.DefaultPageSize <= 0 {
		d.DefaultPageSize = conversations.DefaultPageSize
	}
	if d.MaxPageSize <= 0 {
		d.MaxPageSize = conversations.MaxPageSize
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	e := web.New(web.Config{Logger: d.Logger, Metrics: d.Metrics, CORSOrigins: d.CORSOrigins, ProblemFor: problemFor})
	if d.Hub == nil {
		d.Hub = &conversations.Hub{Store: d.Store, MaxPerCaller: DefaultMaxStreamsPerCaller, Logger: d.Logger}
	}
	if d.Stream.KeepAlive <= 0 {
		d.Stream.KeepAlive = 15 * time.Second
	}
	if d.Stream.Retry <= 0 {
		d.Stream.Retry = 2 * time.Second
	}
	svc := &conversations.Service{Store: d.Store, Logger: d.Logger, Recorded: d.Recorded}
	wh := d.Webhooks
	if wh == nil {
		store, _ := d.Store.(webhook.Store)
		box, _ := webhook.NewSecretBox(randomKey())
		urls := webhook.URLPolicy{Dialable: delivery.NewDialer(nil, nil).Check}
		wh = &webhook.Service{Store: store, Events: d.Store, Box: box, URLs: urls}
	}
	addRoutes(e, d, svc, d.Hub, wh)
	return e
}

func randomKey() []byte {
	b := make([]byte, webhook.SecretBoxKeyLen)
	_, _ = rand.Read(b) // never fails since Go 1.24
	return b
}
