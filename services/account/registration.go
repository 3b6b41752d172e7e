package account

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"
)

// Grant types a client may be allowed (RFC 6749, OpenID Connect Core).
const (
	GrantAuthorizationCode = "authorization_code"
	GrantRefreshToken      = "refresh_token"
	GrantClientCredentials = "client_credentials"
	GrantPassword          = "password"
)

// ErrInvalidRegistration refuses a redirect URI or grant an operator
// gave; the wrapping error says which and why.
var ErrInvalidRegistration = errors.New("invalid client registration")

// MaxRedirectURIs bounds each list of a client's redirect URIs, and
// MaxRedirectURILen each URI.
const (
	MaxRedirectURIs   = 20
	MaxRedirectURILen = 2000
)

// DefaultGrants are the grants of a new client: a public client signs its
// users in with authorization_code and keeps them with refresh_token; a
// confidential one may also use client_credentials. The password grant
// (RFC 9700 section 2.4: must not be used) only when the operator asks.
func DefaultGrants(public, password bool) []string {
	g := []string{GrantAuthorizationCode, GrantRefreshToken}
	if !public {
		g = append(g, GrantClientCredentials)
	}
	if password {
		g = append(g, GrantPassword)
	}
	slices.Sort(g)
	return g
}

// LegacyGrants are the grants of a client stored before grants were
// recorded: what it could do then (public: password and refresh_token;
// confidential: client_credentials too), plus authorization_code, which
// needs redirect URIs it does not have until an operator adds them.
func LegacyGrants(public bool) []string { return DefaultGrants(public, true) }

// AllowsGrant reports whether the client may use grant.
func (c ServiceClient) AllowsGrant(grant string) bool {
	grants := c.Grants
	if grants == nil {
		grants = LegacyGrants(c.Public)
	}
	return slices.Contains(grants, grant)
}

// ClientRegistration is what an operator sets of a client besides its
// name and scopes: its grants and redirect URIs.
type ClientRegistration struct {
	Grants                 []string
	RedirectURIs           []string
	PostLogoutRedirectURIs []string
}

// CheckRegistration validates r for a client (public or not) and returns
// it normalized: grants sorted and distinct (client_credentials is
// refused for a public client), URIs distinct in the order given, each
// one ValidRedirectURI.
func CheckRegistration(r ClientRegistration, public bool) (ClientRegistration, error) {
	out := ClientRegistration{Grants: []string{}, RedirectURIs: []string{}, PostLogoutRedirectURIs: []string{}}
	for _, g := range r.Grants {
		switch g {
		case GrantAuthorizationCode, GrantRefreshToken, GrantPassword:
		case GrantClientCredentials:
			if public {
				return ClientRegistration{}, fmt.Errorf("a public client cannot use client_credentials: %w", ErrInvalidRegistration)
			}
		default:
			return ClientRegistration{}, fmt.Errorf("unknown grant %q: %w", g, ErrInvalidRegistration)
		}
		out.Grants = append(out.Grants, g)
	}
	slices.Sort(out.Grants)
	out.Grants = slices.Compact(out.Grants)
	if len(out.Grants) == 0 {
		// Stored, no grant would read as a client of before grants.
		return ClientRegistration{}, fmt.Errorf("a client needs at least one grant (disable-client stops it): %w", ErrInvalidRegistration)
	}
	for _, list := range []struct {
		in  []string
		out *[]string
	}{{r.RedirectURIs, &out.RedirectURIs}, {r.PostLogoutRedirectURIs, &out.PostLogoutRedirectURIs}} {
		for _, u := range list.in {
			if err := ValidRedirectURI(u); err != nil {
				return ClientRegistration{}, err
			}
			if !slices.Contains(*list.out, u) {
				*list.out = append(*list.out, u)
			}
		}
		if len(*list.out) > MaxRedirectURIs {
			return ClientRegistration{}, fmt.Errorf("at most %d redirect URIs: %w", MaxRedirectURIs, ErrInvalidRegistration)
		}
	}
	return out, nil
}

