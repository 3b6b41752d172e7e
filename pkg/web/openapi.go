package web

import (
	"net/http"

	"github.com/labstack/echo/v5"
)

// OpenAPI serves a service's embedded OpenAPI document at /openapi.yaml.
func OpenAPI(doc []byte) echo.HandlerFunc {
	return func(c *echo.Context) error {
		c.Response().Header().Set("Cache-Control", "public, max-age=300")
		return c.Blob(http.StatusOK, "application/yaml", doc)
	}
}
