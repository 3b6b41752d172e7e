package http

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
)

// discovery is the subset of OpenID Connect Discovery 1.0 and RFC 8414
// (OAuth 2.0 Authorization Server Metadata) that applies to this service:
// it names only endpoints that exist, so that a standard OAuth or JWT
// library that trusts it finds the keys, the token endpoint and
// revocation.
type discovery struct {
	Issuer                                 string   `json:"issuer"`
	JWKSURI                                string   `json:"jwks_uri"`
	TokenEndpoint                          string   `json:"token_endpoint"`
	RevocationEndpoint                     string   `json:"revocation_endpoint"`
	UserinfoEndpoint                       string   `json:"userinfo_endpoint"`
	GrantTypesSupported                    []string `json:"grant_types_supported"`
	TokenEndpointAuthMethodsSupported      []string `json:"token_endpoint_auth_methods_supported"`
	RevocationEndpointAuthMethodsSupported []string `json:"revocation_endpoint_auth_methods_supported"`
	ScopesSupported                        []string `json:"scopes_supported"`
	IDTokenSigningAlgValuesSupported       []string `json:"id_token_signing_alg_values_supported"`
	ResponseTypesSupported                 []string `json:"response_types_supported"`
	SubjectTypesSupported                  []string `json:"subject_types_supported"`
	ClaimsSupported                        []string `json:"claims_supported"`

	AuthorizationEndpoint                      string   `json:"authorization_endpoint"`
	EndSessionEndpoint                         string   `json:"end_session_endpoint"`
	ResponseModesSupported                     []string `json:"response_modes_supported"`
	CodeChallengeMethodsSupported              []string `json:"code_challenge_methods_supported"`
	PromptValuesSupported                      []string `json:"prompt_values_supported"`
	AuthorizationResponseIssParameterSupported bool     `json:"authorization_response_iss_parameter_supported"`
}

// clientAuthMethods are the ways a client authenticates at the token and
// revocation endpoints: a confidential client with its secret, a public
// client with its client_id alone ("none").
var clientAuthMethods = []string{"client_secret_basic", "client_secret_post", "none"}

// handleJWKS serves the public keys; a failure (no keys yet) goes to
// problemFor.
func handleJWKS(keys token.KeyringProvider) echo.HandlerFunc {
	return func(c *echo.Context) error {
		return token.ServeJWKS(c.Response(), c.Request(), keys)
	}
}

func handleDiscovery(issuerURL string, keys token.KeyringProvider) echo.HandlerFunc {
	base := strings.TrimSuffix(issuerURL, "/")
	return func(c *echo.Context) error {
		c.Response().Header().Set("Cache-Control", "public, max-age=300")
		return c.JSON(http.StatusOK, discovery{
			Issuer:                                 issuerURL,
			JWKSURI:                                base + "/.well-known/jwks.json",
			TokenEndpoint:                          base + "/oauth2/token",
			RevocationEndpoint:                     base + "/oauth2/revoke",
			UserinfoEndpoint:                       base + "/userinfo",
			GrantTypesSupported:                    grantTypes,
			TokenEndpointAuthMethodsSupported:      clientAuthMethods,
			RevocationEndpointAuthMethodsSupported: clientAuthMethods,
			ScopesSupported:                        append([]string{"openid", "profile", "email", "offline_access"}, token.Scopes()...),
			IDTokenSigningAlgValuesSupported:       keys.Keyring().Algorithms(),
			ResponseTypesSupported:                 []string{"code"},
			SubjectTypesSupported:                  []string{"public"},
			ClaimsSupported: []string{"iss", "sub", "aud", "iat", "nbf", "exp", "jti", "token_use",
				"account_id", "account_name", "preferred_username", "name", "email", "email_verified", "auth_time", "sid", "azp", "client_id", "scope",
				"nonce", "amr"},
			AuthorizationEndpoint:                      base + pathAuthorize,
			EndSessionEndpoint:                         base + pathLogout,
			ResponseModesSupported:                     []string{"query"},
			CodeChallengeMethodsSupported:              []string{"S256"},
			PromptValuesSupported:                      []string{"none", "login"},
			AuthorizationResponseIssParameterSupported: true,
		})
	}
}
