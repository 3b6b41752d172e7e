package http

import (
	"net/http"
	"strings"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/token"
)

// discovery is the subset of OpenID Connect Discovery 1.0 that applies to
// this service, so that standard JWT libraries can find the keys.
type discovery struct {
	Issuer                           string   `json:"issuer"`
	JWKSURI                          string   `json:"jwks_uri"`
	TokenEndpoint                    string   `json:"token_endpoint"`
	IDTokenSigningAlgValuesSupported []string `json:"id_token_signing_alg_values_supported"`
	ResponseTypesSupported           []string `json:"response_types_supported"`
	SubjectTypesSupported            []string `json:"subject_types_supported"`
	ClaimsSupported                  []string `json:"claims_supported"`
}

func handleDiscovery(issuerURL string, keys token.KeyringProvider) echo.HandlerFunc {
	base := strings.TrimSuffix(issuerURL, "/")
	return func(c *echo.Context) error {
		c.Response().Header().Set("Cache-Control", "public, max-age=300")
		return c.JSON(http.StatusOK, discovery{
			Issuer:                           issuerURL,
			JWKSURI:                          base + "/.well-known/jwks.json",
			TokenEndpoint:                    base + "/login",
			IDTokenSigningAlgValuesSupported: keys.Keyring().Algorithms(),
			ResponseTypesSupported:           []string{"id_token"},
			SubjectTypesSupported:            []string{"public"},
			ClaimsSupported: []string{"iss", "sub", "aud", "iat", "nbf", "exp", "jti", "token_use",
				"account_id", "account_name", "preferred_username", "auth_time", "sid"},
		})
	}
}
