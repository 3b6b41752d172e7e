// Package oidcinterop proves that a standard OpenID Connect library,
// openid-client (npm, with its oauth4webapi), accepts what the account
// service's OAuth 2.0 endpoints answer, and that a user can sign in in a
// browser: it starts the account and conversations binaries on a fresh
// database (the embedded store, or MONGODB_URI), seeds one account with a
// user, a confidential client and public clients (with the account
// binary's own subcommands), serves make run's demo app
// (deploy/devstack/demoapp) on a port of its own, and runs test/*.test.js
// with node --test against them.
//
// test/codeflow.test.js runs the authorization code flow with PKCE through
// openid-client, submitting the sign-in page's form as a browser would, and
// checks access tokens with oauth4webapi's validateJwtAccessToken.
// test/browser.test.js drives one headless Chromium (Debian's, through
// playwright-core): the demo app's sign-in, single sign-on for a second
// app, prompt=login, the page checked by axe-core and refused in a frame,
// and logout. The library validates the
// id tokens itself (iss, aud, azp, exp, iat, and the signature against the
// JWKS of discovery); the suite checks discovery, the password grant with
// account_name, refresh, revocation and client credentials, and that the
// conversations service accepts the id tokens it gets. Both clients are
// allowed the password grant by the operator (create-client
// --allow-password-grant), since new clients do not get it.
//
// TestGoOIDCAuthorizationCodeFlow runs the authorization code flow with
// PKCE with golang.org/x/oauth2 and github.com/coreos/go-oidc/v3 against
// the same binaries: the sign-in page submitted as a browser submits it,
// the id token validated by go-oidc, userinfo, refresh, single sign-on
// and RP-Initiated Logout.
//
//	go test ./deploy/oidcinterop/     # make test runs it
//
// The dependencies are locked in package-lock.json and installed with npm
// ci (from the npm registry, or npm's cache when offline). Node 20 or
// later, npm and Chromium are needed; a missing one fails the test with
// the Debian package that provides it, it never skips.
//
// # The environment of the suite
//
//	OIDC_TEST_ISSUER              the account service's issuer URL (its base URL), for discovery
//	OIDC_TEST_AUDIENCE            the platform audience every token carries
//	OIDC_TEST_CONVERSATIONS_URL   base URL of the conversations service
//	OIDC_TEST_ACCOUNT_NAME        the account …
//	OIDC_TEST_USERNAME            … a user of it …
//	OIDC_TEST_PASSWORD            … and the user's password
//	OIDC_TEST_MFA_USERNAME        a second user, who enrols a second factor in the browser suite …
//	OIDC_TEST_MFA_PASSWORD        … and their password
//	OIDC_TEST_CLIENT_ID           a confidential client of the account (every scope, the password grant allowed) …
//	OIDC_TEST_CLIENT_SECRET       … and its secret
//	OIDC_TEST_PUBLIC_CLIENT_ID    a public client of the account, the password grant allowed (account create-client --public --allow-password-grant)
//	OIDC_TEST_APP_CLIENT_ID       a second public client (a web app on the demo app's server) …
//	OIDC_TEST_APP_REDIRECT_URI    … its redirect URI …
//	OIDC_TEST_APP_POST_LOGOUT_URI … and its post-logout redirect URI
//	OIDC_TEST_DEMO_APP_URL        the demo app (its own public client)
//	CHROMIUM_PATH                 the Chromium to drive (default: chromium on PATH)
package oidcinterop
