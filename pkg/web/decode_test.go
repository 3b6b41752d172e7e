package web_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/web"
)

// decodeIdempotent sends body as a JSON request with the given
// Idempotency-Key values through web.DecodeJSONIdempotent.
func decodeIdempotent(t *testing.T, method, path, contentType, body string, keys ...string) (loginLike, web.Idempotency, error) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Header.Set("Content-Type", contentType)
	for _, k := range keys {
		req.Header.Add("Idempotency-Key", k)
	}
	c := echo.New().NewContext(req, httptest.NewRecorder())
	var got loginLike
	idem, err := web.DecodeJSONIdempotent(c, 1<<10, &got)
	return got, idem, err
}

// TestDecodeJSONIdempotent: the body is decoded as DecodeJSON decodes it;
// the keys are the header's values as sent, and the fingerprint is equal
// for requests that differ only in the body's insignificant whitespace,
// and differs with the method, the path or the body's content.
func TestDecodeJSONIdempotent(t *testing.T) {
	const body = `{"username":"alice","password":"pw"}`
	got, first, err := decodeIdempotent(t, http.MethodPost, "/v1/things", "application/json", body, "k1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Username != "alice" || got.Password != "pw" {
		t.Fatalf("decoded %+v", got)
	}
	if !slices.Equal(first.Keys, []string{"k1"}) || len(first.Fingerprint) != 64 {
		t.Fatalf("idempotency %+v, want the key k1 and a SHA-256 in hex", first)
	}

	_, spaced, err := decodeIdempotent(t, http.MethodPost, "/v1/things", "application/json; charset=utf-8",
		"{ \"username\" : \"alice\",\n\t\"password\": \"pw\" }\n", "k1", "k2")
	if err != nil {
		t.Fatal(err)
	}
	if spaced.Fingerprint != first.Fingerprint {
		t.Errorf("fingerprint %s of the body with whitespace, want %s", spaced.Fingerprint, first.Fingerprint)
	}
	if !slices.Equal(spaced.Keys, []string{"k1", "k2"}) {
		t.Errorf("keys %q, want both values as sent (the service refuses two)", spaced.Keys)
	}

	for name, req := range map[string]struct{ method, path, body string }{
		"method": {http.MethodPut, "/v1/things", body},
		"path":   {http.MethodPost, "/v1/others", body},
		"body":   {http.MethodPost, "/v1/things", `{"username":"alice","password":"pw2"}`},
		"order":  {http.MethodPost, "/v1/things", `{"password":"pw","username":"alice"}`},
	} {
		_, other, err := decodeIdempotent(t, req.method, req.path, "application/json", req.body)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if other.Fingerprint == first.Fingerprint {
			t.Errorf("another %s, the same fingerprint", name)
		}
		if len(other.Keys) != 0 {
			t.Errorf("%s: keys %q of a request without the header", name, other.Keys)
		}
	}
}

// TestDecodeJSONIdempotentRefusesAsDecodeJSON: a body DecodeJSON refuses
// is refused with the same reason, and no keys or fingerprint.
func TestDecodeJSONIdempotentRefusesAsDecodeJSON(t *testing.T) {
	for _, tc := range []struct {
		contentType, body string
		want              error
	}{
		{"text/plain", `{"username":"alice"}`, web.ErrUnsupportedMediaType},
		{"application/json", `{"username":"` + strings.Repeat("a", 2<<10) + `"}`, web.ErrBodyTooLarge},
		{"application/json", `["alice"]`, web.ErrMalformedJSON},
		{"application/json", `{"username":"alice"} {}`, web.ErrMalformedJSON},
	} {
		_, idem, err := decodeIdempotent(t, http.MethodPost, "/v1/things", tc.contentType, tc.body, "k1")
		if !errors.Is(err, tc.want) {
			t.Errorf("Content-Type %s, body %.40q: error %v, want %v", tc.contentType, tc.body, err, tc.want)
		}
		if idem.Keys != nil || idem.Fingerprint != "" {
			t.Errorf("Content-Type %s, body %.40q: idempotency %+v with a refusal", tc.contentType, tc.body, idem)
		}
	}
}
