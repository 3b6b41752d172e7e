package http

import (
	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
	"github.com/acme/platform/pkg/web"
)

// addRoutes is the one list of every route of the API.
func addRoutes(e *echo.Echo, d Deps) {
	bearer := token.Middleware(d.Verifier)
	read, write := token.RequireScope(token.ScopeDefinitionsRead), token.RequireScope(token.ScopeDefinitionsWrite)
	counts := newAuthMetrics(d.Metrics)

	e.POST("/login", handleLogin(d.Sessions), counts.countLogins, singleAuthorization)
	e.POST("/token/refresh", handleRefresh(d.Sessions), counts.countRefreshes, singleAuthorization)
	e.POST("/logout", handleLogout(d.Sessions), singleAuthorization)
	e.POST("/oauth2/token", handleToken(d.Sessions, d.Authorizations), counts.countGrants)
	e.POST("/oauth2/revoke", handleRevoke(d.Sessions))

	// Sign-in for apps: pages for a browser, not JSON (docs/signin.md).
	signIn := signInDeps{authz: d.Authorizations, cookies: newBrowserCookies(d.IssuerURL), metrics: counts}
	e.GET(pathAuthorize, signIn.handleAuthorize, singleAuthorization)
	e.POST(pathSignIn, signIn.handleSignIn, singleAuthorization)
	e.GET(pathLogout, signIn.handleLogout, singleAuthorization)
	e.POST(pathLogout, signIn.handleLogout, singleAuthorization)
	e.GET(pathStylesheet, handleStylesheet)

	e.GET("/definitions", handleListDefinitions(d.Definitions), bearer, read)
	e.POST("/definitions", handleCreateDefinition(d.Definitions), bearer, write)
	e.GET("/definitions/:id", handleGetDefinition(d.Definitions), bearer, read)
	e.PUT("/definitions/:id", handleReplaceDefinition(d.Definitions), bearer, write)
	e.DELETE("/definitions/:id", handleDeleteDefinition(d.Definitions), bearer, write)

	// Users: a service client's, by scope; a user's own token is refused.
	// /userinfo and /password are the user's.
	usersRead, usersWrite := token.RequireClientScopes(token.ScopeUsersRead), token.RequireClientScopes(token.ScopeUsersWrite)
	e.POST("/users", handleCreateUser(d.Users), bearer, usersWrite)
	e.GET("/users", handleListUsers(d.Users), bearer, usersRead)
	e.GET("/users/:id", handleGetUser(d.Users), bearer, usersRead)
	e.PATCH("/users/:id", handlePatchUser(d.Users), bearer, usersWrite)
	e.PUT("/users/:id/password", handleSetUserPassword(d.Users), bearer, usersWrite)
	e.DELETE("/users/:id", handleDeleteUser(d.Users), bearer, usersWrite)
	e.DELETE("/users/:id/mfa", handleResetUserMFA(d.MFA), bearer, usersWrite)
	e.GET("/userinfo", handleUserInfo(d.Users), bearer, token.RequireUser)
	e.POST("/userinfo", handleUserInfo(d.Users), bearer, token.RequireUser)
	e.POST("/password", handleChangePassword(d.Sessions), bearer, token.RequireUser)
	e.POST("/mfa/totp", handleBeginTOTP(d.MFA), bearer, token.RequireUser)
	e.POST("/mfa/totp/verify", handleActivateTOTP(d.MFA), bearer, token.RequireUser)
	e.DELETE("/mfa/totp", handleRemoveTOTP(d.MFA), bearer, token.RequireUser)

	e.GET("/.well-known/jwks.json", handleJWKS(d.Keys))
	e.GET("/.well-known/openid-configuration", handleDiscovery(d.IssuerURL, d.Keys))
	e.GET("/openapi.yaml", web.OpenAPI(OpenAPI))
}

// singleAuthorization refuses a request with more than one Authorization
// header on the routes that take their credentials in the body (the bearer
// middleware and the OAuth 2.0 endpoints refuse it themselves): an
// ambiguous request never authenticates, whatever the body holds.
func singleAuthorization(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c *echo.Context) error {
		if len(c.Request().Header.Values("Authorization")) > 1 {
			return errTwoAuthorizationHeaders
		}
		return next(c)
	}
}
