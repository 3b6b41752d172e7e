package web

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"

	"github.com/labstack/echo/v5"

	"github.com/acme/platform/pkg/validation"
)

// DecodeJSON reads the request body into dst, strictly by type: the body must
// be application/json, at most maxBytes long, one JSON object (not null,
// an array or a scalar) of the right shape. A member of the wrong JSON type (say an object where a string is
// expected, as in {"username":{"$ne":null}}) is a validation problem naming
// the field, never something passed on to a query. Unknown members are
// ignored, so clients may send more than this version knows.
func DecodeJSON(c *echo.Context, maxBytes int64, dst any) error {
	return DecodeJSONAs(c, "application/json", maxBytes, dst)
}

// DecodeJSONAs is DecodeJSON for a body of another JSON-based media type,
// such as application/merge-patch+json (RFC 7396): the body must be sent
// as mediaType, and is otherwise read and decoded the same way.
func DecodeJSONAs(c *echo.Context, mediaType string, maxBytes int64, dst any) error {
	data, err := readBody(c, mediaType, maxBytes)
	if err != nil {
		return err
	}
	return decodeJSONBytes(data, dst)
}

// Idempotency is what a creating request says about its retries under
// the Idempotency-Key header (the IETF httpapi draft): the header's values
// (none, one key, or a client's mistake of several; the service checks
// them) and the request's fingerprint, which tells a retry from another
// request sent with the same key.
type Idempotency struct {
	Keys        []string
	Fingerprint string
}

// DecodeJSONIdempotent is DecodeJSON for a request that creates something
// at most once per Idempotency-Key: it also returns the request's keys and
// fingerprint, a SHA-256 of its method, path and body without
// insignificant whitespace. What they mean is the service's to decide.
func DecodeJSONIdempotent(c *echo.Context, maxBytes int64, dst any) (Idempotency, error) {
	data, err := readBody(c, "application/json", maxBytes)
	if err != nil {
		return Idempotency{}, err
	}
	if err := decodeJSONBytes(data, dst); err != nil {
		return Idempotency{}, err
	}
	r := c.Request()
	return Idempotency{Keys: r.Header.Values("Idempotency-Key"), Fingerprint: fingerprint(r, data)}, nil
}

// readBody reads a request body sent as mediaType, of at most maxBytes.
func readBody(c *echo.Context, mediaType string, maxBytes int64) ([]byte, error) {
	r := c.Request()
	if !hasMediaType(r.Header.Get("Content-Type"), mediaType) {
		return nil, &RequestError{Kind: ErrUnsupportedMediaType, Detail: "The request body must be sent with Content-Type: " + mediaType + "."}
	}
	body := http.MaxBytesReader(c.Response(), r.Body, maxBytes)
	data, err := io.ReadAll(body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return nil, &RequestError{Kind: ErrBodyTooLarge, Detail: fmt.Sprintf("The request body must not exceed %d bytes.", maxBytes)}
		}
		return nil, &RequestError{Kind: ErrMalformedJSON, Detail: "The request body could not be read."}
	}
	return data, nil
}

// fingerprint identifies a request for its idempotency key: method, path
// and the body without insignificant whitespace (a decoded body, so valid
// JSON).
func fingerprint(r *http.Request, body []byte) string {
	h := sha256.New()
	h.Write([]byte(r.Method + " " + r.URL.Path + "\n"))
	var compact bytes.Buffer
	if json.Compact(&compact, body) == nil {
		body = compact.Bytes()
	}
	h.Write(body)
	return hex.EncodeToString(h.Sum(nil))
}

// Why the plumbing refuses a request body (RequestError.Kind); ProblemFor
// gives each its status and code.
var (
	ErrUnsupportedMediaType = errors.New("unsupported media type")
	ErrBodyTooLarge         = errors.New("body too large")
	ErrMalformedJSON        = errors.New("malformed JSON")
)

// RequestError refuses a request for what it is, before any handler's
// work: Kind says why (one of the Err… above), Detail says it for people.
type RequestError struct {
	Kind   error
	Detail string
}

func (e *RequestError) Error() string { return e.Kind.Error() + ": " + e.Detail }

// Unwrap lets errors.Is find Kind.
func (e *RequestError) Unwrap() error { return e.Kind }

func decodeJSONBytes(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(dst); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) && typeErr.Field != "" {
			return validation.Invalid(typeErr.Field, fmt.Sprintf("must be a JSON %s", jsonKind(typeErr.Type.Kind().String())))
		}
		if errors.As(err, &typeErr) {
			return &RequestError{Kind: ErrMalformedJSON, Detail: "The request body must be a JSON object."}
		}
		return &RequestError{Kind: ErrMalformedJSON, Detail: "The request body is not valid JSON."}
	}
	if dec.More() {
		return &RequestError{Kind: ErrMalformedJSON, Detail: "The request body must hold exactly one JSON value."}
	}
	if _, err := dec.Token(); err != io.EOF {
		return &RequestError{Kind: ErrMalformedJSON, Detail: "The request body must hold exactly one JSON value."}
	}
	// Every body of the API is an object. null decodes into a struct or
	// map as "nothing given", and a string or number into a
	// json.Unmarshaler might too: refuse whatever does not start as one.
	if trimmed := bytes.TrimLeft(data, " \t\r\n"); len(trimmed) == 0 || trimmed[0] != '{' {
		return &RequestError{Kind: ErrMalformedJSON, Detail: "The request body must be a JSON object."}
	}
	return nil
}

// jsonKind names Go kinds the way a JSON client thinks of them.
func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "string"
	case "bool":
		return "boolean"
	case "map", "struct":
		return "object"
	case "slice", "array":
		return "array"
	default:
		return "number"
	}
}

func hasMediaType(contentType, want string) bool {
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return false
	}
	return mt == want
}
