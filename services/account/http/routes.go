package http

import (
	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
)

// addRoutes is the one list of every route of the API.
func addRoutes(e *echo.Echo, d Deps) {
	bearer := token.Middleware(d.Verifier)
	counts := newAuthMetrics(d.Metrics)

	e.POST("/login", handleLogin(d.Authenticator, d.Throttle, d.Sessions, d.Issuer), counts.countLogins)
	e.POST("/token/refresh", handleRefresh(d.RefreshVerifier, d.Authenticator.Users, d.Sessions, d.Issuer), counts.countRefreshes)
	e.POST("/logout", handleLogout(d.RefreshVerifier, d.Sessions))

	e.GET("/definitions", handleListDefinitions(d.Definitions), bearer)
	e.POST("/definitions", handleCreateDefinition(d.Definitions), bearer)
	e.GET("/definitions/:id", handleGetDefinition(d.Definitions), bearer)
	e.PUT("/definitions/:id", handleReplaceDefinition(d.Definitions), bearer)
	e.DELETE("/definitions/:id", handleDeleteDefinition(d.Definitions), bearer)

	e.GET("/.well-known/jwks.json", echo.WrapHandler(token.JWKSHandler(d.Keys)))
	e.GET("/.well-known/openid-configuration", handleDiscovery(d.IssuerURL, d.Keys))
	e.GET("/openapi.yaml", web.OpenAPI(OpenAPI))
}
