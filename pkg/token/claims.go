package token

import (
	"errors"
	"math"
	"slices"
	"strings"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// decodeJSON decodes a token header or claims set with the JSON v2
// semantics (github.com/go-json-experiment/json, the future
// encoding/json/v2): names match exactly, a duplicate name or invalid
// UTF-8 is an error, not "the last one wins" or a silent replacement,
// as RFC 7519 section 4 and RFC 7515 section 4 allow. It is also about
// twice as fast as encoding/json, which matters on a path that runs for
// every request.
func decodeJSON(b []byte, v any) error { return jsonv2.Unmarshal(b, v) }

// Use is the value of the token_use claim: which of the three tokens of a
// Set a token is.
type Use string

// The three token uses.
const (
	UseID      Use = "id"
	UseAccess  Use = "access"
	UseRefresh Use = "refresh"
)

// Header typ of each token use. RFC 9068 names at+jwt; refresh+jwt is ours.
// Binding typ to token_use is what keeps a refresh token from passing as a
// bearer token: both are checked, and both are covered by the signature.
const (
	TypeID      = "JWT"
	TypeAccess  = "at+jwt"
	TypeRefresh = "refresh+jwt"
)

// HeaderType returns the header typ of tokens of use u, "" if u is unknown.
func (u Use) HeaderType() string {
	switch u {
	case UseID:
		return TypeID
	case UseAccess:
		return TypeAccess
	case UseRefresh:
		return TypeRefresh
	default:
		return ""
	}
}

// useOfType maps a header typ to its token use. Per RFC 7515 section 4.1.9
// typ is compared case-insensitively and may carry an "application/"
// prefix.
func useOfType(typ string) (Use, bool) {
	if len(typ) > len("application/") && strings.EqualFold(typ[:len("application/")], "application/") {
		typ = typ[len("application/"):]
	}
	switch {
	case strings.EqualFold(typ, TypeID):
		return UseID, true
	case strings.EqualFold(typ, TypeAccess):
		return UseAccess, true
	case strings.EqualFold(typ, TypeRefresh):
		return UseRefresh, true
	default:
		return "", false
	}
}

// Claims is what a verified token says.
type Claims struct {
	Issuer    string
	Subject   string // the user id; for a service client's token, its client id
	Audience  []string
	IssuedAt  time.Time
	NotBefore time.Time
	Expiry    time.Time
	ID        string // jti, unique per token
	Use       Use

	AccountID   string
	AccountName string
	SessionID   string // sid: the login session, and the refresh-token family

	// Id tokens only.
	PreferredUsername string
	AuthTime          time.Time
	// AuthorizedParty is the azp of an id token issued to an OAuth client
	// through the token endpoint: that client's id, which aud lists too.
	// Empty for tokens of POST /login.
	AuthorizedParty string

	// ClientID is the client_id claim of an access token (RFC 9068): the
	// client it was issued to. A service client's token names itself (and
	// has no sid); a user's names the app the user signed in to, or the
	// first-party client for POST /login.
	ClientID string
	// Scopes is the scope claim split at spaces (RFC 9068 section 2.2.3),
	// of service clients' tokens only.
	Scopes []string
	// Nonce and AMR are the id token's nonce (of the authorization
	// request) and amr (how the user authenticated, RFC 8176).
	Nonce string
	AMR   []string

	// From the protected header.
	Type      string // typ
	KeyID     string // kid
	Algorithm string // alg
}

// wireHeader is the part of the JOSE header a Verifier looks at. Crit and
// B64 are only checked for presence: no extension is understood, so a
// token that declares one must be refused (RFC 7515 section 4.1.11).
type wireHeader struct {
	Alg  string         `json:"alg"`
	Kid  string         `json:"kid"`
	Typ  string         `json:"typ"`
	Crit jsontext.Value `json:"crit"`
	B64  jsontext.Value `json:"b64"`
}

// wireClaims is the payload as sent. It is decoded once, before the
// signature check, so that typ and token_use can be compared without any
// cryptography.
type wireClaims struct {
	Iss               string      `json:"iss"`
	Sub               string      `json:"sub"`
	Aud               audience    `json:"aud"`
	Iat               numericDate `json:"iat"`
	Nbf               numericDate `json:"nbf"`
	Exp               numericDate `json:"exp"`
	Jti               string      `json:"jti"`
	TokenUse          Use         `json:"token_use"`
	AccountID         string      `json:"account_id"`
	AccountName       string      `json:"account_name"`
	Sid               string      `json:"sid"`
	PreferredUsername string      `json:"preferred_username"`
	AuthTime          numericDate `json:"auth_time"`
	Azp               string      `json:"azp"`
	ClientID          string      `json:"client_id"`
	Scope             string      `json:"scope"`
	Nonce             string      `json:"nonce"`
	AMR               []string    `json:"amr"`
}

// audience is the aud claim: a string or an array of strings (RFC 7519
// section 4.1.3).
type audience []string

// UnmarshalJSONFrom reads aud from the claims decoder (see decodeJSON).
func (a *audience) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	switch dec.PeekKind() {
	case '"':
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		*a = audience{tok.String()}
		return nil
	case '[':
		var list []string
		if err := jsonv2.UnmarshalDecode(dec, &list); err != nil {
			return err
		}
		*a = list
		return nil
	default:
		return errors.New("aud is neither a string nor an array of strings")
	}
}

