package http

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/web"
	"github.com/acme/platform/services/conversations"
)

// decodeBody decodes the JSON body of c into dst like web.DecodeJSON and
// returns the bytes it read, for the idempotency fingerprint.
func decodeBody(c *echo.Context, maxBytes int64, dst any) ([]byte, error) {
	var raw bytes.Buffer
	r := c.Request()
	r.Body = struct {
		io.Reader
		io.Closer
	}{io.TeeReader(r.Body, &raw), r.Body}
	if err := web.DecodeJSON(c, maxBytes, dst); err != nil {
		return nil, err
	}
	return raw.Bytes(), nil
}

// idempotency is what the request says about its retries: its
// Idempotency-Key values and its fingerprint (conversations.Service
// decides what they mean).
func idempotency(c *echo.Context, body []byte) conversations.Idempotency {
	r := c.Request()
	return conversations.Idempotency{Keys: r.Header.Values("Idempotency-Key"), Fingerprint: fingerprint(r, body)}
}

// writeCreated sends the 201 of a POST that created v at location, with
// Idempotent-Replayed: true when v is what the first request with the
// Idempotency-Key created.
func writeCreated(c *echo.Context, location, etag string, v any, replayed bool) error {
	h := c.Response().Header()
	h.Set("Location", location)
	if etag != "" {
		h.Set("ETag", etag)
	}
	if replayed {
		h.Set("Idempotent-Replayed", "true")
	}
	return c.JSON(http.StatusCreated, v)
}

// fingerprint identifies a request for its idempotency key: method, path
// and the body without insignificant whitespace. The body was decoded
// already, so it is valid JSON.
func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	h.Write([]byte(r.Method + " " + r.URL.Path + "\n"))
	var compact bytes.Buffer
	if json.Compact(&compact, body) == nil {
		body = compact.Bytes()
	}
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}
