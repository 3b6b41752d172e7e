package web

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/labstack/echo/v5"
)

// CORS: web pages of the origins an operator lists may
// call the API from a browser. The API authenticates with the Authorization
// header, never with cookies, so no response ever allows credentials, and
// "*" (any origin) is safe to configure: a page of another origin gets
// nothing it could not get with curl.
const (
	// corsAllowMethods are the methods the API uses. A preflight is answered
	// for any path: the request that follows gets the route's own answer
	// (404, 405), which the page can then read.
	corsAllowMethods = "GET, HEAD, POST, PUT, PATCH, DELETE"
	// corsAllowHeaders are the request headers the API reads beyond the
	// CORS-safelisted ones.
	// Last-Event-ID is how a reconnecting event stream resumes.
	corsAllowHeaders = "Authorization, Content-Type, If-Match, Idempotency-Key, Last-Event-ID"
	// corsExposeHeaders are the response headers a client must read: paging,
	// optimistic concurrency, created resources (and whether the answer is
	// a replay of an idempotent request), back-off and support.
	corsExposeHeaders = "Link, ETag, Location, Idempotent-Replayed, Retry-After, X-Request-ID"
	// corsMaxAge is how long, in seconds, a browser may reuse a preflight.
	corsMaxAge = "600"
	// AnyOrigin allows every origin.
	AnyOrigin = "*"
)

// ParseCORSOrigins checks the origins CORS is configured with and returns
// them in the form browsers send in the Origin header: "scheme://host" or
// "scheme://host:port", lower case, without a default port or a trailing
// slash. AnyOrigin ("*") must be the only entry. An empty list allows no
// origin: CORS is off.
func ParseCORSOrigins(origins []string) ([]string, error) {
	var out []string
	for _, o := range origins {
		o = strings.TrimSpace(o)
		if o == "" {
			continue
		}
		if o == AnyOrigin {
			if len(origins) > 1 {
				return nil, errors.New(`CORS origins: "*" allows every origin and must be the only entry`)
			}
			return []string{AnyOrigin}, nil
		}
		norm, err := parseOrigin(o)
		if err != nil {
			return nil, fmt.Errorf("CORS origin %q: %w", o, err)
		}
		out = append(out, norm)
	}
	return out, nil
}

// parseOrigin normalises one configured origin (RFC 6454 serialisation).
func parseOrigin(s string) (string, error) {
	u, err := url.Parse(s)
	if err != nil {
		return "", err
	}
	scheme := strings.ToLower(u.Scheme)
	switch {
	case scheme != "http" && scheme != "https":
		return "", errors.New("want http:// or https://")
	case u.Host == "" || u.Hostname() == "":
		return "", errors.New("no host")
	case u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return "", errors.New("an origin is scheme://host[:port], without user, path, query or fragment")
	}
	host := strings.ToLower(u.Host)
	if port := u.Port(); (scheme == "http" && port == "80") || (scheme == "https" && port == "443") {
		host = strings.TrimSuffix(host, ":"+port)
	}
	return scheme + "://" + host, nil
}

// cors returns the middleware that answers preflights and marks the
// responses of the allowed origins; origins come from ParseCORSOrigins. A
// request without Origin, or from an origin not allowed, passes through
// untouched: it gets no CORS header (the browser then withholds the
// response from the page) and its preflight is not answered by this
// middleware, so it changes nothing.
func cors(origins []string) echo.MiddlewareFunc {
	anyOrigin := len(origins) == 1 && origins[0] == AnyOrigin
	allowed := make(map[string]bool, len(origins))
	for _, o := range origins {
		allowed[o] = true
	}
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c *echo.Context) error {
			h := c.Response().Header()
			if !anyOrigin {
				// The answer depends on Origin: caches must keep them apart.
				h.Add(echo.HeaderVary, echo.HeaderOrigin)
			}
			r := c.Request()
			origin := r.Header.Get(echo.HeaderOrigin)
			if origin == "" || !anyOrigin && !allowed[strings.ToLower(origin)] {
				return next(c)
			}
			allowOrigin := origin
			if anyOrigin {
				allowOrigin = AnyOrigin
			}
			h.Set(echo.HeaderAccessControlAllowOrigin, allowOrigin)
			if r.Method == http.MethodOptions && r.Header.Get(echo.HeaderAccessControlRequestMethod) != "" {
				h.Set(echo.HeaderAccessControlAllowMethods, corsAllowMethods)
				h.Set(echo.HeaderAccessControlAllowHeaders, corsAllowHeaders)
				h.Set(echo.HeaderAccessControlMaxAge, corsMaxAge)
				return c.NoContent(http.StatusNoContent)
			}
			h.Set(echo.HeaderAccessControlExposeHeaders, corsExposeHeaders)
			return next(c)
		}
	}
}