// maxNumericDate is 9999-12-31T23:59:59Z: anything later is garbage, and
// refusing it keeps the float to int64 conversion defined.
const maxNumericDate = 253402300799

// numericDate is a JSON number of seconds since the epoch (RFC 7519
// section 2), possibly fractional. Set tells a present claim from a
// missing one.
type numericDate struct {
	Time time.Time
	Set  bool
}

// UnmarshalJSONFrom reads a NumericDate from the claims decoder.
func (d *numericDate) UnmarshalJSONFrom(dec *jsontext.Decoder) error {
	if dec.PeekKind() != '0' {
		if dec.PeekKind() == 'n' {
			return errors.New("numeric date is null")
		}
		return errors.New("numeric date is not a number")
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return err
	}
	f, err := tok.Float()
	if err != nil {
		return errors.New("numeric date is not a number")
	}
	if math.IsNaN(f) || f < 0 || f > maxNumericDate {
		return errors.New("numeric date out of range")
	}
	sec, frac := math.Modf(f)
	d.Time = time.Unix(int64(sec), int64(frac*1e9)).UTC()
	d.Set = true
	return nil
}

// IsClient reports whether the token is a service client's (it carries a
// client_id and no session, since no user signed in): such a token may do
// only what its scopes allow, where a user's token acts as the user.
func (c *Claims) IsClient() bool { return c.ClientID != "" && c.SessionID == "" }

// HasScope reports whether the token grants scope. A user's token has no
// scopes: callers decide what a user may do with IsClient first.
func (c *Claims) HasScope(scope string) bool { return slices.Contains(c.Scopes, scope) }

// The scopes of service clients' tokens.
const (
	ScopeDefinitionsRead    = "definitions:read"
	ScopeDefinitionsWrite   = "definitions:write"
	ScopeConversationsRead  = "conversations:read"
	ScopeConversationsWrite = "conversations:write"
	// ScopeWebhooksManage manages the account's webhook endpoints,
	// together with conversations:read.
	ScopeWebhooksManage = "webhooks:manage"
	// ScopeUsersRead and ScopeUsersWrite let a backend read and manage
	// the users of its account.
	ScopeUsersRead  = "users:read"
	ScopeUsersWrite = "users:write"
)

// Scopes lists every scope a service client may hold, in the order
// discovery documents them.
func Scopes() []string {
	return []string{ScopeDefinitionsRead, ScopeDefinitionsWrite, ScopeConversationsRead, ScopeConversationsWrite,
		ScopeUsersRead, ScopeUsersWrite, ScopeWebhooksManage}
}

// ParseScope splits a scope parameter or claim (RFC 6749 section 3.3:
// scope tokens separated by single spaces). Empty tokens, from repeated
// or surrounding spaces, are dropped, and duplicates kept once.
func ParseScope(s string) []string {
	if s == "" {
		return nil
	}
	var out []string
	for _, f := range strings.Split(s, " ") {
		if f != "" && !slices.Contains(out, f) {
			out = append(out, f)
		}
	}
	return out
}
