package http

import (
	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
)

// addRoutes is the one list of every route of the API.
func addRoutes(e *echo.Echo, d Deps) {
	bearer := token.Middleware(d.Verifier)

	e.GET("/v1/conversations", handleList(d.Store, d.Cursors, d.DefaultPageSize, d.MaxPageSize), bearer)
	e.POST("/v1/conversations", handleCreate(d.Store), bearer)
	e.GET("/v1/conversations/:id", handleGet(d.Store), bearer)

	e.GET("/openapi.yaml", web.OpenAPI(OpenAPI))
}
