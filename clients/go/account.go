package client

import (
	"context"
	"encoding/json"
	"net/http"
	"time"
)

// Definition is an integration definition of the caller's account.
type Definition struct {
	ID   string `json:"id"`
	Name string `json:"name"`
	// Type is the kind of integration, e.g. "salesforce".
	Type string `json:"type"`
	// Config holds the settings of the integration, a JSON object whose
	// members depend on Type.
	Config    json.RawMessage `json:"config"`
	Enabled   bool            `json:"enabled"`
	CreatedAt time.Time       `json:"createdAt"`
	UpdatedAt time.Time       `json:"updatedAt"`
}

// ListDefinitions returns the integration definitions of the caller's
// account (GET /definitions): an empty slice when there are none.
func (c *Client) ListDefinitions(ctx context.Context) ([]Definition, error) {
	u, err := endpoint(c.accountURL, "/definitions")
	if err != nil {
		return nil, err
	}
	defs := []Definition{}
	if _, err := c.call(ctx, request{method: http.MethodGet, url: u}, nil, &defs); err != nil {
		return nil, err
	}
	if defs == nil { // a null body
		defs = []Definition{}
	}
	return defs, nil
}
