package web

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"github.com/labstack/echo/v5"
)

// HeaderRequestID carries the request id in both directions.
const HeaderRequestID = "X-Request-ID"

type requestIDKey struct{}

// RequestID takes the caller's X-Request-ID when it is a sane token, or makes
// one, echoes it in the response and puts it in the request context so that
// every log line of the request can carry it.
func RequestID() echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			id := c.Request().Header.Get(HeaderRequestID)
			if !validRequestID(id) {
				id = newRequestID()
			}
			c.Response().Header().Set(HeaderRequestID, id)
			r := c.Request()
			c.SetRequest(r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
			return next(c)
		}
	}
}

// RequestIDFrom returns the request id stored by RequestID, or "".
func RequestIDFrom(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// validRequestID accepts ids a caller may reasonably send (UUIDs, trace ids)
// and refuses anything that could forge or bloat log lines.
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '-' || r == '_' || r == '.' || r == ':'
		if !ok {
			return false
		}
	}
	return true
}

func newRequestID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return hex.EncodeToString(b[:])
}