// ValidRedirectURI checks a redirect URI an operator registers: absolute,
// no fragment, no wildcard, no user information; https, or http for a
// loopback address only (RFC 8252 section 7.3: any port will match), or a
// private-use scheme of a native app (RFC 8252 section 7.1: a reverse
// domain name such as com.example.app, so it contains a dot).
func ValidRedirectURI(raw string) error {
	bad := func(why string) error {
		return fmt.Errorf("redirect URI %q %s: %w", raw, why, ErrInvalidRegistration)
	}
	if raw == "" || len(raw) > MaxRedirectURILen {
		return bad(fmt.Sprintf("must have 1 to %d characters", MaxRedirectURILen))
	}
	if strings.ContainsAny(raw, "#*") {
		return bad("must have neither a fragment nor a wildcard")
	}
	for _, r := range raw {
		if r <= ' ' || r == 0x7f || r > 0x7e {
			return bad("must be printable ASCII without spaces")
		}
	}
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" {
		return bad("must be an absolute URI")
	}
	if u.User != nil {
		return bad("must not carry user information")
	}
	switch scheme := strings.ToLower(u.Scheme); {
	case scheme == "https":
		if u.Host == "" {
			return bad("must name a host")
		}
	case scheme == "http":
		if !isLoopbackHost(u.Hostname()) {
			return bad("may use http only for a loopback address (127.0.0.1 or [::1])")
		}
	case strings.Contains(scheme, "."):
		// A private-use scheme (com.example.app:/callback).
	default:
		return bad("must use https, http on a loopback address, or a private-use scheme such as com.example.app")
	}
	return nil
}

// isLoopbackHost reports whether host is a loopback IP literal. The name
// localhost is not: RFC 8252 section 8.3 advises against it (it may
// resolve elsewhere).
func isLoopbackHost(host string) bool {
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// RedirectURIMatches reports whether presented is one of registered: the
// same string exactly, except that for a registered http URI on a
// loopback address any port matches (RFC 8252 section 7.3: a native app
// listens on a port the system gives it).
func RedirectURIMatches(registered []string, presented string) bool {
	if slices.Contains(registered, presented) {
		return true
	}
	p, err := url.Parse(presented)
	if err != nil || p.Scheme != "http" || !isLoopbackHost(p.Hostname()) {
		return false
	}
	for _, r := range registered {
		u, err := url.Parse(r)
		if err != nil || u.Scheme != "http" || !isLoopbackHost(u.Hostname()) {
			continue
		}
		if u.Hostname() == p.Hostname() && u.EscapedPath() == p.EscapedPath() && u.RawQuery == p.RawQuery &&
			!p.ForceQuery && !u.ForceQuery && p.Fragment == "" && p.User == nil && samePortForm(u, p) {
			return true
		}
	}
	return false
}

// samePortForm reports whether the two loopback URIs, which may differ in
// their port, are otherwise spelt alike: the host part of each up to the
// port is the same string.
func samePortForm(a, b *url.URL) bool {
	return strings.TrimSuffix(a.Host, ":"+a.Port()) == strings.TrimSuffix(b.Host, ":"+b.Port())
}

// UpdateClientRegistration sets the grants and redirect URIs of a client
// of an account (the operator's update-client), after CheckRegistration.
func UpdateClientRegistration(ctx context.Context, clients ClientStore, accountID, clientID string, r ClientRegistration) (ClientRegistration, error) {
	c, err := clients.ClientByID(ctx, clientID)
	if err == nil && c.AccountID != accountID {
		err = fmt.Errorf("client %q: %w", clientID, ErrNotFound)
	}
	if err != nil {
		return ClientRegistration{}, fmt.Errorf("update client: %w", err)
	}
	r, err = CheckRegistration(r, c.Public)
	if err != nil {
		return ClientRegistration{}, err
	}
	if err := clients.UpdateClientRegistration(ctx, accountID, clientID, r); err != nil {
		return ClientRegistration{}, fmt.Errorf("update client: %w", err)
	}
	return r, nil
}

// Registration returns the client's grants (LegacyGrants when none were
// recorded) and redirect URIs.
func (c ServiceClient) Registration() ClientRegistration {
	grants := c.Grants
	if grants == nil {
		grants = LegacyGrants(c.Public)
	}
	return ClientRegistration{Grants: slices.Clone(grants), RedirectURIs: slices.Clone(c.RedirectURIs),
		PostLogoutRedirectURIs: slices.Clone(c.PostLogoutRedirectURIs)}
}
